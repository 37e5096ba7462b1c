"""ROS 2 over DDS: the `rtps` protocol parser (RTPS datagrams), one front door over parse,
discovery, stitch and spans. Discovery, send times and service calls are shared by every
connection of the parser instance (the agent makes one per run)."""

from __future__ import annotations

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
from ..options import Duration, Integer, Schema, Size, resolve
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
_FRAME, _INVALID = ParseResult.FRAME, ParseResult.INVALID  # bound once: looked up per datagram
# option -> the Limits field it sets, and the scale from the option's unit to the field's
_FIELDS: dict[str, tuple[str, int]] = {
    "discovery_max_entries": ("discovery_max", 1),
    "reassembly_timeout_s": ("reassembly_timeout_ns", NS),
    "pairing_timeout_s": ("pairing_timeout_ns", NS),
    "discovery_wait_s": ("discovery_wait_ns", NS),
    "latency_wait_s": ("latency_wait_ns", NS),
    "payload_head_bytes": ("payload_head", 1),
    "max_reassemblies": ("max_reassemblies", 1),
    "max_waiting": ("max_waiting", 1),
    "max_tracked": ("max_tracked", 1),
}
OPTIONS: Schema = {
    "discovery_max_entries": Integer(4096, "writers/readers remembered, and as many "
                                     "participants", least=1),
    "reassembly_timeout_s": Duration(2.0, "DATA_FRAGs of a sample may come this far apart",
                                     least="1ms"),
    "pairing_timeout_s": Duration(10.0, "a service reply may come this late", least="1ms"),
    "discovery_wait_s": Duration(1.0, "a sample of a writer discovery has not named waits "
                                 "this long, then is named by the writer's entity id",
                                 least="0s"),
    "latency_wait_s": Duration(0.2, "a received sample waits this long for its send on "
                               "this host", least="0s"),
    "payload_head_bytes": Size(4096, "kept of a fragmented sample (a service call header "
                               "fits)", least=20),
    "max_reassemblies": Integer(256, "samples being reassembled per connection", least=1),
    "max_waiting": Integer(4096, "samples per connection, and as many left by closed "
                           "connections", least=1),
    "max_tracked": Integer(65536, "send times, receipts and calls", least=16),
}


class RTPSParser(ProtocolParser):
    """RTPS datagrams. Options: OPTIONS (receivers.ebpf.protocols.rtps). See README.md for
    spans, metrics and counters."""

    name = "rtps"
    transport = "datagram"
    instruments: ClassVar[Mapping[str, Instrument]] = INSTRUMENTS

    default_enabled = True
    default_rank = 30
    option_schema: ClassVar[Schema] = OPTIONS

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
            return _INVALID, None, 0
        return _FRAME, message, len(buf)

    def resync(self, direction: Direction, buf: memoryview, state: RTPSState) -> int | None:
        return None  # datagrams are never resynced: each is parsed whole

    def finish(self, direction: Direction, state: RTPSState) -> Frame | None:
        if not state.ended:  # called once per direction: the connection ends once
            state.ended = True
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
    """Limits from the options, checked against OPTIONS (an OptionError naming the
    option when one is wrong), in the units Limits keeps."""
    typed = resolve("rtps", OPTIONS, {k: v for k, v in options.items() if k in _FIELDS})
    return Limits(**{_FIELDS[k][0]: int(v * _FIELDS[k][1]) for k, v in typed.items()})
