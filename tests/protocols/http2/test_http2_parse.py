"""HTTP/2 framing through the real tracker: inference, every split point, lost bytes, DATA
beyond the capture, capture that begins mid-connection, resync, the stream table's bound."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.base import Direction, Role
from otel_ebpf.protocols.http1 import HTTP1Parser
from otel_ebpf.protocols.http2 import HTTP2Parser

from .wire import (
    PREFACE,
    TRACEPARENT,
    Peer,
    data,
    grpc_message,
    grpc_request,
    window_update,
)
from .wire import (
    settings as settings_frame,
)

OUT, IN = Direction.EGRESS, Direction.INGRESS
OK = [(":status", "200"), ("content-type", "application/grpc")]
parser = HTTP2Parser()


def summary(tracker) -> list[tuple]:
    return sorted(
        (r.request.stream_id, r.request.method, r.request.path,
         r.response.status if r.response else None,
         r.response.grpc_status if r.response else None, r.error)
        for r in tracker.records
    )


def call(client: Peer, server: Peer, stream: int, path: str, reply: bytes = b"r"):
    request = client.headers(stream, grpc_request(path)) \
        + data(stream, grpc_message(b"q"), end_stream=True)
    response = server.headers(stream, OK) + data(stream, grpc_message(reply)) \
        + server.headers(stream, [("grpc-status", "0")], end_stream=True)
    return request, response


# --- inference ---------------------------------------------------------------------------


def test_infer_on_the_client_preface(make_conn):
    for role in (Role.UNKNOWN, Role.CLIENT, Role.SERVER):
        conn = make_conn(role)
        assert parser.infer(OUT, PREFACE + settings_frame(), conn) == Role.CLIENT
        assert parser.infer(IN, PREFACE + settings_frame(), conn) == Role.SERVER
        assert parser.infer(OUT, PREFACE[:10], conn) == Role.CLIENT  # a short first write
    # HTTP/1 never claims it, and it never claims HTTP/1
    assert HTTP1Parser().infer(OUT, PREFACE, make_conn(Role.UNKNOWN)) is None
    for text in (b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", b"HTTP/1.1 200 OK\r\n\r\n",
                 b"PRI * HTTP/1.1\r\n", b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc"):
        for role in (Role.UNKNOWN, Role.CLIENT):
            assert parser.infer(OUT, text, make_conn(role)) is None


def test_infer_mid_connection_from_a_header_block(make_conn):
    client, server = Peer(), Peer()
    call(client, server, 1, "/pkg.S/M")  # the channel was used before capture began
    request, response = call(client, server, 3, "/pkg.S/M")
    unknown = make_conn(Role.UNKNOWN)
    # :method POST is a static entry, :status 200 too: known whatever the table's past
    assert parser.infer(OUT, request, unknown) == Role.CLIENT
    assert parser.infer(IN, request, unknown) == Role.SERVER
    assert parser.infer(OUT, response, unknown) == Role.SERVER
    assert parser.infer(IN, response, unknown) == Role.CLIENT
    # frames with no header block say nothing about who sent them
    assert parser.infer(OUT, window_update() + data(3, b"xx"), unknown) is None


def test_infer_a_server_preface_only_when_the_kernel_saw_the_socket_open(make_conn):
    first = settings_frame(max_concurrent_streams=100)
    assert parser.infer(OUT, first, make_conn(Role.SERVER)) == Role.SERVER
    assert parser.infer(IN, first, make_conn(Role.CLIENT)) == Role.CLIENT
    assert parser.infer(OUT, first, make_conn(Role.UNKNOWN)) is None
    assert parser.infer(OUT, settings_frame(ack=True), make_conn(Role.SERVER)) is None


@settings(max_examples=500, deadline=None)
@given(head=st.binary(max_size=300))
def test_random_bytes_are_never_claimed(make_conn, head):
    if head.startswith(PREFACE[:4]):
        return
    for role in (Role.UNKNOWN, Role.CLIENT):
        for direction in Direction:
            assert parser.infer(direction, head, make_conn(role)) is None


# --- splits, lost bytes, capture -----------------------------------------------------------


def _exchange():
    client, server = Peer(), Peer()
    r1, a1 = call(client, server, 1, "/pkg.S/One")
    r3, a3 = call(client, server, 3, "/pkg.S/Two", reply=b"x" * 40)
    return (PREFACE + settings_frame() + r1 + r3, settings_frame() + a1 + a3)


def test_every_split_point_gives_the_same_records(driver):
    out, back = _exchange()
    expected = [(1, "POST", "/pkg.S/One", 200, 0, None), (3, "POST", "/pkg.S/Two", 200, 0, None)]
    for direction, wire in ((OUT, out), (IN, back)):
        for cut in range(1, len(wire)):
            t = driver()
            other = back if direction is OUT else out
            first = (direction, wire[:cut]), (direction, wire[cut:])
            events = [*first, (direction.opposite, other)] if direction is OUT \
                else [(OUT, out), *first]
            for d, chunk in events:
                t.feed(d, chunk)
            t.close()
            assert summary(t) == expected, (direction, cut)
            assert t.invalid == 0 and t.state.unknown_headers == 0


def test_data_beyond_the_capture_is_skipped_by_length(driver):
    client, server = Peer(), Peer()
    request = client.headers(1, grpc_request("/pkg.Blob/Get")) \
        + data(1, grpc_message(b"q"), end_stream=True)
    big = grpc_message(b"z" * 100_000)
    frames = [data(1, big[i : i + 16384]) for i in range(0, len(big), 16384)]
    t = driver()
    t.feed(OUT, PREFACE + settings_frame() + request)
    t.feed(IN, settings_frame() + server.headers(1, OK))
    for frame in frames:  # each syscall captured its first 4096 bytes only
        t.feed(IN, frame[:4096], gap=len(frame) - 4096 if len(frame) > 4096 else 0)
    t.feed(IN, server.headers(1, [("grpc-status", "0")], end_stream=True))
    t.close()
    r = t.records[0]
    assert summary(t) == [(1, "POST", "/pkg.Blob/Get", 200, 0, None)]
    assert t.resyncs == 0  # nothing lost that mattered: skipped bytes are no loss
    # the message prefix was seen; its body was skipped by length, captured or not
    assert (r.response.messages.count, r.response.messages.size) == (1, 100_000)
    assert r.response.messages.complete and r.response.data_size == len(big)


def test_a_prefix_beyond_the_capture_makes_counts_inexact(driver):
    client, server = Peer(), Peer()
    request, _ = call(client, server, 1, "/pkg.S/M")
    two = grpc_message(b"a" * 5000) + grpc_message(b"b")
    t = driver()
    t.feed(OUT, PREFACE + settings_frame() + request)
    frame = server.headers(1, OK) + data(1, two)
    t.feed(IN, settings_frame() + frame[:4096], gap=len(frame) - 4096)
    t.feed(IN, server.headers(1, [("grpc-status", "0")], end_stream=True))
    t.close()
    r = t.records[0]
    assert r.response.data_size == len(two) and not r.response.messages.exact


def test_lost_header_bytes_make_headers_unknown_never_wrong(driver):
    client, server = Peer(), Peer()
    r1, a1 = call(client, server, 1, "/pkg.S/Seen")
    r3, a3 = call(client, server, 3, "/pkg.S/Lost")  # inserts /pkg.S/Lost into the table
    r5, a5 = call(client, server, 5, "/pkg.S/Lost")  # refers to it by index
    r7, a7 = call(client, server, 7, "/pkg.S/Seen")
    t = driver()
    t.feed(OUT, PREFACE + settings_frame() + r1)
    t.feed(IN, settings_frame() + a1)
    t.feed(OUT, r3[:20], gap=len(r3) - 20)  # the kernel captured 20 bytes of this write
    t.feed(IN, a3)
    t.feed(OUT, r5)
    t.feed(IN, a5)
    t.feed(OUT, r7)
    t.feed(IN, a7)
    t.close()
    paths = {r.request.stream_id: r.request.path for r in t.records}
    assert paths[1] == "/pkg.S/Seen" and 3 not in paths
    # after the loss, indices into the table may point anywhere: unknown, not wrong
    assert paths[5] is None and paths[7] is None
    assert t.records[-1].request.method == "POST"  # a static entry stays known
    assert t.state.orphan_responses == 1  # stream 3's answer, whose request was lost


def test_capture_that_begins_mid_connection(driver):
    client, server = Peer(), Peer()
    for sid, path in ((1, "/pkg.S/Old"), (3, "/pkg.S/Other")):
        call(client, server, sid, path)  # before the agent started: never fed
    t = driver(midstream=True)
    for sid, path in ((5, "/pkg.S/Old"), (7, "/pkg.S/New"), (9, "/pkg.S/New")):
        request, response = call(client, server, sid, path)
        t.feed(OUT, request)
        t.feed(IN, response)
    t.close()
    got = {r.request.stream_id: (r.request.method, r.request.path) for r in t.records}
    assert got == {5: ("POST", None), 7: ("POST", "/pkg.S/New"), 9: ("POST", "/pkg.S/New")}
    assert t.state.unknown_headers > 0
    statuses = {r.request.stream_id: r.response.grpc_status for r in t.records}
    assert statuses[5] is None  # grpc-status: 0 was inserted before capture began


def test_invalid_frame_resyncs_to_the_next_boundary(driver):
    client, server = Peer(), Peer()
    r1, a1 = call(client, server, 1, "/pkg.S/A")
    r3, a3 = call(client, server, 3, "/pkg.S/B")
    t = driver()
    t.feed(OUT, PREFACE + settings_frame() + r1)
    t.feed(IN, settings_frame() + a1)
    t.feed(OUT, b"\x00\x00\x05\x08\x00\x00\x00\x00\x00junk!" + r3)  # a WINDOW_UPDATE of 5 bytes
    t.feed(IN, a3)
    t.close()
    assert t.invalid == 1
    # stream 3's HEADERS, after the junk, is found again (the junk's "frame" one byte on
    # is not trusted: one header alone is not enough there); the table was forgotten, but
    # /pkg.S/B is a new literal, so it is known
    assert summary(t) == [(1, "POST", "/pkg.S/A", 200, 0, None),
                          (3, "POST", "/pkg.S/B", 200, 0, None)]


def test_stream_table_is_bounded(driver):
    client, server = Peer(), Peer()
    t = driver(options={"max_streams": 2})
    t.feed(OUT, PREFACE + settings_frame() + b"".join(
        client.headers(sid, grpc_request(f"/pkg.S/M{sid}")) for sid in (1, 3, 5, 7)))
    t.feed(IN, settings_frame() + server.headers(7, OK)
           + server.headers(7, [("grpc-status", "0")], end_stream=True))
    assert t.state.streams_dropped == 2 and len(t.state.streams) <= 2
    t.close()
    assert summary(t) == [(1, "POST", "/pkg.S/M1", None, None, "evicted"),
                          (3, "POST", "/pkg.S/M3", None, None, "evicted"),
                          (5, "POST", "/pkg.S/M5", None, None, "connection_closed"),
                          (7, "POST", "/pkg.S/M7", 200, 0, None)]


def test_options_are_checked():
    with pytest.raises(ValueError):
        HTTP2Parser({"response_timeout": 0})
    with pytest.raises(ValueError):
        HTTP2Parser({"max_streams": 0})
    assert HTTP2Parser({"capture_headers": "false"}).capture_headers is False


def _fields(message) -> tuple:
    return (message.stream_id, getattr(message, "method", None), getattr(message, "path", None),
            getattr(message, "status", None), getattr(message, "grpc_status", None),
            getattr(message, "trailers", None), message.content_type, message.user_agent,
            dict(message.carrier), message.messages.count, message.messages.size,
            message.data_size, message.unknown_fields)


def test_plain_headers_read_inline_as_the_general_path_reads_them(driver):
    # The frame loop reads a plain HEADERS frame (END_HEADERS, no padding or priority)
    # itself; the same blocks with a priority field take the general path. Same fields,
    # sizes apart by the 5 priority bytes of each HEADERS frame.
    def wire(priority: bool):
        client, server = Peer(), Peer()
        out, back = PREFACE + settings_frame(), settings_frame()
        for stream, path in ((1, "/pkg.S/One"), (3, "/pkg.S/Two"), (5, "/pkg.S/One")):
            out += client.headers(stream, grpc_request(path, extra=[("traceparent", TRACEPARENT)]),
                                  priority=priority) \
                + data(stream, grpc_message(b"q" * stream), end_stream=True)
            back += server.headers(stream, OK, priority=priority) \
                + data(stream, grpc_message(b"r" * stream)) \
                + server.headers(stream, [("grpc-status", "0")], end_stream=True,
                                 priority=priority)
        return out, back

    seen = {}
    for priority in (False, True):
        t = driver()
        out, back = wire(priority)
        t.feed(OUT, out)
        t.feed(IN, back)
        t.close()
        assert t.invalid == 0
        seen[priority] = [(_fields(r.request), _fields(r.response),
                           r.request.size, r.response.size) for r in t.records]
    assert len(seen[False]) == 3
    for plain, general in zip(seen[False], seen[True], strict=True):
        assert plain[:2] == general[:2]
        assert plain[2] + 5 == general[2] and plain[3] + 10 == general[3]
