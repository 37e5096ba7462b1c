"""Drives a protocol parser through the real connection tracker (otel_ebpf.conntrack), the
way the agent does: positioned bytes, truncated captures, lost bytes, timing, close.
"""

from __future__ import annotations

from collections.abc import Iterable

import pytest
from otel_ebpf.protocols.base import ConnInfo, Direction, NeutralSpan, ProtocolParser, Record, Role
from otel_ebpf.protocols.layers import HTTPExchange, HTTPLayer
from otel_ebpf.protocols.registry import Registry

from otel_ebpf.conntrack.connection import FOREVER_NS, Connection
from otel_ebpf.telemetry import Stats

CLOSE_NS = FOREVER_NS  # what the tracker passes to stitch when the connection closes
ISN = {Direction.EGRESS: 1_000_000, Direction.INGRESS: 2_000_000}  # TCP sequence bases


class ConnectionDriver:
    """One connection: feed(direction, captured, gap=...) then close(). Records are kept
    as the parser's stitch returns them."""

    def __init__(
        self, parser: ProtocolParser, conn: ConnInfo, *, midstream: bool = False, step_ns: int = 1000,
        layers: tuple = (),
    ) -> None:
        self.parser, self.conn = parser, conn
        self.registry = Registry([parser], layers)  # hands the layers to the parser
        self.connection = Connection(conn, tcp=True)
        self.connection.adopt(parser, conn.role)
        if midstream:  # capture began inside the stream: both directions start by resyncing
            self.connection.resync = [True, True]
        self.stats = Stats()
        self.pos = {d: 0 for d in Direction}
        self.records: list[Record] = []
        self.now = 0
        self.step_ns = step_ns

    @property
    def state(self):
        return self.connection.state

    @property
    def invalid(self) -> int:
        return self.stats.total("parse.errors")

    @property
    def resyncs(self) -> int:
        return self.stats.total("parse.errors") + self.stats.total("gaps")

    def feed(self, direction: Direction, captured: bytes, gap: int = 0, at: int | None = None,
             tail: bytes = b"") -> None:
        """One syscall's worth: `captured` bytes, then `gap` more the kernel did not capture,
        then `tail`: the message's last bytes, which a wide capture sends too."""
        self.now = self.now + self.step_ns if at is None else at
        if captured or gap or tail:
            pos = self.pos[direction]
            size = len(captured) + gap + len(tail)
            self.connection.on_data(direction, pos, size, captured, self.now,
                                    self.now, (ISN[direction] + pos) % 2**32, self.registry,
                                    self.stats, tail=tail)
            self.pos[direction] += size
        self.stitch(self.now)

    def tick(self, at: int) -> None:
        """Time passes with no bytes: only stitch runs (timeouts)."""
        self.now = at
        self.stitch(at)

    def close(self) -> None:
        self.connection.finish()
        self.stitch(CLOSE_NS)

    def stitch(self, now_ns: int) -> None:
        self.records += self.connection.stitch(now_ns)

    def spans(self) -> list[NeutralSpan]:
        return [span for r in self.records for span in self.parser.to_spans(r, self.conn)]


class EchoLayer(HTTPLayer):
    """A layer that wants /api/ requests, renames their span and keeps the exchange
    (`seen`) for the test to look at: what the HTTP parsers hand every layer."""

    name = "echo"

    def wants(self, method: str, target: str) -> bool:
        return target.startswith("/api/")

    def enrich(self, exchange: HTTPExchange, span: NeutralSpan) -> None:
        span.name = f"echo {exchange.target}"
        self.seen = exchange



def conn_info(role: Role = Role.CLIENT, family: str = "ipv4", **kw) -> ConnInfo:
    defaults = {
        "pid": 42, "fd": 7, "generation": 1, "role": role, "transport": "stream", "family": family,
        "local_addr": "10.0.0.1", "local_port": 8080 if role == Role.SERVER else 40000,
        "remote_addr": "10.0.0.2", "remote_port": 40000 if role == Role.SERVER else 8080, "comm": "test",
    }
    return ConnInfo(**{**defaults, **kw})


@pytest.fixture(scope="session")
def tracker_cls() -> type[ConnectionDriver]:
    return ConnectionDriver


@pytest.fixture(scope="session")
def make_conn():
    return conn_info


def feed_all(tracker: ConnectionDriver, events: Iterable[tuple[Direction, bytes, int]]) -> None:
    for direction, captured, gap in events:
        tracker.feed(direction, captured, gap)


REQ, RESP, TICK = "req", "resp", "tick"  # event kinds of run_exchange


def run_exchange(parser, conn: ConnInfo, events, mode: str, garbage: bytes, *,
                 close: bool = True, midstream: bool = False, splitter=None
                 ) -> ConnectionDriver:
    """Feed (REQ|RESP, captured[, gap]) and (TICK, now_ns) events through the real tracker
    in `mode`: "whole" (one syscall per event), "bytes" (one per byte), "frames" (one per
    piece `splitter` cuts, where given), "garbage" (whole, then `garbage` both ways)."""
    tracker = ConnectionDriver(parser, conn, midstream=midstream)
    requests = Direction.EGRESS if conn.role == Role.CLIENT else Direction.INGRESS
    sides = {REQ: requests, RESP: requests.opposite}
    for side, data, *gap in events:
        if side == TICK:
            tracker.tick(data)
            continue
        direction, gap = sides[side], (gap[0] if gap else 0)
        if mode == "bytes":
            for i in range(len(data)):
                tracker.feed(direction, data[i : i + 1])
            if gap:
                tracker.feed(direction, b"", gap)
        elif mode == "frames" and splitter is not None and not gap:
            for piece in splitter(data):
                tracker.feed(direction, piece)
        else:
            tracker.feed(direction, data, gap)
    if mode == "garbage" and garbage:
        for direction in Direction:
            tracker.feed(direction, garbage)
    if close:
        tracker.close()
    return tracker
