"""Property tests: no input makes the HTTP/1 parser raise, and splitting never changes records."""

from __future__ import annotations

from itertools import pairwise

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.base import Direction, ParseResult, Role
from otel_ebpf.protocols.http1 import HTTP1Parser
from otel_ebpf.protocols.http1.fuzz import EXCHANGES, FRAGMENTS
from otel_ebpf.protocols.testing import EchoLayer

parser = HTTP1Parser({"capture_headers": True})
fuzz = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

noise = st.one_of(st.binary(max_size=64), st.sampled_from(FRAGMENTS))
streams = st.lists(noise, max_size=30).map(b"".join)


def _drive(direction: Direction, data: bytes, state) -> None:
    """The tracker's loop, bare: parse, skip, resync on INVALID."""
    pos = 0
    for _ in range(4 * len(data) + 10):
        result, frame, consumed = parser.parse(direction, memoryview(data[pos:]), state)
        assert consumed >= 0
        if result is ParseResult.INVALID:
            offset = parser.resync(direction, memoryview(data[pos + 1 :]), state)
            if offset is None:
                return
            pos += 1 + offset
        elif result is ParseResult.FRAME or consumed:
            pos += consumed
            if frame is not None:
                frame.end_ns = pos
                state.frames[direction].append(frame)
        else:
            return
        if pos >= len(data):
            return


@fuzz
@given(role=st.sampled_from([Role.CLIENT, Role.SERVER]), out=streams, back=streams, now=st.integers(0, 2**63))
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
        for data in (head, frag):
            assert parser.infer(direction, data, make_conn(Role.UNKNOWN)) in (None, Role.CLIENT, Role.SERVER)


events = st.lists(
    st.tuples(st.sampled_from(list(Direction)), streams, st.sampled_from([0, 0, 0, 1, 7, 70_000])),
    max_size=12,
)


@fuzz
@given(role=st.sampled_from([Role.CLIENT, Role.SERVER]), midstream=st.booleans(), events=events)
def test_random_events_through_the_tracker(tracker_cls, make_conn, role, midstream, events):
    """Chunks and gaps at random: the tracker's checks (frame sizes, progress) must hold."""
    tracker = tracker_cls(parser, make_conn(role), midstream=midstream)
    for direction, data, gap in events:
        tracker.feed(direction, data, gap)
    tracker.close()
    tracker.spans()




def _split(data: bytes, cuts: list[int]) -> list[bytes]:
    points = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    return [data[a:b] for a, b in pairwise(points)]


@fuzz
@given(
    picks=st.lists(st.integers(0, len(EXCHANGES) - 1), min_size=1, max_size=6),
    out_cuts=st.lists(st.integers(0, 10_000), max_size=20),
    back_cuts=st.lists(st.integers(0, 10_000), max_size=20),
)
def test_any_split_gives_the_same_records(tracker_cls, make_conn, picks, out_cuts, back_cuts):
    requests = b"".join(EXCHANGES[i][0] for i in picks)
    responses = b"".join(EXCHANGES[i][1] for i in picks)
    expected = [EXCHANGES[i][0].split(b" ")[1].decode() for i in picks]
    tracker = tracker_cls(parser, make_conn(Role.CLIENT))
    # all requests first (pipelined), then the answers, each cut at random
    for piece in _split(requests, out_cuts):
        tracker.feed(Direction.EGRESS, piece)
    for piece in _split(responses, back_cuts):
        tracker.feed(Direction.INGRESS, piece)
    tracker.close()
    assert [(r.request.target, r.error) for r in tracker.records] == [(t, None) for t in expected]
    assert tracker.invalid == 0


class WantsEverything(EchoLayer):
    """Reads every body, so the fuzzing reaches the reading paths too."""

    def wants(self, method: str, target: str) -> bool:
        return True


@fuzz
@given(role=st.sampled_from([Role.CLIENT, Role.SERVER]), midstream=st.booleans(), events=events)
def test_random_events_through_the_tracker_reading_bodies(tracker_cls, make_conn, role,
                                                          midstream, events):
    tracker = tracker_cls(HTTP1Parser(), make_conn(role), midstream=midstream,
                          layers=(WantsEverything(),))
    for direction, data, gap in events:
        tracker.feed(direction, data, gap)
    tracker.close()
    for span in tracker.spans():
        assert span.name.startswith("echo ")


BODIES = {"/a": (b"", b"abc"), "/b": (b"body", b""), "/c": (b"", b""), "/d": (b"", b"ab"),
          "/e": (b"x", b""), "/f": (b"ok", b"!")}


@fuzz
@given(
    picks=st.lists(st.integers(0, len(EXCHANGES) - 1), min_size=1, max_size=6),
    out_cuts=st.lists(st.integers(0, 10_000), max_size=20),
    back_cuts=st.lists(st.integers(0, 10_000), max_size=20),
)
def test_any_split_reads_the_same_bodies(tracker_cls, make_conn, picks, out_cuts, back_cuts):
    layer = WantsEverything()
    seen = []
    layer.enrich = lambda exchange, span: seen.append(exchange)
    tracker = tracker_cls(HTTP1Parser(), make_conn(Role.CLIENT), layers=(layer,))
    for piece in _split(b"".join(EXCHANGES[i][0] for i in picks), out_cuts):
        tracker.feed(Direction.EGRESS, piece)
    for piece in _split(b"".join(EXCHANGES[i][1] for i in picks), back_cuts):
        tracker.feed(Direction.INGRESS, piece)
    tracker.close()
    tracker.spans()
    assert tracker.invalid == 0
    got = [(e.target, e.request_body.contiguous(), e.response_body.contiguous()
            if e.response_body else b"") for e in seen]
    want = []
    for i in picks:
        target = EXCHANGES[i][0].split(b" ")[1].decode()
        want.append((target, *BODIES[target]))
    assert got == want
