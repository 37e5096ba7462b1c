"""bpf/include/abi.h in Python: record layouts, and decoding into frozen event objects.

tests/unit/test_abi.py compiles abi.h with the host compiler and checks every size and
offset here against it, so the two cannot drift apart silently.
"""

from __future__ import annotations

import functools
import ipaddress
import socket
import struct
from dataclasses import dataclass
from typing import NamedTuple

from otel_ebpf import _fast
from otel_ebpf.protocols.base import Direction, Role, positional_maker

ABI_VERSION = 7
MAX_CAPTURE = 65536
MAX_TARGETS = 1024
COMM_LEN = 16
MAX_WIDE_KEYS = 32  # bpf/include/abi.h: POST paths a connection is widened for (a compare each)

EV_CONN_OPEN, EV_CONN_CLOSE, EV_DATA, EV_PROC_EXIT, EV_TASK_NEW, EV_PROC_EXEC, EV_PROC_FORK = (
    1, 2, 3, 4, 5, 6, 7)
EV_CONTEXT_IN, EV_CONTEXT_OUT = 8, 9

CONN_F_STREAM, CONN_F_UNIX, CONN_F_TCP, CONN_F_PREEXISTING, CONN_F_PIPE = 1, 2, 4, 8, 16
DATA_F_TRUNCATED, DATA_F_HAS_PEER, DATA_F_WIDE, DATA_F_TLS, DATA_F_NO_SEQ = 1, 2, 4, 8, 16

# enum counter_idx
COUNTER_NAMES = {
    0: "ringbuf_drops",
    1: "truncated",
    2: "conn_opened",
    3: "conn_closed",
    4: "data_events",
    5: "iov_limit",
    6: "widened",
    7: "tls_unbound",
    8: "muted",
    9: "prop_written",
    10: "prop_no_room",
    11: "prop_received",
    12: "prop_refused",
    13: "prop_untrusted_dst",
    14: "prop_at_send",
    15: "prop_slots_full",
}
CNT_MAX = 16

HEADER = struct.Struct("<B3xIQ")  # type, tid, ts_ns
KEY = struct.Struct("<IiQ")  # pid, fd, gen
ADDR = struct.Struct("<16sHH4x")  # bytes, port, family
CONN_OPEN = struct.Struct("<B3xIQ" + "IiQ" + "16sHH4x" * 2 + "II16s")
CONN_CLOSE = struct.Struct("<B3xIQ" + "IiQ" + "QQ")
DATA = struct.Struct("<B3xIQ" + "IiQ" + "QQIIIBBH" + "16sHH4x" + "Q")
TASK_NEW = struct.Struct("<B3xIQ" + "I4xQQQQ")
PROC_EXIT = struct.Struct("<B3xIQ" + "I4x")
AGENT_CONFIG = struct.Struct(f"<16I{MAX_WIDE_KEYS}Q")  # struct agent_config

# The trace-context TCP option (bpf/propagation.bpf.c): kind 253, ExID 0x07E1, 25 bytes
PROP_OPT_KIND, PROP_EXID, PROP_OPT_LEN, PROP_F_SAMPLED = 253, 0x07E1, 25, 1
PROP_SLOTS, PROP_MAX_CONNS, PROP_MAX_NETS = 4, 16384, 1024
PROP_KEY = struct.Struct("<16s16sHHH2x")  # local, remote (IPv4-mapped for IPv4), ports, family
PROP_SLOT = struct.Struct("<16sIIB7x")  # trace id, seq, order (0: free), flags
PROP_PENDING = struct.Struct("<" + "16sIIB7x" * PROP_SLOTS)
PROP_NET = struct.Struct("<I16s")  # LPM trie key: prefix length, address
CONTEXT_IN = struct.Struct("<B3xIQ" + "16s16sHHH2x" + "IB3x16s")
CONTEXT_OUT = struct.Struct("<B3xIQ" + "IiQ" + "QIB3x16s" + "IiQ" + "Q")

AF_NAMES = {socket.AF_INET: "ipv4", socket.AF_INET6: "ipv6", socket.AF_UNIX: "unix"}


@functools.lru_cache(maxsize=4096)
def format_addr(raw: bytes, family: int) -> str:
    """Text form of an address; IPv4-mapped IPv6 addresses are shown as IPv4. Cached:
    a host talks to few peers, and every connection then shares one string per address
    (with ~10k connections tracked, a string each was megabytes)."""
    if family == socket.AF_INET:
        return socket.inet_ntop(socket.AF_INET, raw[:4])
    if family == socket.AF_INET6:
        ip = ipaddress.IPv6Address(raw)
        return str(ip.ipv4_mapped) if ip.ipv4_mapped else str(ip)
    return ""


def is_loopback(address: str) -> bool:
    """Whether an address in format_addr's text names this host's loopback (127.0.0.0/8,
    ::1), or is no IP address at all ('' or a Unix socket's path)."""
    return address.startswith("127.") or address in ("::1", "") or address.startswith("/")


# The three events that come by the thousand per second are named tuples: as immutable as
# frozen dataclasses, built ~3x faster (a frozen dataclass sets each field through
# object.__setattr__), which was a tenth of the agent's time under load.
class ConnOpen(NamedTuple):
    key: tuple[int, int, int]  # (pid, fd, gen)
    ts_ns: int
    tid: int
    role: Role
    flags: int
    family: int
    local_addr: str
    local_port: int
    remote_addr: str
    remote_port: int
    comm: str


class ConnClose(NamedTuple):
    key: tuple[int, int, int]
    ts_ns: int
    bytes_sent: int
    bytes_recv: int


class DataEvent(NamedTuple):
    key: tuple[int, int, int]
    tid: int
    enter_ns: int
    exit_ns: int
    direction: Direction
    pos: int  # stream position of the first byte
    msg_len: int  # bytes the syscall moved; len(payload) may be less
    tcp_seq: int | None  # meaningful for TCP connections only; None: unknown (TLS)
    payload: bytes  # the message's first captured bytes
    peer: tuple[str, int] | None  # datagram source or destination
    task: int = 0  # the contextvars.Context the thread ran in (its address), or 0
    tail: bytes = b""  # the message's last bytes, when its middle was not captured
    tls: bool = False  # TLS plaintext (OpenSSL uprobes): positions of its own

    @property
    def truncated(self) -> bool:
        return len(self.payload) + len(self.tail) < self.msg_len


@dataclass(frozen=True, slots=True)
class TaskNew:
    """A contextvars.Context `task` was copied on thread `tid` from the Context `parent` it
    ran in (an asyncio task's creation, a thread-pool call's hand-off)."""

    pid: int
    tid: int
    ts_ns: int
    task: int
    parent: int
    # the Context the thread's event loop last entered to run a protocol callback (uvloop
    # runs data_received in the transport's Context, entered after libuv's read), and when
    entered: int = 0
    entered_ns: int = 0


@dataclass(frozen=True, slots=True)
class ProcessExit:
    pid: int
    ts_ns: int


@dataclass(frozen=True, slots=True)
class ProcessExec:
    """Process `pid` now runs a new program."""

    pid: int
    ts_ns: int


@dataclass(frozen=True, slots=True)
class ProcessFork:
    """Process `pid` was forked by a process whose Context probes are its own."""

    pid: int
    ts_ns: int


@dataclass(frozen=True, slots=True)
class ContextIn:
    """A trusted peer's trace context, from the TCP option of a segment this node received
    (bpf/propagation.bpf.c): the connection as the receiving socket sees it, the TCP
    sequence number of the first byte of the peer's request, the peer's trace id and flags."""

    ts_ns: int
    family: int  # AF_INET (IPv4, on either kind of socket) or AF_INET6
    local_addr: str
    local_port: int
    remote_addr: str
    remote_port: int
    seq: int
    flags: int
    trace_id: bytes  # 16 bytes

    @property
    def sampled(self) -> bool:
        return bool(self.flags & PROP_F_SAMPLED)


@dataclass(frozen=True, slots=True)
class ContextOut:
    """A call's trace context, queued by the kernel for the TCP option of its first segment
    at its first write (bpf/include/prop_send.bpf.h): the client connection and the bytes
    written on it before the call, the TCP sequence number of its first byte, the trace of
    the request the writing thread or Context served (its connection and read position)."""

    ts_ns: int
    key: tuple[int, int, int]  # (pid, fd, gen) of the client connection
    pos: int
    seq: int
    flags: int
    trace_id: bytes  # 16 bytes
    origin: tuple[int, int, int]  # (pid, fd, gen) of the served request's connection
    origin_pos: int


Event = (ConnOpen | ConnClose | DataEvent | ProcessExit | TaskNew | ProcessExec | ProcessFork
         | ContextIn | ContextOut)


def pipe_name(inode: int) -> str:
    """A pipe's address as /proc/<pid>/fd names it: "pipe:[<inode>]"."""
    return f"pipe:[{inode}]"


@functools.lru_cache(maxsize=1024)
def _comm(raw: bytes) -> str:
    """A process's command name, one string per name."""
    return raw.split(b"\0", 1)[0].decode(errors="replace")


def _decode_open(buf: bytes) -> ConnOpen:
    (_, tid, ts, pid, fd, gen, lraw, lport, lfam, rraw, rport, rfam, role, flags, comm) = (
        CONN_OPEN.unpack_from(buf)
    )
    if flags & CONN_F_PIPE:  # local holds the pipe's inode number, the same at both ends
        return ConnOpen(key=(pid, fd, gen), ts_ns=ts, tid=tid, role=Role.UNKNOWN, flags=flags,
                        family=0, local_addr=pipe_name(int.from_bytes(lraw[:8], "little")),
                        local_port=0, remote_addr="", remote_port=0, comm=_comm(comm))
    return ConnOpen(
        key=(pid, fd, gen),
        ts_ns=ts,
        tid=tid,
        role=Role(role) if role in (0, 1, 2) else Role.UNKNOWN,
        flags=flags,
        family=lfam or rfam,
        local_addr=format_addr(lraw, lfam),
        local_port=lport,
        remote_addr=format_addr(rraw, rfam),
        remote_port=rport,
        comm=_comm(comm),
    )


def _decode_close(buf: bytes) -> ConnClose:
    _, _, ts, pid, fd, gen, sent, recv = CONN_CLOSE.unpack_from(buf)
    return ConnClose(key=(pid, fd, gen), ts_ns=ts, bytes_sent=sent, bytes_recv=recv)


_DIRECTIONS = (Direction(0), Direction(1))  # indexing, not Enum.__call__, per event


def _peer_of(raw: bytes, family: int, port: int) -> tuple[str, int]:
    """A datagram's peer as events carry it: (address text, port)."""
    return (format_addr(raw, family), port)


def _decode_data(buf: bytes) -> DataEvent:
    (_, tid, enter, pid, fd, gen, exit_ns, pos, msg_len, captured, seq, direction, flags,
     tail_len, praw, pport, pfam, task) = DATA.unpack_from(buf)
    peer = _peer_of(praw, pfam, pport) if flags & DATA_F_HAS_PEER else None
    head_end = DATA.size + max(captured - tail_len, 0)
    return DataEvent(
        key=(pid, fd, gen),
        tid=tid,
        enter_ns=enter,
        exit_ns=exit_ns,
        direction=_DIRECTIONS[direction & 1],
        pos=pos,
        msg_len=msg_len,
        tcp_seq=None if flags & DATA_F_NO_SEQ else seq,
        payload=bytes(buf[DATA.size : head_end]),
        peer=peer,
        task=task,
        tail=bytes(buf[head_end : DATA.size + captured]) if tail_len else b"",
        tls=bool(flags & DATA_F_TLS),
    )


def _decode_exit(buf: bytes) -> ProcessExit:
    _, _, ts, pid = PROC_EXIT.unpack_from(buf)
    return ProcessExit(pid=pid, ts_ns=ts)


def _decode_exec(buf: bytes) -> ProcessExec:
    _, _, ts, pid = PROC_EXIT.unpack_from(buf)
    return ProcessExec(pid=pid, ts_ns=ts)


def _decode_fork(buf: bytes) -> ProcessFork:
    _, _, ts, pid = PROC_EXIT.unpack_from(buf)
    return ProcessFork(pid=pid, ts_ns=ts)


def _decode_task(buf: bytes) -> TaskNew:
    _, tid, ts, pid, task, parent, entered, entered_ns = TASK_NEW.unpack_from(buf)
    return TaskNew(pid=pid, tid=tid, ts_ns=ts, task=task, parent=parent, entered=entered,
                   entered_ns=entered_ns)


def _decode_context_in(buf: bytes) -> ContextIn:
    (_, _, ts, local, remote, lport, rport, family, seq, flags, trace_id) = (
        CONTEXT_IN.unpack_from(buf))
    return ContextIn(ts_ns=ts, family=family,
                     local_addr=format_addr(local, socket.AF_INET6), local_port=lport,
                     remote_addr=format_addr(remote, socket.AF_INET6), remote_port=rport,
                     seq=seq, flags=flags, trace_id=trace_id)


def _decode_context_out(buf: bytes) -> ContextOut:
    (_, _, ts, pid, fd, gen, pos, seq, flags, trace_id, opid, ofd, ogen, opos) = (
        CONTEXT_OUT.unpack_from(buf))
    return ContextOut(ts_ns=ts, key=(pid, fd, gen), pos=pos, seq=seq, flags=flags,
                      trace_id=trace_id, origin=(opid, ofd, ogen), origin_pos=opos)


_DECODERS = {
    EV_CONN_OPEN: (CONN_OPEN.size, _decode_open),
    EV_CONN_CLOSE: (CONN_CLOSE.size, _decode_close),
    EV_DATA: (DATA.size, _decode_data),
    EV_PROC_EXIT: (PROC_EXIT.size, _decode_exit),
    EV_TASK_NEW: (TASK_NEW.size, _decode_task),
    EV_PROC_EXEC: (PROC_EXIT.size, _decode_exec),
    EV_PROC_FORK: (PROC_EXIT.size, _decode_fork),
    EV_CONTEXT_IN: (CONTEXT_IN.size, _decode_context_in),
    EV_CONTEXT_OUT: (CONTEXT_OUT.size, _decode_context_out),
}


class BadRecord(ValueError):
    pass


def decode(buf: bytes) -> Event:
    """One ring-buffer record -> one event. Raises BadRecord on a malformed record."""
    if not buf:
        raise BadRecord("empty record")
    entry = _DECODERS.get(buf[0])
    if entry is None:
        raise BadRecord(f"unknown event type {buf[0]}")
    size, fn = entry
    if len(buf) < size:
        raise BadRecord(f"record of type {buf[0]} is {len(buf)} bytes, expected >= {size}")
    return fn(buf)


def decode_batch(records: list[bytes]) -> tuple[list[Event], int]:
    """Records -> events, and how many were malformed (left out). The compiled decoder
    (otel_ebpf/_fast/ring.c) builds data, close and task events itself and hands every
    other record back for decode(), which is the reference for all of them."""
    if _fast.ring is None:
        return decode_each(records)
    events, raw = _fast.ring.decode(records)
    return finish_raw(events) if raw else (events, 0)


def decode_each(records: list[bytes]) -> tuple[list[Event], int]:
    """The Python path of decode_batch, one decode() per record."""
    events: list[Event] = []
    bad = 0
    for record in records:
        try:
            events.append(decode(record))
        except BadRecord:
            bad += 1
    return events, bad


def finish_raw(events: list) -> tuple[list[Event], int]:
    """The records the compiled decoder left as bytes, decoded here (order kept)."""
    out: list[Event] = []
    bad = 0
    for ev in events:
        if type(ev) is bytes:
            try:
                ev = decode(ev)
            except BadRecord:
                bad += 1
                continue
        out.append(ev)
    return out, bad


if _fast.ring is not None:
    # Context copies come by the thousand from an asyncio program, and a datagram's peer
    # with each of its records (DDS): built in C too, by the fields _decode_task reads, in
    # its order, and by _peer_of (the C decoder keeps the tuples it made for recent peers)
    _fast.ring.configure(DataEvent, ConnClose, _DIRECTIONS,
                         positional_maker(TaskNew, ("pid", "tid", "ts_ns", "task", "parent",
                                                    "entered", "entered_ns")),
                         _peer_of)


def pack_agent_config(
    *,
    agent_pid: int,
    capture_max: int,
    filter_pids: bool,
    filter_comms: bool,
    filter_ports: bool,
    wakeup_bytes: int,
    ignore_ports: bool = False,
    wide_capture: int = 0,
    tail_capture: int = 0,
    wide_keys: tuple[bytes, ...] = (),
    pipes: bool = False,
    wakeup_step: int = 0,
    propagate: bool = False,
    exec_by_argv: bool = False,
) -> bytes:
    keys = [int.from_bytes(k, "little") for k in wide_keys[:MAX_WIDE_KEYS]]
    return AGENT_CONFIG.pack(
        ABI_VERSION,
        agent_pid,
        capture_max,
        int(filter_pids),
        int(filter_comms),
        int(filter_ports),
        wakeup_bytes,
        int(ignore_ports),
        wide_capture,
        tail_capture,
        len(keys),
        int(pipes),
        wakeup_step,
        int(propagate),
        int(exec_by_argv),
        0,
        *keys,
        *[0] * (MAX_WIDE_KEYS - len(keys)),
    )


def mapped(addr: str) -> tuple[int, bytes]:
    """(family, 16 address bytes) as struct prop_key holds an address: IPv6 as it is, IPv4
    (and IPv4-mapped IPv6) as family AF_INET and ::ffff:a.b.c.d. ValueError if not an IP."""
    ip = ipaddress.ip_address(addr)
    if isinstance(ip, ipaddress.IPv6Address) and ip.ipv4_mapped is not None:
        ip = ip.ipv4_mapped
    if isinstance(ip, ipaddress.IPv4Address):
        return socket.AF_INET, bytes(10) + b"\xff\xff" + ip.packed
    return socket.AF_INET6, ip.packed


def pack_prop_key(local: str, local_port: int, remote: str, remote_port: int) -> bytes:
    """struct prop_key: a TCP connection as the socket at `local` sees it."""
    family, lraw = mapped(local)
    rfamily, rraw = mapped(remote)
    if family != rfamily:
        raise ValueError(f"{local} and {remote} are not of one family")
    return PROP_KEY.pack(lraw, rraw, local_port, remote_port, family)


class PropSlot(NamedTuple):
    """One pending context of struct prop_pending (order 0: the slot is free)."""

    trace_id: bytes
    seq: int
    order: int
    flags: int


FREE_SLOT = PropSlot(bytes(16), 0, 0, 0)


def pack_prop_pending(slots: list[PropSlot]) -> bytes:
    """struct prop_pending from PROP_SLOTS slots."""
    if len(slots) != PROP_SLOTS:
        raise ValueError(f"{len(slots)} slots, struct prop_pending has {PROP_SLOTS}")
    return PROP_PENDING.pack(*(v for s in slots for v in s))


def unpack_prop_pending(raw: bytes) -> list[PropSlot]:
    values = PROP_PENDING.unpack(raw)
    return [PropSlot(*values[i : i + 4]) for i in range(0, len(values), 4)]


def pack_prop_net(network: ipaddress.IPv4Network | ipaddress.IPv6Network) -> bytes:
    """struct prop_net: an LPM trie key, an IPv4 network as IPv4-mapped IPv6 (/n + 96)."""
    if isinstance(network, ipaddress.IPv4Network):
        return PROP_NET.pack(network.prefixlen + 96, mapped(str(network.network_address))[1])
    return PROP_NET.pack(network.prefixlen, network.network_address.packed)
