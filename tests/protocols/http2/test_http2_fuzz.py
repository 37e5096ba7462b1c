"""Property tests: no bytes make the HTTP/2 parser raise, through the real tracker or bare;
and how a valid connection's bytes are cut into syscalls never changes its records."""

from __future__ import annotations

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.base import Direction, ParseResult, Role
from otel_ebpf.protocols.http2 import HTTP2Parser

from .wire import (
    PREFACE,
    Peer,
    data,
    goaway,
    grpc_message,
    grpc_request,
    ping,
    rst_stream,
    unknown_frame,
    window_update,
)
from .wire import settings as settings_frame

parser = HTTP2Parser({"capture_headers": True, "max_streams": 4})
fuzz = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _fragments() -> list[bytes]:
    """Pieces of HTTP/2, so that random sequences reach deep into the state machine."""
    client, server = Peer(), Peer()
    pieces = [PREFACE, PREFACE[:7], settings_frame(), settings_frame(ack=True), ping(),
              window_update(), window_update(3), goaway(1), rst_stream(1), rst_stream(3, 0),
              unknown_frame(), b"\x00\x00\x00", b"\xff" * 9, b"\x00\x00\x05\x08\x00\x00\x00\x00\x00"]
    for sid in (1, 3, 5, 2):
        pieces += [
            client.headers(sid, grpc_request(f"/p.S/M{sid}", extra=[("authorization", "x")])),
            client.headers(sid, grpc_request("/p.S/M", extra=[("x-" * 30, "y" * 90)]), split=5),
            server.headers(sid, [(":status", "200"), ("content-type", "application/grpc")]),
            server.headers(sid, [(":status", "100")]),
            server.headers(sid, [("grpc-status", "0")], end_stream=True),
            server.push_promise(sid, sid + 1, [(":method", "GET"), (":path", "/p")]),
            data(sid, grpc_message(b"m" * 20)), data(sid, grpc_message(b"n"), end_stream=True),
            data(sid, b"\x00\x00\x00\x10", padding=3), data(sid, b"", end_stream=True),
        ]
    return pieces


FRAGMENTS = _fragments()
noise = st.one_of(st.binary(max_size=40), st.sampled_from(FRAGMENTS),
                  st.sampled_from(FRAGMENTS).map(lambda b: b[: len(b) // 2]))
streams = st.lists(noise, max_size=25).map(b"".join)
events = st.lists(
    st.tuples(st.sampled_from(list(Direction)), streams, st.sampled_from([0, 0, 0, 1, 9, 70_000])),
    max_size=12,
)


def _drive(direction: Direction, data_: bytes, state) -> None:
    """The tracker's loop, bare: parse, skip, resync on INVALID."""
    pos = 0
    for _ in range(4 * len(data_) + 10):
        result, frame, consumed = parser.parse(direction, memoryview(data_[pos:]), state)
        assert consumed >= 0
        if result is ParseResult.INVALID:
            offset = parser.resync(direction, memoryview(data_[pos + 1 :]), state)
            if offset is None:
                return
            pos += 1 + offset
        elif result is ParseResult.FRAME or consumed:
            assert result is not ParseResult.FRAME or frame is not None
            pos += consumed
            if frame is not None:
                frame.end_ns = pos
                state.frames[direction].append(frame)
        else:
            return
        if pos >= len(data_):
            return


@fuzz
@given(role=st.sampled_from([Role.CLIENT, Role.SERVER]), out=streams, back=streams,
       now=st.integers(0, 2**63))
def test_random_bytes_never_raise(make_conn, role, out, back, now):
    state = parser.new_state(make_conn(role))
    _drive(Direction.EGRESS, out, state)
    _drive(Direction.INGRESS, back, state)
    for direction in Direction:
        parser.resync(direction, memoryview(out), state)
        parser.finish(direction, state)
    for record in parser.stitch(state, now):
        parser.to_spans(record, state.conn)


@fuzz
@given(head=st.binary(max_size=200), frag=streams)
def test_infer_never_raises(make_conn, head, frag):
    for direction in Direction:
        for role in Role:
            for data_ in (head, frag):
                assert parser.infer(direction, data_, make_conn(role)) in (
                    None, Role.CLIENT, Role.SERVER)


@fuzz
@given(role=st.sampled_from([Role.CLIENT, Role.SERVER]), midstream=st.booleans(), events=events)
def test_tracker_never_raises(tracker_cls, make_conn, role, midstream, events):
    tracker = tracker_cls(parser, make_conn(role), midstream=midstream)
    for direction, data_, gap in events:
        tracker.feed(direction, data_, gap)
    tracker.tick(tracker.now + 10**12)
    tracker.close()
    for span in tracker.spans():
        assert span.start_ns <= span.end_ns


def _connection() -> tuple[bytes, bytes]:
    client, server = Peer(), Peer()
    out, back = PREFACE + settings_frame(), settings_frame()
    for sid in (1, 3, 5):
        out += client.headers(sid, grpc_request(f"/p.S/M{sid}")) \
            + data(sid, grpc_message(b"q" * sid), end_stream=True)
    for sid in (3, 1, 5):
        back += server.headers(sid, [(":status", "200"), ("content-type", "application/grpc")]) \
            + data(sid, grpc_message(b"r" * sid)) \
            + server.headers(sid, [("grpc-status", str(sid))], end_stream=True)
    return out, back


OUT_BYTES, BACK_BYTES = _connection()


def _records(tracker_cls, make_conn, out_cuts, back_cuts):
    tracker = tracker_cls(HTTP2Parser(), make_conn(Role.CLIENT))
    for direction, wire, cuts in ((Direction.EGRESS, OUT_BYTES, out_cuts),
                                  (Direction.INGRESS, BACK_BYTES, back_cuts)):
        bounds = [0, *sorted(set(cuts)), len(wire)]
        for a, b in zip(bounds, bounds[1:], strict=False):
            if b > a:
                tracker.feed(direction, wire[a:b])
    tracker.close()
    assert tracker.invalid == 0 and tracker.resyncs == 0
    return sorted((r.request.stream_id, r.request.path, r.response.grpc_status, r.error)
                  for r in tracker.records)


@fuzz
@given(out_cuts=st.lists(st.integers(1, len(OUT_BYTES) - 1), max_size=12),
       back_cuts=st.lists(st.integers(1, len(BACK_BYTES) - 1), max_size=12))
def test_syscall_boundaries_never_change_records(tracker_cls, make_conn, out_cuts, back_cuts):
    assert _records(tracker_cls, make_conn, out_cuts, back_cuts) == [
        (1, "/p.S/M1", 1, None), (3, "/p.S/M3", 3, None), (5, "/p.S/M5", 5, None)]
