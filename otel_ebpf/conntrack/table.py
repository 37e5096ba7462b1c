"""The connection table: routes kernel events to connections, bounded (LRU) and counted."""

from __future__ import annotations

from collections import OrderedDict, defaultdict
from typing import NamedTuple

from otel_ebpf import _fast
from otel_ebpf.kernel import abi
from otel_ebpf.protocols.base import ConnInfo, Direction, Frame, NeutralSpan, ParseResult, Role
from otel_ebpf.protocols.registry import Registry
from otel_ebpf.telemetry import Stats

from .connection import MAX_PARSE_STEPS, Connection, FrameStart, compiled_data
from .nat import NatLookup
from .nat import wanted as nat_wanted

Key = tuple[int, int, int]
_tuple_new = tuple.__new__  # a named tuple of every field, without its __new__'s Python frame
LAST_READ_THREADS = 16384
# A connection closed before all its records came waits for them this long, in kernel
# time past its close, measured against the moment the ring was last drained: the records
# a close can overtake are another thread's, sent a few microseconds after it; what has
# not come by then was dropped in the kernel (otel_ebpf.kernel.drops).
CLOSE_GRACE_NS = 1_000_000_000
# The keys of the connections ended last, one per slot by the low bits of their
# generation (a key is never reused: an older one only ever gives way): a record that
# comes after its connection ended is counted and dropped, not made a new connection.
ENDED_SLOTS = 4096
# enum members as module constants: looking a member up on its class costs ~0.2 µs
_INGRESS = Direction.INGRESS
# the usual syscall of a stream parser whose class sets `compiled_stream_step` (HTTP/2) in
# the compiled data step too (_fast/conn.c stream_step); False: Connection.on_data and
# _whole, its reference (tests compare the two)
STREAM_STEP = True


class LastRead(NamedTuple):
    """A read syscall: the connection, the stream positions it moved, when it returned, and
    the contextvars.Context the thread ran in (its address, 0: not known)."""

    key: Key
    pos: int
    end: int
    ns: int
    context: int = 0


def conn_info(ev: abi.ConnOpen) -> ConnInfo:
    unix = bool(ev.flags & abi.CONN_F_UNIX)
    if ev.flags & abi.CONN_F_PIPE:  # one pipe fd: its address names the pipe (inode)
        return ConnInfo(pid=ev.key[0], fd=ev.key[1], generation=ev.key[2], role=ev.role,
                        transport="stream", family="pipe", local_addr=ev.local_addr,
                        comm=ev.comm)
    return ConnInfo(
        pid=ev.key[0],
        fd=ev.key[1],
        generation=ev.key[2],
        role=ev.role,
        transport="stream" if ev.flags & abi.CONN_F_STREAM else "datagram",
        family="unix" if unix else abi.AF_NAMES.get(ev.family, "ipv4"),
        local_addr=ev.local_addr,
        local_port=ev.local_port,
        remote_addr=ev.remote_addr,
        remote_port=ev.remote_port,
        comm=ev.comm,
    )


def _compiled_run():  # noqa: ANN202 (otel_ebpf/_fast/table.c data_run, or None)
    fast = _fast.table
    if fast is None:
        return None
    fast.setup(abi.DataEvent, LastRead, _INGRESS, LAST_READ_THREADS)
    return fast.data_run


class ConnTable:
    """Connections by (pid, fd, generation); the least recently active is evicted first."""

    def __init__(
        self, registry: Registry, stats: Stats, max_connections: int, idle_timeout_ns: int,
        nat: NatLookup | None = None,
    ) -> None:
        self.registry = registry
        # conntrack, for client connections that may go through NAT (a Service's VIP)
        self.nat = nat
        self.stats = stats
        self.max_connections = max_connections
        self.idle_timeout_ns = idle_timeout_ns
        self.conns: OrderedDict[Key, Connection] = OrderedDict()
        self.by_pid: defaultdict[int, set[Key]] = defaultdict(set)
        self.touched: set[Key] = set()
        # connections that became unparsed, for the agent to mute in the kernel
        self.to_mute: list[Key] = []
        self.evicted_spans: list[NeutralSpan] = []
        # connections the kernel closed whose records up to the close have not all come
        # yet: key -> (bytes written, bytes read, kernel time of the close)
        self.closing: dict[Key, tuple[int, int, int]] = {}
        self.ended: list[Key | None] = [None] * ENDED_SLOTS
        # for correlate/, in event order: frames as they complete, and asyncio tasks as they
        # are born (with the last read their thread made). One list: a task's address is
        # reused once it dies, so a birth must not be seen before an earlier frame.
        self.observed: list[tuple[ConnInfo, Frame] | tuple[abi.TaskNew, LastRead | None]] = []
        self.last_read: OrderedDict[int, LastRead] = OrderedDict()  # by thread id
        # the usual data event in one compiled call (False from it: on_data takes it)
        self.fast_data = compiled_data()
        # the loop over the usual data events in C (None: handle's own loop takes them)
        self.data_run = _compiled_run() if self.fast_data is not None else None
        if self.fast_data is not None:  # the parsers without `whole` whose step is compiled
            stepped = dict.fromkeys(type(p) for p in registry.parsers
                                    if getattr(p, "compiled_stream_step", False))
            _fast.conn.stream_parsers(tuple(stepped) if STREAM_STEP else (), ParseResult.FRAME,
                                      ParseResult.NEED_MORE, FrameStart, MAX_PARSE_STEPS,
                                      Frame)

    def __len__(self) -> int:
        return len(self.conns)

    def handle(self, events: list[abi.Event]) -> list[NeutralSpan]:
        """Apply a batch of kernel events; return the spans that completed."""
        spans: list[NeutralSpan] = []
        stats = self.stats
        payload_bytes = 0  # counted once per batch: Stats.add takes a lock
        registry, conns, touched = self.registry, self.conns, self.touched
        last_read, fast_data = self.last_read, self.fast_data
        # the usual data events in C (_fast/table.c data_run): from i on it takes them up
        # to the first event it leaves to this loop (which takes that one and goes back)
        data_run = self.data_run
        i, n = 0, len(events)
        while i < n:
            if data_run is not None:
                i, taken_bytes = data_run(self, events, i)
                payload_bytes += taken_bytes
                if i >= n:
                    break
            ev = events[i]
            i += 1
            if type(ev) is abi.DataEvent:
                (key, tid, enter_ns, exit_ns, direction, pos, msg_len, tcp_seq, payload, peer,
                 task, tail, tls) = ev
                conn = conns.get(key)
                if conn is None:
                    if self.ended[key[2] & (ENDED_SLOTS - 1)] == key:
                        # the close overtook it: a thread's call racing another's close
                        stats.add("records.after_close")
                        continue
                    # its open event was lost: track it with what we know
                    conn = self._open(self._anonymous(ev))
                else:
                    conns.move_to_end(key)
                payload_bytes += len(payload) + len(tail)
                if fast_data is None or peer is not None or not fast_data(
                        conn, direction, pos, msg_len, payload, enter_ns, exit_ns, tcp_seq, tid,
                        task, tail, tls, stats):
                    conn.on_data(direction, pos, msg_len, payload, enter_ns, exit_ns, tcp_seq,
                                 registry, stats, tid, task, tail, tls, peer)
                touched.add(key)
                if conn.unparsed and not conn.muted:
                    conn.muted = True
                    self.to_mute.append(key)
                if direction is _INGRESS:
                    # what a thread read last: a loop callback creating a task works on it
                    last_read[tid] = _tuple_new(LastRead, (key, pos, pos + msg_len, exit_ns, task))
                    last_read.move_to_end(tid)
                    if len(last_read) > LAST_READ_THREADS:
                        last_read.popitem(last=False)
            elif type(ev) is abi.TaskNew:
                self.observed.append((ev, self.last_read.get(ev.tid)))
            elif type(ev) is abi.ConnOpen:
                if ev.key in self.conns:
                    continue
                info = conn_info(ev)
                tcp = bool(ev.flags & abi.CONN_F_TCP)
                nat = self.nat if tcp and ev.role == Role.CLIENT and self.nat is not None \
                    and nat_wanted(info) else None
                self._open(Connection(info, tcp=tcp, frames_out=self.observed, nat_lookup=nat))
            elif type(ev) is abi.ConnClose:
                # the kernel's byte counts at the close: the connection ends once every
                # byte of them came as a record (another thread's may be reserved in the
                # ring a moment after the close), or after the grace (_finish_closing)
                conn = conns.get(ev.key)
                if conn is None:
                    continue
                if conn.received(ev.bytes_sent, ev.bytes_recv):
                    spans += self._close(ev.key)
                else:
                    self.closing[ev.key] = (ev.bytes_sent, ev.bytes_recv, ev.ts_ns)
            elif type(ev) is abi.ProcessExit:
                # every record of the process came before this one: the kernel sends it
                # when the process's last thread ends
                for key in list(self.by_pid.get(ev.pid, ())):
                    spans += self._close(key)
        if self.closing:
            spans += self._finish_closing(None)
        stats.add("events", len(events))
        stats.add("bytes", payload_bytes)
        for key in self.touched:
            conn = self.conns.get(key)
            if conn is not None:
                spans += conn.collect(0)
        self.touched.clear()
        if self.evicted_spans:
            spans += self.evicted_spans
            self.evicted_spans = []
        return spans

    def _anonymous(self, ev: abi.DataEvent) -> Connection:
        pid, fd, gen = ev.key
        info = ConnInfo(pid=pid, fd=fd, generation=gen, role=Role.UNKNOWN,
                        transport="datagram" if ev.peer else "stream", family="ipv4")
        return Connection(info, tcp=ev.peer is None, frames_out=self.observed)

    def _open(self, conn: Connection) -> Connection:
        key = conn.info.key
        while len(self.conns) >= self.max_connections:
            old_key, old = self.conns.popitem(last=False)
            self.by_pid[old_key[0]].discard(old_key)
            self.closing.pop(old_key, None)
            self.stats.add("connections.evicted")
            self.evicted_spans += self._finish(old)
        self.conns[key] = conn
        self.by_pid[key[0]].add(key)
        self.stats.add("connections.tracked")
        return conn

    def _finish_closing(self, drained_ns: int | None) -> list[NeutralSpan]:
        """End the closed connections whose records have all come; with `drained_ns` (the
        ring drained from then on), also those whose grace is over, counted incomplete."""
        spans: list[NeutralSpan] = []
        for key, (sent, recv, close_ns) in list(self.closing.items()):
            conn = self.conns.get(key)
            if conn is None:
                del self.closing[key]
            elif conn.received(sent, recv) or (
                    drained_ns is not None and drained_ns - close_ns >= CLOSE_GRACE_NS):
                spans += self._close(key)
        return spans

    def _close(self, key: Key, ended: bool = True) -> list[NeutralSpan]:
        """`ended`: the kernel ended it (closed, or its process exited), not the table."""
        conn = self.conns.pop(key, None)
        if conn is None:
            return []
        if self.closing:
            closing = self.closing.pop(key, None)
            if closing is not None and not conn.received(closing[0], closing[1]):
                self.stats.add("connections.incomplete")
        if ended:
            self.ended[key[2] & (ENDED_SLOTS - 1)] = key
        keys = self.by_pid.get(key[0])
        if keys is not None:
            keys.discard(key)
            if not keys:
                del self.by_pid[key[0]]
        return self._finish(conn)

    def _finish(self, conn: Connection) -> list[NeutralSpan]:
        spans = conn.close()
        if conn.parser is not None and conn.state is not None:
            for event, n in conn.parser.counters(conn.state).items():
                if n:
                    self.stats.add("protocol.events", n, protocol=conn.parser.name, event=event)
        return spans

    def sweep(self, now_ns: int, drained_ns: int | None = None) -> list[NeutralSpan]:
        """Expire requests past their timeout and connections idle too long; end closed
        connections whose missing records are past their grace. `drained_ns`: every record
        sent before then has been read from the ring (now_ns when not given)."""
        drained_ns = now_ns if drained_ns is None else drained_ns
        spans: list[NeutralSpan] = self._finish_closing(drained_ns) if self.closing else []
        idle = [k for k, c in self.conns.items() if now_ns - c.last_ns > self.idle_timeout_ns]
        for key in idle:
            spans += self._close(key, ended=False)
        for conn in self.conns.values():
            spans += conn.collect(now_ns)
        return spans

    def close_all(self) -> list[NeutralSpan]:
        spans: list[NeutralSpan] = []
        for key in list(self.conns):
            spans += self._close(key, ended=False)
        return spans
