"""ROS 2 over DDS: the `rtps` protocol parser (RTPS datagrams), one front door over parse,
discovery, stitch and spans. Discovery, send times and service calls are shared by every
connection of the parser instance (the agent makes one per run)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from typing import Any, ClassVar

from ..base import (
    ConnInfo,
    Direction,
    Frame,
    Instrument,
    NeutralSpan,
    ParseResult,
    ProtocolParser,
    Record,
    Role,
)
from . import parse as _parse
from .discovery import Discovery, Endpoint, Participant
from .names import Names, RosKind, names
from .parse import RTPSMessage
from .spans import INSTRUMENTS, to_spans
from .stitch import CallRecord, Limits, MessageRecord, RTPSState, Sample, Shared, stitch

__all__ = [
    "CallRecord", "Discovery", "Endpoint", "Limits", "MessageRecord", "Names", "Participant",
    "RTPSMessage", "RTPSParser", "RTPSState", "RosKind", "Sample", "names",
]

NS = 1_000_000_000
# options the agent hands every parser; RTPS has no use for them (no headers to correlate by)
AGENT_OPTIONS = frozenset({"correlation_headers"})

# option -> (Limits field, type, scale to the field's unit, the smallest value allowed)
_OPTIONS: dict[str, tuple[str, type, int, float]] = {
    "discovery_max_entries": ("discovery_max", int, 1, 1),
    "reassembly_timeout_s": ("reassembly_timeout_ns", float, NS, 0.001),
    "pairing_timeout_s": ("pairing_timeout_ns", float, NS, 0.001),
    "discovery_wait_s": ("discovery_wait_ns", float, NS, 0.0),
    "latency_wait_s": ("latency_wait_ns", float, NS, 0.0),
    "payload_head_bytes": ("payload_head", int, 1, 20),  # a service call header fits
    "max_reassemblies": ("max_reassemblies", int, 1, 1),
    "max_waiting": ("max_waiting", int, 1, 1),
    "max_tracked": ("max_tracked", int, 1, 16),
}


class RTPSParser(ProtocolParser):
    """Options (receivers.ebpf.protocols.rtps): discovery_max_entries (4096 writers/readers,
    and as many participants), reassembly_timeout_s (2: DATA_FRAGs of a sample may come this
    far apart), pairing_timeout_s (10: a service reply may come this late), discovery_wait_s
    (1: a sample of a writer discovery has not named waits this long, then is named by the
    writer's entity id), latency_wait_s (0.2: a received sample waits this long for its send
    on this host), payload_head_bytes (4096 kept of a fragmented sample), max_reassemblies
    (256 per connection), max_waiting (4096 samples per connection, and as many left by
    closed connections), max_tracked (65536 send times, receipts and calls). Durations are in
    seconds; text values (environment variables) are read as numbers. A wrong value or an
    unknown key is a ValueError naming `rtps.<key>`; keys the agent gives every parser
    (AGENT_OPTIONS) are accepted and unused. See README.md for spans, metrics and counters."""

    name = "rtps"
    transport = "datagram"
    instruments: ClassVar[Mapping[str, Instrument]] = INSTRUMENTS

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.limits = limits(self.options)
        self.shared = Shared(self.limits)

    def infer(self, direction: Direction, head: bytes, conn: ConnInfo) -> Role | None:
        # roles do not apply to a datagram socket: any non-None role claims it
        return Role.UNKNOWN if _parse.is_rtps(head) else None

    def new_state(self, conn: ConnInfo) -> RTPSState:
        live = self.shared.live
        live[conn.pid] = live.get(conn.pid, 0) + 1
        self.shared.dead.discard(conn.pid)
        return RTPSState(conn)

    def parse(
        self, direction: Direction, buf: memoryview, state: RTPSState
    ) -> tuple[ParseResult, Frame | None, int]:
        message = _parse.parse(buf)
        if message is None:
            return ParseResult.INVALID, None, 0
        return ParseResult.FRAME, message, len(buf)

    def resync(self, direction: Direction, buf: memoryview, state: RTPSState) -> int | None:
        return None  # datagrams are never resynced: each is parsed whole

    def finish(self, direction: Direction, state: RTPSState) -> Frame | None:
        if not state.closed:  # called once per direction: the connection ends once
            state.closed = True
            live = self.shared.live
            left = live.get(state.conn.pid, 1) - 1
            if left > 0:
                live[state.conn.pid] = left
            else:
                live.pop(state.conn.pid, None)
                self.shared.dead.add(state.conn.pid)
        return None

    def stitch(self, state: RTPSState, now_ns: int) -> list[Record]:
        return stitch(state, now_ns, self.shared)

    def to_spans(self, record: MessageRecord | CallRecord, conn: ConnInfo) -> list[NeutralSpan]:
        return to_spans(record, conn)

    def counters(self, state: RTPSState) -> dict[str, int]:
        """This connection's counts, plus what the shared tables counted since the last
        connection ended (evictions, unpaired calls, discovery), so each is reported once."""
        out = dict(state.counts)
        for event, n in self.shared.drain().items():
            out[event] = out.get(event, 0) + n
        return out


def limits(options: Mapping[str, Any]) -> Limits:
    """Limits from the options mapping; ValueError naming the option when one is wrong."""
    unknown = sorted(set(options) - set(_OPTIONS) - AGENT_OPTIONS)
    if unknown:
        raise ValueError(f"rtps.{unknown[0]}: unknown option (known: {', '.join(_OPTIONS)})")
    values: dict[str, int] = {}
    for key, value in options.items():
        if key in AGENT_OPTIONS:
            continue
        field, kind, scale, least = _OPTIONS[key]
        number = _number(value, kind)
        if number is None:
            raise ValueError(f"rtps.{key}: expected {'an integer' if kind is int else 'a number'}"
                             f", got {value!r}")
        if not number >= least:  # also refuses NaN
            raise ValueError(f"rtps.{key}: must be at least {least}, got {value!r}")
        values[field] = int(number * scale)
    return Limits(**values)


def _number(value: Any, kind: type) -> float | int | None:
    """`value` as an int or float; settings from environment variables come as text."""
    if isinstance(value, bool):
        return None
    try:
        number = float(value.strip() if isinstance(value, str) else value)
    except (TypeError, ValueError):
        return None
    if math.isinf(number):
        return None
    if kind is int:
        return int(number) if number.is_integer() else None
    return number
