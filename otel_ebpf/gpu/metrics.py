"""GPU metrics as OTLP data, one resource per process: memory in use (per device and memory
type), its peak, live allocations, bytes and count allocated, host<->device copies (count,
bytes, time) and kernel launches."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterable

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Gauge,
    Metric,
    MetricsData,
    NumberDataPoint,
    ResourceMetrics,
    ScopeMetrics,
    Sum,
)
from opentelemetry.sdk.resources import Resource

from otel_ebpf.gpu.ledger import ESTIMATED, Usage
from otel_ebpf.kernel.cuda_abi import SYNC_APIS, Api
from otel_ebpf.kernel.cuda_tracer import CopyTotals, LaunchTotals, SiteTotals
from otel_ebpf.spans.convert import SCOPE

# copy entry point -> (direction, asynchronous); the unified forms (cuMemcpy, cuMemcpyAsync)
# take any two pointers, so their direction is not known at the call
COPY_KINDS: dict[Api, tuple[str, bool]] = {
    Api.MEMCPY_HTOD: ("host_to_device", False),
    Api.MEMCPY_DTOH: ("device_to_host", False),
    Api.MEMCPY_HTOD_ASYNC: ("host_to_device", True),
    Api.MEMCPY_DTOH_ASYNC: ("device_to_host", True),
    Api.MEMCPY: ("unknown", False),
    Api.MEMCPY_ASYNC: ("unknown", True),
}

# name -> (unit, description, kind): "sum" monotonic, "updown" non-monotonic sum, "gauge"
METRICS: dict[str, tuple[str, str, str]] = {
    "gpu.memory.in_use": ("By", "GPU memory the process holds through the CUDA driver "
                          "(allocations not yet freed)", "updown"),
    "gpu.memory.peak": ("By", "Most GPU memory the process held at once since it was first "
                        "seen", "gauge"),
    "gpu.memory.allocations.live": ("{allocation}", "Driver allocations the process holds",
                                    "updown"),
    "gpu.memory.allocated": ("By", "Bytes allocated through the CUDA driver", "sum"),
    "gpu.memory.allocations": ("{allocation}", "Driver allocations made", "sum"),
    "gpu.memory.copy.bytes": ("By", "Bytes copied by cuMemcpy* calls", "sum"),
    "gpu.memory.copy.count": ("{copy}", "cuMemcpy* calls that succeeded", "sum"),
    "gpu.memory.copy.time": ("s", "Time inside cuMemcpy* calls (for the asynchronous forms, "
                             "the time to enqueue the copy)", "sum"),
    "gpu.kernel.launches": ("{launch}", "cuLaunchKernel calls (estimated from the launch "
                            "probes' duty cycle where gpu.launch.count.estimated is true)",
                            "sum"),
    "gpu.sync.count": ("{call}", "cuStreamSynchronize, cuCtxSynchronize and "
                       "cuEventSynchronize calls", "sum"),
    "gpu.sync.time": ("s", "Time threads spent inside the synchronize calls: the CPU "
                      "waiting for the GPU", "sum"),
    "gpu.memory.mapped": ("By", "Device memory mapped by cuMemMap and not yet unmapped",
                          "updown"),
}


def _point(value: float, attributes: dict, start_ns: int, now_ns: int) -> NumberDataPoint:
    return NumberDataPoint(attributes=attributes, start_time_unix_nano=start_ns,
                           time_unix_nano=now_ns, value=value)


def _metric(name: str, points: list[NumberDataPoint]) -> Metric:
    unit, description, kind = METRICS[name]
    if kind == "gauge":
        data = Gauge(points)
    else:
        data = Sum(points, AggregationTemporality.CUMULATIVE, kind == "sum")
    return Metric(name=name, description=description, unit=unit, data=data)


def _device(device: int) -> dict:
    return {"gpu.device.index": device} if device >= 0 else {}


def build_metrics(usage: Iterable[Usage], copies: Iterable[CopyTotals],
                  launches: Iterable[LaunchTotals], resource_of: Callable[[int], Resource],
                  start_ns: Callable[[int], int], now_ns: int | None = None,
                  sites: Iterable[SiteTotals] = (), mapped: dict[int, int] | None = None,
                  launches_estimated: bool = False) -> MetricsData | None:
    """One ResourceMetrics per process from the ledger's usage and the kernel's totals
    (`sites` for the synchronize calls, `mapped`: {pid: bytes} from cuMemMap;
    `launches_estimated`: the launch counts are the duty cycle's estimates, and their
    points say so with gpu.launch.count.estimated=true);
    `start_ns(pid)` is when the process's cumulative series began (wall clock)."""
    now_ns = now_ns or time.time_ns()
    points: dict[int, dict[str, list[NumberDataPoint]]] = {}

    def add(pid: int, name: str, value: float, attrs: dict) -> None:
        points.setdefault(pid, {}).setdefault(name, []).append(
            _point(value, attrs, start_ns(pid), now_ns))

    for u in usage:
        attrs = {**_device(u.device), "gpu.memory.type": u.type}
        add(u.pid, "gpu.memory.in_use", u.in_use, attrs)
        add(u.pid, "gpu.memory.peak", u.peak, attrs)
        add(u.pid, "gpu.memory.allocations.live", u.live, attrs)
        add(u.pid, "gpu.memory.allocated", u.allocated, attrs)
        add(u.pid, "gpu.memory.allocations", u.allocations, attrs)
    # the kernel keys copies by entry point: sum the plain and per-thread-stream forms
    merged: dict[tuple[int, str, bool, int], list[int]] = {}
    for c in copies:
        direction, is_async = COPY_KINDS[c.api]
        row = merged.setdefault((c.pid, direction, is_async, c.device), [0, 0, 0])
        row[0] += c.count
        row[1] += c.bytes
        row[2] += c.ns
    for (pid, direction, is_async, device), (count, nbytes, ns) in merged.items():
        attrs = {**_device(device), "gpu.copy.direction": direction, "gpu.copy.async": is_async}
        add(pid, "gpu.memory.copy.count", count, attrs)
        add(pid, "gpu.memory.copy.bytes", nbytes, attrs)
        add(pid, "gpu.memory.copy.time", ns / 1e9, attrs)
    launched: dict[tuple[int, int], int] = {}
    for t in launches:
        launched[(t.pid, t.device)] = launched.get((t.pid, t.device), 0) + t.count
    for (pid, device), n in launched.items():
        attrs = _device(device)
        if launches_estimated:
            attrs[ESTIMATED] = True
        add(pid, "gpu.kernel.launches", n, attrs)
    waits: dict[tuple[int, str, int], list[int]] = {}
    for t in sites:
        if t.api in SYNC_APIS:
            row = waits.setdefault((t.pid, t.api.name.lower(), t.device), [0, 0])
            row[0] += t.count
            row[1] += t.ns
    for (pid, api, device), (count, ns) in waits.items():
        attrs = {**_device(device), "gpu.sync.api": api}
        add(pid, "gpu.sync.count", count, attrs)
        add(pid, "gpu.sync.time", ns / 1e9, attrs)
    for pid, nbytes in (mapped or {}).items():
        add(pid, "gpu.memory.mapped", nbytes, {})
    if not points:
        return None
    return MetricsData([
        ResourceMetrics(resource_of(pid), [ScopeMetrics(
            SCOPE, [_metric(name, pts) for name, pts in by_name.items()], "")], "")
        for pid, by_name in points.items()])
