"""A public test kit for protocol parsers and layers: drive one through the agent's real
connection tracker (otel_ebpf.conntrack) as the agent does, with positioned bytes, cut
captures, lost bytes, timing and close; and declare the parser's fuzz target, which
bench/fuzz and the test suite find beside the parser (`TARGET` in its package's fuzz.py;
see otel_ebpf.protocols.fuzz_targets).

    from otel_ebpf.protocols.testing import REQ, RESP, conn_info, run_exchange
    driver = run_exchange(MyParser(), conn_info(), [(REQ, b"PING\r\n"), (RESP, b"+PONG\r\n")],
                          "bytes", b"")
    assert [s.name for s in driver.spans()] == ["PING"]
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from dataclasses import dataclass

from otel_ebpf.conntrack.connection import FOREVER_NS, Connection, compiled_data, fill_correlation
from otel_ebpf.telemetry import Stats

from .base import ConnInfo, Direction, NeutralSpan, ProtocolParser, Record, Role
from .layers import HTTPExchange, HTTPLayer
from .registry import Registry

__all__ = [
    "CLOSE_NS", "ISN", "REQ", "RESP", "TICK", "ConnectionDriver", "EchoLayer", "FuzzTarget",
    "GAPS", "MAX_STEPS", "conn_info", "feed_all", "fuzz_chunk", "fuzz_stream", "run_exchange",
]

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
        # the compiled step ConnTable.handle tries first (otel_ebpf/_fast/conn.c data: a
        # whole message, a body piece), on_data when it declines; None: on_data alone
        self.fast_data = compiled_data()

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
            seq = (ISN[direction] + pos) % 2**32
            if self.fast_data is None or not self.fast_data(
                    self.connection, direction, pos, size, captured, self.now, self.now, seq, 0,
                    0, tail, False, self.stats):
                self.connection.on_data(direction, pos, size, captured, self.now, self.now,
                                        seq, self.registry, self.stats, tail=tail)
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
        """The records' spans as the agent makes them (Connection.collect: the exchange's
        span gets the correlation fields of the record's request and response frames)."""
        out: list[NeutralSpan] = []
        for record in self.records:
            made = self.parser.to_spans(record, self.conn)
            if made and made[0].request_pos is None and self.connection.tcp:
                fill_correlation(made[0], record)
            out += made
        return out


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


def feed_all(tracker: ConnectionDriver, events: Iterable[tuple[Direction, bytes, int]]) -> None:
    for direction, captured, gap in events:
        tracker.feed(direction, captured, gap)


REQ, RESP, TICK = "req", "resp", "tick"  # event kinds of run_exchange


def run_exchange(parser, conn: ConnInfo, events, mode: str, garbage: bytes, *,
                 close: bool = True, midstream: bool = False, splitter=None,
                 layers: tuple[HTTPLayer, ...] = ()) -> ConnectionDriver:
    """Feed (REQ|RESP, captured[, gap]) and (TICK, now_ns) events through the real tracker
    in `mode`: "whole" (one syscall per event), "bytes" (one per byte), "frames" (one per
    piece `splitter` cuts, where given), "garbage" (whole, then `garbage` both ways)."""
    tracker = ConnectionDriver(parser, conn, midstream=midstream, layers=layers)
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


# --- fuzz targets --------------------------------------------------------------------

GAPS = (0, 1, 7, 4096, 70_000)  # lost bytes after a chunk (a capture cut short, a lost event)
MAX_STEPS = 24  # syscalls per input: long enough for pipelining, short enough to stay fast


@dataclass(frozen=True)
class FuzzTarget:
    """A parser's (or layer's) coverage-guided fuzz target: `TARGET` in the fuzz.py of its
    package (otel_ebpf.protocols.fuzz_targets finds it). Either `make` and `pieces`: fuzzer bytes become a script
    of syscalls on one stream connection (`fuzz_stream`), chunks cut from `pieces` or raw;
    or `run(fdp) -> [ConnectionDriver]` for a target that scripts its own connections (an
    atheris.FuzzedDataProvider in, the drivers it fed out). No exception may escape."""

    make: Callable[[], tuple[ProtocolParser, tuple[HTTPLayer, ...]]] | None = None
    pieces: Callable[[], list[bytes]] = list
    run: Callable[..., list[ConnectionDriver]] | None = None
    # inputs the test suite's short run feeds (tests/protocols/test_fuzz_targets.py)
    ci_runs: int = 4000

    def one(self) -> Callable[..., list[ConnectionDriver]]:
        """What one input does (the pieces are made once)."""
        if self.run is not None:
            return self.run
        if self.make is None:
            raise TypeError("a FuzzTarget needs make and pieces, or run")
        pieces, make = self.pieces(), self.make
        return lambda fdp: fuzz_stream(fdp, make, pieces)


def fuzz_chunk(fdp, pieces: list[bytes]) -> bytes:
    """A known piece (whole or cut), or raw fuzzer bytes."""
    pick = fdp.ConsumeIntInRange(0, 3 if pieces else 0)
    if pick == 0:
        return fdp.ConsumeBytes(fdp.ConsumeIntInRange(0, 256))
    piece = pieces[fdp.ConsumeIntInRange(0, len(pieces) - 1)]
    if pick == 1:
        return piece[: fdp.ConsumeIntInRange(0, len(piece))]
    return piece


def fuzz_script(fdp, pieces: list[bytes], ticks: bool = False) -> tuple:
    """A connection's role, whether it is seen midstream, a script of syscalls (direction,
    captured bytes, bytes lost before them[, a clock tick after them]) and whether it ends
    closed, drawn from the fuzzer's bytes in that order (a corpus keeps its meaning)."""
    role = (Role.CLIENT, Role.SERVER)[fdp.ConsumeIntInRange(0, 1)]
    midstream = fdp.ConsumeBool()
    script = []
    for _ in range(fdp.ConsumeIntInRange(0, MAX_STEPS)):
        if fdp.remaining_bytes() == 0:
            break
        direction = (Direction.EGRESS, Direction.INGRESS)[fdp.ConsumeIntInRange(0, 1)]
        captured = fuzz_chunk(fdp, pieces)
        gap = GAPS[fdp.ConsumeIntInRange(0, len(GAPS) - 1)] if fdp.ConsumeProbability() < 0.1 else 0
        step = (direction, captured, gap)
        script.append((*step, fdp.ConsumeProbability() < 0.05) if ticks else step)
    return role, midstream, script, fdp.ConsumeBool()


def fuzz_stream(fdp, make: Callable[[], tuple[ProtocolParser, tuple[HTTPLayer, ...]]],
                pieces: list[bytes]) -> list[ConnectionDriver]:
    """One input on one stream connection: role, mid-stream start, then chunks both ways
    (with lost bytes now and then, and time passing so timeouts fire), maybe the close."""
    parser, layers = make()
    role, midstream, script, close = fuzz_script(fdp, pieces, ticks=True)
    driver = ConnectionDriver(parser, conn_info(role), midstream=midstream, layers=layers)
    for direction, captured, gap, tick in script:
        driver.feed(direction, captured, gap)
        if tick:  # time passes: response timeouts fire
            driver.tick(driver.now + 60 * 10**9)
    if close:
        driver.close()
    return [driver]
