"""HTTP/2 and gRPC exchanges through the real connection tracker: each fed whole, byte by
byte, one wire frame per syscall, and with garbage after (the `run` fixture's modes)."""

from __future__ import annotations

from otel_ebpf.protocols.base import Direction, Role
from otel_ebpf.protocols.http2 import H2Record, HTTP2Parser

from .conftest import REQ, RESP, TICK
from .wire import (
    CANCEL,
    PREFACE,
    REFUSED_STREAM,
    TRACEPARENT,
    Peer,
    data,
    goaway,
    grpc_message,
    grpc_request,
    http_request,
    ping,
    priority,
    rst_stream,
    settings,
    unknown_frame,
    window_update,
)

S = 1_000_000_000
REQ_DIR, RESP_DIR = Direction.EGRESS, Direction.INGRESS  # a client's requests go out
OK_TRAILERS = [("grpc-status", "0")]


def summary(tracker) -> list[tuple]:
    return sorted(
        (r.request.stream_id, r.request.method, r.request.path,
         r.response.status if r.response else None,
         r.response.grpc_status if r.response else None, r.error)
        for r in tracker.records
    )


def only(tracker) -> H2Record:
    assert len(tracker.records) == 1, summary(tracker)
    return tracker.records[0]


def counts(record: H2Record) -> tuple:
    req, resp = record.request.messages, record.response.messages
    return req.count, req.size, resp.count, resp.size


def unary(client: Peer, server: Peer, stream: int, path: str, reply: bytes = b"pong",
          trailers=OK_TRAILERS, request_extra=()):
    """(request bytes, response bytes) of one unary gRPC call."""
    request = client.headers(stream, grpc_request(path, extra=request_extra)) \
        + data(stream, grpc_message(b"ping"), end_stream=True)
    response = server.headers(stream, [(":status", "200"), ("content-type", "application/grpc")]) \
        + data(stream, grpc_message(reply)) + server.headers(stream, trailers, end_stream=True)
    return request, response


def test_grpc_unary_calls_on_one_connection(run, mode):
    client, server = Peer(), Peer()
    first = unary(client, server, 1, "/pkg.Echo/Say")
    second = unary(client, server, 3, "/pkg.Echo/Say", reply=b"again!")
    t = run([
        (REQ, PREFACE + settings() + window_update() + first[0]),
        (RESP, settings() + settings(ack=True) + first[1]),
        (REQ, settings(ack=True) + second[0]),
        (RESP, second[1]),
    ])
    assert summary(t) == [(1, "POST", "/pkg.Echo/Say", 200, 0, None),
                          (3, "POST", "/pkg.Echo/Say", 200, 0, None)]
    for r in t.records:
        assert r.request.start_ns <= r.request.end_ns <= r.response.end_ns == r.end_ns
        assert r.request.content_type == "application/grpc" and r.request.ended
    if mode != "bytes":  # a DATA frame cut by a syscall is skipped, its prefixes unseen
        assert [counts(r) for r in sorted(t.records, key=lambda r: r.request.stream_id)] == [
            (1, 4, 1, 4), (1, 4, 1, 6)]
    assert t.invalid == (2 if mode == "garbage" else 0)
    assert t.state.unknown_headers == 0 and t.state.orphan_responses == 0


def test_server_role_reads_requests(run):
    client, server = Peer(), Peer()
    request, response = unary(client, server, 1, "/pkg.Echo/Say")
    t = run([(REQ, PREFACE + settings() + request), (RESP, settings() + response)],
            role=Role.SERVER)
    assert summary(t) == [(1, "POST", "/pkg.Echo/Say", 200, 0, None)]


def test_error_status_and_message(run):
    client, server = Peer(), Peer()
    request, response = unary(client, server, 1, "/pkg.Store/Get", trailers=[
        ("grpc-status", "5"), ("grpc-message", "no%20such%20key")])
    r = only(run([(REQ, PREFACE + settings() + request), (RESP, settings() + response)]))
    assert (r.response.grpc_status, r.response.grpc_message) == (5, "no%20such%20key")
    assert r.response.trailers


def test_trailers_only_response(run):
    client, server = Peer(), Peer()
    request = client.headers(1, grpc_request("/pkg.Store/Missing")) \
        + data(1, grpc_message(b"x"), end_stream=True)
    response = server.headers(1, [(":status", "200"), ("content-type", "application/grpc"),
                                  ("grpc-status", "12"), ("grpc-message", "unimplemented")],
                              end_stream=True)
    r = only(run([(REQ, PREFACE + settings() + request), (RESP, settings() + response)]))
    assert (r.response.status, r.response.grpc_status, r.response.trailers) == (200, 12, False)
    assert r.response.data_size == 0 and r.response.ended


def test_server_streaming(run, mode):
    client, server = Peer(), Peer()
    request = client.headers(1, grpc_request("/pkg.Feed/Watch")) \
        + data(1, grpc_message(b"topic"), end_stream=True)
    t = run([
        (REQ, PREFACE + settings() + request),
        (RESP, settings() + server.headers(1, [(":status", "200"),
                                                ("content-type", "application/grpc")])),
        (RESP, data(1, grpc_message(b"one"))),
        (RESP, data(1, grpc_message(b"two") + grpc_message(b"three"))),
        (REQ, window_update() + ping()),
        (RESP, ping(ack=True) + data(1, grpc_message(b"four"))),
        (RESP, server.headers(1, OK_TRAILERS, end_stream=True)),
    ])
    r = only(t)
    assert (r.request.path, r.response.grpc_status) == ("/pkg.Feed/Watch", 0)
    if mode != "bytes":
        assert counts(r) == (1, 5, 4, 3 + 3 + 5 + 4)
    assert r.response.data_size == 4 * 5 + 15


def test_client_streaming_and_bidi(run, mode):
    client, server = Peer(), Peer()
    t = run([
        (REQ, PREFACE + settings() + client.headers(1, grpc_request("/pkg.Up/Load"))),
        (REQ, data(1, grpc_message(b"a" * 10))),
        (RESP, settings() + server.headers(1, [(":status", "200"),
                                                ("content-type", "application/grpc")])),
        (REQ, data(1, grpc_message(b"b" * 20) + grpc_message(b""))),
        (RESP, data(1, grpc_message(b"ack"))),
        (REQ, data(1, b"", end_stream=True)),
        (RESP, data(1, grpc_message(b"done")) + server.headers(1, OK_TRAILERS, end_stream=True)),
    ])
    r = only(t)
    assert r.request.ended and r.response.grpc_status == 0
    if mode != "bytes":
        assert counts(r) == (3, 30, 2, 7)


def test_concurrent_streams_pair_by_stream_id(run):
    client, server = Peer(), Peer()
    requests = b"".join(
        client.headers(sid, grpc_request(f"/pkg.Svc/M{sid}"))
        + data(sid, grpc_message(b"q"), end_stream=True) for sid in (1, 3, 5))
    ok = [(":status", "200"), ("content-type", "application/grpc")]
    t = run([
        (REQ, PREFACE + settings() + requests),
        (RESP, settings() + server.headers(3, ok) + server.headers(1, ok)),
        (RESP, data(1, grpc_message(b"r1")) + data(3, grpc_message(b"r3"))),
        (RESP, server.headers(3, OK_TRAILERS, end_stream=True)),
        (RESP, server.headers(5, [(":status", "503")], end_stream=True)),
        (RESP, data(1, grpc_message(b"more")) + server.headers(1, [("grpc-status", "4")],
                                                               end_stream=True)),
    ])
    assert summary(t) == [(1, "POST", "/pkg.Svc/M1", 200, 4, None),
                          (3, "POST", "/pkg.Svc/M3", 200, 0, None),
                          (5, "POST", "/pkg.Svc/M5", 503, None, None)]
    by_id = {r.request.stream_id: r for r in t.records}
    # each response ends with its own last frame: 3, then 5, then 1
    assert by_id[3].end_ns <= by_id[5].end_ns <= by_id[1].end_ns
    # one request frame and one response frame per stream, nothing else
    assert len({r.request.stream_pos for r in t.records}) == 3


def test_continuation_frames(run):
    client, server = Peer(), Peer()
    long = [("x-long-" + str(i), "v" * 40) for i in range(10)]
    request = client.headers(1, grpc_request("/pkg.Big/Headers", extra=long), split=50) \
        + data(1, grpc_message(b"."), end_stream=True)
    response = server.headers(1, [(":status", "200"), ("content-type", "application/grpc")],
                              split=3) \
        + server.headers(1, [("grpc-status", "0"), ("x-trailer", "t" * 30)], end_stream=True,
                         split=7)
    r = only(run([(REQ, PREFACE + settings() + request), (RESP, settings() + response)],
                 options={"capture_headers": True}))
    assert (r.request.path, r.response.status, r.response.grpc_status) == (
        "/pkg.Big/Headers", 200, 0)
    assert r.request.headers["x-long-9"] == ["v" * 40]


def test_padding_priority_and_frames_to_ignore(run, mode):
    client, server = Peer(), Peer()
    request = priority(1) + client.headers(1, http_request("POST", "/upload"), padding=7,
                                           priority=True) \
        + unknown_frame() + data(1, b"0123456789", padding=5) + window_update(1) \
        + data(1, b"abc", end_stream=True, padding=1)
    response = ping() + server.headers(1, [(":status", "201")], padding=3) + unknown_frame(0) \
        + data(1, b"created", end_stream=True)
    r = only(run([(REQ, PREFACE + settings(max_frame_size=32768) + request),
                  (RESP, settings() + window_update() + response)]))
    assert (r.request.method, r.request.path, r.response.status) == ("POST", "/upload", 201)
    assert (r.request.data_size, r.response.data_size) == (13, 7)


def test_push_promise_keeps_hpack_in_step(run):
    client, server = Peer(), Peer()
    page = http_request("GET", "/index.html")
    pushed = http_request("GET", "/style.css")
    response = server.headers(1, [(":status", "200"), ("content-type", "text/html")]) \
        + server.push_promise(1, 2, pushed) \
        + server.headers(2, [(":status", "200"), ("content-type", "text/css")]) \
        + data(2, b"body{}", end_stream=True) + data(1, b"<html>", end_stream=True)
    # the second response reuses entries the push inserted into the server's table
    again = server.headers(3, [(":status", "200"), ("content-type", "text/css")]) \
        + data(3, b"x", end_stream=True)
    t = run([
        (REQ, PREFACE + settings() + client.headers(1, page, end_stream=True)),
        (RESP, settings() + response),
        (REQ, client.headers(3, pushed, end_stream=True)),
        (RESP, again),
    ])
    assert summary(t) == [(1, "GET", "/index.html", 200, None, None),
                          (3, "GET", "/style.css", 200, None, None)]
    assert [r.response.content_type for r in sorted(t.records, key=lambda r: r.end_ns)] == [
        "text/html", "text/css"]
    assert t.state.unknown_headers == 0


def test_client_cancels_with_rst_stream(run):
    client, server = Peer(), Peer()
    t = run([
        (REQ, PREFACE + settings() + client.headers(1, grpc_request("/pkg.Feed/Watch"))
         + data(1, grpc_message(b"t"), end_stream=True)),
        (RESP, settings() + server.headers(1, [(":status", "200"),
                                                ("content-type", "application/grpc")])
         + data(1, grpc_message(b"one"))),
        (REQ, rst_stream(1, CANCEL)),
        (RESP, data(1, grpc_message(b"late"))),  # in flight when the reset arrived
    ])
    r = only(t)
    assert (r.error, r.request.reset, r.response.status) == ("reset", CANCEL, 200)
    assert r.end_ns >= r.request.end_ns


def test_server_refuses_with_rst_stream(run):
    client = Peer()
    t = run([
        (REQ, PREFACE + settings() + client.headers(1, grpc_request("/pkg.Svc/M"))
         + data(1, grpc_message(b"q"), end_stream=True)),
        (RESP, settings() + rst_stream(1, REFUSED_STREAM)),
    ])
    r = only(t)
    assert (r.error, r.response.reset, r.response.status) == (None, REFUSED_STREAM, None)


def test_goaway_refuses_later_streams(run):
    client, server = Peer(), Peer()
    first, reply = unary(client, server, 1, "/pkg.Svc/A")
    second, _ = unary(client, server, 3, "/pkg.Svc/B")
    t = run([
        (REQ, PREFACE + settings() + first + second),
        (RESP, settings() + goaway(1) + reply),
    ])
    assert summary(t) == [(1, "POST", "/pkg.Svc/A", 200, 0, None),
                          (3, "POST", "/pkg.Svc/B", None, None, "goaway")]


def test_unanswered_request_times_out_but_a_long_stream_does_not(run):
    client, server = Peer(), Peer()
    t = run([
        (REQ, PREFACE + settings() + client.headers(1, grpc_request("/pkg.Svc/Slow"))
         + data(1, grpc_message(b"q"), end_stream=True)),
        (REQ, client.headers(3, grpc_request("/pkg.Feed/Watch"))
         + data(3, grpc_message(b"q"), end_stream=True)),
        (RESP, settings() + server.headers(3, [(":status", "200"),
                                                ("content-type", "application/grpc")])),
        (TICK, 60 * S),
        (RESP, data(3, grpc_message(b"tick"))),
        (TICK, 120 * S),
    ], close=False, garbage=False)  # garbage would be lost bytes: the stream's end may be in them
    assert summary(t) == [(1, "POST", "/pkg.Svc/Slow", None, None, "timeout")]
    t.close()
    assert summary(t)[1][-1] == "connection_closed"
    assert t.records[1].response.status == 200  # partial: what came before the close


def test_plain_http2_requests(run, mode):
    client, server = Peer(), Peer()
    t = run([
        (REQ, PREFACE + settings() + client.headers(1, http_request("GET", "/items?id=7"),
                                                    end_stream=True)),
        (RESP, settings() + server.headers(1, [(":status", "200"),
                                                ("content-type", "application/json")])
         + data(1, b'{"id": 7}', end_stream=True)),
        (REQ, client.headers(3, http_request("POST", "/items",
                                             extra=[("content-type", "application/json")]))
         + data(3, b'{"name": "x"}', end_stream=True)),
        (RESP, server.headers(3, [(":status", "404")]) + data(3, b"", end_stream=True)),
    ])
    assert summary(t) == [(1, "GET", "/items?id=7", 200, None, None),
                          (3, "POST", "/items", 404, None, None)]
    by_id = {r.request.stream_id: r for r in t.records}
    assert (by_id[1].response.data_size, by_id[3].request.data_size) == (9, 13)
    assert by_id[1].request.user_agent == "test-client/1"


def test_correlation_evidence_and_secrets(run, mode):
    client, server = Peer(), Peer()
    secret = [("authorization", "Bearer sk-123"), ("x-api-key", "k"), ("cookie", "a=b"),
              ("traceparent", TRACEPARENT), ("x-request-id", "req-42")]
    request = client.headers(1, grpc_request("/pkg.Svc/M", extra=secret)) \
        + data(1, grpc_message(b"q"), end_stream=True)
    lead = PREFACE + settings() + window_update()
    t = run([(REQ, lead + request),
             (RESP, settings() + server.headers(1, [(":status", "200"),
                                                    ("set-cookie", "s=1")], end_stream=True))],
            options={"capture_headers": True})
    r = only(t)
    # the request frame is placed at its HEADERS, not at the preface before it
    assert r.request.stream_pos == len(lead)
    assert r.request.tcp_seq == 1_000_000 + len(lead)
    assert r.response.stream_pos == len(settings())
    assert r.request.carrier == {"traceparent": TRACEPARENT, "x-request-id": "req-42"}
    for message in (r.request, r.response):
        assert not {"authorization", "x-api-key", "cookie", "set-cookie"} & message.headers.keys()
    # timed from its own syscall: the first (the preface came with it), or in "frames"
    # mode the fourth (preface, SETTINGS, WINDOW_UPDATE came alone): never the preface's
    if mode in ("whole", "garbage"):
        assert r.request.start_ns == 1000
    elif mode == "frames":
        assert r.request.start_ns == 4000


def test_a_lone_control_frame_does_not_start_the_next_request(driver):
    client, server = Peer(), Peer()
    t = driver()
    req1, resp1 = unary(client, server, 1, "/pkg.Svc/A")
    req2, resp2 = unary(client, server, 3, "/pkg.Svc/B")
    t.feed(REQ_DIR, PREFACE + settings() + req1, at=1000)
    t.feed(RESP_DIR, settings() + resp1, at=2000)
    t.feed(REQ_DIR, window_update() + ping(), at=3000)  # alone, while the client reads
    t.feed(REQ_DIR, req2, at=9000)
    t.feed(RESP_DIR, resp2, at=10_000)
    t.close()
    records = sorted(t.records, key=lambda r: r.request.stream_id)
    first, second = records[0], records[1]
    assert (first.request.start_ns, first.end_ns) == (1000, 2000)
    # the lone WINDOW_UPDATE+PING at 3000 belong to no request: the second starts at 9000
    assert second.request.start_ns == 9000 and second.end_ns == 10_000
    pos2 = len(PREFACE + settings() + req1) + len(window_update() + ping())
    assert second.request.stream_pos == pos2
    assert second.request.tcp_seq == 1_000_000 + pos2


def _write(t, payload: bytes, enter: int, leave: int, tid: int) -> None:
    """One write() syscall of the client, with its own thread and entry/return times."""
    pos = t.pos[REQ_DIR]
    t.connection.on_data(REQ_DIR, pos, len(payload), payload, enter, leave,
                         (1_000_000 + pos) % 2**32, t.registry, t.stats, tid=tid)
    t.pos[REQ_DIR] += len(payload)


def test_request_timing_thread_and_position_with_a_lead(driver):
    """A request frame's timing is its HEADERS': exact when the frames before it came in
    the same syscall; else the HEADERS' last byte's time, and no thread (not the lead's)."""
    client, server = Peer(), Peer()
    req1, resp1 = unary(client, server, 1, "/pkg.Svc/A")
    req3, _ = unary(client, server, 3, "/pkg.Svc/B")
    req5, _ = unary(client, server, 5, "/pkg.Svc/C")
    t = driver()
    _write(t, PREFACE + settings() + req1, 1000, 1010, tid=7)
    t.feed(RESP_DIR, settings() + resp1, at=2000)
    _write(t, window_update(), 3000, 3010, tid=8)  # alone: the next request's lead
    _write(t, req3, 9000, 9010, tid=9)
    _write(t, ping() + req5, 12_000, 12_010, tid=10)  # the lead in the same write
    t.stitch(13_000)
    first = only(t).request  # the preface and SETTINGS came in its write
    assert (first.start_ns, first.tid, first.stream_pos) == (1000, 7, len(PREFACE + settings()))
    requests = {r.stream_id: r for r in t.state.waiting.values()}
    assert (requests[3].start_ns, requests[3].tid) == (9010, 0)
    assert (requests[5].start_ns, requests[5].tid) == (12_000, 10)
    pos3 = len(PREFACE + settings() + req1 + window_update())
    assert (requests[3].stream_pos, requests[3].tcp_seq) == (pos3, 1_000_000 + pos3)
    pos5 = pos3 + len(req3) + len(ping())
    assert (requests[5].stream_pos, requests[5].tcp_seq) == (pos5, 1_000_000 + pos5)


def test_a_layer_gets_the_streams_bodies_as_timed_pieces(tracker_cls, make_conn):
    from otel_ebpf.protocols.testing import EchoLayer

    layer = EchoLayer()
    t = tracker_cls(HTTP2Parser(), make_conn(Role.CLIENT), layers=(layer,))
    client, server = Peer(), Peer()
    t.feed(REQ_DIR, PREFACE + settings() + client.headers(
        1, http_request("POST", "/api/chat", extra=[("content-type", "application/json")])),
        at=100)
    t.feed(REQ_DIR, data(1, b'{"model":"m"}', end_stream=True), at=150)
    t.feed(RESP_DIR, settings() + server.headers(
        1, [(":status", "200"), ("content-type", "text/event-stream")]), at=1_000)
    t.feed(RESP_DIR, data(1, b"data: a\n\n"), at=2_000)
    t.feed(RESP_DIR, data(1, b"data: b\n\n") + data(1, b"", end_stream=True), at=2_500)
    # a stream no layer wants is only counted
    t.feed(REQ_DIR, client.headers(3, http_request("GET", "/other"), end_stream=True), at=3_000)
    t.feed(RESP_DIR, server.headers(3, [(":status", "204")], end_stream=True), at=3_100)
    spans = t.spans()
    assert [s.name for s in spans] == ["echo /api/chat", "GET"]
    ex = layer.seen
    assert ex.request_body.contiguous() == b'{"model":"m"}' and ex.request_end_ns == 150
    assert ex.request_content_type == "application/json"
    assert ex.response_content_type == "text/event-stream" and ex.status == 200
    assert [(p.ns, p.data) for p in ex.response_body.pieces] == [
        (2_000, b"data: a\n\n"), (2_500, b"data: b\n\n")]
    assert ex.response_body.complete and ex.response_start_ns == 1_000


def test_a_layer_body_beyond_the_capture_is_counted_lost(tracker_cls, make_conn):
    from otel_ebpf.protocols.testing import EchoLayer

    layer = EchoLayer()
    t = tracker_cls(HTTP2Parser(), make_conn(Role.CLIENT), layers=(layer,))
    client, server = Peer(), Peer()
    body = b'{"messages":"' + b"x" * 5000 + b'"}'
    frame = data(1, body, end_stream=True)
    t.feed(REQ_DIR, PREFACE + settings() + client.headers(1, http_request("POST", "/api/x")))
    t.feed(REQ_DIR, frame[:1009], gap=len(frame) - 1009)
    t.feed(RESP_DIR, settings() + server.headers(1, [(":status", "200")])
           + data(1, b"{}", end_stream=True))
    (span,) = t.spans()
    req = layer.seen.request_body
    assert req.size == len(body) and req.lost == len(body) - 1000
    assert req.contiguous() == body[:1000]
