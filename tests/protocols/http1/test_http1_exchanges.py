"""HTTP/1 exchanges through the real connection tracker: each fed whole, byte by byte, and with garbage."""

from __future__ import annotations

from otel_ebpf.protocols.base import Direction, Role, StatusCode
from otel_ebpf.protocols.http1 import HTTPRecord

from .conftest import GARBAGE

REQ, RESP, TICK = "req", "resp", "tick"  # event kinds of the `run` fixture

S = 1_000_000_000


def request(method="GET", target="/", headers=(), body=b"", version="1.1"):
    lines = [f"{method} {target} HTTP/{version}", "Host: api.example.com:8080", *headers]
    if body and not any(h.lower().startswith(("content-length", "transfer-encoding")) for h in headers):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def response(status=200, headers=(), body=b"", version="1.1", length=True):
    lines = [f"HTTP/{version} {status} Whatever", "Server: test", *headers]
    if length and not any(h.lower().startswith("transfer-encoding") for h in headers):
        lines.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(lines) + "\r\n\r\n").encode() + body


def summary(tracker) -> list[tuple]:
    return [
        (r.request.method, r.request.target, r.response.status if r.response else None, r.error)
        for r in tracker.records
    ]


def only(tracker) -> HTTPRecord:
    assert len(tracker.records) == 1, summary(tracker)
    return tracker.records[0]


def test_get_keep_alive(run):
    t = run(
        [
            (REQ, request(target="/a")),
            (RESP, response(body=b"first")),
            (REQ, request(target="/b?x=1")),
            (RESP, response(body=b"second!")),
            (REQ, request(target="/c")),
            (RESP, response(status=201, body=b"")),
        ]
    )
    assert summary(t) == [
        ("GET", "/a", 200, None),
        ("GET", "/b?x=1", 200, None),
        ("GET", "/c", 201, None),
    ]
    assert [r.response.body_size for r in t.records] == [5, 7, 0]
    assert [r.request.body_size for r in t.records] == [None] * 3
    for r in t.records:  # times are the tracker's, in order
        assert r.request.start_ns <= r.request.end_ns < r.response.start_ns <= r.response.end_ns


def test_post_with_content_length(run):
    body = b'{"prompt": "hello"}'
    t = run([(REQ, request("POST", "/v1/x", body=body)), (RESP, response(body=b"ok"))])
    r = only(t)
    assert (r.request.method, r.request.body_size, r.response.body_size) == ("POST", len(body), 2)
    assert r.request.size == len(request("POST", "/v1/x", body=body))


def test_chunked_response_with_extensions_and_trailers(run):
    chunked = (
        b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\nTrailer: X-Checksum\r\n\r\n"
        b"5\r\nhello\r\n"
        b"7;name=value\r\n, world\r\n"
        b"A ; a=1;b\r\n0123456789\r\n"
        b"0\r\nX-Checksum: abc\r\nX-Other: 1\r\n\r\n"
    )
    t = run([(REQ, request()), (RESP, chunked), (REQ, request(target="/next")), (RESP, response())])
    assert summary(t) == [("GET", "/", 200, None), ("GET", "/next", 200, None)]
    first = t.records[0].response
    assert (first.chunks, first.body_size, first.size) == (3, 5 + 7 + 10, len(chunked))


def test_chunked_response_without_trailers_and_chunked_request(run):
    upload = request("POST", "/up", ["Transfer-Encoding: chunked"]) + b"3\r\nabc\r\n0\r\n\r\n"
    answer = response(headers=["Transfer-Encoding: chunked"]) + b"2\r\nok\r\n0\r\n\r\n"
    t = run([(REQ, upload), (RESP, answer)])
    r = only(t)
    assert (r.request.chunks, r.request.body_size) == (1, 3)
    assert (r.response.chunks, r.response.body_size, r.response.size) == (1, 2, len(answer))


def test_http10_response_delimited_by_close(run, mode):
    t = run([(REQ, request(version="1.0")), (RESP, response(version="1.0", body=b"x" * 300, length=False))])
    r = only(t)
    assert (r.response.status, r.response.version, r.request.version) == (200, "1.0", "1.0")
    if mode != "garbage":  # bytes after the body are more body: only the close ends it
        assert r.response.body_bytes == 300
    assert r.error is None


def test_close_delimited_body_survives_lost_bytes(run, mode):
    head = response(version="1.0", length=False)
    t = run([(REQ, request()), (RESP, head + b"a" * 100, 50_000), (RESP, b"b" * 100)])
    r = only(t)
    after = len(GARBAGE) if mode == "garbage" else 0  # more body: only the close ends it
    assert r.response.status == 200 and r.response.body_bytes == 50_200 + after


def test_head_has_no_body_despite_content_length(run):
    t = run(
        [
            (REQ, request("HEAD", "/big")),
            (RESP, response(headers=["Content-Length: 123456"], length=False)),
            (REQ, request(target="/after")),
            (RESP, response(body=b"yes")),
        ]
    )
    assert summary(t) == [("HEAD", "/big", 200, None), ("GET", "/after", 200, None)]
    assert t.records[0].response.body_size is None


def test_204_and_304_have_no_body(run):
    no_body = ["Content-Length: 99"]  # even when declared (RFC 9112, section 6.3)
    t = run(
        [
            (REQ, request("DELETE", "/x")),
            (RESP, response(204, no_body, length=False)),
            (REQ, request(target="/y", headers=["If-None-Match: abc"])),
            (RESP, response(304, no_body, length=False)),
            (REQ, request(target="/z")),
            (RESP, response(body=b"z")),
        ]
    )
    assert summary(t) == [("DELETE", "/x", 204, None), ("GET", "/y", 304, None), ("GET", "/z", 200, None)]


def test_100_continue_before_200(run):
    head = request("POST", "/upload", ["Expect: 100-continue", "Content-Length: 4"])
    cont = b"HTTP/1.1 100 Continue\r\n\r\n"
    final = response(body=b"done")
    t = run([(REQ, head), (RESP, cont), (REQ, b"data"), (RESP, final)])
    r = only(t)
    assert (r.response.status, r.response.interim, r.request.body_size) == (200, (100,), 4)
    assert r.response.size == len(cont) + len(final)


def test_101_upgrade_then_binary_frames_ignored(run, make_conn):
    upgrade = request("GET", "/chat", ["Upgrade: websocket", "Connection: Upgrade"])
    switched = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    ws = bytes([0x81, 0x85, 1, 2, 3, 4]) + b"GET / HTTP/1.1\r\n\r\n" + bytes(range(256))
    events = [(REQ, upgrade), (RESP, switched + ws), (REQ, ws), (RESP, ws), (REQ, ws)]
    t = run(events)
    r = only(t)
    assert (r.response.status, r.response.upgraded, r.response.upgrade) == (101, True, "websocket")
    assert t.invalid == 0
    (span,) = t.spans()
    assert span.attributes["http.connection.upgrade"] == "websocket"
    assert span.status == StatusCode.UNSET


def test_ws_bytes_before_the_101_is_parsed(run):
    """The client's first frames may reach us before the answer that allowed them."""
    upgrade = request("GET", "/chat", ["Upgrade: websocket", "Connection: Upgrade"])
    switched = b"HTTP/1.1 101 Switching Protocols\r\nUpgrade: websocket\r\nConnection: Upgrade\r\n\r\n"
    t = run([(REQ, upgrade), (REQ, b"\x81\x85\x01\x02\x03\x04hello"), (RESP, switched), (REQ, b"\x82\x00")])
    assert summary(t) == [("GET", "/chat", 101, None)]
    assert t.invalid == 0


def test_upgrade_refused_keeps_http(run):
    upgrade = request("GET", "/chat", ["Upgrade: websocket", "Connection: Upgrade"])
    t = run([(REQ, upgrade), (RESP, response(426, body=b"no")), (REQ, request(target="/n")), (RESP, response())])
    assert summary(t) == [("GET", "/chat", 426, None), ("GET", "/n", 200, None)]
    assert not t.records[0].response.upgraded


def test_connect_tunnel(run):
    connect = b"CONNECT db.internal:5432 HTTP/1.1\r\nHost: db.internal:5432\r\n\r\n"
    t = run([(REQ, connect), (RESP, b"HTTP/1.1 200 Connection established\r\n\r\n"), (REQ, b"\x16\x03\x01tls")])
    r = only(t)
    assert (r.request.method, r.request.target, r.response.upgraded) == ("CONNECT", "db.internal:5432", True)
    assert t.invalid == 0


def test_pipelined_requests_then_responses(run):
    t = run(
        [
            (REQ, request(target="/1") + request("HEAD", "/2") + request("POST", "/3", body=b"abc")),
            (RESP, response(body=b"one") + response(headers=["Content-Length: 500"], length=False)
             + response(202, body=b"three")),
        ]
    )
    assert summary(t) == [("GET", "/1", 200, None), ("HEAD", "/2", 200, None), ("POST", "/3", 202, None)]


def test_404_fails_the_client_not_the_server(run):
    events = [(REQ, request(target="/missing")), (RESP, response(404, body=b"nope"))]
    (client,) = run(events, role=Role.CLIENT).spans()
    (server,) = run(events, role=Role.SERVER).spans()
    assert client.status == StatusCode.ERROR and client.attributes["error.type"] == "404"
    assert server.status == StatusCode.UNSET and "error.type" not in server.attributes


def test_500_fails_both(run):
    events = [(REQ, request()), (RESP, response(500, body=b"boom"))]
    for role in Role.CLIENT, Role.SERVER:
        (span,) = run(events, role=role).spans()
        assert span.status == StatusCode.ERROR and span.attributes["error.type"] == "500"


def test_large_bodies_skipped_by_length(run):
    """A 1 MB body arrives as the first 4 KiB of the write and a gap of known length."""
    size = 1_000_000
    upload_head = request("POST", "/big", [f"Content-Length: {size}"])
    captured = 4096 - len(upload_head)
    download_head = response(headers=[f"Content-Length: {size}"], length=False)
    t = run(
        [
            (REQ, upload_head + b"u" * captured, size - captured),
            (RESP, download_head + b"d" * 2000, size - 2000),
            (REQ, request(target="/next")),
            (RESP, response(body=b"small")),
        ]
    )
    assert summary(t) == [("POST", "/big", 200, None), ("GET", "/next", 200, None)]
    big = t.records[0]
    assert (big.request.body_size, big.response.body_size) == (size, size)
    assert big.request.size == len(upload_head) + size
    assert t.resyncs == 0 or t.invalid  # garbage mode resyncs after the end only


def test_large_chunk_skipped_by_length(run):
    head = response(headers=["Transfer-Encoding: chunked"])
    chunk = 0x100000
    t = run(
        [
            (REQ, request()),
            (RESP, head + b"100000\r\n" + b"c" * 3000, chunk - 3000),
            (RESP, b"\r\n0\r\n\r\n"),
            (REQ, request(target="/2")),
            (RESP, response()),
        ]
    )
    assert summary(t) == [("GET", "/", 200, None), ("GET", "/2", 200, None)]
    assert (t.records[0].response.body_size, t.records[0].response.chunks) == (chunk, 1)


def test_request_without_response_times_out(run):
    t = run([(REQ, request(target="/slow")), (TICK, 10 * S)], close=False)
    assert t.records == []
    t.tick(60 * S)
    r = only(t)
    assert (r.response, r.error) == (None, "timeout")
    (span,) = t.spans()
    assert span.status == StatusCode.ERROR and span.attributes["error.type"] == "timeout"
    assert span.end_ns == r.request.end_ns


def test_response_timeout_option(run):
    t = run([(REQ, request()), (TICK, 2 * S)], options={"response_timeout": 1}, close=False)
    assert [r.error for r in t.records] == ["timeout"]


def test_request_pending_at_close(run):
    t = run([(REQ, request(target="/a")), (RESP, response()), (REQ, request(target="/b"))])
    assert summary(t) == [("GET", "/a", 200, None), ("GET", "/b", None, "connection_closed")]


def test_streaming_response_is_no_timeout(run):
    """An answer whose head came is still arriving after the timeout: the request waits."""
    head = response(headers=["Transfer-Encoding: chunked"])
    events = [(REQ, request("POST", "/stream", body=b"{}")), (RESP, head + b"3\r\nabc\r\n"), (TICK, 100 * S)]
    t = run(events, close=False, garbage=False)  # garbage inside a body is the lost-bytes case
    assert t.records == []
    t.feed(t.state.requests.opposite, b"2\r\nde\r\n0\r\n\r\n", at=101 * S)
    r = only(t)
    assert (r.response.chunks, r.response.body_size, r.error) == (2, 5, None)


def test_lost_response_leaves_the_request_unanswered(run):
    t = run(
        [
            (REQ, request(target="/1")),
            (RESP, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nab", 500_000),  # lost
            (REQ, request(target="/2")),
            (RESP, b"junk the loss left\r\n" + response(body=b"2")),
        ]
    )
    assert summary(t) == [("GET", "/1", None, None), ("GET", "/2", 200, None)]
    assert t.records[0].response is None
    (lost, _) = t.spans()
    assert lost.status == StatusCode.UNSET


def test_capture_started_mid_body(run):
    t = run(
        [
            (REQ, b"dy of an upload we never saw the head of"),
            (RESP, b" of some answer\r\n0\r\n\r\n"),
            (REQ, request(target="/fresh")),
            (RESP, response(body=b"hi")),
        ],
        midstream=True,
    )
    assert summary(t) == [("GET", "/fresh", 200, None)]


def test_capture_started_between_request_and_response(run):
    t = run(
        [(RESP, response(body=b"answer to a request we missed")), (REQ, request(target="/n")), (RESP, response())],
        midstream=True,
    )
    assert summary(t) == [("GET", "/n", 200, None)]
    assert t.state.orphan_responses == 1


def test_secrets_never_stored(run):
    secrets = ["s3cr3t-bearer", "sess=abcdef", "sid=12345", "sk-live-key", "tok-777", "proxy-pw"]
    t = run(
        [
            (REQ, request("POST", "/login", [
                f"Authorization: Bearer {secrets[0]}",
                f"Cookie: {secrets[1]}",
                f"X-Api-Key: {secrets[3]}",
                f"X-Auth-Token: {secrets[4]}",
                f"Proxy-Authorization: Basic {secrets[5]}",
                "X-Request-Id: r-1",
            ], body=b"{}")),
            (RESP, response(headers=[f"Set-Cookie: {secrets[2]}", "X-Trace: t-1"], body=b"ok")),
        ],
        role=Role.SERVER,
        options={"capture_headers": True},
    )
    r = only(t)
    (span,) = t.spans()
    stored = repr(r) + repr(span.attributes)
    for secret in secrets:
        assert secret not in stored
    assert span.attributes["http.request.header.x-request-id"] == ["r-1"]
    assert span.attributes["http.response.header.x-trace"] == ["t-1"]
    assert not any(k.endswith(("authorization", "cookie", "api-key", "token")) for k in span.attributes)


def test_headers_not_kept_by_default(run):
    t = run([(REQ, request(headers=["X-Request-Id: r-1"])), (RESP, response())])
    r = only(t)
    assert r.request.headers == {} and r.response.headers == {}
    assert not any(k.startswith("http.request.header.") for k in t.spans()[0].attributes)


def test_server_role_directions(run):
    t = run([(REQ, request(target="/srv")), (RESP, response())], role=Role.SERVER)
    r = only(t)
    assert (r.request.direction, r.response.direction) == (Direction.INGRESS, Direction.EGRESS)
