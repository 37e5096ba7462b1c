"""The http1 fuzz target (entry point `otel_ebpf.fuzz_targets`), and the pieces of HTTP/1
it and the property tests start from, so that random sequences reach deep into the parser."""

from __future__ import annotations

from ..testing import FuzzTarget

# pieces of HTTP/1, so that random sequences reach deep into the state machine
FRAGMENTS = [
    b"GET / HTTP/1.1\r\n", b"HEAD /h HTTP/1.1\r\n", b"POST /p?q=1 HTTP/1.0\r\n",
    b"CONNECT a:1 HTTP/1.1\r\n", b"PROPFIND /d HTTP/1.1\r\n",
    b"HTTP/1.1 200 OK\r\n", b"HTTP/1.0 204 No Content\r\n", b"HTTP/1.1 100 Continue\r\n",
    b"HTTP/1.1 101 Switching\r\n", b"HTTP/1.1 304 Not Modified\r\n", b"HTTP/1.1 500 Oops\r\n",
    b"Host: h:80\r\n", b"Content-Length: 5\r\n", b"Content-Length: 99999999\r\n",
    b"Transfer-Encoding: chunked\r\n", b"Transfer-Encoding: gzip\r\n",
    b"Upgrade: websocket\r\nConnection: Upgrade\r\n", b"Cookie: secret\r\n", b"Expect: 100-continue\r\n",
    b"\r\n", b"\r", b"\n", b"5\r\nhello\r\n", b"a;x=y\r\n", b"0\r\n", b"0\r\n\r\n", b"X-T: v\r\n\r\n",
    b"hello", b" ", b"\x00\xff", b"HTTP/1.", b"GET ",
]

# whole exchanges, a request and its answer
EXCHANGES = [
    (b"GET /a HTTP/1.1\r\nHost: h\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"),
    (b"POST /b HTTP/1.1\r\nContent-Length: 4\r\n\r\nbody", b"HTTP/1.1 201 Created\r\nContent-Length: 0\r\n\r\n"),
    (b"HEAD /c HTTP/1.1\r\n\r\n", b"HTTP/1.1 200 OK\r\nContent-Length: 1234\r\n\r\n"),
    (b"GET /d HTTP/1.1\r\n\r\n", b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2;e\r\nab\r\n0\r\nT: 1\r\n\r\n"),
    (b"POST /e HTTP/1.1\r\nTransfer-Encoding: chunked\r\n\r\n1\r\nx\r\n0\r\n\r\n", b"HTTP/1.1 204 No\r\n\r\n"),
    (b"PUT /f HTTP/1.1\r\nExpect: 100-continue\r\nContent-Length: 2\r\n\r\nok",
     b"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 500 Err\r\nContent-Length: 1\r\n\r\n!"),
]


def _make():
    from . import HTTP1Parser  # noqa: PLC0415 - imported under the fuzzer's instrumentation
    parser = HTTP1Parser({"capture_headers": True})
    return lambda: (parser, ())


TARGET = FuzzTarget(make=_make(), pieces=lambda: FRAGMENTS + [b for ex in EXCHANGES for b in ex])
