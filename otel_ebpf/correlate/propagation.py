"""One trace across hosts: the trace of a request this host's client sent to another host
goes to the server's agent in a TCP header option (kernel/propagation.py), and a context that
came the same way makes a waiting server request a child of the client span.

Both ends name the client span alike without sending its ID: its span ID is the one derived
from the connection as the server sees it and the TCP sequence number of the request's first
byte (joiner.derived_ids), so the option carries only the trace ID, that sequence number and
the sampled flag. The option rides the connection's next segment after the client's agent
decided the trace (the kernel cannot know it when the request's first byte leaves: the
parent is decided here, from evidence read after the fact). The server's agent holds the
request's span meanwhile: twice the correlation window on a connection no context has come
by yet, and up to `propagation.wait` on one that has carried contexts before (its client's
agent sends them, so one will come, with the next request, an ACK, or the FIN that closes
the connection once it idles).
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from otel_ebpf.kernel.abi import ContextOut, is_loopback

from .joiner import (ATTRIBUTE, MAX_DEPTH, Correlator, Request, WireKey, _now, _trace_of,
                     derived_ids)

EVIDENCE = "tcp_option"
# a call the agent's own evidence left ambiguous, whose parent the kernel named at its write
SEND_CONTEXT = "send_context"
# contexts that came before their server request was read (the option can overtake the
# server's read of the request it names), requests whose trace is not known yet, connections
# that carried contexts
MAX_KEPT = 65_536
DEFAULT_WAIT_NS = 10_000_000_000  # propagation.wait's default: past common idle timeouts


@dataclass(frozen=True, slots=True)
class OutgoingContext:
    """What the kernel is asked to send for a request: `key` names it as the server sees it
    (client address and port, server address and port, the request's sequence number)."""

    key: WireKey
    conn_key: tuple[int, int, int]  # the client's connection (pid, fd, generation): its
    # socket's own addresses name it to the kernel (a Service's address, before DNAT)
    trace_id: bytes
    sampled: bool = True


class RemoteContexts:
    """Between a Correlator and the kernel's option carrier: `outgoing()` after each batch of
    frames gives the contexts to send; `incoming()` takes the contexts that arrived."""

    def __init__(self, correlator: Correlator, wait_ns: int = DEFAULT_WAIT_NS) -> None:
        self.correlator = correlator
        # a hop's server request may wait the window for its own caller's trace before its
        # calls' contexts leave: the next host waits twice as long for them, and as long as
        # `wait_ns` where the connection's contexts are known to come (Correlator.expire)
        correlator.remote_window_ns = 2 * correlator.window_ns
        correlator.context_wait_ns = max(wait_ns, correlator.remote_window_ns)
        self._seen: OrderedDict[WireKey, None] = OrderedDict()  # client requests looked at
        self._undecided: OrderedDict[WireKey, Request] = OrderedDict()  # trace not known yet
        # calls whose context the kernel sent, until their served request's trace is known
        self._adopting: OrderedDict[WireKey, tuple] = OrderedDict()
        # contexts not matched to a server request yet, with when they came: kept a window
        # (a request is read within moments of its context), then counted as unmatched
        self._arrived: OrderedDict[WireKey, tuple[bytes, bool, int]] = OrderedDict()
        # contexts the kernel sent at a call's first write, by (connection, position), until
        # the call's request comes
        self._at_send: OrderedDict[tuple[tuple[int, int, int], int],
                                   tuple[bytes, tuple[int, int, int], int]] = OrderedDict()
        self.sent = self.received = self.unmatched = self.at_send = 0

    # ---- the client's side ------------------------------------------------------------

    def outgoing(self) -> list[OutgoingContext]:
        """The new client requests to another host whose trace is known, each once; their
        span takes the ID both ends derive. Those whose parent still waits come later."""
        out: list[OutgoingContext] = []
        seen = self._seen
        for key in reversed(self.correlator.clients):
            if key in seen:
                break  # the rest were looked at before (new ones are appended)
            seen[key] = None
            req = self.correlator.clients[key]
            if not is_loopback(key[2]):
                # named now, before any release can settle its span with another ID
                req.span_id = derived_ids(key)[1]
                at_send = self._at_send.pop((req.conn_key, req.stream_pos), None)
                if at_send is None:
                    self._undecided[key] = req
                else:  # its context left with its first segment: its trace is that one
                    self._adopting[key] = (req, *at_send)
        for key, (req, *at_send) in list(self._adopting.items()):
            if self._adopt(req, *at_send):
                del self._adopting[key]
        while len(self._adopting) > MAX_KEPT:
            self._adopting.popitem(last=False)
        while len(seen) > MAX_KEPT:
            seen.popitem(last=False)
        for key, req in list(self._undecided.items()):
            if req.matched:  # its server end is on this host after all: the wire decides
                del self._undecided[key]
                continue
            trace = _trace_of(req)
            if trace is None:
                continue
            del self._undecided[key]
            # its span keeps its link to the derived pair: a context that never reaches the
            # server (no segment after it within the server's wait: a connection left idle
            # right after its last answer) leaves the server a derived root, found by it
            out.append(OutgoingContext(key, req.conn_key, trace))
        while len(self._undecided) > MAX_KEPT:
            self._undecided.popitem(last=False)
        self.sent += len(out)
        return out

    def queued_at_send(self, contexts: list[ContextOut]) -> None:
        """Contexts the kernel queued for a call's first segment at its first write (it knew
        the request the writing thread or Context served): the call's span adopts that
        trace when its request comes (outgoing())."""
        at_send = self._at_send
        for c in contexts:
            at_send[(c.key, c.pos)] = (c.trace_id, c.origin, c.origin_pos)
        while len(at_send) > MAX_KEPT:
            at_send.popitem(last=False)

    def _adopt(self, req: Request, trace: bytes, origin: tuple[int, int, int],
               origin_pos: int) -> bool:
        """A call whose context the kernel sent: where this agent's join agrees with the
        kernel on the request it was made for, that request's trace is the one sent (a root
        takes it as its trace ID). A call this agent found `ambiguous` (several requests
        open, no evidence naming one) takes the kernel's request as its parent
        (`send_context`): the kernel followed the call's Context to the request it was made
        for. Where they name different requests, the server's trace and this call's differ
        (counted: never a parent guessed to make them agree). False while an ancestor
        waits for its own parent (asked again after the next batch)."""
        if req.evidence == "ambiguous" and not req.trace_id:
            # several requests were open and this agent's evidence named none; the kernel
            # followed the call's Context back to the request it was born for
            owner = self.correlator.requests.get((origin, origin_pos))
            if owner is not None:
                req.parent, req.evidence = owner, SEND_CONTEXT
        r, served = req, False
        for _ in range(MAX_DEPTH):
            served = served or (r.conn_key == origin and r.stream_pos == origin_pos)
            if r.remote_parent is not None:
                break
            if not r.decided:
                return False
            if r.parent is None:
                break
            r = r.parent
        if served:
            if r.remote_parent is not None:
                served = r.remote_parent[0] == trace
            elif not r.trace_id or r.trace_id == trace:
                r.trace_id = trace
            else:
                served = False
        self.at_send += 1
        outcome = "at_send" if served else "at_send_disagreed"
        self.correlator.stats.add("propagation.contexts", outcome=outcome)
        return True

    # ---- the server's side ------------------------------------------------------------

    def incoming(self, contexts: list[tuple[WireKey, bytes, bool]], now_ns: int | None = None
                 ) -> None:
        """Contexts carried to this host: (wire key as this server sees it, trace ID,
        sampled). A server request waiting for its client end becomes its child; one not
        read yet finds the context when it is (resolve())."""
        now_ns = _now() if now_ns is None else now_ns
        arrived, conns = self._arrived, self.correlator.context_conns
        for key, trace, sampled in contexts:
            arrived[key] = (trace, sampled, now_ns)
            arrived.move_to_end(key)
            conns[key[:4]] = None  # its later requests wait for theirs (Correlator.expire)
            conns.move_to_end(key[:4])
        self.received += len(contexts)
        while len(conns) > MAX_KEPT:
            conns.popitem(last=False)
        self.resolve(now_ns)

    def resolve(self, now_ns: int | None = None) -> None:
        """Settle the waiting server requests whose context has arrived; forget the contexts
        that found none for a window (their request settled before they came, or was never
        read: counted as unmatched)."""
        arrived = self._arrived
        if not arrived:
            return
        now_ns = _now() if now_ns is None else now_ns
        c = self.correlator
        for key in list(arrived):
            for waiting in (c.waiting, c.waiting_context, c.waiting_remote):
                server = waiting.pop(key, None)
                if server is not None:
                    trace, _, _ = arrived.pop(key)
                    server.remote_parent = (trace, derived_ids(key)[1])
                    server.evidence, server.decided = EVIDENCE, True
                    break
        deadline, dropped = now_ns - c.window_ns, 0
        while arrived and (next(iter(arrived.values()))[2] <= deadline
                           or len(arrived) > MAX_KEPT):
            arrived.popitem(last=False)
            dropped += 1
        if dropped:
            self.unmatched += dropped
            c.stats.add("propagation.contexts", dropped, outcome="unmatched")


__all__ = ["ATTRIBUTE", "EVIDENCE", "OutgoingContext", "RemoteContexts"]
