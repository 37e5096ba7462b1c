"""The MCP layer: Model Context Protocol calls (JSON-RPC 2.0) inside HTTP, as MCP spans and
operation-duration histograms (the MCP semantic conventions).

Both HTTP transports: streamable HTTP (a POST answered with JSON or with an event stream,
the GET stream, the Mcp-Session-Id header) and the older HTTP+SSE transport (a GET event
stream that announces where to post, POSTs answered 202 whose answers come on the stream).

Options (`receivers.ebpf.protocols.mcp`):
  paths: streamable HTTP endpoints (POST and GET); a path matches itself and what lies
    below it (default: [/mcp]).
  sse_paths: HTTP+SSE event-stream endpoints (GET; default: [/sse]).
  message_paths: HTTP+SSE endpoints clients post to (POST whose query names a session,
    session_id or sessionId; default: [/messages]).
  capture_content: record tool arguments and results (gen_ai.tool.call.arguments,
    gen_ai.tool.call.result); off by default: they hold user data.
  max_content_bytes: the most bytes of JSON each of those attributes holds (4096).
  body_limit: body bytes kept per message (1 MiB); a GET stream is one message for the
    whole session, so a long one may want more.
  max_pending: requests and answers that wait for their other half on another exchange
    (4096); the oldest requests beyond it are exported as unanswered.
  session_id: export mcp.session.id (true). MCP forbids using a session for
    authentication, but an HTTP+SSE server that does not bind a session to its user lets
    whoever knows the id post into it: false keeps it on the host (it is still used to
    pair messages).
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..base import ConnInfo, Instrument, NeutralSpan, Role, SpanKind, StatusCode
from ..layers import DEFAULT_BODY_LIMIT, HTTPExchange, HTTPLayer
from ..options import Flag, Integer, Paths, Schema, Size
from . import spans
from .messages import NOTIFICATION, REQUEST, Message, Read, read_body, session_of_target
from .pairs import Half, Pairs
from .spans import HTTP_SSE, STREAMABLE_HTTP, TRANSPORT_ATTRIBUTE, Content

DEFAULT_PATHS = ("/mcp",)
DEFAULT_SSE_PATHS = ("/sse",)
DEFAULT_MESSAGE_PATHS = ("/messages",)
DEFAULT_MAX_CONTENT_BYTES = 4096
DEFAULT_MAX_PENDING = 4096
SESSION_HEADER = "mcp-session-id"
VERSION_HEADER = "mcp-protocol-version"
UNANSWERED = "otel_ebpf.mcp.unanswered"  # ours: no answer was seen before its stream ended


class _Under:
    """Whether a request path is one of `paths` or below one, read once per HTTP request
    of every connection: a set lookup and one startswith, no generator per call."""

    __slots__ = ("exact", "prefixes", "everything")

    def __init__(self, paths: tuple[str, ...]) -> None:
        self.exact = frozenset(paths)
        self.prefixes = tuple(p + "/" for p in paths)
        self.everything = "/" in self.exact

    def __call__(self, path: str) -> bool:
        return self.everything or path in self.exact or path.startswith(self.prefixes)


class MCPLayer(HTTPLayer):
    name: ClassVar[str] = "mcp"
    instruments: ClassVar[Mapping[str, Instrument]] = spans.INSTRUMENTS
    headers: ClassVar[frozenset[str]] = frozenset({SESSION_HEADER, VERSION_HEADER})

    default_enabled = True
    default_rank = 30
    option_schema: ClassVar[Schema] = {
        "paths": Paths(DEFAULT_PATHS, "Streamable HTTP endpoints"),
        "sse_paths": Paths(DEFAULT_SSE_PATHS, "HTTP+SSE event streams"),
        "message_paths": Paths(DEFAULT_MESSAGE_PATHS, "HTTP+SSE message posts"),
        "capture_content": Flag(False, "arguments and results as span attributes"),
        "max_content_bytes": Size(DEFAULT_MAX_CONTENT_BYTES, "kept of each captured value",
                                  least=2, most=1 << 20),
        "body_limit": Size(DEFAULT_BODY_LIMIT, "body bytes kept per message", least=0),
        "max_pending": Integer(DEFAULT_MAX_PENDING, "requests awaiting their answer", least=1),
        "session_id": Flag(True, "export mcp.session.id"),
    }

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        o = self.options
        self.paths, self.sse_paths = o["paths"], o["sse_paths"]
        self.message_paths = o["message_paths"]
        self._in_paths, self._in_sse = _Under(self.paths), _Under(self.sse_paths)
        self._in_messages = _Under(self.message_paths)
        self.content = Content(o["capture_content"], o["max_content_bytes"])
        self.body_limit = o["body_limit"]
        self.pairs = Pairs(o["max_pending"])
        self.export_session = o["session_id"]

    def wants(self, method: str, target: str) -> bool:
        post = method == "POST"
        if not post and method != "GET":
            return False
        path = target.partition("?")[0].rstrip("/") or "/"
        if self._in_paths(path):
            return True
        if post:  # HTTP+SSE messages name their session; other POSTs there are not MCP's
            return self._in_messages(path) and bool(session_of_target(target))
        return self._in_sse(path)

    def capture_prefixes(self) -> tuple[str, ...]:
        # the kernel matches 8 bytes of the request target: a shorter path is matched
        # with the " HTTP/1" that follows it on the request line (HTTP/1 only). The
        # HTTP+SSE posts are left out: they carry short requests (the long answers come
        # on the GET stream, which a POST key would not widen anyway)
        return tuple(p if len(p) >= 8 else (p + " HTTP/1.1")[:8] for p in self.paths)

    def enrich(self, exchange: HTTPExchange, span: NeutralSpan) -> list[NeutralSpan] | None:
        sent = read_body(exchange.request_body, exchange.request_content_type) \
            if exchange.method == "POST" else Read()
        got = read_body(exchange.response_body, exchange.response_content_type)
        return _Exchange(self, exchange, span, sent, got).run()


class _Exchange:
    """One HTTP exchange's MCP messages made spans: what its request body sent, what its
    response body (JSON or an event stream) brought."""

    def __init__(self, layer: MCPLayer, exchange: HTTPExchange, span: NeutralSpan,
                 sent: Read, got: Read) -> None:
        self.layer, self.exchange, self.span, self.sent, self.got = \
            layer, exchange, span, sent, got
        self.conn: ConnInfo = span.conn
        self.client = exchange.role == Role.CLIENT
        legacy = session_of_target(exchange.target) or session_of_target(got.endpoint)
        self.session = exchange.response_headers.get(SESSION_HEADER) \
            or exchange.request_headers.get(SESSION_HEADER) or legacy
        self.transport = HTTP_SSE if legacy else STREAMABLE_HTTP
        self.shown = self.session if layer.export_session else ""  # mcp.session.id
        self.headers = exchange.request_headers
        self.more: list[NeutralSpan] = []
        self.renamed = False

    def run(self) -> list[NeutralSpan]:
        answers = {m.id: m for m in self.got.messages if m.answers and m.id is not None}
        for msg in self.sent.messages:
            if msg.kind == REQUEST:
                self._sent_request(msg, answers)
            elif msg.kind == NOTIFICATION:
                self._operation(msg, None, self.exchange.start_ns, self.exchange.end_ns)
            else:
                self._sent_answer(msg)
        for msg in self.got.messages:
            if msg.answers:
                if msg.id is not None and answers.get(msg.id) is msg:
                    # it answers a request posted on another exchange (HTTP+SSE)
                    self._half(msg, "c", msg.ns)
            elif msg.kind == REQUEST:
                self._half(msg, "s", msg.ns)  # the server asks (sampling, elicitation...)
            else:
                self._notification(msg)
        if self.exchange.method == "GET" and self.session:
            # the session's stream ended: requests it was to answer never will be
            for half in self.layer.pairs.unanswered(self.conn.pid, self.session):
                self.more.append(self._unanswered(half, self.exchange.end_ns))
        for half in self.layer.pairs.take_evicted():
            self.more.append(self._unanswered(half, half.ns))
        if not self.renamed and (self.session or self.sent.messages or self.got.messages):
            self._mark_http_span()
        return self.more

    # --- what the request body sent ----------------------------------------------------

    def _sent_request(self, msg: Message, answers: dict[str, Message]) -> None:
        answer = answers.pop(msg.id, None) if msg.id is not None else None
        status = self.exchange.status
        if answer is None and self.transport == HTTP_SSE and status is not None \
                and status < 300 and msg.id is not None:
            self._half(msg, "c", self.exchange.start_ns)  # its answer comes on the stream
            return
        end = answer.ns if answer is not None and self.renamed else self.exchange.end_ns
        self._operation(msg, answer, self.exchange.start_ns, end)

    def _sent_answer(self, msg: Message) -> None:
        """The client answering a request the server sent on a stream."""
        if msg.id is None:
            return
        # the answer leaves the client when it starts writing it; the server has it once read
        ns = self.exchange.start_ns if self.client else self.exchange.request_end_ns
        self._half(msg, "s", ns)

    def _operation(self, msg: Message, answer: Message | None, start: int, end: int) -> None:
        """A request or notification this exchange carried, with its answer if it came."""
        kind = SpanKind.CLIENT if self.client else SpanKind.SERVER
        attrs: spans.Attributes = {}
        version = spans.protocol_version(self.headers, msg, answer)
        spans.operation_attributes(msg, answer, self.shown, version, self.layer.content,
                                   attrs)
        attrs[TRANSPORT_ATTRIBUTE] = self.transport
        if not self.renamed:  # the exchange's own span becomes the first operation's
            self.renamed = True
            span = self.span
            span.name = spans.span_name(msg)
            span.attributes.update(attrs)
            status, text = spans.status_of(answer, attrs)
            if status == StatusCode.ERROR:
                span.status, span.status_message = status, text
            spans.measure(span)
            return
        base = self._transport_attributes()
        base.update(attrs)
        self.more.append(spans.new_span(spans.span_name(msg), kind, start, end, self.conn,
                                        base, answer))

    def _mark_http_span(self) -> None:
        """An exchange that carried no request of its own (a GET stream, a posted answer)
        stays an HTTP span, with the session it belongs to."""
        if self.shown:
            self.span.attributes["mcp.session.id"] = self.shown
        self.span.attributes[TRANSPORT_ATTRIBUTE] = self.transport

    # --- what the response body brought ------------------------------------------------

    def _notification(self, msg: Message) -> None:
        """A notification the server sent on a stream: an instant on each side."""
        kind = SpanKind.SERVER if self.client else SpanKind.CLIENT
        attrs = self._transport_attributes()
        spans.operation_attributes(msg, None, self.shown, spans.protocol_version(
            self.headers, msg), self.layer.content, attrs)
        self.more.append(spans.new_span(spans.span_name(msg), kind, msg.ns, msg.ns,
                                        self.conn, attrs, None))

    # --- requests and answers on two exchanges ------------------------------------------

    def _half(self, msg: Message, asker: str, ns: int) -> None:
        if msg.id is None:
            return
        # the span's kind in this process: who asked, seen from this side
        kind = SpanKind.CLIENT if (asker == "c") == self.client else SpanKind.SERVER
        attrs = self._transport_attributes()
        if self.shown:
            attrs["mcp.session.id"] = self.shown
        half = Half(msg, ns, self.conn, kind, attrs)
        pair = self.layer.pairs.add((self.conn.pid, self.session, asker, msg.id), half)
        if pair is None:
            return
        request, answer = pair
        attrs = request.attributes
        version = spans.protocol_version(self.headers, request.message, answer.message)
        spans.operation_attributes(request.message, answer.message, self.shown, version,
                                   self.layer.content, attrs)
        # both ends compute the same identity: the asker's span is the answerer's parent
        identity = f"mcp/{self.session}/{asker}/{msg.id}" if self.session else ""
        self.more.append(spans.new_span(spans.span_name(request.message), request.kind,
                                        request.ns, answer.ns, request.conn, attrs,
                                        answer.message, identity))

    def _unanswered(self, half: Half, end: int) -> NeutralSpan:
        attrs = half.attributes
        # its session is in its attributes already (it may be another exchange's)
        spans.operation_attributes(half.message, None, "", "", self.layer.content, attrs)
        attrs[UNANSWERED] = True
        return spans.new_span(spans.span_name(half.message), half.kind, half.ns, end,
                              half.conn, attrs, None)

    def _transport_attributes(self) -> spans.Attributes:
        attrs: spans.Attributes = {}
        spans.transport_attributes(self.conn, attrs)
        exchange = self.exchange
        if exchange.server_address:
            attrs["server.address"] = exchange.server_address
        if exchange.server_port:
            attrs["server.port"] = exchange.server_port
        attrs[TRANSPORT_ATTRIBUTE] = self.transport
        return attrs


__all__ = ["MCPLayer"]
