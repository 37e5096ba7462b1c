"""The connection table's loop over the usual data events in C (otel_ebpf/_fast/table.c
data_run) against ConnTable.handle's own loop, its reference: the same events in the same
batches give the same spans and frames, and leave the table as the reference does (the
connections' LRU order, the threads' last reads and their order, connections to mute).

The events are the recorded traffic of the golden span test (HTTP/1 connections cut into
syscalls, losses, captures cut short, task births, connections whose open was lost)
with more that the C loop hands back: connections of bytes no parser wants (muted),
datagrams with their peer, process exits, and a small bound on the threads' last reads."""

from __future__ import annotations

import dataclasses
import enum
import random

import pytest

from otel_ebpf import _fast
from otel_ebpf.conntrack import table as table_module
from otel_ebpf.conntrack.table import ConnTable
from otel_ebpf.kernel import abi
from otel_ebpf.protocols.base import Direction, Role
from otel_ebpf.protocols.registry import Registry
from otel_ebpf.telemetry import Stats
from tests.unit import span_traffic

pytestmark = pytest.mark.skipif(_fast.table is None or _fast.conn is None,
                                reason="no compiled table loop (OTEL_EBPF_PURE_PYTHON=1)")


def extra_events(rng: random.Random, t: int) -> list:
    """A connection of bytes no parser wants, a datagram socket's reads with their peer, a
    process that exits with a connection open."""
    out: list = []
    for n, (pid, flags, peer) in enumerate([
            (300, abi.CONN_F_STREAM | abi.CONN_F_TCP, None),
            (301, 0, ("10.0.0.9", 53)),
            (302, abi.CONN_F_STREAM | abi.CONN_F_TCP, None)]):
        key = (pid, 50 + n, 7)
        out.append(abi.ConnOpen(key=key, ts_ns=t, tid=pid, role=Role.CLIENT, flags=flags,
                                family=2, local_addr="127.0.0.1", local_port=30000 + n,
                                remote_addr="127.0.0.1", remote_port=9000 + n, comm="x"))
        pos = 0
        for _ in range(rng.randint(2, 12)):
            payload = bytes(rng.randrange(256) for _ in range(rng.randint(1, 40)))
            t += rng.randint(1, 2000)
            direction = rng.choice([Direction.EGRESS, Direction.INGRESS])
            out.append(abi.DataEvent(key=key, tid=pid * 10 + rng.randint(0, 3), enter_ns=t,
                                     exit_ns=t + 5, direction=direction, pos=pos,
                                     msg_len=len(payload), tcp_seq=None, payload=payload,
                                     peer=peer, task=0, tail=b""))
            pos += len(payload)
        if pid == 302:
            out.append(abi.ProcessExit(pid=pid, ts_ns=t + 10))
    return out


def traffic(seed: int) -> list:
    rng = random.Random(seed)
    events = span_traffic.traffic(seed)
    extra = extra_events(rng, 10_000)
    for ev in extra:  # spread in, in their own order
        events.insert(rng.randint(0, len(events)), ev)
    return events


def plain(value):  # noqa: ANN001, ANN201
    """Comparable data: dataclasses and tuples by their fields, the parsers' layer objects
    (one per registry, and each run has its own) by their class."""
    if dataclasses.is_dataclass(value) and not isinstance(value, type):
        return (type(value).__name__,
                [(f.name, plain(getattr(value, f.name))) for f in dataclasses.fields(value)])
    if isinstance(value, (list, tuple)):
        return [plain(v) for v in value]
    if isinstance(value, dict):
        return [(k, plain(v)) for k, v in value.items()]
    if isinstance(value, (str, bytes, int, float, type(None), enum.Enum)):
        return value
    return type(value).__name__


def run(seed: int, compiled: bool) -> tuple[list, list]:
    registry = Registry.from_config(["http1", "http2", "rtps", "llm", "vectordb"],
                                    {"http1": {"correlation_headers": ["x-request-id"]}})
    table = ConnTable(registry, Stats(), 64, 300 * 10**9)
    assert table.data_run is not None
    if not compiled:
        table.data_run = None
    events = traffic(seed)
    rng = random.Random(-seed)
    out, states = [], []
    i = 0
    while i < len(events):
        n = rng.randint(1, 64)
        spans = table.handle(events[i:i + n])
        i += n
        out.append(plain((spans, table.observed)))
        table.observed.clear()
        states.append((list(table.conns), list(table.last_read.items()), list(table.to_mute),
                       table.stats.snapshot()))
        table.to_mute.clear()
    out.append(plain(table.close_all()))
    return out, states


@pytest.mark.parametrize("seed", list(span_traffic.SEEDS))
def test_compiled_loop_leaves_what_the_reference_does(monkeypatch, seed):
    # a small bound on the threads' last reads: the oldest leave in both
    monkeypatch.setattr(table_module, "LAST_READ_THREADS", 3 if seed % 2 else 16384)
    compiled, compiled_states = run(seed, True)
    reference, reference_states = run(seed, False)
    assert compiled_states == reference_states
    assert compiled == reference


def test_the_events_reach_what_the_loop_hands_back(monkeypatch):
    """Not vacuous: muted connections, datagrams, exits and lost opens are in the events,
    and the C loop took most data events itself."""
    monkeypatch.setattr(table_module, "LAST_READ_THREADS", 3)
    taken = [0, 0]
    real = _fast.table.data_run

    def counted(table, events, start):
        stop, n = real(table, events, start)
        taken[0] += stop - start
        return stop, n

    muted = data = 0
    for seed in span_traffic.SEEDS:
        registry = Registry.from_config(["http1"], {})
        table = ConnTable(registry, Stats(), 64, 300 * 10**9)
        table.data_run = counted
        events = traffic(seed)
        data += sum(type(ev) is abi.DataEvent for ev in events)
        for i in range(0, len(events), 32):
            table.handle(events[i:i + 32])
            muted += len(table.to_mute)
            table.to_mute.clear()
    assert muted > 0
    assert data / 2 < taken[0] < data
