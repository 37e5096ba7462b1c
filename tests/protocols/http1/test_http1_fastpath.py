"""The compiled head parser (protocols/http1/_parse.c) against llhttp, the reference: on the
same bytes, the same step, frame and parser state, and over whole connections the same
spans. Heads come from a grammar that reaches both sides of every line the C code draws
(methods, targets, versions, names, values, blanks, line ends), then random mutations."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.base import Direction, Role
from otel_ebpf.protocols.http1 import HTTP1Parser
from otel_ebpf.protocols.http1 import parse as http1_parse
from otel_ebpf.protocols.registry import Registry
from otel_ebpf.protocols.testing import conn_info

from otel_ebpf import _fast
from otel_ebpf.conntrack.table import ConnTable
from otel_ebpf.kernel import abi
from otel_ebpf.telemetry import Stats

if _fast.PURE_PYTHON:
    pytest.skip("OTEL_EBPF_PURE_PYTHON=1: no compiled path to compare", allow_module_level=True)

fuzz = settings(max_examples=600, deadline=None, suppress_health_check=[HealthCheck.too_slow])
parser = HTTP1Parser({"correlation_headers": ["x-request-id", "x-api-key"]})

METHODS = [b"GET", b"HEAD", b"POST", b"PUT", b"DELETE", b"OPTIONS", b"TRACE", b"PATCH",
           b"CONNECT", b"PROPFIND", b"get", b"GETX"]
TARGET_CHARS = list(b"abcXYZ019-._~:/?@!$&'()*+,;=%#[]\"<>\\^`{|} \t\x7f\x80\xff")
NAMES = [b"Host", b"host", b"HOST", b"User-Agent", b"Content-Type", b"Content-Length",
         b"content-length", b"Transfer-Encoding", b"Upgrade", b"Connection", b"traceparent",
         b"TraceState", b"X-Request-Id", b"x-api-key", b"Authorization", b"Cookie", b"Accept",
         b"X-Custom_1", b"Bad Name", b"", b"X:Y", b"\xff", b"a" * 70]
VALUE_CHARS = list(b"az AZ09 \t:;,/=*\"'()\x01\x7f\x80\xe9\xff\r\n\x0b")
VALUES = [b"", b" ", b"20", b" 20", b"20 ", b"0", b"007", b"-1", b"1" * 16, b"chunked",
          b"websocket", b"127.0.0.1:8000",
          b"00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"]
LINE_ENDS = [b"\r\n"] * 8 + [b"\n", b"\r", b"\r\r\n"]
# the same pieces, only those the compiled path takes: half the heads are drawn from these,
# so both sides of its line are well covered (a clean head may still fall back: a repeated
# Content-Length, say)
CLEAN = {
    "method": METHODS[:8], "target_char": TARGET_CHARS[:20], "name": NAMES[:6] + NAMES[10:18],
    "value_char": VALUE_CHARS[:19], "value": VALUES[2:4] + VALUES[5:7] + VALUES[11:],
    "line_end": [b"\r\n"], "lead": [b"", b"\r\n"], "version": [b"HTTP/1.1", b"HTTP/1.0"],
    "target": [b"/", b"/items/42?x=1"], "sep": [b" "], "code": [b"200", b"204", b"304", b"100",
    b"404", b"500"], "reason": [b" OK", b" Not Found"], "hsep": [b":", b": ", b":\t", b":  "],
    "fold": [b""], "blank": [b"\r\n"],
}
ANY = {
    "method": METHODS, "target_char": TARGET_CHARS, "name": NAMES, "value_char": VALUE_CHARS,
    "value": VALUES, "line_end": LINE_ENDS, "lead": [b"", b"", b"", b"\r\n", b"\n\r\n", b"\r\n" * 40],
    "version": [b"HTTP/1.1", b"HTTP/1.1", b"HTTP/1.0", b"HTTP/1.2", b"HTTP/2.0", b"http/1.1"],
    "target": [b"/", b"/items/42?x=1", b"*", b"http://a/b", b"a:1", b""],
    "sep": [b" ", b" ", b" ", b"  ", b"\t"],
    "code": [b"200", b"204", b"304", b"100", b"101", b"404", b"500", b"099", b"600", b"2000", b"20"],
    "reason": [b" OK", b" Not Found", b" ", b"", b" caf\xe9", b" a\tb"],
    "hsep": [b":", b": ", b":\t", b" :", b":  "], "fold": [b""] * 9 + [b"\r\n folded"],
    "blank": [b"\r\n"] * 6 + [b"", b"\n", b"\r"],
}


@st.composite
def heads(draw, request: bool) -> bytes:
    pick = CLEAN if draw(st.booleans()) else ANY

    def one(what: str) -> bytes:
        return draw(st.sampled_from(pick[what]))

    def chars(what: str, size: int) -> bytes:
        return bytes(draw(st.lists(st.sampled_from(pick[what]), min_size=1, max_size=size)))

    if request:
        target = one("target") if draw(st.booleans()) else b"/" + chars("target_char", 16)
        line = one("method") + one("sep") + target + b" " + one("version")
    else:
        line = one("version") + b" " + one("code") + one("reason")
    out = one("lead") + line + one("line_end")
    for _ in range(draw(st.integers(0, 8))):
        value = one("value") if draw(st.booleans()) else chars("value_char", 24)
        out += one("name") + one("hsep") + value + one("fold") + one("line_end")
    out += one("blank")
    return out + draw(st.sampled_from([b"", b"hello", b"GET / HTTP/1.1\r\n\r\n"]))


# Transfer-Encoding lines around the one the compiled path takes ("chunked" alone, in
# HTTP/1.1, without Content-Length): other spellings, codings and repeats stay llhttp's
TE_LINES = [b"Transfer-Encoding: chunked\r\n"] * 6 + [
    b"transfer-encoding: chunked\r\n", b"Transfer-Encoding:chunked\r\n",
    b"Transfer-Encoding: \tchunked\r\n", b"Transfer-Encoding: Chunked\r\n",
    b"Transfer-Encoding: chunked \r\n", b"Transfer-Encoding: gzip, chunked\r\n",
    b"Transfer-Encoding: chunked, gzip\r\n", b"Transfer-Encoding: gzip\r\n",
    b"Transfer-Encoding: chunked;q=1\r\n", b"Transfer-Encoding: chunkedx\r\n",
    b"Transfer-Encoding: chunked\r\nTransfer-Encoding: chunked\r\n",
    b"Transfer-Encoding: chunked\r\nContent-Length: 5\r\n",
    b"Content-Length: 5\r\nTransfer-Encoding: chunked\r\n"]
CHUNKED_BODIES = [b"", b"5\r\nhello\r\n", b"5\r\nhello\r\n0\r\n\r\n", b"0\r\n\r\n", b"5\r\nhel",
                  b"data: {}\r\n"]


@st.composite
def chunked_heads(draw, request: bool) -> bytes:
    """A head with a Transfer-Encoding line put among its fields, then a chunked body's
    start."""
    head = draw(heads(request))
    end = head.find(b"\r\n\r\n")
    lines = head[:end + 2].split(b"\r\n")[:-1] if end >= 0 else []
    if len(lines) < 1:
        return head
    at = draw(st.integers(1, len(lines)))
    lines.insert(at, draw(st.sampled_from(TE_LINES))[:-2])
    return b"\r\n".join(lines) + b"\r\n\r\n" + draw(st.sampled_from(CHUNKED_BODIES))


@st.composite
def mutated(draw, request: bool) -> bytes:
    data = bytearray(draw(st.one_of(heads(request), chunked_heads(request))))
    for _ in range(draw(st.integers(0, 3))):
        if not data:
            break
        at = draw(st.integers(0, len(data) - 1))
        op = draw(st.integers(0, 2))
        if op == 0:
            data[at] = draw(st.integers(0, 255))
        elif op == 1:
            del data[at]
        else:
            data[at:at] = draw(st.sampled_from([b"\r\n", b" ", b":", b"\x00"]))
    cut = draw(st.integers(0, len(data)))
    return bytes(data[: cut if draw(st.booleans()) else len(data)])


def _states(role: Role):
    """The same connection twice: one parsed with the compiled heads, one with llhttp."""
    fast, slow = parser.new_state(conn_info(role)), parser.new_state(conn_info(role))
    assert fast.fast_kept is not None, "http1._parse is not built (make install)"
    slow.fast_kept = None
    return fast, slow


def _state_view(state) -> tuple:
    streams = tuple((s.body, s.size, s.remaining, s.interim, s.frame) for s in state.streams)
    return (list(state.sent), state.next_index, state.answered, state.switch_pending,
            state.tunnel, state.orphan_responses, streams)


def _same_step(data: bytes, direction: Direction, role: Role, prime_request: bool) -> bool:
    fast, slow = _states(role)
    if prime_request:  # a response answers a request seen before
        for state in (fast, slow):
            parser.parse(direction.opposite, memoryview(b"GET / HTTP/1.1\r\n\r\n"), state)
            parser.parse(direction.opposite, memoryview(b"HEAD / HTTP/1.1\r\n\r\n"), state)
    got = parser.parse(direction, memoryview(data), fast)
    want = parser.parse(direction, memoryview(data), slow)
    assert got == want, (data, got, want)
    assert _state_view(fast) == _state_view(slow), data
    kept = http1_parse._fast_kept(fast.carrier_names)
    return http1_parse.compiled.head(data, direction == fast.requests, kept, True) is not None


@fuzz
@given(data=st.one_of(heads(True), chunked_heads(True), mutated(True)),
       role=st.sampled_from([Role.CLIENT, Role.SERVER]))
def test_request_heads_as_llhttp_reads_them(data, role):
    direction = Direction.EGRESS if role == Role.CLIENT else Direction.INGRESS
    _same_step(data, direction, role, prime_request=False)


@fuzz
@given(data=st.one_of(heads(False), chunked_heads(False), mutated(False)),
       role=st.sampled_from([Role.CLIENT, Role.SERVER]),
       head_first=st.booleans())
def test_response_heads_as_llhttp_reads_them(data, role, head_first):
    direction = Direction.INGRESS if role == Role.CLIENT else Direction.EGRESS
    _same_step(data, direction, role, prime_request=not head_first)


def test_the_common_heads_take_the_compiled_path():
    """Not vacuous: the heads of a keep-alive API call are parsed in C."""
    request = (b"GET /items/42?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nUser-Agent: python-requests/"
               b"2.31\r\nAccept: */*\r\nX-Request-Id: r-1\r\ntraceparent: 00-0af7651916cd43dd8448eb"
               b"211c80319c-b7ad6b7169203331-01\r\nAuthorization: Bearer s3cret\r\n\r\n")
    response = (b"HTTP/1.1 200 OK\r\ndate: Wed, 02 Dec 2026 10:00:00 GMT\r\nserver: uvicorn\r\n"
                b"content-length: 20\r\ncontent-type: application/json\r\nx-api-key: k\r\n\r\n")
    assert _same_step(request, Direction.EGRESS, Role.CLIENT, prime_request=False)
    assert _same_step(response, Direction.INGRESS, Role.CLIENT, prime_request=True)
    fast, _ = _states(Role.CLIENT)
    _, frame, _ = parser.parse(Direction.EGRESS, memoryview(request), fast)
    assert frame.carrier == {"x-request-id": "r-1", "traceparent": request.split(b"traceparent: ")[1]
                             .split(b"\r\n")[0].decode()}
    assert (frame.host, frame.user_agent, frame.method, frame.target) == (
        "127.0.0.1:8000", "python-requests/2.31", "GET", "/items/42?x=1")
    # secret headers stay out even when named as a correlation header (x-api-key)
    _, frame, _ = parser.parse(Direction.INGRESS, memoryview(response), fast)
    assert frame.carrier == {} and frame.body_size == 20 and frame.status == 200


def test_chunked_heads_take_the_compiled_path_only_where_asked():
    """A streamed answer's head (chunked, as an SSE stream's) is read in C by the head
    step, which then reads its chunks; whole() and a caller not taking chunked bodies
    leave it to llhttp, whose step is the same."""
    response = (b"HTTP/1.1 200 OK\r\ndate: Wed, 02 Dec 2026 10:00:00 GMT\r\nserver: uvicorn\r\n"
                b"content-type: text/event-stream; charset=utf-8\r\n"
                b"Transfer-Encoding: chunked\r\n\r\n")
    request = b"POST /v1/x HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n"
    assert _same_step(response, Direction.INGRESS, Role.CLIENT, prime_request=True)
    assert _same_step(request, Direction.EGRESS, Role.CLIENT, prime_request=False)
    fast, _ = _states(Role.CLIENT)
    kept = http1_parse._fast_kept(fast.carrier_names)
    got = http1_parse.compiled.head(response, False, kept, True)
    assert got is not None and got[-1] == http1_parse.compiled.CHUNKED
    assert http1_parse.compiled.head(response, False, kept) is None
    http10 = response.replace(b"HTTP/1.1", b"HTTP/1.0")
    assert http1_parse.compiled.head(http10, False, kept, True) is None
    parser.parse(Direction.EGRESS, memoryview(b"GET / HTTP/1.1\r\n\r\n"), fast)
    assert http1_parse.whole(Direction.INGRESS, response, fast, 0, 1, 2, None, 1, 0) is None


# ---- whole connections: events -> spans, both ways ---------------------------------------

def _traffic(exchanges: list[tuple[bytes, bytes]], splits: list[int]) -> list:
    """Both ends of keep-alive connections carrying these exchanges, each message cut into
    syscalls at `splits` (cycled), as the kernel sends them."""
    ends = {Role.CLIENT: (100, 5, 1), Role.SERVER: (200, 9, 2)}
    out: list = []
    for role, key in ends.items():
        local, remote = (40000, 8000) if role == Role.CLIENT else (8000, 40000)
        out.append(abi.ConnOpen(key=key, ts_ns=1, tid=key[0], role=role,
                                flags=abi.CONN_F_STREAM | abi.CONN_F_TCP, family=2,
                                local_addr="127.0.0.1", local_port=local,
                                remote_addr="127.0.0.1", remote_port=remote, comm="python"))
    pos = {(k, d): 0 for k in ends.values() for d in Direction}
    t, n = 1000, 0
    for request, response in exchanges:
        for role, direction, payload in ((Role.CLIENT, Direction.EGRESS, request),
                                         (Role.SERVER, Direction.INGRESS, request),
                                         (Role.SERVER, Direction.EGRESS, response),
                                         (Role.CLIENT, Direction.INGRESS, response)):
            key = ends[role]
            while payload:
                cut = max(1, splits[n % len(splits)]) if splits else len(payload)
                piece, payload, n, t = payload[:cut], payload[cut:], n + 1, t + 1000
                p = pos[(key, direction)]
                out.append(abi.DataEvent(key=key, tid=key[0], enter_ns=t, exit_ns=t + 500,
                                         direction=direction, pos=p, msg_len=len(piece),
                                         tcp_seq=(1000 + p) & 0xFFFFFFFF, payload=piece,
                                         peer=None))
                pos[(key, direction)] += len(piece)
    out += [abi.ConnClose(key=k, ts_ns=t + 10_000, bytes_sent=0, bytes_recv=0) for k in ends.values()]
    return out


def _spans(events: list, monkeypatch, compiled: bool) -> list:
    with monkeypatch.context() as m:
        if not compiled:
            m.setattr(http1_parse, "compiled", None)
        registry = Registry.from_config(["http1", "http2"], {"http1": {"correlation_headers": ["x-request-id"]}})
        table = ConnTable(registry, Stats(), 1024, 300 * 10**9)
        spans = []
        for i in range(0, len(events), 7):
            spans += table.handle(events[i : i + 7])
        spans += table.close_all()
    return [dataclasses.asdict(s) for s in spans]


MESSAGES = st.sampled_from([
    (b"GET /a?b=c HTTP/1.1\r\nHost: h:1\r\nUser-Agent: t\r\nX-Request-Id: 7\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\nContent-Type: text/plain\r\n\r\nok"),
    (b"POST /p HTTP/1.1\r\nHost: h\r\nContent-Length: 5\r\n\r\nhello",
     b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"),
    (b"GET /c HTTP/1.1\r\nHost: h\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nhello\r\n0\r\n\r\n"),
    (b"POST /s HTTP/1.1\r\nHost: h\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
     b"HTTP/1.1 200 OK\r\ncontent-type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
     b"9\r\ndata: 1\n\n\r\n9\r\ndata: 2\n\n\r\n0\r\n\r\n"),
    (b"GET /c0 HTTP/1.1\r\nHost: h\r\n\r\n",
     b"HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n2\r\nhi\r\n0\r\n\r\n"),
    (b"HEAD /h HTTP/1.0\r\n\r\n", b"HTTP/1.0 200 OK\r\nContent-Length: 99\r\n\r\n"),
    (b"DELETE /x HTTP/1.1\r\nhost: a\r\nhost: b\r\n\r\n", b"HTTP/1.1 404 Not Found\r\n\r\n"),
    (b"\r\nGET /lead HTTP/1.1\r\nHost: h\r\n\r\n",
     b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n"),
])


@settings(max_examples=150, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(exchanges=st.lists(MESSAGES, min_size=1, max_size=6),
       splits=st.lists(st.integers(1, 80), max_size=4))
def test_connections_give_the_same_spans(monkeypatch, exchanges, splits):
    events = _traffic(exchanges, splits)
    assert _spans(events, monkeypatch, True) == _spans(events, monkeypatch, False)
