"""The end of a connection in the connection table, with the real parsers: a close record
that comes before the connection's last records (another thread's, reserved in the ring a
moment later) holds the connection until they come; records that never come (dropped in
the kernel) are given up on after the grace, counted; a record that comes after its
connection ended is counted and dropped, never taken for a new connection."""

from __future__ import annotations

import pytest

from otel_ebpf.conntrack.table import CLOSE_GRACE_NS, ConnTable
from otel_ebpf.kernel import abi
from otel_ebpf.protocols.base import Direction, Role
from otel_ebpf.protocols.registry import Registry
from otel_ebpf.telemetry import Stats

OUT, IN = Direction.EGRESS, Direction.INGRESS
T0 = 10**12  # kernel time of the first record


def table() -> tuple[ConnTable, Stats]:
    stats = Stats()
    registry = Registry.from_config(["http1", "redis"], {})
    return ConnTable(registry, stats, 100, idle_timeout_ns=300 * 10**9), stats


class Wire:
    """One connection's records as the kernel makes them: positions per direction, kernel
    times, the open and the close with the kernel's byte counts."""

    def __init__(self, key: tuple[int, int, int], role: Role) -> None:
        self.key, self.role, self.pos, self.t = key, role, [0, 0], T0

    def opened(self) -> abi.ConnOpen:
        return abi.ConnOpen(key=self.key, ts_ns=self.t, tid=self.key[0], role=self.role,
                            flags=abi.CONN_F_STREAM | abi.CONN_F_TCP, family=2,
                            local_addr="127.0.0.1", local_port=40000, remote_addr="127.0.0.1",
                            remote_port=6379, comm="client")

    def data(self, direction: Direction, payload: bytes) -> abi.DataEvent:
        self.t += 1000
        ev = abi.DataEvent(key=self.key, tid=self.key[0], enter_ns=self.t, exit_ns=self.t + 10,
                           direction=direction, pos=self.pos[direction], msg_len=len(payload),
                           tcp_seq=1000 + self.pos[direction], payload=payload, peer=None)
        self.pos[direction] += len(payload)
        return ev

    def closed(self) -> abi.ConnClose:
        self.t += 1000
        return abi.ConnClose(key=self.key, ts_ns=self.t, bytes_sent=self.pos[OUT],
                             bytes_recv=self.pos[IN])


def redis_client(key, n: int = 6) -> tuple[Wire, list]:
    w = Wire(key, Role.CLIENT)
    events = [w.opened()]
    for i in range(n):
        command = f"*3\r\n$3\r\nSET\r\n$2\r\nk{i}\r\n$1\r\n{i}\r\n".encode()
        events += [w.data(OUT, command), w.data(IN, b"+OK\r\n")]
    return w, events


def http1_server(key, n: int = 6) -> tuple[Wire, list]:
    w = Wire(key, Role.SERVER)
    events = [w.opened()]
    for i in range(n):
        events += [w.data(IN, f"GET /items/{i} HTTP/1.1\r\nHost: x\r\n\r\n".encode()),
                   w.data(OUT, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")]
    return w, events


def names(spans) -> list[tuple[int, str]]:
    return sorted((s.kind, s.name, s.start_ns) for s in spans)


@pytest.mark.parametrize("make", [redis_client, http1_server])
@pytest.mark.parametrize("early", [1, 2, 5])
def test_a_close_that_overtakes_the_last_records_waits_for_them(make, early):
    """The close record `early` records ahead of the connection's last ones, in the same
    poll or in the next: the same spans as in order, none after a grace, nothing counted."""
    w, events = make((100, 5, 7))
    close = w.closed()
    reference, _ = table()
    in_order = reference.handle(events + [close])
    assert len(in_order) == 6
    moved = events[:-early] + [close] + events[-early:]
    for batches in ([moved], [moved[:-early], moved[-early:]]):
        t, stats = table()
        spans = t.handle(batches[0])
        if len(batches) > 1:  # closed, waiting for what the next poll brings
            assert list(t.closing) == [w.key] and len(t) == 1
            spans += t.handle(batches[1])
        assert names(spans) == names(in_order)
        assert len(t) == 0 and not t.closing
        assert stats.total("connections.incomplete") == 0
        assert stats.total("records.after_close") == 0


def test_a_close_with_every_record_in_ends_at_once():
    w, events = redis_client((101, 5, 7))
    t, _ = table()
    assert len(t.handle(events)) == 6
    assert t.handle([w.closed()]) == [] and len(t) == 0 and not t.closing


def test_records_that_never_come_are_given_up_after_the_grace():
    """The last reply was dropped in the kernel: the connection waits (its other spans are
    out already), and a sweep once the ring has been drained a grace past the close ends
    it, the command unanswered, counted incomplete."""
    w, events = redis_client((102, 5, 7), n=3)
    lost = events.pop()  # the last +OK never reaches user space
    close = w.closed()
    t, stats = table()
    assert len(t.handle(events + [close])) == 2
    assert list(t.closing) == [w.key]
    assert t.sweep(close.ts_ns + CLOSE_GRACE_NS, drained_ns=close.ts_ns + CLOSE_GRACE_NS - 1) == []
    spans = t.sweep(close.ts_ns + CLOSE_GRACE_NS + 5, drained_ns=close.ts_ns + CLOSE_GRACE_NS)
    assert [(s.name, s.attributes.get("error.type")) for s in spans] == [
        ("SET", "connection_closed")]
    assert len(t) == 0 and stats.total("connections.incomplete") == 1
    # the dropped record would be a record after the end: counted, no new connection made
    assert t.handle([lost]) == [] and len(t) == 0
    assert stats.total("records.after_close") == 1


def test_a_record_after_the_end_is_not_a_new_connection():
    w, events = http1_server((103, 5, 7), n=2)
    t, stats = table()
    t.handle(events + [w.closed()])
    late = w.data(IN, b"GET /late HTTP/1.1\r\nHost: x\r\n\r\n")
    assert t.handle([late]) == [] and len(t) == 0
    assert stats.total("records.after_close") == 1


def test_a_connection_ended_for_idleness_is_tracked_again_when_it_speaks():
    """Idle past connections.idle_timeout is the table's doing, not an end: the kernel
    still has the connection, and its next record makes it anew."""
    w, events = http1_server((107, 5, 7), n=1)
    t, stats = table()
    t.handle(events)
    t.sweep(w.t + 301 * 10**9)
    assert len(t) == 0
    t.handle([w.data(IN, b"GET /again HTTP/1.1\r\nHost: x\r\n\r\n")])
    assert len(t) == 1 and stats.total("records.after_close") == 0


def test_process_exit_ends_its_closing_connections_at_once():
    """The kernel sends a process's exit when its last thread ends, after every record of
    it: what a closed connection still waits for then was dropped."""
    w, events = redis_client((104, 5, 7), n=2)
    events.pop()
    t, stats = table()
    t.handle(events + [w.closed()])
    assert list(t.closing) == [w.key]
    spans = t.handle([abi.ProcessExit(pid=104, ts_ns=w.t + 1)])
    assert [s.attributes.get("error.type") for s in spans] == ["connection_closed"]
    assert len(t) == 0 and not t.closing and stats.total("connections.incomplete") == 1


def test_bytes_no_parser_took_count_as_received():
    """A connection whose first bytes no parser recognized yet (inference goes on with the
    next ones): the close finds them counted, it does not wait for them."""
    w = Wire((105, 5, 7), Role.CLIENT)
    t, stats = table()
    t.handle([w.opened(), w.data(OUT, b"\x00\x01 not a protocol"), w.data(IN, b"\x02")])
    assert t.handle([w.closed()]) == [] and len(t) == 0 and not t.closing
    assert stats.total("connections.incomplete") == 0


def test_close_all_at_shutdown_ends_a_closing_connection():
    w, events = redis_client((106, 5, 7), n=2)
    events.pop()
    t, stats = table()
    t.handle(events + [w.closed()])
    spans = t.close_all()
    assert [s.attributes.get("error.type") for s in spans] == ["connection_closed"]
    assert not t.closing and stats.total("connections.incomplete") == 1
