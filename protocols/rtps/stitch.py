"""RTPS datagrams -> records. Discovery is learned, fragments are reassembled into samples,
samples are named (waiting a little for discovery), timed against their send on this host
(waiting a little for it), and service requests are paired with their replies.

Per-connection state lives in RTPSState; what every connection of the parser shares
(discovery, send times, receipts, calls) lives in Shared, one per parser instance, every
table bounded with its evictions counted. Time is the kernel's: the frames' own times, and
stitch's `now_ns` (0 between sweeps: the latest frame time any connection has seen)."""

from __future__ import annotations

from bisect import bisect_right
from collections import OrderedDict, deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field

from ..base import ConnInfo, Direction, ParserState, Record, Role, positional_maker
from ..common import BoundedTable
from . import payload as pl
from .discovery import DISCOVERY_WRITERS, Discovery
from .names import Names, RosKind
from .parse import (
    DATA_D,
    FLAG_E,
    VENDOR_CYCLONE,
    AckNack,
    Addressed,
    Data,
    DataFrag,
    Gap,
    Heartbeat,
    HeartbeatFrag,
    NackFrag,
    RTPSMessage,
)
from .table import LruTable

BUILTIN_KIND = 0xC0  # entity kind's top bits: 11 builtin, 01 vendor-specific, 00 the user's
MAX_DESTINATIONS = 32  # peers one sample is remembered to have gone to (fan-out vs repair)
MAX_NACKED = 256  # sequence numbers remembered per (process, writer) as asked for again
DISCOVERY_HEAD = 65536  # reassembled discovery samples are kept whole up to this size

# enum members bound once: a member looked up on its class costs ~0.2 µs, per sample
EGRESS, INGRESS, REQUEST = Direction.EGRESS, Direction.INGRESS, RosKind.REQUEST
_CALL_KINDS = (RosKind.REQUEST, RosKind.REPLY)
EVERY_PARTICIPANT = bytes(12)  # an INFO_DST prefix of zeros: no participant named
Key = tuple[bytes, int]  # (writer GUID, sequence number): a sample's identity everywhere
Waiting = tuple[ConnInfo, "Sample"]  # a sample waiting for its names or send time
Destination = tuple[tuple[str, int] | None, bytes]  # (peer, INFO_DST prefix)


@dataclass(frozen=True, slots=True)
class Limits:
    """The parser's options, checked (see RTPSParser)."""

    discovery_max: int = 4096
    reassembly_timeout_ns: int = 2_000_000_000
    pairing_timeout_ns: int = 10_000_000_000
    discovery_wait_ns: int = 1_000_000_000
    latency_wait_ns: int = 200_000_000
    payload_head: int = 4096
    max_reassemblies: int = 256  # per connection
    max_waiting: int = 4096  # samples held per connection (discovery, send time)
    max_tracked: int = 65536  # send times, receipts, calls, per parser


@dataclass(slots=True)
class Sample:
    """One sample, whole: a DATA, or the DATA_FRAGs that covered it."""

    direction: Direction
    writer: bytes  # GUID
    seq: int
    reader: bytes | None  # GUID, when the datagram named the reader
    dst_prefix: bytes  # the participant INFO_DST named, or 12 zero octets (every one)
    start_ns: int
    end_ns: int
    size: int  # serialized payload bytes (encapsulation header included)
    peer: tuple[str, int] | None
    vendor: int
    head: bytes  # the serialized payload's first bytes
    inline_qos: dict[int, bytes]
    qos_little: bool
    fragments: int = 0  # 0: it came in one DATA
    repair: bool = False  # it was sent again before this copy came (or was asked for)
    # the writer's repairs, nacks and gaps this process saw since its previous sample
    loss: dict[str, int] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        return (self.writer, self.seq)

    @property
    def message_id(self) -> str:
        return f"{self.writer.hex()}:{self.seq}"


@dataclass(slots=True, kw_only=True)
class MessageRecord(Record):
    """A sample published (EGRESS) or received (INGRESS) on a topic."""

    conn: ConnInfo
    sample: Sample
    names: Names | None  # None: discovery never named its writer
    latency_ns: int | None = None  # receive - send, both on this host


# Positional makers (protocols/base.py): a sample and a record are made per DDS sample
_new_sample = positional_maker(Sample, (
    "direction", "writer", "seq", "reader", "dst_prefix", "start_ns", "end_ns", "size", "peer",
    "vendor", "head", "inline_qos", "qos_little"))
_new_message_record = positional_maker(MessageRecord, ("conn", "sample", "names", "latency_ns"))


@dataclass(slots=True, kw_only=True)
class CallRecord(Record):
    """A service call on one process: its client (request out, reply in) or its server."""

    conn: ConnInfo
    role: Role
    names: Names
    request: Sample
    reply: Sample | None = None
    pairing: str = ""  # "cyclone_header" or "related_sample_identity"
    error: str | None = None  # "timeout", "closed": no reply came
    latency_ns: int | None = None  # request delivery (server side), when sent on this host


Bounded = BoundedTable  # the shared tables: at most `limit` entries, evictions counted


@dataclass(slots=True)
class Sent:
    """A sample this host sent: when it first went to each destination, and when it was
    first sent again to one it had gone to (a repair)."""

    destinations: dict[Destination, int]
    resent_ns: int | None = None


@dataclass(slots=True)
class Call:
    """A request and/or a reply of one process waiting for the other."""

    pid: int
    role: Role
    conn: ConnInfo
    names: Names
    idents: tuple[tuple, ...]
    since_ns: int
    request: Sample | None = None
    reply: Sample | None = None
    pairing: str = ""


class Shared:
    """What the connections of one parser share."""

    def __init__(self, limits: Limits) -> None:
        self.limits = limits
        self.discovery = Discovery(limits.discovery_max)
        # looked up per sample: LruTable (C reads and moves); the calls keep the order they
        # began in (their expiry walks it), a BoundedTable
        self.sent = LruTable(limits.max_tracked)  # Key -> Sent
        self.received = LruTable(limits.max_tracked)  # (pid, writer, seq) -> None
        self.nacked = LruTable(limits.max_tracked)  # (pid, writer) -> deque of seqs
        self.loss = LruTable(limits.max_tracked)  # (pid, writer) -> {event: n}
        self.prefixes = LruTable(limits.max_tracked)  # GUID prefix -> pid that sent it
        self.calls = Bounded(limits.max_tracked)  # (pid, role, ident) -> Call
        self.live: dict[int, int] = {}  # pid -> connections not yet closed
        self.dead: set[int] = set()  # pids whose last connection closed: end their calls
        self.waiting: deque[Waiting] = deque()  # samples of connections that closed
        self.clock = 0  # latest kernel time of a frame any connection stitched
        self.counts: dict[str, int] = {}  # not yet reported (counters() drains them)
        self._reported_evictions: dict[str, int] = {}

    def count(self, event: str, n: int = 1) -> None:
        self.counts[event] = self.counts.get(event, 0) + n

    def drain(self) -> dict[str, int]:
        """Counts since the last drain, table evictions included."""
        for name, table in (("discovery_evicted", self.discovery), ("send_times_evicted",
                            self.sent), ("receipts_evicted", self.received),
                            ("calls_evicted", self.calls)):
            total = table.evicted
            delta = total - self._reported_evictions.get(name, 0)
            if delta:
                self.count(name, delta)
                self._reported_evictions[name] = total
        out, self.counts = self.counts, {}
        return out

    def add_loss(self, pid: int, writer: bytes, event: str, n: int = 1) -> None:
        found = self.loss.get((pid, writer))
        if found is None:
            found = {}
            self.loss.put((pid, writer), found)
        found[event] = found.get(event, 0) + n

    def take_loss(self, pid: int, writer: bytes) -> dict[str, int]:
        return self.loss.pop((pid, writer), None) or {}


class Coverage:
    """Which fragment numbers came: disjoint ranges, merged as they fill (in order, one)."""

    __slots__ = ("covered", "ends", "starts")
    MAX_RANGES = 4096  # fragments reordered worse than this are not reassembled

    def __init__(self) -> None:
        self.starts: list[int] = []
        self.ends: list[int] = []
        self.covered = 0

    def add(self, lo: int, hi: int) -> bool:
        """Fragments lo..hi came; False when the ranges would be too many."""
        starts, ends = self.starts, self.ends
        i = bisect_right(starts, lo) - 1
        if i < 0 or ends[i] < lo - 1:
            i += 1  # lo begins a range of its own
        else:
            lo = starts[i]
        j = i
        while j < len(starts) and starts[j] <= hi + 1:
            hi = max(hi, ends[j])
            j += 1
        if j == i and len(starts) >= self.MAX_RANGES:
            return False
        self.covered += (hi - lo + 1) - sum(ends[k] - starts[k] + 1 for k in range(i, j))
        starts[i:j] = [lo]
        ends[i:j] = [hi]
        return True


@dataclass(slots=True)
class Reassembly:
    """The fragments of one sample seen so far on one connection."""

    sample_size: int
    fragment_size: int
    total: int
    have: Coverage
    head: bytearray  # the payload's first bytes, where the fragments that came put them
    inline_qos: dict[int, bytes]
    qos_little: bool
    start_ns: int
    end_ns: int
    peer: tuple[str, int] | None
    vendor: int
    reader: bytes | None
    destination: Destination
    key_only: bool


class RTPSState(ParserState):
    """Per connection: fragments being reassembled, samples waiting, counts."""

    __slots__ = ("completed", "counts", "ended", "reassembly", "waiting")

    def __init__(self, conn: ConnInfo) -> None:
        super().__init__(conn)
        self.reassembly: OrderedDict[Key, Reassembly] = OrderedDict()
        # samples reassembled lately, with where they went: fragments of them that come
        # again are a repair or a copy for another reader, not a new sample
        self.completed = LruTable(1024)
        self.waiting: deque[Waiting] = deque()
        self.counts: dict[str, int] = {}
        self.ended = False  # the parser's finish ran (it runs once per direction)

    def count(self, event: str, n: int = 1) -> None:
        self.counts[event] = self.counts.get(event, 0) + n


# --- stitch --------------------------------------------------------------------------------


def stitch(state: RTPSState, now_ns: int, shared: Shared) -> list[Record]:
    for frame in _in_time_order(state):
        if frame.end_ns > shared.clock:
            shared.clock = frame.end_ns
        _message(state, frame, shared)
    # at the close now_ns is "forever": the clock stays the frames'
    now = shared.clock if state.closed else max(now_ns, shared.clock)
    _expire_reassembly(state, now, shared.limits, state.closed)
    records: list[Record] = []
    if state.closed and state.waiting:
        # its samples still wait: a process exits right after its last receive, and the
        # send of that sample (another connection's frame in the same batch) may not be
        # stitched yet. Other connections' stitches release them; the last close, all.
        shared.waiting.extend(state.waiting)
        state.waiting.clear()
    final = state.closed and not shared.live
    state.waiting = _release(state.waiting, now, shared, False, records, state.count)
    if shared.waiting:
        shared.waiting = _release(shared.waiting, now, shared, final, records, shared.count)
    _expire_calls(state, now, shared, records)
    return records


def _in_time_order(state: RTPSState) -> Iterator[RTPSMessage]:
    out, inn = state.frames[EGRESS], state.frames[INGRESS]
    frames = [*out, *inn]
    out.clear()
    inn.clear()
    if inn and out:
        frames.sort(key=lambda f: f.start_ns)
    return iter(frames)  # type: ignore[arg-type]


def _message(state: RTPSState, frame: RTPSMessage, shared: Shared) -> None:
    if frame.direction is EGRESS:
        shared.prefixes.put(frame.prefix, state.conn.pid)
    if frame.truncated or frame.size > frame.captured:
        state.count("truncated_datagrams")
    if frame.malformed:
        state.count("malformed_submessages", frame.malformed)
    if frame.unknown:
        state.count("unknown_submessages", frame.unknown)
    handlers = _HANDLERS
    for sub in frame.submessages:
        handler = handlers.get(type(sub))
        if handler is not None:
            handler(state, frame, sub, shared)  # type: ignore[operator]


def _data(state: RTPSState, frame: RTPSMessage, sub: Data, shared: Shared) -> None:
    end = sub.payload_end
    if end is None:  # up to the datagram's end: its real size comes from the tracker
        end = max(frame.size, sub.payload_offset + len(sub.payload))
    size = max(0, end - sub.payload_offset)
    writer_id = sub.writer_id
    if writer_id & BUILTIN_KIND:
        _builtin(writer_id, sub.payload, sub.inline_qos, sub.little, sub.key_only, frame,
                 shared)
        return
    flags = sub.flags
    if not flags & DATA_D:  # a key alone: an instance disposed or unregistered
        state.count("key_only_samples")
        return
    # Data.writer_guid, Data.little, _reader(sub), spelled out: this runs once per sample
    dst = sub.dst_prefix
    reader_id = sub.reader_id
    reader = (None if not reader_id or dst == EVERY_PARTICIPANT
              else dst + reader_id.to_bytes(4, "big"))
    peer = frame.peer
    sample = _new_sample(frame.direction, sub.src_prefix + writer_id.to_bytes(4, "big"),
                         sub.seq, reader, dst, frame.start_ns, frame.end_ns, size, peer,
                         frame.vendor, sub.payload[: shared.limits.payload_head],
                         sub.inline_qos, bool(flags & FLAG_E))
    _sample(state, sample, (peer, dst), shared)


def _builtin(writer_id: int, data: bytes, inline_qos: dict[int, bytes], little: bool,
             key_only: bool, frame: RTPSMessage, shared: Shared) -> None:
    if writer_id in DISCOVERY_WRITERS:
        learned = shared.discovery.learn(writer_id, data, inline_qos, little, key_only,
                                         frame.vendor)
        shared.count("discovery_samples" if learned else "discovery_unreadable")


def _reader(sub: Addressed) -> bytes | None:
    if not sub.reader_id or sub.dst_prefix == EVERY_PARTICIPANT:
        return None
    return sub.dst_prefix + sub.reader_id.to_bytes(4, "big")


def _data_frag(state: RTPSState, frame: RTPSMessage, sub: DataFrag, shared: Shared) -> None:
    key = (sub.writer_guid, sub.seq)
    destination = (frame.peer, sub.dst_prefix)
    done = state.completed.get(key)
    if done is not None:
        if frame.direction is INGRESS:
            state.count("duplicate_fragments")
        elif done == destination:
            state.count("repair_fragments")
        return  # else: the same sample for another reader
    entry = state.reassembly.get(key)
    total = -(-sub.sample_size // sub.fragment_size)
    if entry is None:
        if total == 0 or sub.start > total:
            state.count("malformed_submessages")
            return
        entry = Reassembly(sub.sample_size, sub.fragment_size, total, Coverage(), bytearray(),
                           sub.inline_qos, sub.little, frame.start_ns, frame.end_ns,
                           frame.peer, frame.vendor, _reader(sub), destination, sub.key_only)
        state.reassembly[key] = entry
        limits = shared.limits
        while len(state.reassembly) > limits.max_reassemblies:
            state.reassembly.popitem(last=False)
            state.count("reassembly_evicted")
    elif (entry.sample_size, entry.fragment_size) != (sub.sample_size, sub.fragment_size):
        state.count("malformed_submessages")
        return
    if not entry.have.add(sub.start, min(sub.start + max(sub.count, 1) - 1, total)):
        del state.reassembly[key]
        state.count("reassembly_evicted")
        return
    entry.start_ns = min(entry.start_ns, frame.start_ns)
    entry.end_ns = max(entry.end_ns, frame.end_ns)
    entry.peer = frame.peer
    _keep_head(entry, sub, DISCOVERY_HEAD if sub.writer_id & BUILTIN_KIND
               else shared.limits.payload_head)
    if not entry.inline_qos and sub.inline_qos:
        entry.inline_qos, entry.qos_little = sub.inline_qos, sub.little
    if entry.have.covered < total:
        return
    del state.reassembly[key]
    state.completed.put(key, destination)
    state.count("reassembled_samples")
    if sub.writer_id & BUILTIN_KIND:
        _builtin(sub.writer_id, bytes(entry.head), entry.inline_qos, entry.qos_little,
                 entry.key_only, frame, shared)
        return
    if entry.key_only:
        state.count("key_only_samples")
        return
    sample = Sample(frame.direction, key[0], key[1], entry.reader, destination[1],
                    entry.start_ns, entry.end_ns, entry.sample_size, entry.peer, entry.vendor,
                    bytes(entry.head), entry.inline_qos, entry.qos_little, fragments=total)
    _sample(state, sample, destination, shared)


def _keep_head(entry: Reassembly, sub: DataFrag, limit: int) -> None:
    """Copy what this submessage carries of the payload's first `limit` bytes (a service
    call's header; the whole of a discovery sample)."""
    offset = (sub.start - 1) * sub.fragment_size
    if offset >= limit:
        return
    piece = sub.payload[: min(limit, entry.sample_size) - offset]
    if len(entry.head) < offset + len(piece):
        entry.head.extend(bytes(offset + len(piece) - len(entry.head)))
    entry.head[offset : offset + len(piece)] = piece


def _sample(state: RTPSState, sample: Sample, destination: Destination, shared: Shared) -> None:
    """A whole user sample: a new one waits to be named; a copy is counted."""
    pid = state.conn.pid
    writer = sample.writer
    if sample.direction is EGRESS:
        key = (writer, sample.seq)  # sample.key
        sent = shared.sent.get(key)
        if sent is None:
            shared.sent.put(key, Sent({destination: sample.start_ns}))
        elif destination in sent.destinations:  # sent there before: a retransmission
            state.count("repair_samples")
            shared.add_loss(pid, sample.writer, "repair")
            if sent.resent_ns is None:
                sent.resent_ns = sample.start_ns
            return
        else:  # the same sample for another reader (unicast fan-out, a late joiner's history)
            if len(sent.destinations) < MAX_DESTINATIONS:
                sent.destinations[destination] = sample.start_ns
            return
    else:
        if shared.prefixes.get(writer[:12]) == pid:
            state.count("own_samples")  # multicast looped back to the process that sent it
            return
        receipt = (pid, writer, sample.seq)
        received = shared.received
        if receipt in received:
            state.count("duplicate_samples")
            return
        received.put(receipt, None)
        if shared.nacked:
            nacked = shared.nacked.get((pid, writer))
            sample.repair = nacked is not None and sample.seq in nacked
    loss = shared.loss
    if loss:  # Shared.take_loss, spelled out
        sample.loss = loss.pop((pid, writer), None) or {}
    state.waiting.append((state.conn, sample))


def _heartbeat(state: RTPSState, frame: RTPSMessage, sub: Heartbeat, shared: Shared) -> None:
    counts = state.counts  # state.count, spelled out: one per heartbeat
    counts["heartbeats"] = counts.get("heartbeats", 0) + 1


def _heartbeat_frag(state: RTPSState, frame: RTPSMessage, sub: HeartbeatFrag, shared: Shared
                    ) -> None:
    state.count("heartbeat_frags")


def _acknack(state: RTPSState, frame: RTPSMessage, sub: AckNack, shared: Shared) -> None:
    counts = state.counts  # state.count, spelled out: one per acknack
    counts["acknacks"] = counts.get("acknacks", 0) + 1
    if not sub.missing:
        return
    state.count("nacked_samples", len(sub.missing))
    if frame.direction is EGRESS and sub.dst_prefix != EVERY_PARTICIPANT:
        # the reader on this process asks again: a copy that comes later is a repair
        pid, writer = state.conn.pid, sub.writer_guid
        nacked = shared.nacked.get((pid, writer))
        if nacked is None:
            nacked = deque(maxlen=MAX_NACKED)
            shared.nacked.put((pid, writer), nacked)
        fresh = [s for s in sub.missing if s not in nacked]
        nacked.extend(fresh)
        shared.add_loss(pid, writer, "nack", len(sub.missing))


def _nack_frag(state: RTPSState, frame: RTPSMessage, sub: NackFrag, shared: Shared) -> None:
    state.count("nack_frags")


def _gap(state: RTPSState, frame: RTPSMessage, sub: Gap, shared: Shared) -> None:
    state.count("gaps")
    if frame.direction is INGRESS and not sub.writer_id & BUILTIN_KIND:
        shared.add_loss(state.conn.pid, sub.writer_guid, "gap", sub.gapped)


_HANDLERS = {
    Data: _data,
    DataFrag: _data_frag,
    Heartbeat: _heartbeat,
    HeartbeatFrag: _heartbeat_frag,
    AckNack: _acknack,
    NackFrag: _nack_frag,
    Gap: _gap,
}


def _expire_reassembly(state: RTPSState, now: int, limits: Limits, final: bool) -> None:
    if not state.reassembly:
        return
    stale = [k for k, e in state.reassembly.items()
             if final or now - e.end_ns > limits.reassembly_timeout_ns]
    for key in stale:
        del state.reassembly[key]
        state.count("incomplete_samples")  # a fragment never came


# --- naming, timing, pairing ---------------------------------------------------------------


def _release(waiting: deque[Waiting], now: int, shared: Shared, final: bool,
             records: list[Record], count: Callable[..., None]) -> deque[Waiting]:
    """Samples whose writer discovery named (or that waited long enough) become records;
    received ones also wait a little for their send time on this host. Returns those that
    still wait."""
    limits = shared.limits
    forced = len(waiting) - limits.max_waiting  # the oldest go now, named or not
    if forced > 0:
        count("waiting_overflow", forced)
    keep: deque[Waiting] = deque()
    endpoints = shared.discovery.endpoints  # Discovery.endpoint, without its call
    for i, (conn, sample) in enumerate(waiting):
        must = final or i < forced
        endpoint = endpoints.get(sample.writer)
        if endpoint is None and not must and now - sample.end_ns < limits.discovery_wait_ns:
            keep.append((conn, sample))
            continue
        names = endpoint.names if endpoint is not None else None
        if names is not None and names.kind in _CALL_KINDS:
            _call(conn, sample, names, shared, records)
            continue
        latency = None
        if sample.direction is INGRESS:
            sent = shared.sent.get(sample.key)
            if sent is None and not must and now - sample.end_ns < limits.latency_wait_ns:
                keep.append((conn, sample))
                continue
            latency = _latency(sent, sample)
        if names is None:
            count("unknown_writers")
        records.append(_new_message_record(conn, sample, names, latency))
    return keep


def _latency(sent: Sent | None, sample: Sample) -> int | None:
    """Receive - send, from the first send to this receiver: the one to the participant the
    datagram named (INFO_DST), else the latest first send to any destination before the
    receipt (a late joiner gets the history long after the others did). A repair counts from
    the send it repaired."""
    if sent is None:
        return None
    named = sample.dst_prefix != EVERY_PARTICIPANT
    before = [ns for (_, prefix), ns in sent.destinations.items()
              if ns <= sample.end_ns and (prefix == sample.dst_prefix or not named)]
    if not before and named:
        before = [ns for ns in sent.destinations.values() if ns <= sample.end_ns]
    if not before:
        return None
    if sent.resent_ns is not None and sent.resent_ns <= sample.end_ns:
        sample.repair = True
    return sample.end_ns - max(before)


def _call(conn: ConnInfo, sample: Sample, names: Names, shared: Shared,
          records: list[Record]) -> None:
    is_request = names.kind is REQUEST
    outbound = sample.direction is EGRESS
    # a client sends requests and receives replies; a server the other way round
    role = Role.CLIENT if is_request == outbound else Role.SERVER
    pid, calls = conn.pid, shared.calls
    if pid not in shared.live:
        shared.dead.add(pid)  # its sockets closed while the sample waited: end the call soon
    if is_request:
        idents = _request_idents(sample)
        for ident in idents:
            waiting = calls.get((pid, role, ident))
            if waiting is not None and waiting.request is None:  # its reply came first
                _forget(calls, waiting)
                waiting.request, waiting.conn, waiting.names = sample, conn, names
                records.append(_call_record(waiting, shared))
                return
        call = Call(pid, role, conn, names, tuple(idents), sample.end_ns, request=sample)
    else:
        found = _reply_ident(sample)
        if found is None:
            shared.count("replies_without_identity")
            return
        ident, pairing = found
        waiting = calls.get((pid, role, ident))
        if waiting is not None and waiting.reply is None and waiting.request is not None:
            _forget(calls, waiting)
            waiting.reply, waiting.pairing = sample, pairing
            records.append(_call_record(waiting, shared))
            return
        call = Call(pid, role, conn, names, (ident,), sample.end_ns, reply=sample,
                    pairing=pairing)
    for ident in call.idents:
        calls.put((pid, role, ident), call)


def _request_idents(sample: Sample) -> list[tuple]:
    """What a reply may name its request by: the request sample's own identity (Fast DDS
    puts it in the reply's PID_RELATED_SAMPLE_IDENTITY), and for Cyclone DDS the header its
    rmw writes before the request's data and copies into the reply's."""
    idents: list[tuple] = [("sample", sample.writer, sample.seq)]
    if sample.vendor == VENDOR_CYCLONE:
        header = pl.request_header(sample.head)
        if header is not None:
            idents.append(("cyclone", *header))
    return idents


def _reply_ident(sample: Sample) -> tuple[tuple, str] | None:
    for pid in (pl.PID_RELATED_SAMPLE_IDENTITY, pl.PID_FASTDDS_RELATED_SAMPLE_IDENTITY):
        value = sample.inline_qos.get(pid)
        if value is not None:
            found = pl.sample_identity(value, sample.qos_little)
            if found is not None:
                return ("sample", *found), "related_sample_identity"
    header = pl.request_header(sample.head)
    if header is not None:
        return ("cyclone", *header), "cyclone_header"
    return None


def _forget(calls: Bounded, call: Call) -> None:
    for ident in call.idents:
        if calls.get((call.pid, call.role, ident)) is call:
            del calls[(call.pid, call.role, ident)]


def _call_record(call: Call, shared: Shared, error: str | None = None) -> CallRecord:
    request = call.request
    assert request is not None
    latency = None
    if call.role is Role.SERVER:
        latency = _latency(shared.sent.get(request.key), request)
    return CallRecord(conn=call.conn, role=call.role, names=call.names, request=request,
                      reply=call.reply, pairing=call.pairing, error=error, latency_ns=latency)


def _expire_calls(state: RTPSState, now: int, shared: Shared, records: list[Record]) -> None:
    """Calls unanswered for too long, and calls of processes whose every connection has
    closed, end: a request alone with an error, a reply alone counted. Any connection's
    stitch may end them: a record carries its own connection."""
    calls, timeout = shared.calls, shared.limits.pairing_timeout_ns
    if not calls:  # no service call waits (a topic's stitch): nothing to walk
        shared.dead.clear()
        return
    ended: list[tuple[Call, str]] = []
    if shared.dead:
        ended += [(c, "closed") for c in _unique(calls.values()) if c.pid in shared.dead]
        shared.dead.clear()
    # calls are kept in the order they began (their frames' kernel times, nearly in order)
    for call in _unique(calls.values()):
        if now - call.since_ns <= timeout:
            break
        ended.append((call, "timeout"))
    for call, error in ended:
        if not any(calls.get((call.pid, call.role, i)) is call for i in call.idents):
            continue  # ended already (listed twice)
        _forget(calls, call)
        if call.request is None:
            shared.count("orphan_replies")  # another client's, or its request went uncaptured
            continue
        shared.count("unanswered_requests")
        records.append(_call_record(call, shared, error))


def _unique(calls) -> Iterator[Call]:
    seen: set[int] = set()
    for call in calls:
        if id(call) not in seen:
            seen.add(id(call))
            yield call
