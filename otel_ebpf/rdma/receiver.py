"""The RDMA receiver: every interval, reads the ports' counters from sysfs, applies the
verbs events and NCCL totals the uprobes gathered, and exports it all as OTLP metrics
(ports under the host's resource, process use under each process's resource)."""

from __future__ import annotations

import logging
import os
import socket
import threading
import time
from collections.abc import Mapping
from dataclasses import dataclass

from opentelemetry.sdk.metrics.export import (
    MetricExporter,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource

from otel_ebpf import __version__
from otel_ebpf.export.metrics_send import MetricsSender
from otel_ebpf.kernel.libbpf import LibbpfLog
from otel_ebpf.spans.convert import SCOPE, resource_for
from otel_ebpf.spans.resources import ProcessResources
from otel_ebpf.telemetry import Stats

from .ports import COUNTERS, PortCounters
from .sysfs import read_ports
from .usage import RdmaUsage

log = logging.getLogger(__name__)

POLL_MS = 500  # how often verbs events are drained between exports


@dataclass(frozen=True, slots=True)
class RdmaSettings:
    sysfs_root: str = "/sys"
    interval_s: float = 10.0
    uprobes: bool = True  # verbs and NCCL probes (ports need none)
    proc_root: str = "/proc"


def host_resource() -> Resource:
    """A port belongs to the host, reported by the agent (like its own otel_ebpf.* metrics)."""
    return Resource({"service.name": "otel-ebpf", "host.name": socket.gethostname(),
                     "telemetry.distro.name": "otel-ebpf",
                     "telemetry.distro.version": __version__})


class RdmaReceiver:
    """start() loads the probes (when it can) and, with a thread, exports every interval;
    collect()/export() do one interval's work by hand; shutdown() exports a last time."""

    def __init__(self, settings: RdmaSettings, exporters: Mapping[str, MetricExporter],
                 resources: ProcessResources, stats: Stats, libbpf_log: LibbpfLog) -> None:
        self.settings = settings
        self.sender = MetricsSender(exporters, stats, what="rdma metrics")
        self._resources = resources
        self._stats = stats
        self._libbpf_log = libbpf_log
        self._host = host_resource()
        self.ports = PortCounters()
        self.usage = RdmaUsage()
        self.probes = None
        self._start_ns = time.time_ns()
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()  # the thread's interval and shutdown's, in turn

    def start(self, thread: bool = True) -> None:
        if self.settings.uprobes:
            self._load_probes()
        if thread:
            self._thread = threading.Thread(target=self._run, name="otel-ebpf-rdma", daemon=True)
            self._thread.start()

    def _load_probes(self) -> None:
        # imported here: port counters need no libbpf at all
        from otel_ebpf.kernel.loader import BPFError
        from otel_ebpf.kernel.rdma_probes import RdmaProbes

        try:
            self.probes = RdmaProbes(self._libbpf_log)
        except (BPFError, OSError) as exc:
            log.warning("RDMA verbs/NCCL uprobes not loaded (%s): port counters only", exc)
            return
        n = self.probes.scan_system() + self.probes.scan_all(self.settings.proc_root)
        log.info("RDMA: probes on %d libraries (verbs: %s; NCCL: %s)", n,
                 ", ".join(sorted(self.probes.verbs)) or "none",
                 ", ".join(sorted(self.probes.nccl)) or "none")

    # -- one interval

    def drain(self, timeout_ms: int = 0) -> int:
        """Apply the verbs events waiting (waiting up to timeout_ms for them)."""
        if self.probes is None:
            if timeout_ms:
                self._stopped.wait(timeout_ms / 1000)
            return 0
        events = self.probes.poll(timeout_ms)
        for ev in events:
            if ev.pid not in self.usage.processes:
                self._resources.prime(ev.pid, ev.comm)  # read /proc while it is alive
        self.usage.apply(events)
        return len(events)

    def collect(self) -> MetricsData | None:
        """One interval: read ports and probes, build the data; None when there is none."""
        now_ns = time.time_ns()
        resource_metrics: list[ResourceMetrics] = []
        readings = read_ports(self.settings.sysfs_root, COUNTERS)
        resets = self.ports.resets
        self.ports.update(readings, now_ns)
        if self.ports.resets > resets:
            self._stats.add("rdma.counter_resets", self.ports.resets - resets)
        port_metrics = self.ports.metrics(readings, now_ns)
        if port_metrics:
            resource_metrics.append(
                ResourceMetrics(self._host, [ScopeMetrics(SCOPE, port_metrics, "")], ""))
        ended: set[int] = set()
        if self.probes is not None:
            self.drain(0)
            self.probes.scan_all(self.settings.proc_root)  # libraries loaded since
            totals = self.probes.collectives()
            for t in totals:
                if t.pid not in self.usage.processes:
                    self._resources.prime(t.pid)
            self.usage.set_collectives(totals)
            for name, n in self.probes.counters().items():
                self._stats.set_total("rdma.lost", n, reason=name)
            ended = {pid for pid in self.usage.processes
                     if not os.path.exists(os.path.join(self.settings.proc_root, str(pid)))}
        start_ns = (self.probes.attached_ns if self.probes and self.probes.attached_ns
                    else self._start_ns)
        for pid, process in self.usage.processes.items():
            metrics = self.usage.metrics(pid, start_ns, now_ns)
            if metrics:
                resource = resource_for(self._resources.get(pid, process.comm))
                resource_metrics.append(
                    ResourceMetrics(resource, [ScopeMetrics(SCOPE, metrics, "")], ""))
        # an ended process is exported this once more, then forgotten (here and in the kernel)
        for pid in ended:
            self.usage.forget(pid)
        if ended and self.probes is not None:
            self.probes.forget(ended)
        return MetricsData(resource_metrics) if resource_metrics else None

    def export(self) -> dict[str, str]:
        with self._lock:
            data = self.collect()
            return self.sender.send(data) if data is not None else {}

    def _run(self) -> None:
        interval = self.settings.interval_s
        next_export = time.monotonic() + interval
        while not self._stopped.is_set():
            left = next_export - time.monotonic()
            if left > 0:
                try:
                    self.drain(int(min(left * 1000, POLL_MS)) or 1)
                except Exception:  # a bad record must not end the receiver
                    log.exception("RDMA: draining verbs events failed")
                continue
            next_export = time.monotonic() + interval
            try:
                self.export()
            except Exception:  # keep exporting next interval
                log.exception("RDMA: export failed")

    def shutdown(self) -> None:
        """Stop the thread, export a last time, unload the probes."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(self.settings.interval_s + 15.0)
        try:
            self.export()
        finally:
            if self.probes is not None:
                self.probes.close()
                self.probes = None
