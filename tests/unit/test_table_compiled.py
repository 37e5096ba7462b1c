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
import json
import random
import sys
from pathlib import Path

import pytest

from otel_ebpf import _fast
from otel_ebpf.conntrack import table as table_module
from otel_ebpf.conntrack.table import ConnTable
from otel_ebpf.kernel import abi
from otel_ebpf.protocols.base import Direction, Role
from otel_ebpf.protocols.http1 import parse as http1_parse
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


def head_then_body(seed: int) -> list:
    """Keep-alive exchanges whose messages are written as uvicorn writes an answer: the
    head in one syscall, then the body (Content-Length) in one or more, the last piece
    sometimes carrying the next message's first bytes; both ends traced."""
    rng = random.Random(seed)
    out: list = []
    t = 1_000
    for n in range(6):
        keys = {Role.CLIENT: (700 + n, 3, 1), Role.SERVER: (800 + n, 4, 1)}
        for role, key in keys.items():
            local, remote = (41000 + n, 8000) if role == Role.CLIENT else (8000, 41000 + n)
            out.append(abi.ConnOpen(key=key, ts_ns=t, tid=key[0], role=role,
                                    flags=abi.CONN_F_STREAM | abi.CONN_F_TCP, family=2,
                                    local_addr="127.0.0.1", local_port=local,
                                    remote_addr="127.0.0.1", remote_port=remote, comm="py"))
        pos = {(r, d): 0 for r in keys for d in Direction}
        for _ in range(rng.randint(1, 5)):
            request, response = span_traffic.EXCHANGES[rng.randrange(len(span_traffic.EXCHANGES))]
            for author, message in ((Role.CLIENT, request), (Role.SERVER, response)):
                head, sep, body = message.partition(b"\r\n\r\n")
                cuts = [len(head) + len(sep)]
                if body and rng.random() < 0.4:
                    cuts.append(cuts[0] + rng.randint(1, len(body)))  # the body in two
                pieces = [message[a:b] for a, b in zip([0, *cuts], [*cuts, len(message)]) if b > a]
                for role, key in keys.items():
                    direction = Direction.EGRESS if role == author else Direction.INGRESS
                    for piece in pieces:
                        t += rng.randint(1, 3000)
                        p = pos[(role, direction)]
                        pos[(role, direction)] += len(piece)
                        capture = rng.choice([4096, 4096, 16])  # a body cut short by the capture
                        out.append(abi.DataEvent(
                            key=key, tid=key[0], enter_ns=t, exit_ns=t + rng.randint(0, 900),
                            direction=direction, pos=p, msg_len=len(piece),
                            tcp_seq=(5000 * n + p) & 0xFFFFFFFF, payload=piece[:capture],
                            peer=None, task=0, tail=b""))
        if rng.random() < 0.7:
            t += 5000
            out += [abi.ConnClose(key=k, ts_ns=t, bytes_sent=0, bytes_recv=0)
                    for k in keys.values()]
    return out


@pytest.mark.parametrize("seed", range(20))
def test_bodies_written_after_their_heads_leave_what_the_reference_does(monkeypatch, seed):
    """The compiled step for a body skipped by length and sent in syscalls of its own
    (_fast/conn.c skipped_body) against Connection.on_data."""
    monkeypatch.setattr(table_module, "LAST_READ_THREADS", 16384)
    monkeypatch.setattr(sys.modules[__name__], "traffic", head_then_body)
    compiled, compiled_states = run(seed, True)
    reference, reference_states = run(seed, False)
    assert compiled_states == reference_states
    assert compiled == reference
    assert sum(len(batch[0]) for batch in reference[:-1]) > 0  # spans came out


def test_a_body_after_its_head_is_taken_by_the_compiled_step(monkeypatch):
    """Not vacuous: bodies skipped by length (behind the stream's head, their message's
    frame pending) are in the events, and the C step takes them: Connection.on_data never
    sees one. (Other events behind the head, an answer the close delimits, go to it.)"""
    from otel_ebpf.conntrack.connection import Connection

    seen_by_python = []
    real = Connection.on_data

    def skipped(conn, direction, pos) -> bool:
        stream = conn.streams[direction]
        return stream.started and pos < stream.head and len(conn.pending[direction]) == 1

    def on_data(self, direction, pos, *args, **kwargs):
        seen_by_python.append(skipped(self, direction, pos))
        return real(self, direction, pos, *args, **kwargs)

    monkeypatch.setattr(Connection, "on_data", on_data)
    registry = Registry.from_config(["http1"], {})
    table = ConnTable(registry, Stats(), 64, 300 * 10**9)
    behind = 0
    for ev in head_then_body(1):
        conn = table.conns.get(ev.key) if type(ev) is abi.DataEvent else None
        if conn is not None and conn.parser is not None:
            behind += skipped(conn, ev.direction, ev.pos)
        table.handle([ev])
    assert behind > 10
    assert not any(seen_by_python)


@pytest.mark.parametrize("seed", range(20))
def test_heads_then_bodies_give_what_the_pure_python_path_gives(monkeypatch, seed):
    """A head whose body comes later taken in one call (whole() with its frame pending)
    and its body in C, against the path with no compiled HTTP/1 step at all."""

    def frames_and_spans(compiled: bool) -> list:
        with monkeypatch.context() as m:
            if not compiled:
                m.setattr(http1_parse, "compiled", None)
            registry = Registry.from_config(["http1", "llm", "vectordb"],
                                            {"http1": {"correlation_headers": ["x-request-id"]}})
            table = ConnTable(registry, Stats(), 64, 300 * 10**9)
            if not compiled:
                table.data_run = None
            events, out = head_then_body(seed), []
            for i in range(0, len(events), 5):
                spans = table.handle(events[i:i + 5])
                out.append(plain((spans, table.observed)))
                table.observed.clear()
            out.append(plain(table.close_all()))
            return out

    compiled = frames_and_spans(True)
    assert compiled == frames_and_spans(False)
    assert sum(len(batch[0]) for batch in compiled[:-1]) > 0


def dds_events(name: str) -> list:
    """A recorded Cyclone DDS domain (tests/protocols/rtps/fixtures) as the kernel sends it:
    each socket's open, then its datagrams, each with its peer."""
    path = Path(__file__).parents[1] / "protocols/rtps/fixtures" / f"{name}.jsonl"
    grams = [json.loads(line) for line in path.read_text().splitlines()]
    out: list = []
    pos: dict[tuple, int] = {}  # (key, direction) -> the next datagram's position
    for g in grams:
        key = (g["pid"], g["fd"], 1)
        if (key, 0) not in pos:
            pos[(key, 0)] = pos[(key, 1)] = 0
            out.append(abi.ConnOpen(key=key, ts_ns=g["ts_ns"] - 1, tid=g["pid"], role=Role.UNKNOWN,
                                    flags=0, family=2, local_addr="127.0.0.1",
                                    local_port=7400 + g["fd"], remote_addr="0.0.0.0",
                                    remote_port=0, comm="dds_peer"))
        direction = Direction.EGRESS if g["direction"] == "out" else Direction.INGRESS
        p = pos[(key, int(direction))]
        pos[(key, int(direction))] = p + g["len"]
        out.append(abi.DataEvent(key=key, tid=g["pid"], enter_ns=g["ts_ns"] - 2_000,
                                 exit_ns=g["ts_ns"], direction=direction, pos=p,
                                 msg_len=g["len"], tcp_seq=None,
                                 payload=bytes.fromhex(g["hex"]),
                                 peer=tuple(g["peer"]) if g["peer"] else None, task=0,
                                 tail=b""))
    return out


@pytest.mark.parametrize("name", ["pubsub", "big"])
def test_datagrams_with_their_peer_leave_what_the_reference_does(name):
    """DDS: every datagram carries its peer; the C loop hands it to Connection.on_data (no
    compiled step) and does the rest, as the reference loop does."""
    events = dds_events(name)
    results, taken = [], [0]
    real = _fast.table.data_run

    def counted(table, events, start):
        stop, n = real(table, events, start)
        taken[0] += stop - start
        return stop, n

    for compiled in (True, False):
        registry = Registry.from_config(["rtps"], {})
        table = ConnTable(registry, Stats(), 64, 300 * 10**9)
        table.data_run = counted if compiled else None
        out = []
        for i in range(0, len(events), 16):
            out.append(plain((table.handle(events[i:i + 16]), table.observed)))
            table.observed.clear()
        out.append(plain(table.close_all()))
        results.append((out, list(table.conns), list(table.last_read.items()),
                        table.stats.snapshot()))
    assert results[0] == results[1]
    assert sum(len(spans) for spans, _ in results[0][0][:-1]) > 0  # spans came out
    # not vacuous: the C loop took the datagrams (all but none: every open comes first)
    assert taken[0] == sum(type(ev) is abi.DataEvent for ev in events)
