"""The compiled HTTP/2 syscall step (otel_ebpf/_fast/conn.c stream_step) against its
reference (Connection.on_data, _whole, _parse and _finish_pending): the same events through
the connection table with and without it leave every connection the same after every event:
each direction's stream (head, buffer, timing chunks, furthest byte), the frame start and
the frames pending their last byte, the frames finished (field for field, in order) and the
parser's state. Over the recorded grpcio traffic at both ends, whole and cut into random
syscalls with some lost, and over random HTTP/2 frame sequences (frames, pieces of frames,
noise), several to a syscall: a FRAME and what follows it in one write (an answer's
trailers, then a WINDOW_UPDATE or a PING), a syscall inside a message whose start an earlier
one left, unusual answers handed over to the reference midway."""

from __future__ import annotations

import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from bench import stream_pipeline as sp
from otel_ebpf import _fast
from otel_ebpf.conntrack import connection, table
from otel_ebpf.conntrack.table import ConnTable
from otel_ebpf.kernel import abi
from otel_ebpf.protocols.http2 import parse as h2parse
from otel_ebpf.protocols.registry import Registry
from otel_ebpf.telemetry import Stats

from .test_http2_compiled import _plain, _state
from .test_http2_fuzz import FRAGMENTS
from .wire import PREFACE
from .wire import settings as settings_frame

pytestmark = pytest.mark.skipif(_fast.conn is None or h2parse.compiled is None,
                                reason="no compiled HTTP/2 step")
fuzz = settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])


def _conn_picture(conn: connection.Connection) -> dict:
    state = conn.state
    return {
        "streams": [(s.head, bytes(s.buf), list(s.times), list(s.queue), s.known_end,
                     s.last_end_ns, s.started) for s in conn.streams],
        "frame_start": list(conn.frame_start),
        "pending": [[(_plain(f), end) for f, end in p] for p in conn.pending],
        "resync": list(conn.resync),
        "last_ns": conn.last_ns,
        "frames": None if state is None else [[_plain(f) for f in q] for q in state.frames],
        "parser": None if state is None or not hasattr(state, "sides") else _state(state),
    }


def _pictures(evs: list, stepped: bool, monkeypatch) -> tuple[list, int]:
    """A picture of every connection after each event, and how many events on_data took."""
    monkeypatch.setattr(table, "STREAM_STEP", stepped)
    calls = []
    on_data = connection.Connection.on_data

    def counted(self, *args, **kwargs):  # noqa: ANN001, ANN002, ANN003, ANN202
        calls.append(1)
        return on_data(self, *args, **kwargs)

    monkeypatch.setattr(connection.Connection, "on_data", counted)
    registry = Registry.from_config(list(sp.ENABLED), {})
    t = ConnTable(registry, Stats(), 65536, 300 * 10**9)
    out = []
    for ev in evs:
        t.handle([ev])
        out.append({key: _conn_picture(c) for key, c in t.conns.items()})
        out.append([(info.key, _plain(f)) for info, f in t.observed])
        t.observed.clear()
    monkeypatch.setattr(connection.Connection, "on_data", on_data)
    return out, len(calls)


def _alike(evs: list, monkeypatch) -> tuple[int, int]:
    stepped, stepped_calls = _pictures(evs, True, monkeypatch)
    reference, reference_calls = _pictures(evs, False, monkeypatch)
    assert len(stepped) == len(reference)
    for i, (a, b) in enumerate(zip(stepped, reference, strict=True)):
        assert a == b, f"after event {i // 2}"
    return stepped_calls, reference_calls


@pytest.mark.parametrize("seed", [None, 1, 2, 3, 4])
def test_recorded_grpc_connections_alike_after_every_event(monkeypatch, seed):
    rng = None if seed is None else random.Random(seed)
    evs = sp.events(sp.recording("grpc"), 2, rng)
    stepped_calls, reference_calls = _alike(evs, monkeypatch)
    data_events = sum(type(e) is abi.DataEvent for e in evs)
    assert reference_calls == data_events
    if seed is None:
        # every usual syscall, the answers' (trailers and a WINDOW_UPDATE) included, is the
        # compiled step's: on_data takes only each connection's first events
        assert stepped_calls <= 8
    else:
        assert stepped_calls < data_events // 2


frames = st.one_of(st.sampled_from(FRAGMENTS), st.sampled_from(FRAGMENTS),
                   st.binary(max_size=24),
                   st.sampled_from(FRAGMENTS).map(lambda b: b[: len(b) // 2]))


@fuzz
@given(chunks=st.lists(st.tuples(st.booleans(), st.lists(frames, min_size=1, max_size=6)
                                 .map(b"".join)), max_size=16),
       seed=st.integers(0, 2**32), cut=st.booleans())
def test_random_frames_alike_after_every_event(chunks, seed, cut):
    chunks = [(True, PREFACE + settings_frame()), (False, settings_frame()), *chunks]
    evs = sp.events(chunks, 1, random.Random(seed) if cut else None)
    with pytest.MonkeyPatch.context() as m:
        _alike(evs, m)


def test_a_burst_of_answers_past_the_step_s_frames(monkeypatch):
    """More answers in one write than the step ends itself: the rest go on in _parse."""
    chunks = sp.recording("grpc")
    requests = [d for c, d in chunks[10:] if c][:40]
    answers = [d for c, d in chunks[10:] if not c][:40]
    burst = [*chunks[:10], (True, b"".join(requests)), (False, b"".join(answers))]
    _alike(sp.events(burst, 1), monkeypatch)
