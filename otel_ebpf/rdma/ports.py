"""RDMA port counters as OTLP metrics: which sysfs file becomes which metric and attribute,
and the running totals that keep an exported sum monotonic across counter resets."""

from __future__ import annotations

import logging
from dataclasses import dataclass

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Metric,
    NumberDataPoint,
    Sum,
)

from .sysfs import PortReading

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class CounterSpec:
    metric: str
    attributes: tuple[tuple[str, str], ...]
    scale: int = 1  # PortXmitData/PortRcvData count 4-octet words (IBA 16.1.3.5)


def _c(metric: str, scale: int = 1, **attributes: str) -> CounterSpec:
    return CounterSpec(metric, tuple(sorted(attributes.items())), scale)


# file under ports/<n>/ -> what it becomes. counters/ is the IB PMA (every driver);
# hw_counters/ names are mlx5's (drivers/infiniband/hw/mlx5/counters.c); other drivers'
# files of the same meaning can be added here. hw_counters/lifespan is a setting, not
# a counter, and is never read.
COUNTERS: dict[str, CounterSpec] = {
    "counters/port_xmit_data": _c("rdma.port.io", 4, **{"network.io.direction": "transmit"}),
    "counters/port_rcv_data": _c("rdma.port.io", 4, **{"network.io.direction": "receive"}),
    "counters/port_xmit_packets": _c("rdma.port.packets", **{"network.io.direction": "transmit"}),
    "counters/port_rcv_packets": _c("rdma.port.packets", **{"network.io.direction": "receive"}),
    "counters/port_rcv_errors": _c("rdma.port.errors", **{"error.type": "port_rcv_errors"}),
    "counters/port_xmit_discards": _c("rdma.port.errors", **{"error.type": "port_xmit_discards"}),
    "counters/symbol_error": _c("rdma.port.errors", **{"error.type": "symbol_error"}),
    "counters/link_downed": _c("rdma.port.errors", **{"error.type": "link_downed"}),
    "hw_counters/out_of_sequence": _c("rdma.port.errors", **{"error.type": "out_of_sequence"}),
    "hw_counters/packet_seq_err": _c("rdma.port.errors", **{"error.type": "packet_seq_err"}),
    "hw_counters/implied_nak_seq_err": _c("rdma.port.errors",
                                          **{"error.type": "implied_nak_seq_err"}),
    "hw_counters/local_ack_timeout_err": _c("rdma.port.errors",
                                            **{"error.type": "local_ack_timeout_err"}),
    "hw_counters/rnr_nak_retry_err": _c("rdma.port.errors", **{"error.type": "rnr_nak_retry_err"}),
    "hw_counters/out_of_buffer": _c("rdma.port.errors", **{"error.type": "out_of_buffer"}),
    "hw_counters/duplicate_request": _c("rdma.port.errors", **{"error.type": "duplicate_request"}),
    "hw_counters/np_cnp_sent": _c("rdma.port.congestion", **{"rdma.congestion.event": "cnp_sent"}),
    "hw_counters/rp_cnp_handled": _c("rdma.port.congestion",
                                     **{"rdma.congestion.event": "cnp_handled"}),
    "hw_counters/rp_cnp_ignored": _c("rdma.port.congestion",
                                     **{"rdma.congestion.event": "cnp_ignored"}),
    "hw_counters/np_ecn_marked_roce_packets": _c("rdma.port.congestion",
                                                 **{"rdma.congestion.event": "ecn_marked"}),
    # InfiniBand's congestion sign: ticks a port had data to send and no credit
    "counters/port_xmit_wait": _c("rdma.port.xmit_wait"),
}

METRICS: dict[str, tuple[str, str]] = {  # name -> (unit, description)
    "rdma.port.io": ("By", "Bytes through an RDMA port (all traffic of the port, RDMA and not)"),
    "rdma.port.packets": ("{packet}", "Packets through an RDMA port"),
    "rdma.port.errors": ("{error}", "Errors and retransmission causes of an RDMA port, by "
                         "error.type (the driver's counter name)"),
    "rdma.port.congestion": ("{packet}", "RoCE congestion control: CNPs sent and handled, "
                             "ECN-marked packets received"),
    "rdma.port.xmit_wait": ("{tick}", "Ticks an InfiniBand port waited for credit to send"),
    "rdma.port.up": ("1", "1 when the port's logical state is ACTIVE, else 0"),
    "rdma.port.bandwidth.limit": ("By/s", "The port's link rate"),
}


def port_attributes(reading: PortReading) -> dict[str, str | int]:
    attrs: dict[str, str | int] = {"rdma.device": reading.device, "rdma.port": reading.port,
                                   "rdma.link_layer": reading.link_layer}
    if reading.netdev:
        attrs["network.interface.name"] = reading.netdev
    return attrs


@dataclass(slots=True)
class _Total:
    start_ns: int
    last_raw: int
    total: int = 0


class PortCounters:
    """Cumulative sums of port counters since the agent first read each one.

    A hardware counter starts from zero when the driver loads or someone resets it
    (`rdma statistic ... reset`, a firmware reset). The exported value is what was counted
    since the series' start time: its first reading is the baseline (0 is exported), each
    later reading adds its increase, and a reading below the last one adds the reading
    itself (the counter restarted from zero in between). So the sum never goes down and
    its start time never lies; an agent restart starts new series with a new start time,
    which is how backends tell a restart from a drop."""

    def __init__(self) -> None:
        self._totals: dict[tuple[str, int, str], _Total] = {}
        self.resets = 0

    def update(self, readings: list[PortReading], now_ns: int) -> None:
        seen = set()
        for r in readings:
            for rel, raw in r.counters.items():
                key = (r.device, r.port, rel)
                seen.add(key)
                t = self._totals.get(key)
                if t is None:
                    self._totals[key] = _Total(now_ns, raw)
                    continue
                if raw >= t.last_raw:
                    t.total += raw - t.last_raw
                else:
                    self.resets += 1
                    log.info("RDMA counter %s/%d/%s went from %d to %d: reset, counting on",
                             r.device, r.port, rel, t.last_raw, raw)
                    t.total += raw
                t.last_raw = raw
        # a port that went away (device removed) starts anew when it comes back
        for key in self._totals.keys() - seen:
            del self._totals[key]

    def metrics(self, readings: list[PortReading], now_ns: int) -> list[Metric]:
        """The sums, the link state and the link rate of `readings`' ports."""
        points: dict[str, list[NumberDataPoint]] = {name: [] for name in METRICS}
        for r in readings:
            base = port_attributes(r)
            for rel in r.counters:
                spec = COUNTERS[rel]
                t = self._totals.get((r.device, r.port, rel))
                if t is None:
                    continue
                points[spec.metric].append(NumberDataPoint(
                    attributes={**base, **dict(spec.attributes)}, start_time_unix_nano=t.start_ns,
                    time_unix_nano=now_ns, value=t.total * spec.scale))
            points["rdma.port.up"].append(NumberDataPoint(
                attributes=base, start_time_unix_nano=0, time_unix_nano=now_ns,
                value=int(r.state == "ACTIVE")))
            if r.rate_bps is not None:
                points["rdma.port.bandwidth.limit"].append(NumberDataPoint(
                    attributes=base, start_time_unix_nano=0, time_unix_nano=now_ns,
                    value=int(r.rate_bps // 8)))
        out = []
        for name, pts in points.items():
            if not pts:
                continue
            unit, description = METRICS[name]
            data = (Gauge(pts) if name in ("rdma.port.up", "rdma.port.bandwidth.limit")
                    else Sum(pts, AggregationTemporality.CUMULATIVE, is_monotonic=True))
            out.append(Metric(name=name, description=description, unit=unit, data=data))
        return out
