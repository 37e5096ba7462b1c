"""HTTP/2 record -> neutral span: gRPC calls after the RPC semantic conventions (gRPC), other
requests after the HTTP ones, with network.protocol.version "2". What HPACK kept from us is
left out, never guessed: a span may lack its method or path, never carry a wrong one."""

from __future__ import annotations

from ..base import (
    AttributeValue,
    ConnInfo,
    NeutralSpan,
    Role,
    SpanKind,
    StatusCode,
    positional_maker,
)
from ..common import nat_attributes
from ..http1.spans import (
    _authority,
    _connection,
    _host_port,
    _method,
    _status,
    _url,
    redact_query,
    scheme_of,
)
from ..layers import HTTPExchange, apply_layer
from . import grpc
from . import stitch as _stitch
from .frames import error_name
from .parse import H2Message, H2Request, H2Response
from .stitch import H2Record

PROTOCOL = "http2"
Attributes = dict[str, AttributeValue]


def to_spans(record: H2Record, conn: ConnInfo, capture_headers: bool = False
             ) -> list[NeutralSpan]:
    fast = _stitch.compiled
    if COMPILED and fast is not None and not capture_headers:
        span = fast.span(record, conn)  # _stitch.c: the usual gRPC call
        if span is not None:
            return [span]
    request, response = record.request, record.response
    kind = SpanKind.SERVER if conn.role == Role.SERVER else SpanKind.CLIENT
    if _is_grpc(request, response):
        name, attrs = _grpc_head(request, conn, kind)
        status, message = _grpc(record, kind, attrs, capture_headers)
    else:
        attrs = {}
        _connection(conn, attrs)
        attrs["network.protocol.version"] = "2"
        name, status, message = _http(record, kind, conn, attrs, capture_headers)
    span = _new_span(
        name, kind, request.start_ns, max(record.end_ns, request.start_ns), conn, attrs,
        status, message if status == StatusCode.ERROR else "", PROTOCOL, request.tcp_seq,
        request.stream_pos,
        response.tcp_seq if response is not None and response.ended else None)
    if request.layer is not None:
        return apply_layer(request.layer, _exchange(record, conn, kind, span.end_ns), span)
    return [span]


# NeutralSpan(name=, ...) in one call: one span per call at each end
_new_span = positional_maker(NeutralSpan, (
    "name", "kind", "start_ns", "end_ns", "conn", "attributes", "status", "status_message",
    "protocol", "request_seq", "request_pos", "response_seq"))


def _exchange(record: H2Record, conn: ConnInfo, kind: SpanKind, end_ns: int) -> HTTPExchange:
    request, response = record.request, record.response
    server = kind == SpanKind.SERVER
    answered = response is not None and response.final
    return HTTPExchange(
        role=Role.SERVER if server else Role.CLIENT,
        method=request.method or "",
        target=request.path or "",
        host=request.authority or "",
        scheme=request.scheme or scheme_of(conn),
        request_content_type=request.content_type or "",
        request_body=request.body,
        status=response.status if answered else None,
        response_content_type=(response.content_type or "") if answered else "",
        response_body=response.body if answered else None,
        start_ns=request.start_ns,
        # the request frame ends with its HEADERS; its body may come later
        request_end_ns=_last_piece_ns(request) or request.end_ns,
        response_start_ns=response.start_ns if answered else None,
        end_ns=end_ns,
        server_address=conn.local_addr if server else conn.remote_addr,
        server_port=conn.local_port if server else conn.remote_port,
        request_headers=request.carrier,
        response_headers=response.carrier if answered else {},
    )


def _last_piece_ns(message: H2Message) -> int:
    body = message.body
    return body.pieces[-1].ns if body is not None and body.pieces else 0


def _is_grpc(request: H2Request, response: H2Response | None) -> bool:
    """By the request's content-type; when HPACK hid it (capture began after the channel
    sent it), by the response's gRPC fields, or by the bodies: both sides' DATA made of
    whole length-prefixed messages, which a JSON or text body never is."""
    if request.content_type is not None:
        return grpc.is_grpc(request.content_type)
    if response is None:
        return False
    if response.content_type is not None:
        return grpc.is_grpc(response.content_type)
    if response.grpc_status is not None:
        return True
    bodies = [m for m in (request, response) if m.data_size]
    return request.method in (None, "POST") and bool(bodies) and all(
        m.messages.complete and m.messages.count for m in bodies)


def _server_address(request: H2Request, conn: ConnInfo, kind: SpanKind, attrs: Attributes
                    ) -> None:
    host, _ = _host_port(request.authority or "")
    if kind == SpanKind.CLIENT:
        attrs["server.address"] = host or conn.remote_addr
        if conn.remote_port:
            attrs["server.port"] = conn.remote_port
        if conn.nat is not None:
            nat_attributes(conn, attrs)
        return
    if host:
        attrs["server.address"] = host
    if conn.local_port:
        attrs["server.port"] = conn.local_port
    if conn.remote_addr:
        attrs["client.address"] = conn.remote_addr
    if conn.remote_port:
        attrs["client.port"] = conn.remote_port


# --- gRPC --------------------------------------------------------------------------------


# the last call's name and first attributes, by connection, path and authority: they are
# the same for every call of a method on a channel (copied, never changed)
_last_head: tuple = (None, None, None, "grpc", {})


def _grpc_head(request: H2Request, conn: ConnInfo, kind: SpanKind) -> tuple[str, Attributes]:
    """A call's name and its attributes up to the server's address."""
    global _last_head
    last = _last_head
    if last[0] is conn and last[1] == request.path and last[2] == request.authority:
        return last[3], dict(last[4])
    attrs: Attributes = {}
    _connection(conn, attrs)
    attrs["network.protocol.version"] = "2"
    attrs["rpc.system.name"] = "grpc"
    name = "grpc"  # semconv: {rpc.system.name} when the method is not known
    path = request.path
    if path is not None:
        method = path[1:]
        if path.startswith("/") and method.count("/") == 1 and all(method.split("/")):
            attrs["rpc.method"] = name = method
        else:
            attrs["rpc.method"] = "_OTHER"
            attrs["rpc.method_original"] = path
    _server_address(request, conn, kind, attrs)
    _last_head = (conn, path, request.authority, name, attrs)
    return name, dict(attrs)


_REQUEST_KEYS, _RESPONSE_KEYS = (
    (f"rpc.{side}.message.count", f"rpc.{side}.size", f"rpc.{side}.metadata.")
    for side in ("request", "response"))


def _grpc(record: H2Record, kind: SpanKind, attrs: Attributes, capture_headers: bool
          ) -> tuple[StatusCode, str]:
    request, response = record.request, record.response
    for keys, message in ((_REQUEST_KEYS, request), (_RESPONSE_KEYS, response)):
        if message is not None and message.messages.exact and (message.data_size or message.ended):
            # ours: gRPC messages each side sent, and their bytes (compressed if they were)
            attrs[keys[0]] = message.messages.count
            attrs[keys[1]] = message.messages.size
        if capture_headers and message is not None:
            _headers(keys[2], message, attrs)
    code = _grpc_code(record)
    text = ""
    if response is not None and response.grpc_message:
        text = grpc.decode_message(response.grpc_message) or ""
        attrs["rpc.grpc.status_message"] = text  # ours: semconv has no place for it
    if code is None:
        if record.error and record.error != "reset":
            attrs["error.type"] = record.error
            return StatusCode.ERROR, text
        return StatusCode.UNSET, text
    code_name = grpc.code_name(code)
    attrs["rpc.response.status_code"] = code_name
    error = code != grpc.OK if kind == SpanKind.CLIENT else code_name in grpc.SERVER_ERRORS
    if error:
        attrs["error.type"] = code_name
        return StatusCode.ERROR, text
    return StatusCode.UNSET, text


def _grpc_code(record: H2Record) -> int | None:
    """The call's status: grpc-status; else what the client library makes of a reset
    stream or of a non-200 answer. None when HPACK hid it or no answer came."""
    request, response = record.request, record.response
    if response is not None and response.grpc_status is not None:
        return response.grpc_status
    if response is not None and response.reset is not None:
        return grpc.from_rst(response.reset)
    if request.reset is not None:
        return grpc.from_rst(request.reset)
    if (response is not None and response.ended and response.status is not None
            and response.status != 200 and not response.unknown_fields):
        return grpc.from_http(response.status)
    return None


# --- plain HTTP --------------------------------------------------------------------------


def _http(record: H2Record, kind: SpanKind, conn: ConnInfo, attrs: Attributes,
          capture_headers: bool) -> tuple[str, StatusCode, str]:
    request, response = record.request, record.response
    name = _method(request.method, attrs) if request.method is not None else "HTTP"
    if request.path is not None:
        _url(request.path, attrs, scheme_of(conn))
    # :scheme when HPACK let us see it, else what the connection was
    attrs["url.scheme"] = request.scheme or scheme_of(conn)
    _server_address(request, conn, kind, attrs)
    if kind == SpanKind.CLIENT and request.path is not None and request.path.startswith("/"):
        path, mark, query = request.path.partition("?")
        authority = request.authority or _authority(conn)
        attrs["url.full"] = (f"{attrs['url.scheme']}://{authority}{path}"
                             f"{mark}{redact_query(query) if mark else ''}")
    if request.user_agent:
        attrs["user_agent.original"] = request.user_agent
    if request.data_size:
        attrs["http.request.body.size"] = request.data_size
    if response is not None:
        if response.status is not None:
            attrs["http.response.status_code"] = response.status
        if response.ended and response.reset is None:
            attrs["http.response.body.size"] = response.data_size
    if capture_headers:
        _headers("http.request.header.", request, attrs)
        if response is not None:
            _headers("http.response.header.", response, attrs)
    reset = response.reset if response is not None and response.reset is not None \
        else request.reset
    if reset is not None:
        attrs["error.type"] = error_name(reset)
        return name, StatusCode.ERROR, ""
    if record.error:  # no answer, or only part of one
        attrs["error.type"] = record.error
        return name, StatusCode.ERROR, ""
    if response is None or response.status is None:  # HPACK hid the status
        return name, StatusCode.UNSET, ""
    # http1's rule (5xx fails both sides, 4xx the client); it reads .response.status, .error
    status, error = _status(record, kind)  # type: ignore[arg-type]
    if error:
        attrs["error.type"] = error
    return name, status, ""


def _headers(prefix: str, message: H2Message, attrs: Attributes) -> None:
    for name, values in message.headers.items():
        attrs[prefix + name] = list(values)


# to_spans' usual gRPC call in C where the agent's extensions are built (False: this file's
# to_spans, the reference, alone; tests compare the two)
COMPILED = True
if _stitch.compiled is not None:
    _stitch.compiled.setup_span(H2Record, grpc.Messages, ConnInfo, _new_span, _grpc_head,
                                (Role.SERVER,), (SpanKind.SERVER, SpanKind.CLIENT),
                                (StatusCode.UNSET, StatusCode.ERROR), grpc.CODES,
                                grpc.SERVER_ERRORS, PROTOCOL)
