"""Joins spans into traces from what the wire and the kernel show, deciding each request's
trace and parent when the request is made, not when its span ends.

Evidence, strongest first (the span attribute `otel_ebpf.correlation` names it):
  traceparent   the message carried W3C trace context: it is honored
  wire          both ends of a TCP connection seen: same 4-tuple and TCP sequence number
                of the request's first byte, so request n pairs with request n
  thread        an outbound request written by the thread that read the one server
                request it is handling (sync servers, thread-per-request)
  task          an outbound request written in a contextvars.Context made for one server
                request: an asyncio task's, born in the loop callback that read that
                request's first bytes, or one copied from it (a task that task created,
                a thread-pool call it made)
  sole_request  the only server request open in the process when the call was made
  derived       the other end is not seen here: IDs computed from the 4-tuple and sequence
                number, which an agent on the other host computes the same way
  ambiguous     several server requests could be the parent: left a root, never guessed
"""

from __future__ import annotations

import functools
import hashlib
import ipaddress
import time
from collections import OrderedDict, defaultdict
from dataclasses import dataclass, field
from random import getrandbits as _getrandbits

from otel_ebpf import _fast
from otel_ebpf.conntrack.table import LastRead as TaskRead
from otel_ebpf.correlate.ids import random_id
from otel_ebpf.kernel.abi import TaskNew, is_loopback
from otel_ebpf.protocols.base import (
    ConnInfo,
    Direction,
    Frame,
    NeutralSpan,
    Role,
    SpanKind,
    SpanLink,
    positional_maker,
)
from otel_ebpf.telemetry import Stats

ATTRIBUTE = "otel_ebpf.correlation"
MAX_DEPTH = 64  # parent chains longer than this are cut (a cycle can never hang us)
# A loop callback creates a request's task right after the read that brought its head in.
TASK_AFTER_READ_NS = 10_000_000  # generous: a loaded loop thread may be preempted
# A client request waits this long for its server end to read it: a server with a queue
# (gunicorn's backlog) may read a request seconds after it was written.
CLIENT_RETENTION_NS = 120 * 10**9

WireKey = tuple[str, int, str, int, int]  # client addr, port, server addr, port, request seq

# enum members as module constants: looking a member up on its class costs ~0.2 µs
_EGRESS, _CLIENT, _SERVER = Direction.EGRESS, Role.CLIENT, Role.SERVER


@dataclass(slots=True, eq=False)
class Request:
    """One request seen on the wire, before its span exists."""

    span_id: bytes
    conn_key: tuple[int, int, int]
    stream_pos: int
    pid: int
    tid: int
    task: int
    exchange: int
    role: Role
    start_ns: int  # first byte
    ready_ns: int  # last byte: a server request is being handled from here...
    done_ns: int = 2**63  # ...until its response's first byte
    seen_ns: int = 0  # agent's clock when it arrived, for the waiting window
    wire_key: WireKey | None = None
    carrier: dict[str, str] = field(default_factory=dict)
    parent: Request | None = None
    remote_parent: tuple[bytes, bytes] | None = None  # (trace id, span id) not ours
    trace_id: bytes = b""  # a root's, drawn when first needed
    evidence: str = ""
    decided: bool = True  # False while a server request waits for its client's write
    matched: bool = False  # a client request whose server end was seen here
    links: list[SpanLink | _PendingLink] = field(default_factory=list)


_new_request = positional_maker(Request, (
    "span_id", "conn_key", "stream_pos", "pid", "tid", "task", "exchange", "role", "start_ns",
    "ready_ns", "seen_ns", "wire_key", "carrier"))


@dataclass(frozen=True, slots=True)
class _PendingLink:
    """A link to a request whose trace may not be known yet (resolved when emitted)."""

    target: Request
    name: str


def parse_traceparent(value: str) -> tuple[bytes, bytes] | None:
    """(trace id, span id) of a W3C traceparent header, or None when it is malformed."""
    parts = value.strip().split("-")
    if len(parts) < 4 or len(parts[0]) != 2 or parts[0] == "ff":
        return None
    try:
        trace, span = bytes.fromhex(parts[1]), bytes.fromhex(parts[2])
    except ValueError:
        return None
    if len(trace) != 16 or len(span) != 8 or not any(trace) or not any(span):
        return None
    return trace, span


def message_ids(span: NeutralSpan) -> None:
    """A message's sender and its receivers, on any host, compute the same IDs from its
    identity: the sender's span is the trace's root, each receiver's span its child."""
    trace, origin = identity_ids(f"message|{span.message_id}")
    span.trace_id = trace
    if span.kind in (SpanKind.PRODUCER, SpanKind.CLIENT):
        span.span_id = origin
    else:
        span.parent_span_id = origin
    span.attributes[ATTRIBUTE] = "message"


def identity_ids(identity: str) -> tuple[bytes, bytes]:
    """(trace id, span id) every host computes alike from an identity they all see."""
    digest = hashlib.sha256(identity.encode()).digest()
    return digest[:16], digest[16:24]


def derived_ids(key: WireKey) -> tuple[bytes, bytes]:
    """(trace id, span id) both hosts of a connection compute alike from what both see: the
    client's address and port, the server's, the TCP sequence number of the request's first
    byte."""
    client, client_port, server, server_port, seq = key
    return wire_ids(_addr_words(str(client)), _addr_words(str(server)),
                    int(client_port), int(server_port), int(seq))


M64 = (1 << 64) - 1


def _splitmix(z: int) -> int:
    """splitmix64's step: a bijective mix of 64 bits (its constants are Steele et al.'s)."""
    z = (z + 0x9E3779B97F4A7C15) & M64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & M64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & M64
    return z ^ (z >> 31)


WIRE_SEED = 0x6F74656C2D656270  # "otel-ebp"


def wire_ids(client: tuple[int, int], server: tuple[int, int], client_port: int,
             server_port: int, seq: int) -> tuple[bytes, bytes]:
    """The derived pair of a request on the wire, from the addresses as two 64-bit words
    each (big-endian halves of the 16-byte address, IPv4 as IPv4-mapped IPv6). The kernel
    computes the same (bpf/include/prop_send.bpf.h, prop_wire_trace), so that a server
    request's trace is known at its read to the calls it makes."""
    h = WIRE_SEED
    for word in (*client, *server,
                 (client_port & 0xFFFF) << 48 | (server_port & 0xFFFF) << 32 | seq & 0xFFFFFFFF):
        h = _splitmix(h ^ word)
    trace = _splitmix(h ^ 1).to_bytes(8, "big") + _splitmix(h ^ 2).to_bytes(8, "big")
    span = _splitmix(h ^ 3) or 1  # an all-zero span ID is invalid
    return trace, span.to_bytes(8, "big")


@functools.lru_cache(maxsize=4096)
def _addr_words(address: str) -> tuple[int, int]:
    ip = ipaddress.ip_address(address)
    raw = (ipaddress.IPv6Address(b"\0" * 10 + b"\xff\xff" + ip.packed).packed
           if ip.version == 4 else ip.packed)
    return int.from_bytes(raw[:8], "big"), int.from_bytes(raw[8:], "big")


class Correlator:
    """Feed it frames as they complete (`on_frames`) and spans as they end (`on_spans`);
    it returns spans with trace, span and parent IDs once they are known."""

    def __init__(
        self,
        stats: Stats,
        window_ns: int = 2_000_000_000,
        correlation_headers: tuple[str, ...] = ("x-request-id",),
        max_requests: int = 200_000,
        compiled: bool = True,
    ) -> None:
        self.stats = stats
        self.window_ns = window_ns
        self.id_headers = tuple(h.lower() for h in correlation_headers)
        self.max_requests = max_requests
        # requests by (connection key, stream position of the request's first byte)
        self.requests: OrderedDict[tuple[tuple[int, int, int], int], Request] = OrderedDict()
        self.clients: OrderedDict[WireKey, Request] = OrderedDict()  # awaiting their server
        self.waiting: OrderedDict[WireKey, Request] = OrderedDict()  # servers awaiting client
        # with context propagation on (correlate/propagation.py), a server request from a
        # peer that is not this host's loopback, once the window passed, waits on for the
        # context its client's host sends: up to `remote_window_ns` in `waiting_remote`
        # (that host may have waited the window itself for the trace of the request the
        # call was made for), or, on a connection that has carried a context before (its
        # client's agent sends them: one will come, with the connection's next segment), up
        # to `context_wait_ns` in `waiting_context`
        self.remote_window_ns = self.context_wait_ns = window_ns
        self.waiting_remote: OrderedDict[WireKey, Request] = OrderedDict()
        self.waiting_context: OrderedDict[WireKey, Request] = OrderedDict()
        # the connections (client address, port, server address, port) that carried one
        self.context_conns: OrderedDict[tuple[str, int, str, int], None] = OrderedDict()
        # server requests by pid, by identity: one leaves in O(1) when its span comes
        self.open: defaultdict[int, dict[int, Request]] = defaultdict(dict)
        # server requests whose response has not begun, by connection: a response finds its
        # request here without scanning every open request of the process
        self.unanswered: defaultdict[tuple[int, int, int], list[Request]] = defaultdict(list)
        self.first_by_id: OrderedDict[tuple[str, str], Request] = OrderedDict()
        # Context (pid, address) -> the read whose loop callback created it or its ancestor
        self.task_reads: OrderedDict[tuple[int, int], TaskRead] = OrderedDict()
        self.reads_taken: OrderedDict[tuple, None] = OrderedDict()  # reads a birth took
        self.held: list[tuple[NeutralSpan, Request]] = []
        self.decided: dict[str, int] = {}  # spans settled by evidence, not yet in stats
        # the usual frames and spans in C (_fast/correlate.c), this class's methods the
        # reference it hands everything else to; None: the Python loops alone
        self._compiled = _fast.correlate if compiled else None

    # ---- requests, as they are made --------------------------------------------------

    def observe(self, observed: list, now_ns: int | None = None) -> None:
        """Frames as they completed and asyncio task births, in event order (a dead task's
        address is reused: order keeps each birth after the frames its predecessor wrote)."""
        now_ns = _now() if now_ns is None else now_ns
        if self._compiled is not None and type(observed) is list:
            self._compiled.observe(self, observed, now_ns)
            return
        for first, second in observed:
            if type(first) is TaskNew:
                self._birth(first, second)
            else:
                self._frame(first, second, now_ns)

    def on_frames(self, frames: list[tuple[ConnInfo, Frame]], now_ns: int | None = None
                  ) -> None:
        """Frames in the order they completed. Requests get their IDs here; a server's
        response ends the time its request could be the parent of outbound calls."""
        now_ns = _now() if now_ns is None else now_ns
        for conn, frame in frames:
            self._frame(conn, frame, now_ns)

    def _frame(self, conn: ConnInfo, frame: Frame, now_ns: int) -> None:
        if conn.transport == "datagram" or conn.family == "pipe":
            # messages, not requests on a connection (a pipe's answers come on another
            # pipe): their spans carry a message_id instead
            return
        role = conn.role
        is_request = (frame.direction == _EGRESS) == (role == _CLIENT)
        if not is_request:
            if role == _SERVER:
                self._server_answers(conn, frame)
            return
        conn_key = (conn.pid, conn.fd, conn.generation)
        seq = frame.tcp_seq
        # the wire identity both ends compute: client address and port, server address and
        # port, TCP sequence number of the request's first byte (None: not known), as the
        # server sees them: a client through NAT (a Service's VIP) uses conntrack's view
        if seq is None or not conn.remote_port:
            key = None
        elif role == _SERVER:
            key = (conn.remote_addr, conn.remote_port, conn.local_addr, conn.local_port, seq)
        elif (nat := conn.nat) is not None:
            key = (nat[0], nat[1], nat[2], nat[3], seq)
        else:
            key = (conn.local_addr, conn.local_port, conn.remote_addr, conn.remote_port, seq)
        carrier = frame.carrier
        pos = frame.stream_pos
        bits = _getrandbits(64)  # random_id(8) inline: a zero draw (invalid) is redrawn there
        req = _new_request(bits.to_bytes(8, "big") if bits else random_id(8), conn_key, pos,
                           conn.pid, frame.tid, frame.task, frame.exchange, role,
                           frame.start_ns, frame.end_ns, now_ns, key, carrier)
        requests = self.requests
        requests[(conn_key, pos)] = req  # _remember inline
        if len(requests) > self.max_requests:
            self._evict()
        if carrier:
            traceparent = carrier.get("traceparent")
            context = None if traceparent is None else parse_traceparent(traceparent)
            if context is not None:
                req.remote_parent, req.evidence = context, "traceparent"
        if role == _SERVER:
            self._server_request(req)
        else:
            self._client_request(req)
        if carrier:
            self._link_by_id(req)

    def _evict(self) -> None:
        while len(self.requests) > self.max_requests:
            _, old = self.requests.popitem(last=False)
            self._close_server(old)
            self.stats.add("correlation.evicted")

    def on_tasks(self, births: list[tuple[TaskNew, TaskRead | None]]) -> None:
        """asyncio tasks as they are born. One created by a running task serves what that
        task serves; one created by a loop callback serves the request whose first bytes
        the thread had just read in that callback's Context (uvicorn creates a task per
        request there; aiohttp creates it in the connection's handler task, which nothing
        seen ties to the read: its calls get no task evidence)."""
        for birth, read in births:
            self._birth(birth, read)

    def _birth(self, birth: TaskNew, read: TaskRead | None) -> None:
        key = (birth.pid, birth.task)
        self.task_reads.pop(key, None)  # an address reused by a new task
        origin = self.task_reads.get((birth.pid, birth.parent)) if birth.parent else None
        # a Context copied from one that serves no request: a loop callback's (the one
        # the loop runs a protocol's data_received in) creating a request's task. The copy
        # must be made in the Context the read's bytes were handed over in: asyncio's
        # callback made the read in the very Context the copy is made from; uvloop reads in
        # libuv's callback, outside any Context, then enters the transport's Context to
        # run data_received (the Context the kernel saw it enter after the read). A copy
        # from any other Context after the read (an accept's call_soon for another
        # connection, the loop's own work in its base Context, another connection's
        # handler task) is not made for that read, and would pass its request on to every
        # Context made from its own. Only the first such copy after a read takes it (a
        # callback copies more than once: timers, call_soon)
        parent = birth.parent
        if origin is None and read is not None and parent and (
                read.context == parent
                or (birth.entered == parent and birth.entered_ns >= read.ns)) \
                and 0 <= birth.ts_ns - read.ns <= TASK_AFTER_READ_NS:
            taken = (read.key, read.pos)
            if taken not in self.reads_taken:
                self.reads_taken[taken] = None
                if len(self.reads_taken) > self.max_requests:
                    self.reads_taken.popitem(last=False)
                origin = read
        if origin is not None:
            self.task_reads[key] = origin
            while len(self.task_reads) > self.max_requests:
                self.task_reads.popitem(last=False)

    def _request_of_task(self, req: Request) -> Request | None:
        """The server request the task that wrote `req` serves: exactly one request must
        have begun in the read its task was born from."""
        read = self.task_reads.get((req.pid, req.task))
        if read is None:
            return None
        began = [s for s in self.open.get(req.pid, {}).values()
                 if s.conn_key == read.key and read.pos <= s.stream_pos < read.end]
        return began[0] if len(began) == 1 else None

    def _server_request(self, req: Request) -> None:
        self.open[req.pid][id(req)] = req
        self.unanswered[req.conn_key].append(req)
        key = req.wire_key
        client = self.clients.pop(key, None) if key else None
        if client is not None:
            client.matched = True
            if req.remote_parent is None:
                req.parent, req.evidence = client, "wire"
        elif req.remote_parent is None and key is not None:
            req.decided = False  # its client's write may be a moment behind in the ring
            self.waiting[key] = req

    def _server_answers(self, conn: ConnInfo, frame: Frame) -> None:
        """The response's first byte ends its request's handling: the oldest unanswered
        request of the connection, or on a multiplexed one, the same exchange's."""
        key = (conn.pid, conn.fd, conn.generation)
        waiting = self.unanswered.get(key)
        if not waiting:
            return
        for i, req in enumerate(waiting):
            if frame.exchange < 0 or req.exchange == frame.exchange:
                req.done_ns = frame.start_ns
                del waiting[i]
                if not waiting:
                    del self.unanswered[key]
                return

    def _client_request(self, req: Request) -> None:
        if req.remote_parent is None:
            self._parent_in_process(req)
        key = req.wire_key
        if key is None:
            return
        server = self.waiting.pop(key, None)
        if server is not None:
            req.matched = True
            server.parent, server.evidence, server.decided = req, "wire", True
        else:
            self.clients[key] = req

    def _parent_in_process(self, req: Request) -> None:
        """The server request this outbound call is made for, when the evidence says so."""
        if req.task and (owner := self._request_of_task(req)) is not None:
            req.parent, req.evidence = owner, "task"
            return
        candidates = [s for s in self.open.get(req.pid, {}).values()
                      if s.ready_ns <= req.start_ns < s.done_ns]
        if not candidates:
            return  # made outside any request: a root
        same_thread = [s for s in candidates if s.tid == req.tid]
        if len(same_thread) == 1:
            req.parent, req.evidence = same_thread[0], "thread"
        elif not same_thread and len(candidates) == 1:
            req.parent, req.evidence = candidates[0], "sole_request"
        else:
            req.evidence = "ambiguous"
            self.stats.add("correlation.ambiguous")

    def _link_by_id(self, req: Request) -> None:
        """Requests carrying the same x-request-id (or configured header) are linked."""
        for name in self.id_headers:
            value = req.carrier.get(name)
            if not value:
                continue
            first = self.first_by_id.setdefault((name, value), req)
            if first is not req and req.parent is None and req.remote_parent is None:
                req.links.append(_PendingLink(first, name))
            while len(self.first_by_id) > self.max_requests:
                self.first_by_id.popitem(last=False)

    def _close_server(self, req: Request) -> None:
        if req.role == _SERVER:
            reqs = self.open.get(req.pid)
            if reqs is not None and reqs.pop(id(req), None) is not None and not reqs:
                del self.open[req.pid]
            waiting = self.unanswered.get(req.conn_key)
            if waiting is not None and req in waiting:  # its span came without a response
                waiting.remove(req)
                if not waiting:
                    del self.unanswered[req.conn_key]

    # ---- spans, as they end ---------------------------------------------------------

    def on_spans(self, spans: list[NeutralSpan], now_ns: int | None = None) -> list[NeutralSpan]:
        """Spans whose IDs are settled; the others wait (at most the window)."""
        now_ns = _now() if now_ns is None else now_ns
        if self._compiled is not None and type(spans) is list:
            return self._compiled.on_spans(self, spans, now_ns) + self.expire(now_ns)
        ready: list[NeutralSpan] = []
        for span in spans:
            self._span(span, ready)
        return ready + self.expire(now_ns)

    def _span(self, span: NeutralSpan, ready: list[NeutralSpan]) -> None:
        """One span of on_spans: into `ready` once its IDs are settled, else held."""
        if span.message_id:
            message_ids(span)
            ready.append(span)
            return
        req = None
        if span.request_pos is not None:
            conn = span.conn  # its key inline: a property is a Python call
            req = self.requests.pop(((conn.pid, conn.fd, conn.generation), span.request_pos),
                                    None)
        if req is None:
            ready.append(span)  # nothing seen of its request: random IDs later
            return
        if req.role == _SERVER:
            self._close_server(req)
        if self._settle(span, req):
            ready.append(span)
        else:
            self.held.append((span, req))

    def expire(self, now_ns: int | None = None) -> list[NeutralSpan]:
        """Give up waiting where the window has passed; release what that settles."""
        now_ns = _now() if now_ns is None else now_ns
        deadline = now_ns - self.window_ns
        longer = self.remote_window_ns > self.window_ns
        while self.waiting:
            key, server = next(iter(self.waiting.items()))
            if server.seen_ns > deadline:
                break
            del self.waiting[key]
            if longer and not is_loopback(key[0]):
                # each stage keeps its requests in the order they were seen: the ones
                # leaving `waiting` do so in that order
                if key[:4] in self.context_conns:
                    self.waiting_context[key] = server
                else:
                    self.waiting_remote[key] = server
                continue
            _derive(key, server)
        for waiting, wait_ns in ((self.waiting_remote, self.remote_window_ns),
                                 (self.waiting_context, self.context_wait_ns)):
            deadline = now_ns - wait_ns
            while waiting:
                key, server = next(iter(waiting.items()))
                if server.seen_ns > deadline:
                    break
                del waiting[key]
                _derive(key, server)
        retention = now_ns - max(CLIENT_RETENTION_NS, self.window_ns)
        while self.clients and next(iter(self.clients.values())).seen_ns <= retention:
            self.clients.popitem(last=False)
        while len(self.clients) > self.max_requests:
            self.clients.popitem(last=False)
        return self._release(force=False)

    def flush(self) -> list[NeutralSpan]:
        """At shutdown: settle everything with what is known."""
        for waiting in (self.waiting, self.waiting_remote, self.waiting_context):
            for key, server in waiting.items():
                _derive(key, server)
            waiting.clear()
        return self._release(force=True)

    def _release(self, force: bool) -> list[NeutralSpan]:
        ready: list[NeutralSpan] = []
        if self.held:
            still: list[tuple[NeutralSpan, Request]] = []
            for span, req in self.held:
                if self._settle(span, req) or force:
                    ready.append(span)
                else:
                    still.append((span, req))
            self.held = still
        if self.decided:
            for evidence, n in self.decided.items():
                self.stats.add("correlation.decided", n, evidence=evidence)
            self.decided.clear()
        return ready

    def _settle(self, span: NeutralSpan, req: Request) -> bool:
        """Write IDs into the span if its trace is known; False while an ancestor waits."""
        trace = _trace_of(req)
        if trace is None:
            return False
        span.trace_id, span.span_id = trace, req.span_id
        if req.parent is not None:
            span.parent_span_id = req.parent.span_id
        elif req.remote_parent is not None:
            span.parent_span_id = req.remote_parent[1]
        if req.evidence:
            span.attributes[ATTRIBUTE] = req.evidence
            decided = self.decided  # added to stats once per call (Stats.add locks)
            decided[req.evidence] = decided.get(req.evidence, 0) + 1
        for link in req.links:
            if isinstance(link, _PendingLink):
                target = link.target
                if (t := _trace_of(target)) is not None:
                    span.links.append(SpanLink(t, target.span_id, {"otel_ebpf.link": link.name}))
            else:
                span.links.append(link)
        if req.role == _CLIENT and not req.matched and req.wire_key is not None \
                and req.remote_parent is None:
            trace_id, span_id = derived_ids(req.wire_key)
            span.links.append(SpanLink(trace_id, span_id, {ATTRIBUTE: "derived"}))
        return True


def _derive(key: WireKey, server: Request) -> None:
    """No client end here, and no context came: the IDs the client's agent derives alike."""
    server.remote_parent, server.evidence = derived_ids(key), "derived"
    server.decided = True


def _trace_of(req: Request) -> bytes | None:
    """The trace a request belongs to: its root's. None while some ancestor still waits."""
    r = req
    for _ in range(MAX_DEPTH):
        if r.remote_parent is not None:
            return r.remote_parent[0]
        if not r.decided:
            return None
        if r.parent is None:
            break
        r = r.parent
    if not r.trace_id:
        r.trace_id = random_id(16)
    return r.trace_id


if _fast.correlate is not None:
    _fast.correlate.setup(Request, ConnInfo, Frame, NeutralSpan, TaskNew, _new_request,
                          _getrandbits, random_id, Direction.EGRESS, Direction.INGRESS,
                          _CLIENT, _SERVER, ATTRIBUTE)


def _now() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)
