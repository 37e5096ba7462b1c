"""HTTP/1.x framing: heads validated by llhttp (httptools); bodies skipped by length, or read
into timed pieces when a layer (an LLM API, say) wants the exchange."""

from __future__ import annotations

import enum
import functools
import re
from dataclasses import dataclass, field
from typing import NamedTuple

import httptools

from otel_ebpf import _fast

from ..base import (
    UNTIL_CLOSE,
    ConnInfo,
    Direction,
    Frame,
    ParseResult,
    ParserState,
    Role,
    SmallDeque,
    positional_maker,
)
from ..common import SECRET_HEADERS, SECRET_PARTS, is_secret  # noqa: F401 (re-exported)
from ..layers import MAX_PIECES, BodyPiece, HTTPLayer, first_wanting
from ..layers import Body as BodyCapture

MAX_HEAD = 64 * 1024  # a head this long without its blank line is not HTTP we can follow
MAX_LINE = 8 * 1024  # request or status line
MAX_CHUNK_LINE = 1024  # hex size plus extensions
SENT_LIMIT = 256  # requests awaiting a response; beyond that pairing is lost anyway

NEED, FRAME, INVALID = ParseResult.NEED_MORE, ParseResult.FRAME, ParseResult.INVALID
Step = tuple[ParseResult, Frame | None, int]
# this file's compiled implementation (_parse.c: heads, whole messages, chunked pieces and
# spans.py's span), None on the pure Python path. Looked up when called (but
# HTTP1Parser.piece, taken once at import), so setting it to None turns HTTP/1's compiled
# heads, whole messages and spans off
compiled = _fast.accelerator(__name__)

# Secrets never enter a frame: they are dropped as llhttp hands the header over.


# W3C trace context: correlate/ honors it; more names (x-request-id) come from the options
CONTEXT_HEADERS = frozenset({"traceparent", "tracestate"})
# what spans and framing read from a head; other headers are not even decoded, unless
# capture_headers asks for all of them
FRAMING_HEADERS = frozenset({"host", "user-agent", "content-type", "content-length",
                             "transfer-encoding", "upgrade"})


# --- line shapes -------------------------------------------------------------------------


def _prefix_of(atoms: list[bytes]) -> bytes:
    """A regex matching any prefix (empty included) of the sequence of regex atoms."""
    out = b""
    for atom in reversed(atoms):
        out = b"(?:" + atom + out + b")?"
    return out


_VERSION_ATOMS = [b"H", b"T", b"T", b"P", b"/", b"1", rb"\.", b"[01]"]
_STATUS_ATOMS = [*_VERSION_ATOMS, b" ", rb"\d", rb"\d", rb"\d"]
_KNOWN_METHOD = rb"(?:GET|HEAD|POST|PUT|DELETE|CONNECT|OPTIONS|TRACE|PATCH)"
# origin form (/p), asterisk (*), absolute URI (scheme:...) or authority (host:port, [v6]:port)
_TARGET = rb"(?:[/*]|[A-Za-z0-9][A-Za-z0-9+.-]*:|\[)[!-~]*"

# Strict shapes, to claim a connection (infer) or find a message after lost bytes (resync).
# A *_CUT shape is what a line cut by the end of the capture may look like.
_REQUEST_LINE = re.compile(_KNOWN_METHOD + b" " + _TARGET + rb" HTTP/1\.[01]")
_REQUEST_CUT = re.compile(_KNOWN_METHOD + b" " + _TARGET + b"(?: " + _prefix_of(_VERSION_ATOMS) + b")?")
_STATUS_LINE = re.compile(rb"HTTP/1\.[01] [1-5]\d\d(?: [^\r\n]*)?")
_STATUS_CUT = re.compile(_STATUS_LINE.pattern + b"|" + _prefix_of(_STATUS_ATOMS))
_REQUEST_CANDIDATE = re.compile(_KNOWN_METHOD + b" ")
_STATUS_CANDIDATE = re.compile(rb"HTTP/1\.")

# Loose shapes, to tell early that a head being received cannot be HTTP (any llhttp method).
_ANY_REQUEST_LINE = re.compile(rb"[A-Z_-]{1,20} [!-~\x80-\xff]+ HTTP/1\.[01]")
_ANY_REQUEST_CUT = re.compile(
    rb"[A-Z_-]{0,20}|[A-Z_-]{1,20} [!-~\x80-\xff]*(?: " + _prefix_of(_VERSION_ATOMS) + b")?"
)
_ANY_STATUS_LINE = re.compile(rb"HTTP/1\.[01] \d\d\d(?: [^\r\n]*)?")
_ANY_STATUS_CUT = re.compile(_ANY_STATUS_LINE.pattern + b"|" + _prefix_of(_STATUS_ATOMS))

# empty lines before a message are tolerated (RFC 9112, section 2.2)
_LEADING_CRLF = re.compile(rb"[\r\n]*")
_CRLF = re.compile(rb"\r\n")
_HEAD_END = re.compile(rb"\r\n\r\n")
_CHUNK_LINE = re.compile(rb"([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?\r\n")
_LF = re.compile(rb"\n")
_DIGITS = re.compile(r"[0-9]{1,19}")  # llhttp checked it already; str.isdigit would take "²"


def _line_at(buf, pos: int, whole: re.Pattern, cut: re.Pattern) -> bool:
    """Whether the line at `pos` has the shape `whole`, or `cut` when the buffer ends inside it."""
    end = _CRLF.search(buf, pos, pos + MAX_LINE)
    if end is not None:
        return whole.fullmatch(buf, pos, end.start()) is not None
    cut_at = len(buf) - (buf[-1:] == b"\r")  # the CR of the CRLF may have come alone
    return cut_at - pos <= MAX_LINE and cut.fullmatch(buf, pos, cut_at) is not None


# --- frames and state --------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class HTTPMessage(Frame):
    """What requests and responses share. Headers are kept only with capture_headers."""

    version: str = "1.1"
    headers: dict[str, list[str]] = field(default_factory=dict)  # lower-case names, no secrets
    host: str = ""
    user_agent: str = ""
    upgrade: str = ""  # the Upgrade header: protocols asked for (request) or switched to (101)
    body_size: int | None = None  # payload bytes (chunk framing excluded); None: no body
    chunks: int = 0
    index: int = -1  # which request of the connection this is or answers; -1: unknown
    close_head: int = -1  # a body the close delimits starts after this many bytes
    content_type: str = ""
    # the close came before the body's end: the bytes that came are the message (an SSE
    # client that stops reading at "data: [DONE]" never reads the last chunk over TLS)
    incomplete: bool = False
    # the layer that wants this exchange, and the body it reads for it (else: skipped)
    layer: HTTPLayer | None = None
    body: BodyCapture | None = None

    @property
    def body_bytes(self) -> int | None:
        """Body size; for a body the close delimits, known once the tracker set `size`."""
        if self.close_head >= 0:
            return self.size - self.close_head
        return self.body_size


@dataclass(slots=True, kw_only=True)
class HTTPRequest(HTTPMessage):
    method: str = "GET"
    target: str = ""


@dataclass(slots=True, kw_only=True)
class HTTPResponse(HTTPMessage):
    status: int = 0
    reason: str = ""
    upgraded: bool = False  # the connection stopped speaking HTTP/1 after this response
    interim: tuple[int, ...] = ()  # 1xx codes received before this final response


# the frames of heads the compiled parser read, built without keyword calls (4x faster)
_new_request = positional_maker(HTTPRequest, (
    "direction", "method", "target", "layer", "body", "index", "carrier", "version",
    "headers", "host", "user_agent", "content_type", "upgrade"))
_new_response = positional_maker(HTTPResponse, (
    "direction", "status", "reason", "index", "interim", "upgraded", "layer", "body",
    "carrier", "version", "headers", "host", "user_agent", "content_type", "upgrade"))


class Sent(NamedTuple):
    """A request whose head was seen, waiting for its response's head."""

    index: int
    method: str
    switch: bool  # Upgrade or CONNECT: the connection may stop speaking HTTP/1
    layer: HTTPLayer | None = None  # the layer that wants the exchange: read the answer too


_UNKNOWN_REQUEST = Sent(-1, "GET", False)  # capture began after the request: assume GET


class Body(enum.Enum):
    """How a message's body ends (RFC 9112, section 6.3); the last three are states between
    calls."""

    NONE = "none"
    LENGTH = "length"
    TUNNEL = "tunnel"
    CHUNKED = "chunked"  # waiting for a chunk-size line
    TRAILERS = "trailers"  # after the last chunk
    UNTIL_CLOSE = "until_close"
    # a body being read (kept) rather than skipped
    READ_LENGTH = "read_length"  # `remaining` bytes to go
    READ_CHUNK = "read_chunk"  # `remaining` bytes of the current chunk's data to go
    CHUNK_END = "chunk_end"  # the CRLF after a chunk's data (`remaining` of its 2 bytes)
    READ_UNTIL_CLOSE = "read_until_close"


class _Stream:
    """One direction's message in progress, once its head is past."""

    __slots__ = ("body", "frame", "interim", "remaining", "size")

    def __init__(self) -> None:
        self.reset()

    def reset(self) -> None:
        self.frame: HTTPMessage | None = None
        self.body: Body | None = None
        self.size = 0  # bytes of the message consumed so far, interim 1xx heads included
        self.remaining = 0  # bytes left in the body (READ_LENGTH) or chunk (READ_CHUNK...)
        self.interim: tuple[int, ...] = ()  # rare: a tuple, not a list per message


@functools.lru_cache(maxsize=16)
def _kept_names(carrier_names: frozenset[str]) -> frozenset[bytes]:
    """The (lower-case, bytes) header names a head's parse keeps: one set for every
    connection with the same options, not one each."""
    return frozenset(name.encode("latin-1") for name in FRAMING_HEADERS | carrier_names)


@functools.lru_cache(maxsize=16)
def _fast_kept(carrier_names: frozenset[str]) -> dict[bytes, tuple[str, int]]:
    """What _parse.c keeps of a head: lower-case name -> (name, what it
    is). Secrets are left out here, as _Head.on_header drops them; a head with Upgrade
    is left to llhttp (K_FALLBACK), and one with Transfer-Encoding (K_TE) unless it is
    "chunked" alone and the caller takes chunked bodies."""
    fast = compiled
    roles = {"host": fast.K_HOST, "user-agent": fast.K_UA, "content-type": fast.K_CTYPE,
             "content-length": fast.K_CLEN, "transfer-encoding": fast.K_TE,
             "upgrade": fast.K_FALLBACK}
    kept: dict[bytes, tuple[str, int]] = {}
    for name in FRAMING_HEADERS | carrier_names:
        if not is_secret(name):
            flags = roles.get(name, 0) | (fast.K_CARRIER if name in carrier_names else 0)
            kept[name.encode("latin-1")] = (name, flags)
    return kept


class HTTP1State(ParserState):
    """Per connection: a stream per direction and the requests still waiting for a response."""

    __slots__ = (
        "answered",
        "carrier_names",
        "fast_kept",
        "kept_headers",
        "layers",
        "next_index",
        "orphan_responses",
        "sent",
        "streams",
        "switch_pending",
        "tunnel",
    )

    def __init__(self, conn: ConnInfo, carrier_names: frozenset[str] = CONTEXT_HEADERS,
                 layers: tuple[HTTPLayer, ...] = (), capture_headers: bool = False) -> None:
        super().__init__(conn)
        self.carrier_names = carrier_names  # headers kept for correlate/ (frame.carrier)
        self.layers = layers
        # the (lower-case, bytes) names a head's parse keeps; None: every non-secret one
        self.kept_headers = None if capture_headers else _kept_names(carrier_names)
        # the same, for the compiled head parser (None: llhttp parses every head)
        self.fast_kept = (None if capture_headers or compiled is None
                          else _fast_kept(carrier_names))
        # requests, responses, closed: ParserState's (a client writes its requests)
        self.streams = (_Stream(), _Stream())
        self.sent = SmallDeque()  # at most SENT_LIMIT
        self.next_index = 0
        self.answered = -1  # index of the last request whose response head was seen
        self.switch_pending = False  # an Upgrade/CONNECT request awaits its answer
        self.tunnel = False  # the connection no longer speaks HTTP/1
        self.orphan_responses = 0  # responses dropped for want of their request


# --- heads -------------------------------------------------------------------------------


class _Head:
    """Collects one head from llhttp's callbacks; secrets are dropped on arrival."""

    __slots__ = ("complete", "fields", "firsts", "kept", "reason", "url")

    def __init__(self, kept: frozenset[bytes] | None = None) -> None:
        self.kept = kept
        self.url = b""
        self.reason = b""
        self.fields: list[tuple[str, str]] = []
        self.firsts: dict[str, str] = {}  # each name's first value: looked up many times
        self.complete = False

    def on_url(self, url: bytes) -> None:
        self.url += url

    def on_status(self, reason: bytes) -> None:
        self.reason += reason

    def on_header(self, name: bytes, value: bytes) -> None:
        if self.kept is not None and name.lower() not in self.kept:
            return  # neither framing, nor a span attribute, nor correlation: not decoded
        key = name.decode("latin-1").lower()
        if not is_secret(key):
            text = value.strip().decode("latin-1")
            self.fields.append((key, text))
            self.firsts.setdefault(key, text)

    def on_headers_complete(self) -> None:
        self.complete = True

    def values(self, name: str) -> list[str]:
        if name not in self.firsts:  # the usual answer, without a scan of every field
            return []
        return [v for k, v in self.fields if k == name]

    def first(self, name: str) -> str:
        return self.firsts.get(name, "")


def _read_head(parser_type, head, kept: frozenset[bytes] | None
               ) -> tuple[_Head, object] | None:
    """Feed exactly one head to a fresh llhttp parser; None when llhttp rejects it."""
    collected = _Head(kept)
    parser = parser_type(collected)
    # an observer, not a gatekeeper: both peers accepted Content-Length beside chunked
    parser.set_dangerous_leniencies(lenient_chunked_length=True)
    try:
        parser.feed_data(head)
    except (httptools.HttpParserUpgrade, httptools.HttpParserError):
        # Past a whole head llhttp only stops for an upgrade (even a 101 without
        # "Connection: upgrade") or objects to body framing, which we judge ourselves.
        pass
    version = parser.get_http_version()
    if not collected.complete or version not in ("1.0", "1.1"):
        return None
    return collected, parser


def _head_span(buf, whole: re.Pattern, cut: re.Pattern) -> tuple[int, int] | ParseResult:
    """(start, end) of the head at the front of buf, or NEED_MORE / INVALID."""
    lead = _LEADING_CRLF.match(buf, 0, MAX_HEAD).end()
    end = _HEAD_END.search(buf, lead, lead + MAX_HEAD)
    if end is not None:
        return lead, end.end()
    if lead == len(buf):
        return NEED  # nothing but empty lines yet
    if len(buf) - lead >= MAX_HEAD or not _line_at(buf, lead, whole, cut):
        return INVALID
    return NEED


def _message_fields(head: _Head, version: str, capture_headers: bool,
                    carrier_names: frozenset[str]) -> dict:
    headers: dict[str, list[str]] = {}
    if capture_headers:
        for k, v in head.fields:
            headers.setdefault(k, []).append(v)
    return {
        "carrier": {k: v for k, v in head.fields if k in carrier_names},
        "version": version,
        "headers": headers,
        "host": head.first("host"),
        "user_agent": head.first("user-agent"),
        "content_type": head.first("content-type"),
        "upgrade": head.first("upgrade"),
    }


def _transfer(head: _Head) -> tuple[Body | None, int]:
    """Body framing the headers declare: CHUNKED, UNTIL_CLOSE (other codings), LENGTH, or None."""
    codings = ",".join(head.values("transfer-encoding"))
    if codings:
        last = codings.rsplit(",", 1)[-1].strip().lower()
        return (Body.CHUNKED if last == "chunked" else Body.UNTIL_CLOSE), 0
    length = head.first("content-length")
    return (Body.LENGTH, int(length)) if _DIGITS.fullmatch(length) else (None, 0)


def _request_head(buf, state: HTTP1State, s: _Stream, capture_headers: bool) -> Step:
    fast = state.fast_kept is not None and compiled.head(buf, True, state.fast_kept, True)
    if fast:  # a plain head, parsed in C (_parse.c): what llhttp would say
        _, end, method, target, version, carrier, host, agent, ctype, clen = fast
        layer = first_wanting(state.layers, method, target) if state.layers else None
        index = state.next_index
        request = _new_request(
            state.requests, method, target, layer,
            None if layer is None else BodyCapture(limit=layer.body_limit), index,
            carrier, version, {}, host, agent, ctype, "")
        state.next_index = index + 1
        sent = state.sent
        if len(sent) >= SENT_LIMIT:
            del sent[0]
        # no Upgrade header, no CONNECT: those heads are llhttp's, so no switch
        sent.append(Sent(index, method, False, layer))
        if clen == compiled.CHUNKED:
            return _start_body(s, request, end, Body.CHUNKED, 0)
        if layer is None:  # skipped by length, as _start_body does
            if clen >= 0:
                request.body_size = clen
                end += clen
            request.size = s.size + end
            s.reset()
            return FRAME, request, end
        body, length = (Body.LENGTH, clen) if clen >= 0 else (Body.NONE, 0)
        return _start_body(s, request, end, body, length)
    span = _head_span(buf, _ANY_REQUEST_LINE, _ANY_REQUEST_CUT)
    if span is INVALID and state.switch_pending:
        # the new protocol, seen before the answer that allowed it
        s.size += len(buf)
        return NEED, None, len(buf)
    if not isinstance(span, tuple):
        return span, None, 0
    start, end = span
    read = _read_head(httptools.HttpRequestParser, buf[start:end], state.kept_headers)
    if read is None:
        return INVALID, None, 0
    head, parser = read
    body, length = _transfer(head)
    if body is Body.UNTIL_CLOSE:
        # a request body is never delimited by the close (RFC 9112, section 6.3)
        return INVALID, None, 0
    method = parser.get_method().decode("ascii", "replace")
    target = head.url.decode("latin-1")
    fields = _message_fields(head, parser.get_http_version(), capture_headers,
                             state.carrier_names)
    switch = parser.should_upgrade()  # Upgrade + Connection: upgrade, or CONNECT
    layer = first_wanting(state.layers, method, target) if state.layers else None
    request = HTTPRequest(
        direction=state.requests,
        method=method,
        target=target,
        layer=layer,
        body=None if layer is None else BodyCapture(limit=layer.body_limit),
        index=state.next_index,
        **fields,
    )
    state.next_index += 1
    if len(state.sent) >= SENT_LIMIT:
        state.sent.popleft()
    state.sent.append(Sent(request.index, method, switch, layer))
    state.switch_pending |= switch
    return _start_body(s, request, end, body or Body.NONE, length)


def _response_body(status: int, method: str, declared: Body | None) -> Body:
    """RFC 9112, section 6.3, in its order."""
    if method == "HEAD" or status in (204, 304):
        return Body.NONE
    if status == 101 or (method == "CONNECT" and 200 <= status < 300):
        return Body.TUNNEL
    return declared or Body.UNTIL_CLOSE


def _response_head(buf, state: HTTP1State, s: _Stream, capture_headers: bool) -> Step:
    fast = state.fast_kept is not None and compiled.head(buf, False, state.fast_kept, True)
    if fast:  # a plain head, parsed in C (_parse.c): what llhttp would say
        _, end, status, reason, version, carrier, host, agent, ctype, clen = fast
        if 100 <= status < 200 and status != 101:  # interim: see below
            s.interim += (status,)
            s.size += end
            return NEED, None, end
        sent = state.sent
        sent = sent.pop(0) if sent else _UNKNOWN_REQUEST
        if sent.index > state.answered:
            state.answered = sent.index
        if state.switch_pending:
            state.switch_pending = any(r.switch for r in state.sent)
        # _response_body, in its order
        if sent.method == "HEAD" or status == 204 or status == 304:
            body = Body.NONE
        elif status == 101 or (sent.method == "CONNECT" and 200 <= status < 300):
            body = Body.TUNNEL
        elif clen >= 0:
            body = Body.LENGTH
        elif clen == compiled.CHUNKED:
            body = Body.CHUNKED
        else:
            body = Body.UNTIL_CLOSE
        layer = sent.layer
        response = _new_response(
            state.responses, status, reason, sent.index, s.interim, body is Body.TUNNEL,
            layer, None if layer is None else BodyCapture(limit=layer.body_limit),
            carrier, version, {}, host, agent, ctype, "")
        state.tunnel = body is Body.TUNNEL
        if layer is None and body is not Body.UNTIL_CLOSE and body is not Body.CHUNKED:
            # as _start_body does
            if body is Body.LENGTH:
                response.body_size = clen
                end += clen
            response.size = s.size + end
            s.reset()
            return FRAME, response, end
        return _start_body(s, response, end, body, clen if body is Body.LENGTH else 0)
    span = _head_span(buf, _ANY_STATUS_LINE, _ANY_STATUS_CUT)
    if not isinstance(span, tuple):
        return span, None, 0
    start, end = span
    read = _read_head(httptools.HttpResponseParser, buf[start:end], state.kept_headers)
    if read is None:
        return INVALID, None, 0
    head, parser = read
    status = parser.get_status_code()
    reason = head.reason.decode("latin-1")
    declared, length = _transfer(head)
    fields = _message_fields(head, parser.get_http_version(), capture_headers,
                             state.carrier_names)
    if 100 <= status < 200 and status != 101:
        # interim (100 Continue, 103 Early Hints): part of the exchange, the answer follows
        s.interim += (status,)
        s.size += end
        return NEED, None, end
    sent = state.sent.popleft() if state.sent else _UNKNOWN_REQUEST
    state.answered = max(state.answered, sent.index)
    if state.switch_pending:  # rare: only then can the answer have changed it
        state.switch_pending = any(r.switch for r in state.sent)
    body = _response_body(status, sent.method, declared)
    response = HTTPResponse(
        direction=state.responses,
        status=status,
        reason=reason,
        index=sent.index,
        interim=s.interim,
        upgraded=body is Body.TUNNEL,
        layer=sent.layer,
        body=None if sent.layer is None else BodyCapture(limit=sent.layer.body_limit),
        **fields,
    )
    state.tunnel = body is Body.TUNNEL
    return _start_body(s, response, end, body, length)


# --- a whole syscall's message ------------------------------------------------------------

# frames of whole syscalls, built with their timing (see whole): no attribute set after
_whole_request = positional_maker(HTTPRequest, (
    "direction", "method", "target", "index", "carrier", "version", "host", "user_agent",
    "content_type", "stream_pos", "start_ns", "end_ns", "tcp_seq", "tid", "task", "size",
    "body_size"))
# a request whose body a layer wants, the body whole in the syscall
_whole_kept_request = positional_maker(HTTPRequest, (
    "direction", "method", "target", "index", "carrier", "version", "host", "user_agent",
    "content_type", "stream_pos", "start_ns", "end_ns", "tcp_seq", "tid", "task", "size",
    "body_size", "layer", "body"))
_whole_response = positional_maker(HTTPResponse, (
    "direction", "status", "reason", "index", "carrier", "version", "host", "user_agent",
    "content_type", "stream_pos", "start_ns", "end_ns", "tcp_seq", "tid", "task", "size",
    "body_size"))


def whole(direction: Direction, data: bytes, state: HTTP1State, pos: int, start_ns: int,
          end_ns: int, seq: int | None, tid: int, task: int) -> HTTPMessage | None:
    """The usual event in one step: `data`, a syscall's every byte at an empty stream's
    head, is one plain message (a head the compiled parser reads, its body skipped by
    length, no layer wanting it), or such a message's head with none or part of its body
    (a server that writes the head, then the body), or a request whose body a layer wants
    with all of that body (an LLM API call). Returns that message's timed frame,
    what parse and the tracker's stamping give it, its `size` running past `data` when
    the rest of its body is still to come (the tracker keeps it pending until that
    byte); None, with nothing changed, for anything else (the general path then runs)."""
    kept = state.fast_kept
    if kept is None or state.tunnel:
        return None
    s = state.streams[direction]
    if s.body is not None or s.size:  # inside a message, or after an interim head
        return None
    if direction == state.requests:
        fast = compiled.head(data, True, kept)
        if not fast:
            return None
        _, end, method, target, version, carrier, host, agent, ctype, clen = fast
        head_end = end
        if clen >= 0:
            end += clen
        if end < len(data):
            return None
        layer = first_wanting(state.layers, method, target) if state.layers else None
        if layer is not None and end > len(data):
            return None  # a body a layer wants, still to come: the general path reads it
        # _request_head's compiled branch, from here on
        index = state.next_index
        state.next_index = index + 1
        sent = state.sent
        if len(sent) >= SENT_LIMIT:
            del sent[0]
        sent.append(Sent(index, method, False, layer))
        stamps = (pos, start_ns, max(end_ns, start_ns), None if seq is None else seq & 0xFFFFFFFF,
                  tid, task, end, clen if clen >= 0 else None)
        if layer is None:
            return _whole_request(direction, method, target, index, carrier, version, host,
                                  agent, ctype, *stamps)
        # the body (an LLM request's, say) read as _read_length reads it: one piece, timed
        # by the syscall (the time of its first byte)
        return _whole_kept_request(direction, method, target, index, carrier, version, host,
                                   agent, ctype, *stamps, layer,
                                   kept_body(layer, data[head_end:end], start_ns))
    fast = compiled.head(data, False, kept)
    if not fast:
        return None
    _, end, status, reason, version, carrier, host, agent, ctype, clen = fast
    if status < 200:  # interim, or 101 (a tunnel)
        return None
    sent = state.sent
    request = sent[0] if sent else _UNKNOWN_REQUEST
    if request.layer is not None or request.method == "CONNECT":
        return None
    if request.method == "HEAD" or status == 204 or status == 304:
        body_size = None  # Body.NONE
    elif clen >= 0:
        body_size = clen
        end += clen
    else:
        return None  # until the close
    if end < len(data):  # the next message's bytes too: the general path
        return None
    # _response_head's compiled branch, from here on
    if sent:
        del sent[0]
    if request.index > state.answered:
        state.answered = request.index
    if state.switch_pending:
        state.switch_pending = any(r.switch for r in sent)
    return _whole_response(
        direction, status, reason, request.index, carrier, version, host, agent, ctype, pos,
        start_ns, max(end_ns, start_ns), None if seq is None else seq & 0xFFFFFFFF, tid, task,
        end, body_size)


def kept_body(layer: HTTPLayer, data: bytes, ns: int) -> BodyCapture:
    """A body a layer wants, whole: its capture holding `data` as one piece at `ns`."""
    body = BodyCapture(limit=layer.body_limit)
    if data:
        body.add(data, ns)
    return body


_compiled_ready = None  # the compiled module whose whole() was given its pieces


def compiled_whole(fast):  # noqa: ANN001, ANN201 (the extension module and its function)
    """`fast.whole` (_parse.c), once it was given what it builds with: the
    same makers, Sent and first_wanting as whole() above."""
    global _compiled_ready
    if _compiled_ready is not fast:
        fast.setup(_whole_request, _whole_response, Sent, _UNKNOWN_REQUEST, first_wanting,
                   SENT_LIMIT, HTTP1State, _Stream, _whole_kept_request, kept_body)
        _compiled_ready = fast
    return fast.whole


def compiled_piece():  # noqa: ANN201 (_parse.c chunks, or None)
    """The tracker's step for a body piece (_parse.c chunks): a syscall's
    every byte inside a chunked body that is whole chunks, none of them the last, taken
    as _chunks takes them (the reference), its pieces timed by the syscall's time; False
    from it, with nothing changed, for anything else. None on the pure Python path."""
    fast = compiled
    if fast is None:
        return None
    fast.chunks_setup(HTTP1State, _Stream, HTTPMessage, HTTPRequest, HTTPResponse, Body.CHUNKED,
                      BodyCapture, BodyPiece, MAX_PIECES)
    return fast.chunks


# --- bodies ------------------------------------------------------------------------------


def _complete(s: _Stream, frame: HTTPMessage, consumed: int) -> Step:
    frame.size = s.size + consumed
    s.reset()
    return FRAME, frame, consumed


def _start_body(s: _Stream, frame: HTTPMessage, head_len: int, body: Body, length: int) -> Step:
    if frame.body is not None and body in _READ_INSTEAD:
        return _start_reading(s, frame, head_len, body, length)
    if body is Body.LENGTH:
        # skipped by length: the body need not have been captured
        frame.body_size = length
        return _complete(s, frame, head_len + length)
    if body in (Body.NONE, Body.TUNNEL):
        return _complete(s, frame, head_len)
    frame.body_size = 0
    s.frame, s.body, s.size = frame, body, s.size + head_len
    return NEED, None, head_len


_LAST_CHUNK = b"0\r\n\r\n"


def _chunks(buf, s: _Stream, state: HTTP1State, direction: Direction) -> Step:
    """Every whole chunk at the buffer's head in one step (size line, data, CRLF), as the
    steps of _chunk, _read_chunk and _chunk_end would take them one by one: the same
    counts, the same pieces timed by their first byte; then the last chunk, when it is
    exactly "0" and an empty trailer section, ends the message in the same step. The
    first chunk that is not whole here (or a size line that is not clean, or another
    last chunk) is left to _chunk."""
    frame, n, pos = s.frame, len(buf), 0
    keep = frame.body is not None
    while True:
        line = _CHUNK_LINE.match(buf, pos, pos + MAX_CHUNK_LINE)
        if line is None:
            break
        size = int(line[1], 16)
        data = line.end()
        end = data + size + 2
        if size == 0 or end > n:
            break
        frame.chunks += 1
        frame.body_size += size
        if keep:
            frame.body.add(bytes(buf[data:data + size]), state.time_at(direction, data))
        pos = end
    if buf[pos:pos + 5] == _LAST_CHUNK:
        # the last chunk with no trailer: the message ends here, as _chunk and _trailers
        # would end it
        return _complete(s, frame, pos + 5)
    if pos == 0:
        return _chunk(buf, s)
    s.size += pos
    return NEED, None, pos


def _chunk(buf, s: _Stream, *_) -> Step:
    """A chunk-size line; the chunk's data is skipped by length, or read when kept."""
    line = _LF.search(buf, 0, MAX_CHUNK_LINE)
    if line is None:
        return (INVALID if len(buf) >= MAX_CHUNK_LINE else NEED), None, 0
    m = _CHUNK_LINE.fullmatch(buf, 0, line.end())
    if m is None:
        return INVALID, None, 0
    size, consumed = int(m[1], 16), line.end()
    if size == 0:
        s.body = Body.TRAILERS
    else:
        s.frame.chunks += 1
        s.frame.body_size += size
        if s.frame.body is not None:
            s.body, s.remaining = Body.READ_CHUNK, size
        else:
            consumed += size + 2  # data and its CRLF, skipped by length like any body
    s.size += consumed
    return NEED, None, consumed


def _trailers(buf, s: _Stream, *_) -> Step:
    if len(buf) < 2:
        return NEED, None, 0
    if buf[:2] == b"\r\n":
        return _complete(s, s.frame, 2)
    end = _HEAD_END.search(buf, 0, MAX_HEAD)  # trailer fields are skipped, never kept
    if end is None:
        return (INVALID if len(buf) >= MAX_HEAD else NEED), None, 0
    return _complete(s, s.frame, end.end())


def _until_close(buf, s: _Stream, *_) -> Step:
    # The close ends it: let the tracker skip every byte to there, lost ones included.
    # Its length is known only then, to the tracker (frame.size): see body_bytes.
    s.frame.body_size = None
    s.frame.close_head = s.size
    return NEED, None, UNTIL_CLOSE


# --- bodies a layer wants: read into timed pieces, lost bytes stepped over ---------------

_READ_INSTEAD = {Body.LENGTH: Body.READ_LENGTH, Body.CHUNKED: Body.CHUNKED,
                 Body.UNTIL_CLOSE: Body.READ_UNTIL_CLOSE}


def _start_reading(s: _Stream, frame: HTTPMessage, head_len: int, body: Body,
                   length: int) -> Step:
    frame.body_size = length if body is Body.LENGTH else 0
    if body is Body.LENGTH and length == 0:
        return _complete(s, frame, head_len)
    if body is Body.UNTIL_CLOSE:
        frame.body_size = None
        frame.close_head = s.size + head_len
    s.frame, s.body, s.remaining = frame, _READ_INSTEAD[body], length
    s.size += head_len
    return NEED, None, head_len


def _keep(buf, s: _Stream, state: HTTP1State, direction: Direction, n: int) -> None:
    # the piece is timed by its first byte: buf[0] (when the write was made / read returned)
    s.frame.body.add(bytes(buf[:n]), state.time_at(direction, 0))  # type: ignore[union-attr]


def _read_length(buf, s: _Stream, state: HTTP1State, direction: Direction) -> Step:
    n = min(len(buf), s.remaining)
    if n:
        _keep(buf, s, state, direction, n)
        s.remaining -= n
    if s.remaining == 0:
        return _complete(s, s.frame, n)
    s.size += n
    return NEED, None, n


def _read_chunk(buf, s: _Stream, state: HTTP1State, direction: Direction) -> Step:
    n = min(len(buf), s.remaining)
    if n:
        _keep(buf, s, state, direction, n)
        s.remaining -= n
    if s.remaining == 0:
        s.body, s.remaining = Body.CHUNK_END, 2
    s.size += n
    return NEED, None, n


def _chunk_end(buf, s: _Stream, *_) -> Step:
    n = min(len(buf), s.remaining)  # the CRLF, taken by length like the skipping path does
    s.remaining -= n
    if s.remaining == 0:
        s.body = Body.CHUNKED
    s.size += n
    return NEED, None, n


def _read_until_close(buf, s: _Stream, state: HTTP1State, direction: Direction) -> Step:
    if buf:
        _keep(buf, s, state, direction, len(buf))
    s.size += len(buf)
    return NEED, None, len(buf)


_BODY_STEPS = {
    Body.CHUNKED: _chunks,  # its reference: _chunk alone (_ONE_CHUNK_STEPS)
    Body.TRAILERS: _trailers,
    Body.UNTIL_CLOSE: _until_close,
    Body.READ_LENGTH: _read_length,
    Body.READ_CHUNK: _read_chunk,
    Body.CHUNK_END: _chunk_end,
    Body.READ_UNTIL_CLOSE: _read_until_close,
}
# the steps one chunk's part at a time: the reference of _chunks (tests swap it in)
_ONE_CHUNK_STEPS = {**_BODY_STEPS, Body.CHUNKED: _chunk}
# lost bytes inside these are part of the body: step over them, the message goes on
_LOSS_TOLERANT = frozenset({Body.READ_LENGTH, Body.READ_CHUNK, Body.CHUNK_END,
                            Body.READ_UNTIL_CLOSE})


# --- the parser's verbs ------------------------------------------------------------------

_REQUEST_ROLE = {Direction.EGRESS: Role.CLIENT, Direction.INGRESS: Role.SERVER}
_RESPONSE_ROLE = {Direction.EGRESS: Role.SERVER, Direction.INGRESS: Role.CLIENT}


def infer(direction: Direction, head: bytes) -> Role | None:
    if _line_at(head, 0, _REQUEST_LINE, _REQUEST_CUT):
        return _REQUEST_ROLE[direction]
    if _STATUS_CANDIDATE.match(head) and _line_at(head, 0, _STATUS_LINE, _STATUS_CUT):
        return _RESPONSE_ROLE[direction]
    return None


def parse(direction: Direction, buf, state: HTTP1State, capture_headers: bool) -> Step:
    if state.tunnel:
        return NEED, None, UNTIL_CLOSE  # no longer HTTP/1: let every byte go by
    s = state.streams[direction]
    if s.body is not None:
        return _BODY_STEPS[s.body](buf, s, state, direction)
    if not buf:
        return NEED, None, 0
    head = _request_head if direction == state.requests else _response_head
    return head(buf, state, s, capture_headers)


def resync(direction: Direction, buf, state: HTTP1State) -> int | None:
    s = state.streams[direction]
    if state.tunnel or s.body in (Body.UNTIL_CLOSE, Body.READ_UNTIL_CLOSE):
        return 0  # lost bytes are just more of what only the close can end
    # Sent entries stay: a request whose body was lost still gets an answer, which
    # must take its index (stitch then drops it) rather than the next request's.
    s.reset()
    if direction == state.requests:
        candidates, whole, cut = _REQUEST_CANDIDATE, _REQUEST_LINE, _REQUEST_CUT
    else:
        candidates, whole, cut = _STATUS_CANDIDATE, _STATUS_LINE, _STATUS_CUT
    for m in candidates.finditer(buf):
        if _line_at(buf, m.start(), whole, cut):
            return m.start()
    return None


def finish(direction: Direction, state: HTTP1State) -> HTTPMessage | None:
    state.closed = True  # finish is called at close, before the last stitch
    s = state.streams[direction]
    if state.tunnel or s.frame is None:
        return None
    if s.body in (Body.UNTIL_CLOSE, Body.READ_UNTIL_CLOSE):
        return _complete(s, s.frame, 0)[1]
    if direction == state.requests:
        return None  # a request cut short was never answered: stitch reports it
    frame = s.frame
    frame.incomplete = True
    s.reset()
    return frame


def skip_lost(direction: Direction, lost: int, state: HTTP1State) -> bool:
    """Bytes lost inside a body being read are part of it, when it has room for them."""
    s = state.streams[direction]
    if s.body not in _LOSS_TOLERANT or state.tunnel:
        return False
    if s.body is not Body.READ_UNTIL_CLOSE:
        if lost > s.remaining:
            return False  # the message ended inside the lost bytes: find the next one
        s.remaining -= lost
    if s.body is not Body.CHUNK_END:  # payload bytes, not chunk framing
        s.frame.body.skip(lost)  # type: ignore[union-attr]
    if s.body is Body.READ_CHUNK and s.remaining == 0:
        s.body, s.remaining = Body.CHUNK_END, 2
    s.size += lost
    return True
