"""The compiled frame loop (protocols/http2/_parse.c parse) against its reference
(protocols/http2/parse.py parse): on the same bytes cut into the same syscalls, every call
gives the same result, the same frame field for field and the same consumed count, and
leaves the connection's state the same (each side's counts and marks, the open streams and
what they hold). Over the recorded grpcio traffic at both ends, and over random sequences of
HTTP/2 frames (and pieces of them, and noise) cut at random syscall boundaries; and the
recorded streams' spans through the whole agent's path are the same with either."""

from __future__ import annotations

import dataclasses
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.base import Direction, ParseResult, Role
from otel_ebpf.protocols.http2 import HTTP2Parser
from otel_ebpf.protocols.http2 import parse as h2parse

from bench import stream_pipeline as sp
from otel_ebpf import _fast
from otel_ebpf.conntrack import connection, table
from tests.unit.span_traffic import plain

from .test_http2_fuzz import FRAGMENTS
from .wire import PREFACE
from .wire import settings as settings_frame

pytestmark = pytest.mark.skipif(h2parse.compiled is None, reason="no compiled HTTP/2 frame loop")
fuzz = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _plain(value, depth: int = 0):  # noqa: ANN001, ANN202
    """A comparable picture of a parser object: fields and slots, recursively."""
    if value is None or isinstance(value, (bool, int, str, float)):
        return value
    if isinstance(value, (bytes, bytearray, memoryview)):
        return bytes(value)
    if isinstance(value, (tuple, list)):
        return [_plain(v, depth + 1) for v in value]
    if isinstance(value, dict):
        return {k: _plain(v, depth + 1) for k, v in value.items()}
    if depth > 6:
        return type(value).__name__
    if dataclasses.is_dataclass(value):
        return (type(value).__name__, {f.name: _plain(getattr(value, f.name), depth + 1)
                                       for f in dataclasses.fields(value)})
    slots = [s for c in type(value).__mro__ for s in getattr(c, "__slots__", ())]
    if slots:
        return (type(value).__name__, {s: _plain(getattr(value, s, "<unset>"), depth + 1)
                                       for s in slots if s not in ("decoder", "time_at")})
    return type(value).__name__


def _state(state) -> dict:
    sides = [_plain(s) for s in state.sides]
    for picture, side in zip(sides, state.sides, strict=True):
        d = side.decoder  # the HPACK table as it stands
        picture[1]["decoder"] = (list(d.entries), d.size, d.max_size, d.unknown_fields,
                                 d.errors, d.version)
    return {"sides": sides, "streams": [(k, _plain(s)) for k, s in state.streams.items()],
            "last_request_id": state.last_request_id, "goaway": state.goaway,
            "orphan_responses": state.orphan_responses,
            "streams_dropped": state.streams_dropped,
            "malformed_blocks": state.malformed_blocks}


class _Ends:
    """One state per implementation, fed the same syscalls, each direction's bytes held as
    the tracker holds them (consumed from the front, skipped by length past the end)."""

    def __init__(self, role: Role, make_conn) -> None:
        self.parser = HTTP2Parser({"capture_headers": False})
        self.compiled = h2parse.compiled_parse()
        assert self.compiled is not None
        conn = make_conn(role)
        self.states = (self.parser.new_state(conn), self.parser.new_state(conn))
        for s in self.states:
            s.time_at = lambda direction, offset: offset
        self.bufs = ([bytearray(), bytearray()], [bytearray(), bytearray()])
        self.skip = ([0, 0], [0, 0])
        self.resync = ([False, False], [False, False])
        self.steps = 0

    def feed(self, direction: Direction, data: bytes) -> None:
        pictures = [self._run(i, direction, data) for i in (0, 1)]
        assert pictures[0] == pictures[1]

    def _run(self, i: int, direction: Direction, data: bytes) -> list:
        parse = self.compiled if i else h2parse.parse
        state, buf = self.states[i], self.bufs[i][direction]
        skip = min(self.skip[i][direction], len(data))
        self.skip[i][direction] -= skip
        buf += data[skip:]
        out = []
        for _ in range(4 * len(buf) + 10):
            if not buf:
                break
            if self.resync[i][direction]:
                offset = h2parse.resync(direction, memoryview(buf), state)
                out.append(("resync", offset))
                if offset is None:
                    break
                del buf[:offset]
                self.resync[i][direction] = False
                continue
            view = memoryview(buf)
            result, frame, consumed = parse(direction, view, state)
            view.release()
            out.append((result, _plain(frame), consumed, _state(state)))
            if result is ParseResult.INVALID:
                del buf[:1]
                self.resync[i][direction] = True
                continue
            if not consumed:
                break
            if frame is not None:
                state.frames[direction].append(frame)
            if consumed > len(buf):
                self.skip[i][direction] += consumed - len(buf)
                buf.clear()
            else:
                del buf[:consumed]
        self.steps += len(out)
        return out


def _cut(data: bytes, rng: random.Random) -> list[bytes]:
    if len(data) < 2 or rng.random() < 0.5:
        return [data]
    at = sorted(rng.sample(range(1, len(data)), min(len(data) - 1, rng.randint(1, 4))))
    return [data[a:b] for a, b in zip([0, *at], [*at, len(data)], strict=True)]


@pytest.mark.parametrize("seed", [None, 1, 2, 3])
@pytest.mark.parametrize("role", [Role.CLIENT, Role.SERVER])
def test_recorded_grpc_streams_parse_alike(make_conn, role, seed):
    rng = None if seed is None else random.Random(seed)
    ends = _Ends(role, make_conn)
    for from_client, data in sp.recording("grpc"):
        # the client writes what the server reads
        direction = Direction.EGRESS if from_client == (role == Role.CLIENT) else Direction.INGRESS
        for piece in ([data] if rng is None else _cut(data, rng)):
            ends.feed(direction, piece)
    assert ends.steps > 1000  # the whole recording went through both


noise = st.one_of(st.binary(max_size=40), st.sampled_from(FRAGMENTS),
                  st.sampled_from(FRAGMENTS).map(lambda b: b[: len(b) // 2]))
wire = st.lists(st.tuples(st.sampled_from(list(Direction)), st.lists(noise, max_size=8)
                          .map(b"".join)), max_size=20)


@fuzz
@given(role=st.sampled_from([Role.CLIENT, Role.SERVER]), events=wire, seed=st.integers(0, 2**32))
def test_random_frames_cut_anywhere_parse_alike(make_conn, role, events, seed):
    rng = random.Random(seed)
    ends = _Ends(role, make_conn)
    for direction, data in events:
        for piece in _cut(data, rng):
            ends.feed(direction, piece)


@pytest.mark.parametrize("reference", ["frame loop", "syscall step", "both"])
@pytest.mark.parametrize("seed", [None, 4])
def test_recorded_spans_alike_through_the_agents_path(monkeypatch, seed, reference):
    """The frame loop (_parse.c) and the connection's syscall step (conn.c stream_step), each
    and both against their Python references, on the recording whole and cut with losses."""
    chunks = sp.recording("grpc")

    def spans() -> list:
        rng = None if seed is None else random.Random(seed)
        return plain(sp.spans_of(sp.events(chunks, 2, rng), rng))

    compiled = spans()
    if reference != "syscall step":
        monkeypatch.setattr(h2parse, "COMPILED", False)
        assert HTTP2Parser().parse is h2parse.parse
    if reference != "frame loop":
        monkeypatch.setattr(table, "STREAM_STEP", False)
    assert spans() == compiled
    assert len(compiled) == 800 if seed is None else len(compiled) > 700  # syscalls lost


@pytest.mark.skipif(_fast.conn is None, reason="no compiled connection step")
def test_the_syscall_step_takes_whole_frames(monkeypatch):
    """With the compiled step, a syscall that is one whole request or answer never reaches
    Connection.on_data (those that do, once a message is under way, are the others)."""
    calls = []
    on_data = connection.Connection.on_data

    def counted(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls.append(1)
        return on_data(self, *args, **kwargs)

    monkeypatch.setattr(connection.Connection, "on_data", counted)
    evs = sp.events(sp.recording("grpc"))
    data_events = sum(type(e).__name__ == "DataEvent" for e in evs)
    assert len(sp.spans_of(evs)) == 400
    stepped = len(calls)
    calls.clear()
    monkeypatch.setattr(table, "STREAM_STEP", False)
    assert len(sp.spans_of(evs)) == 400
    assert len(calls) == data_events
    assert stepped < data_events * 3 // 4


frames = st.one_of(st.sampled_from(FRAGMENTS), st.sampled_from(FRAGMENTS), noise)


@fuzz
@given(chunks=st.lists(st.tuples(st.booleans(), st.lists(frames, min_size=1, max_size=6)
                                 .map(b"".join)), max_size=16), seed=st.integers(0, 2**32))
def test_random_frames_through_the_table_alike(chunks, seed):
    """Random frame sequences as syscalls at both ends of a connection (cut at random
    points, now and then one lost), through the connection table and the correlator: the
    compiled frame loop and syscall step give the spans their Python references give."""
    chunks = [(True, PREFACE + settings_frame()), (False, settings_frame()), *chunks]

    def spans() -> list:
        rng = random.Random(seed)
        return plain(sp.spans_of(sp.events(chunks, 1, rng), rng))

    compiled = spans()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(h2parse, "COMPILED", False)
        m.setattr(table, "STREAM_STEP", False)
        assert spans() == compiled



def test_the_usual_header_blocks_are_read_in_c(monkeypatch):
    """A request's or an answer's reused header block (a call's headers, an answer's
    headers and trailers) never reaches _request_block / _response_block on the compiled
    path: only each block's first reading (the HPACK walk) does."""
    calls = {"request": [], "response": []}

    def counted(name: str):  # noqa: ANN202
        reader = getattr(h2parse, f"_{name}_block")

        def read(*args):  # noqa: ANN002, ANN202
            calls[name].append(1)
            return reader(*args)
        return read

    for name in calls:
        monkeypatch.setattr(h2parse, f"_{name}_block", counted(name))
    monkeypatch.setattr(h2parse, "_compiled_ready", None)  # set up again with the counters
    try:
        evs = sp.events(sp.recording("grpc"))
        compiled = plain(sp.spans_of(evs))
        in_c = {k: len(v) for k, v in calls.items()}
        for v in calls.values():
            v.clear()
        monkeypatch.setattr(h2parse, "COMPILED", False)
        assert plain(sp.spans_of(evs)) == compiled
        # 200 calls seen at both ends: a request block and an answer's two at each
        assert len(calls["request"]) >= 400 and len(calls["response"]) >= 800
        assert in_c["request"] < 10 and in_c["response"] < 20
    finally:
        monkeypatch.undo()
        h2parse._compiled_ready = None  # the C loop set up again with the readers themselves
