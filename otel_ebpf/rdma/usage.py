"""Per-process RDMA use, from the verbs call events and the NCCL totals: live queue pairs
with their peers (local QPN, remote QPN and GID), registered memory, QP lifecycle counts,
and collective calls and bytes by operation and datatype, as OTLP metric data."""

from __future__ import annotations

from collections import Counter
from dataclasses import dataclass, field

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Metric,
    NumberDataPoint,
    Sum,
)

from otel_ebpf.kernel import rdma_abi as abi

# ncclDataType_t (nccl.h) -> (name, bytes per element)
NCCL_DATATYPES: dict[int, tuple[str, int]] = {
    0: ("int8", 1), 1: ("uint8", 1), 2: ("int32", 4), 3: ("uint32", 4), 4: ("int64", 8),
    5: ("uint64", 8), 6: ("float16", 2), 7: ("float32", 4), 8: ("float64", 8),
    9: ("bfloat16", 2), 10: ("float8e4m3", 1), 11: ("float8e5m2", 1),
}
DEFAULT_MAX_QPS = 4096  # QPs of one process exported one by one (rdma.qp); more are counted

METRICS: dict[str, tuple[str, str]] = {  # name -> (unit, description)
    "rdma.qp": ("1", "One point per live queue pair, 1, with its number, type, state and "
                "peer (remote QPN and GID) as attributes"),
    "rdma.qp.active": ("{qp}", "Live queue pairs of the process"),
    "rdma.qp.created": ("{qp}", "Queue pairs the process created (ibv_create_qp)"),
    "rdma.qp.destroyed": ("{qp}", "Queue pairs the process destroyed (ibv_destroy_qp)"),
    "rdma.mr.active": ("{region}", "Memory regions the process has registered"),
    "rdma.mr.registered": ("By", "Bytes of memory the process has registered for RDMA"),
    "nccl.calls": ("{call}", "NCCL collective and point-to-point calls the process issued"),
    "nccl.bytes": ("By", "Bytes of the NCCL calls' buffers: count x datatype size (AllGather: "
                   "the per-rank send size; ReduceScatter: the per-rank receive size)"),
}
_SUMS = frozenset({"rdma.qp.created", "rdma.qp.destroyed", "nccl.calls", "nccl.bytes"})


@dataclass(slots=True)
class QueuePair:
    qp_num: int
    qp_type: int
    device: str
    state: int = 0
    port: int = 0
    remote_qp_num: int | None = None
    remote_gid: bytes | None = None
    remote_lid: int = 0

    def attributes(self) -> dict[str, str | int]:
        attrs: dict[str, str | int] = {
            "rdma.device": self.device, "rdma.qp.num": self.qp_num,
            "rdma.qp.type": abi.QP_TYPES.get(self.qp_type, str(self.qp_type)),
            "rdma.qp.state": abi.QP_STATES.get(self.state, str(self.state)),
        }
        if self.port:
            attrs["rdma.port"] = self.port
        if self.remote_qp_num is not None:
            attrs["rdma.qp.remote.num"] = self.remote_qp_num
        if self.remote_gid is not None:
            attrs["rdma.qp.remote.gid"] = abi.gid_text(self.remote_gid)
            attrs["network.peer.address"] = abi.gid_ip(self.remote_gid)
        elif self.remote_lid:
            attrs["rdma.qp.remote.lid"] = self.remote_lid
        return attrs


@dataclass(slots=True)
class ProcessRdma:
    comm: str = ""
    qps: dict[int, QueuePair] = field(default_factory=dict)  # by the QP's address
    mrs: dict[int, tuple[str, int]] = field(default_factory=dict)  # address -> (device, bytes)
    created: Counter = field(default_factory=Counter)  # (device, qp type) -> n
    destroyed: Counter = field(default_factory=Counter)
    collectives: dict[tuple[str, int], abi.CollectiveTotals] = field(default_factory=dict)


class RdmaUsage:
    """Applies verbs events and NCCL totals; `metrics(pid)` gives a process's metric data.
    Sums count from `start_ns` (when the probes were attached)."""

    def __init__(self, max_qps: int = DEFAULT_MAX_QPS) -> None:
        self.processes: dict[int, ProcessRdma] = {}
        self.max_qps = max_qps
        self.qps_refused = 0  # rdma.qp points left out (max_qps)

    def _process(self, pid: int, comm: str = "") -> ProcessRdma:
        p = self.processes.get(pid)
        if p is None:
            p = self.processes[pid] = ProcessRdma(comm)
        elif comm and not p.comm:
            p.comm = comm
        return p

    def apply(self, events: list[abi.VerbsCall]) -> None:
        for ev in events:
            apply = self._APPLY.get(ev.kind)
            if ev.ok and apply is not None:
                apply(self, self._process(ev.pid, ev.comm), ev)

    def _qp_create(self, p: ProcessRdma, ev: abi.VerbsCall) -> None:
        p.created[(ev.device, ev.qp_type)] += 1
        self._track(p, ev).state = ev.qp_state

    def _track(self, p: ProcessRdma, ev: abi.VerbsCall) -> QueuePair:
        qp = p.qps.get(ev.handle)
        if qp is None or qp.qp_num != ev.qp_num:  # a freed QP's address reused
            qp = p.qps[ev.handle] = QueuePair(ev.qp_num, ev.qp_type, ev.device)
        return qp

    def _qp_modify(self, p: ProcessRdma, ev: abi.VerbsCall) -> None:
        # a QP created before the probes were attached is learned at its next modify
        qp = self._track(p, ev)
        if ev.attr_mask & abi.QP_STATE_BIT:
            qp.state = ev.qp_state
        if ev.attr_mask & abi.QP_PORT_BIT:
            qp.port = ev.port_num
        if ev.attr_mask & abi.QP_DEST_QPN_BIT:
            qp.remote_qp_num = ev.dest_qp_num
        if ev.attr_mask & abi.QP_AV_BIT:
            qp.remote_gid = ev.dgid
            qp.remote_lid = ev.dlid

    def _qp_destroy(self, p: ProcessRdma, ev: abi.VerbsCall) -> None:
        p.destroyed[(ev.device, ev.qp_type)] += 1
        p.qps.pop(ev.handle, None)

    def _mr_reg(self, p: ProcessRdma, ev: abi.VerbsCall) -> None:
        p.mrs[ev.handle] = (ev.device, ev.length)

    def _mr_dereg(self, p: ProcessRdma, ev: abi.VerbsCall) -> None:
        p.mrs.pop(ev.handle, None)

    _APPLY = {abi.QP_CREATE: _qp_create, abi.QP_MODIFY: _qp_modify,
              abi.QP_DESTROY: _qp_destroy, abi.MR_REG: _mr_reg, abi.MR_DEREG: _mr_dereg}

    def set_collectives(self, totals: list[abi.CollectiveTotals]) -> None:
        """The kernel's running totals (they replace what was read before)."""
        for t in totals:
            self._process(t.pid).collectives[(t.op, t.datatype)] = t

    def forget(self, pid: int) -> None:
        self.processes.pop(pid, None)

    def metrics(self, pid: int, start_ns: int, now_ns: int) -> list[Metric]:
        p = self.processes.get(pid)
        if p is None:
            return []
        points: dict[str, list[NumberDataPoint]] = {name: [] for name in METRICS}

        def add(name: str, attrs: dict, value: int) -> None:
            start = start_ns if name in _SUMS else 0
            points[name].append(NumberDataPoint(attrs, start, now_ns, value))

        active: Counter = Counter()
        for qp in p.qps.values():
            active[(qp.device, qp.qp_type)] += 1
        for device, qp_type in sorted(set(active) | set(p.created) | set(p.destroyed)):
            attrs = {"rdma.device": device, "rdma.qp.type": abi.QP_TYPES.get(qp_type, str(qp_type))}
            add("rdma.qp.active", attrs, active[(device, qp_type)])
            add("rdma.qp.created", attrs, p.created[(device, qp_type)])
            add("rdma.qp.destroyed", attrs, p.destroyed[(device, qp_type)])
        for qp in p.qps.values():
            if len(points["rdma.qp"]) >= self.max_qps:
                self.qps_refused += len(p.qps) - self.max_qps
                break
            add("rdma.qp", qp.attributes(), 1)
        regions: Counter = Counter()
        registered: Counter = Counter()
        for device, length in p.mrs.values():
            regions[device] += 1
            registered[device] += length
        for device in sorted(regions):
            add("rdma.mr.active", {"rdma.device": device}, regions[device])
            add("rdma.mr.registered", {"rdma.device": device}, registered[device])
        for (op, datatype), t in sorted(p.collectives.items()):
            name, size = NCCL_DATATYPES.get(datatype, (str(datatype), 0))
            attrs = {"nccl.operation": op, "nccl.datatype": name}
            add("nccl.calls", attrs, t.calls)
            if size:  # a datatype newer than this table: its calls count, its bytes can't
                add("nccl.bytes", attrs, t.elements * size)
        out = []
        for name, pts in points.items():
            if pts:
                unit, description = METRICS[name]
                data = (Sum(pts, AggregationTemporality.CUMULATIVE, is_monotonic=True)
                        if name in _SUMS else Gauge(pts))
                out.append(Metric(name=name, description=description, unit=unit, data=data))
        return out
