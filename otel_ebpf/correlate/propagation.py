"""One trace across hosts: the trace of a request this host's client sent to another host
goes to the server's agent in a TCP header option (kernel/propagation.py), and a context that
came the same way makes a waiting server request a child of the client span.

Both ends name the client span alike without sending its ID: its span ID is the one derived
from the connection as the server sees it and the TCP sequence number of the request's first
byte (joiner.derived_ids), so the option carries only the trace ID, that sequence number and
the sampled flag. The option rides the connection's next segment after the client's agent
decided the trace (the kernel cannot know it when the request's first byte leaves: the
parent is decided here, from evidence read after the fact); the server's agent holds the
request's span for the correlation window meanwhile, as it does for a client end that may be
a moment behind in the ring.
"""

from __future__ import annotations

from collections import OrderedDict
from dataclasses import dataclass

from .joiner import ATTRIBUTE, Correlator, Request, WireKey, _loopback, _trace_of, derived_ids

EVIDENCE = "tcp_option"
# contexts that came before their server request was read (the option can overtake the
# server's read of the request it names), and requests whose trace is not known yet
MAX_KEPT = 65_536


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

    def __init__(self, correlator: Correlator) -> None:
        self.correlator = correlator
        # a hop's server request may wait the window for its own caller's trace before its
        # calls' contexts leave: the next host waits twice as long for them
        correlator.remote_window_ns = 2 * correlator.window_ns
        self._seen: OrderedDict[WireKey, None] = OrderedDict()  # client requests looked at
        self._undecided: OrderedDict[WireKey, Request] = OrderedDict()  # trace not known yet
        self._arrived: OrderedDict[WireKey, tuple[bytes, bool]] = OrderedDict()
        self.sent = self.received = 0

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
            if not _loopback(key[2]):
                # named now, before any release can settle its span with another ID
                req.span_id = derived_ids(key)[1]
                self._undecided[key] = req
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

    # ---- the server's side ------------------------------------------------------------

    def incoming(self, contexts: list[tuple[WireKey, bytes, bool]]) -> None:
        """Contexts carried to this host: (wire key as this server sees it, trace ID,
        sampled). A server request waiting for its client end becomes its child; one not
        read yet finds the context when it is (resolve())."""
        arrived = self._arrived
        for key, trace, sampled in contexts:
            arrived[key] = (trace, sampled)
            self.received += 1
        while len(arrived) > MAX_KEPT:
            arrived.popitem(last=False)
        self.resolve()

    def resolve(self) -> None:
        """Settle the waiting server requests whose context has arrived."""
        if not self._arrived:
            return
        for waiting in (self.correlator.waiting, self.correlator.waiting_remote):
            for key in [k for k in self._arrived if k in waiting]:
                trace, _ = self._arrived.pop(key)
                server = waiting.pop(key)
                server.remote_parent = (trace, derived_ids(key)[1])
                server.evidence, server.decided = EVIDENCE, True


__all__ = ["ATTRIBUTE", "EVIDENCE", "OutgoingContext", "RemoteContexts"]
