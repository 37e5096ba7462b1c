"""Runs GPU profiling beside the agent's capture loop, on a thread of its own: drains the
CUDA probes' events into the ledger, names allocation sites as they arrive (native frames
and Python frames, by the CPU profiler's symbolizer) and kernels as the runtime looks them
up, looks for libcuda in new processes, and every interval exports gpu.* metrics and hands
GPU profiles (memory: alloc_*/inuse_*; kernel launches by stack and kernel; copies; time
waiting in synchronize calls) to the profile exporters."""

from __future__ import annotations

import logging
import os
import threading
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter

from otel_ebpf.config import Config
from otel_ebpf.export.metrics_send import MetricsSender
from otel_ebpf.export.profile_exporters import build_profile_exporters
from otel_ebpf.export.profiles import ProfileBatch, ProfileSample
from otel_ebpf.gpu.duty import LaunchDuty, launch_scale
from otel_ebpf.gpu.ledger import (
    SAMPLE_TYPES,
    MemoryLedger,
    ProcessProfile,
    Site,
    site_profiles,
)
from otel_ebpf.gpu.metrics import build_metrics
from otel_ebpf.kernel.cuda_abi import Api, GpuAlloc, GpuInit, GpuName
from otel_ebpf.kernel.cuda_tracer import (
    CudaTracer,
    LaunchTotals,
    copy_totals,
    launch_totals,
)
from otel_ebpf.kernel.libbpf import LibbpfLog
from otel_ebpf.profiling.demangle import demangle
from otel_ebpf.profiling.frames import CUDA, CUDA_MODULE, PYTHON, Frame, merge
from otel_ebpf.profiling.python_procs import Interpreter
from otel_ebpf.profiling.symbolizer import Symbolizer
from otel_ebpf.profiling.unwinder import Unwinder, UnwindTables
from otel_ebpf.spans.convert import resource_for
from otel_ebpf.spans.resources import ProcessResources
from otel_ebpf.telemetry import Stats

log = logging.getLogger(__name__)

MAX_SITES = 200_000  # named allocation sites kept (by process and raw stack)
MAX_NAMES = 200_000  # kernel handles named (by process)
TOP_SITES = 3  # allocation sites logged per process when its memory changes


def describe(frames: tuple[Frame, ...], depth: int = 4) -> str:
    """A site in one line, innermost first: its Python frames (`file:line function`, the
    line being the function's first) when it has them, else its native frames."""
    python = [f for f in frames if f.kind == PYTHON]
    shown = python or list(frames)
    parts = [f"{os.path.basename(f.module)}:{f.line} {f.name}" if f.kind == PYTHON else f.name
             for f in shown[:depth]]
    return " <- ".join(parts) or "(no stack)"


class GpuMonitor:
    def __init__(
        self,
        tracer: CudaTracer,
        metric_exporters: Mapping[str, MetricExporter],
        resources: ProcessResources,
        stats: Stats,
        *,
        profile_exporters: Mapping[str, Any] | None = None,
        interval_s: float = 10.0,
        poll_interval_s: float = 0.1,
        scan_interval_s: float = 2.0,
        proc_root: str = "/proc",
        unwinder: Unwinder | None = None,
        duty: LaunchDuty | None = None,
    ) -> None:
        """`unwinder`: the agent's unwind tables (the tracer loaded with their maps): the
        processes that use CUDA get tables, and their allocation stacks cross code
        without frame pointers. `duty`: the launch probes' duty cycle (started and stopped
        with the monitor); when it is below 1, launch counts are scaled estimates."""
        self.tracer = tracer
        self.duty = duty
        # estimated launches: the raw totals last seen and the estimate so far, by
        # (pid, device), and where the interval being estimated began
        self._launch_raw: dict[tuple[int, int], int] = {}
        self._launch_est: dict[tuple[int, int], float] = {}
        self.unwinder = unwinder
        self._unwinding: set[int] = set()  # processes given to the unwinder
        self.ledger = MemoryLedger()
        # two symbolizers, one per thread: the drain thread's names Python frames on
        # arrival (fast); the export thread's names native frames, which first reads the
        # symbol tables of large libraries (libtorch_cuda: tens of seconds) and must not
        # hold up the draining while the processes, and their code objects, still live
        self.symbolizer = Symbolizer(on_python=self._python_found)
        self._natives = Symbolizer()
        self._metrics = MetricsSender(metric_exporters, stats, what="GPU metrics")
        self._profile_exporters = dict(profile_exporters or {})
        self._resources = resources
        self._stats = stats
        self._interval_s = interval_s
        self._poll_ms = max(1, int(poll_interval_s * 1000))
        self._scan_interval_s = scan_interval_s
        self._proc_root = proc_root
        self._first_seen: dict[int, int] = {}  # pid -> wall time its series start
        self._pythons: set[int] = set()
        self._sites: dict[tuple[int, Site], tuple[Frame, ...]] = {}
        # Python frames of sites, named on arrival, in the evaluator calls that ran them
        self._python: dict[tuple[int, Site], list[list[Frame]]] = {}
        self._sites_seen: dict = {}  # launch/copy/sync totals last exported, by site
        # kernels' names by (pid, CUfunction or CUkernel), and the kernel each function
        # made by cuKernelGetFunction comes from
        self._kernel_names: dict[tuple[int, int], str] = {}
        self._kernel_of: dict[tuple[int, int], int] = {}
        self._last_usage: dict[tuple[int, int, str], tuple[int, int]] = {}
        self._interval_start = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        self._launch_since = self._interval_start
        self._ledger_lock = threading.Lock()  # the ledger and per-process tables
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []

    # -- processes

    def _python_found(self, interp: Interpreter) -> None:
        self._pythons.add(interp.pid)
        self.tracer.set_python(interp.pid, interp.runtime, interp.offsets.kernel_fields())
        log.info("pid %d runs CPython %d.%d: its GPU allocation sites get Python frames",
                 interp.pid, *interp.version)

    def scan(self) -> None:
        """Probe libcuda files new processes map; know the interpreter of every process
        that uses CUDA (or may: a Python process loads libcuda late, at torch.cuda init),
        so its first allocation is walked."""
        self.tracer.probes.scan_all(self._proc_root)
        using = self.tracer.probes.covered_pids | set(self._first_seen)
        self._unwinding &= using  # the others ended (the unwinder dropped them itself)
        for pid in using:
            self.symbolizer.process(pid)
            self._unwind(pid)
        self._name_live_sites()

    def _name_live_sites(self) -> None:
        """The Python frames of launch, copy and sync sites new since the last scan, named
        while their process lives: one that exits before the interval's export (a short
        launch-bound job) would keep its counts and lose its Python names."""
        for t in self.tracer.sites():
            self._name_python(t.pid, t.stack, t.py)

    def _unwind(self, pid: int) -> None:
        """Unwind tables for a process that uses CUDA (built in the background; until
        they are in, its stacks are frame-pointer walks)."""
        if self.unwinder is not None and pid not in self._unwinding:
            self._unwinding.add(pid)
            try:
                self.unwinder.add(pid, announce=True)
            except Exception as exc:
                self.unwinder.fail("unwind", type(exc).__name__)

    def unwind_tick(self) -> None:
        """Tables that came in go to their processes; mappings are looked at again."""
        if self.unwinder is not None:
            try:
                self.unwinder.apply_ready()
                self.unwinder.tick()
            except Exception as exc:
                self.unwinder.fail("unwind", type(exc).__name__)

    # -- the loop

    def start(self) -> None:
        self.scan()
        if self.duty is not None:
            self.duty.start()
        self._threads = [
            threading.Thread(target=self._run_drain, name="otel-ebpf-gpu", daemon=True),
            threading.Thread(target=self._run_export, name="otel-ebpf-gpu-export",
                             daemon=True)]
        for t in self._threads:
            t.start()

    def _run_drain(self) -> None:
        next_scan = time.monotonic() + self._scan_interval_s
        while not self._stop.is_set():
            try:
                self.drain(self._poll_ms)
                self.unwind_tick()
                if time.monotonic() >= next_scan:
                    next_scan = time.monotonic() + self._scan_interval_s
                    self.scan()
            except Exception:  # keep profiling: one bad batch must not end it
                log.exception("GPU monitor: draining failed")
                self._stop.wait(self._poll_ms / 1000)

    def _run_export(self) -> None:
        while not self._stop.wait(self._interval_s):
            try:
                self.flush()
            except Exception:  # keep exporting next interval
                log.exception("GPU monitor: interval failed")

    def drain(self, timeout_ms: int = 0) -> int:
        events = self.tracer.poll(timeout_ms)
        if not events:
            return 0
        not_counted = 0  # cuInit and name lookups are not memory events
        for ev in events:
            if ev.pid not in self._first_seen:
                self._first_seen[ev.pid] = time.time_ns()
                self._resources.prime(ev.pid)  # a short-lived process is read while alive
                self.symbolizer.process(ev.pid)  # its interpreter, from now on
                self._unwind(ev.pid)
            if type(ev) is GpuAlloc:
                self._name_python(ev.pid, ev.stack, ev.py)
            elif type(ev) is GpuName:
                self._kernel_found(ev)
                not_counted += 1
            elif type(ev) is GpuInit:
                log.debug("pid %d called cuInit", ev.pid)
                not_counted += 1
        with self._ledger_lock:
            before = self.ledger.unmatched_frees
            self.ledger.apply(events)
            unmatched = self.ledger.unmatched_frees
        self._stats.add("gpu.events", len(events) - not_counted)
        if unmatched != before:
            self._stats.add("gpu.frees.unmatched", unmatched - before)
        return len(events)

    def _kernel_found(self, ev: GpuName) -> None:
        if len(self._kernel_names) + len(self._kernel_of) >= MAX_NAMES:
            self._kernel_names.clear()
            self._kernel_of.clear()
        if ev.api is Api.KERNEL_GET_FUNCTION:
            self._kernel_of[(ev.pid, ev.handle)] = ev.kernel
        elif ev.name:
            self._kernel_names[(ev.pid, ev.handle)] = demangle(ev.name)

    def kernel_names(self, pids: set[int]) -> dict[tuple[int, int], str]:
        """{(pid, handle): name} for every handle a launch of these processes may pass:
        functions and kernels looked up by name, and functions made from kernels."""
        # list(): one step under the GIL, while the drain thread adds names
        names = {k: v for k, v in list(self._kernel_names.items()) if k[0] in pids}
        for (pid, func), kernel in list(self._kernel_of.items()):
            name = self._kernel_names.get((pid, kernel))
            if pid in pids and name:
                names[(pid, func)] = name
        return names

    def _name_python(self, pid: int, stack: tuple[int, ...], py: tuple[int, ...]) -> None:
        """A site's Python frames, named now, while the code objects the kernel saw surely
        exist (a cheap read of the process's memory); native frames at export, since naming
        them means reading symbol tables of large libraries (libtorch_cuda) once."""
        if not py:
            return
        key = (pid, Site(stack, py))
        if key in self._python:
            return
        if len(self._python) >= MAX_SITES:
            self._python.clear()
        groups = self.symbolizer.python(pid, py)
        if groups is not None:
            self._python[key] = groups

    def site_frames(self, pid: int, site: Site) -> tuple[Frame, ...]:
        """The site's frames, innermost first: native frames with the Python frames in
        place of the evaluator frames that ran them (the CPU profiler's merge)."""
        key = (pid, site)
        frames = self._sites.get(key)
        if frames is None:
            native = self._natives.native(pid, site.stack)
            python = self._python.get(key)
            if python is None and site.py:
                # launch, copy and sync sites: named now, from the kernel's totals (their
                # code objects live as long as the functions that keep calling)
                python = self._natives.python(pid, site.py)
            frames = tuple(merge((), native, python or []))
            if len(self._sites) >= MAX_SITES:
                self._sites.clear()
            self._sites[key] = frames
        return frames

    # -- each interval

    def flush(self) -> list[ProcessProfile]:
        """One interval: profiles to the profile exporters, metrics to the metric
        exporters; processes that ended are reported a last time (their memory at 0 in
        use: the driver released it at their exit) and forgotten."""
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        sites = self.tracer.sites()
        copies, launches = copy_totals(sites), launch_totals(sites)
        for pid in {t.pid for t in sites}:
            self._first_seen.setdefault(pid, time.time_ns())
        ended = self._ended()
        with self._ledger_lock:
            memory = self.ledger.snapshot(now)
            for pid in ended:  # after the snapshot: its profile shows what it held last
                self.ledger.exited(pid)
            usage = self.ledger.usage()
            mapped = self.ledger.mapped()
        scale = self.launch_scale(now)
        by_site = site_profiles(sites, self._sites_seen, self._interval_start, now,
                                self.kernel_names({t.pid for t in sites}), scale)
        launches = self._estimate(launches, scale)
        self._interval_start = now
        # metrics first: naming the sites of profiles may first read the symbol tables of
        # a large library (libtorch_cuda: a minute on the H200 run), and the interval's
        # in-use and peak figures must not wait for that
        data = build_metrics(usage, copies, launches, self._resource,
                             lambda pid: self._first_seen.get(pid, 0), sites=sites,
                             mapped=mapped, launches_estimated=scale is not None)
        if data is not None:
            self._metrics.send(data)
        self._update_counters()
        self._export_profiles(memory, SAMPLE_TYPES, "memory")
        for kind, profiles in by_site.items():
            if profiles:
                self._export_profiles(profiles, profiles[0].sample_types, kind)
        self._log_changes(usage, memory)
        if ended:
            with self._ledger_lock:
                self._forget(ended)
        return memory + [p for profiles in by_site.values() for p in profiles]

    def launch_scale(self, now: int) -> float | None:
        """The factor this interval's launch counts are scaled by (otel_ebpf/gpu/duty.py):
        None when they are exact (no duty cycle, or duty 1); 0.0 when the probes were not
        attached since the last estimate (it waits for the next interval)."""
        if self.duty is None or self.duty.exact:
            return None
        scale = launch_scale(now - self._launch_since,
                             self.duty.attached_ns(self._launch_since, now))
        if scale:
            self._launch_since = now
        return scale

    def _estimate(self, launches: list[LaunchTotals], scale: float | None
                  ) -> list[LaunchTotals]:
        """The metrics' launch totals: as counted when exact, else the running estimate by
        process and device (each interval's new launches times its scale)."""
        if scale is None:
            return launches
        raw: dict[tuple[int, int], int] = {}
        for t in launches:
            raw[(t.pid, t.device)] = raw.get((t.pid, t.device), 0) + t.count
        if scale:
            for key, n in raw.items():
                self._launch_est[key] = self._launch_est.get(key, 0.0) + \
                    (n - self._launch_raw.get(key, 0)) * scale
                self._launch_raw[key] = n
        return [LaunchTotals(pid, device, (), round(n))
                for (pid, device), n in self._launch_est.items()]

    def batch(self, profiles: list[ProcessProfile],
              sample_types: tuple[tuple[str, str], ...], name: str = "") -> ProfileBatch:
        """Profiles of one kind (memory, launches, copies, sync) as one batch, frames
        named, wall clock times, one resource per process; a launch's kernel is its leaf
        frame (module CUDA_MODULE), so flame graphs show kernels under their callers."""
        offset = time.time_ns() - time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        samples = []
        for p in profiles:
            resource = self._resources.get(p.pid)
            for s in p.samples:
                attrs = dict(s.attributes)
                frames = self.site_frames(p.pid, s.site)
                kernel = attrs.get("gpu.kernel.name")
                if kernel:
                    frames = (Frame(str(kernel), CUDA_MODULE, CUDA),) + frames
                samples.append(ProfileSample(frames, s.values, resource, attrs))
        start = min((p.start_ns for p in profiles), default=self._interval_start)
        end = max((p.end_ns for p in profiles), default=self._interval_start)
        return ProfileBatch(sample_types, start + offset, end + offset, samples, name=name)

    def _export_profiles(self, profiles: list[ProcessProfile],
                         sample_types: tuple[tuple[str, str], ...], name: str) -> None:
        if not profiles or not self._profile_exporters:
            return
        batch = self.batch(profiles, sample_types, name)
        for name, exporter in self._profile_exporters.items():
            try:
                exporter.export(batch)
            except Exception:  # the other exporters and the metrics still go out
                log.exception("GPU profiles: exporter %s failed", name)

    def _log_changes(self, usage: list, memory: list[ProcessProfile]) -> None:
        """Lines for each process whose GPU memory changed, with the sites that hold the
        most: what `otel-ebpf run` shows without a backend."""
        changed = set()
        for u in usage:
            key = (u.pid, u.device, u.type)
            if self._last_usage.get(key) == (u.in_use, u.peak):
                continue
            self._last_usage[key] = (u.in_use, u.peak)
            changed.add(u.pid)
            log.info("GPU pid %d device %s (%s): %.1f MiB in use in %d allocations, peak "
                     "%.1f MiB", u.pid, u.device if u.device >= 0 else "?", u.type,
                     u.in_use / 2**20, u.live, u.peak / 2**20)
        for p in memory:
            if p.pid not in changed:
                continue
            # by what the site allocated this interval or still holds, whichever is more
            top = sorted(p.samples, key=lambda s: -max(s.values[1], s.values[3]))
            for s in top[:TOP_SITES]:
                log.info("GPU pid %d   %.1f MiB allocated (%d), %.1f MiB held (%d) from %s",
                         p.pid, s.values[1] / 2**20, s.values[0], s.values[3] / 2**20,
                         s.values[2], describe(self.site_frames(p.pid, s.site)))

    def _resource(self, pid: int):
        return resource_for(self._resources.get(pid))

    def _update_counters(self) -> None:
        kernel = self.tracer.kernel_counters()
        self._stats.set_total("gpu.kernel.drops", kernel["ringbuf_drops"])
        self._stats.set_total("gpu.libraries", len(self.tracer.probes.attached))
        if self.unwinder is not None:
            self._stats.set_total("gpu.stacks.unwound", kernel["unwind_stacks"])

    def _ended(self) -> set[int]:
        """Processes seen that exited: reported a last time (0 held), then forgotten."""
        return {pid for pid in self._first_seen
                if not os.path.exists(os.path.join(self._proc_root, str(pid)))}

    def _forget(self, ended: set[int]) -> None:
        for pid in ended:
            if self.unwinder is not None:
                self.unwinder.remove(pid)
                self._unwinding.discard(pid)
            self._natives.forget(pid)
            self.ledger.end(pid)
            del self._first_seen[pid]
            self.symbolizer.forget(pid)
            if pid in self._pythons:
                self._pythons.discard(pid)
                self.tracer.forget_python(pid)
        self.tracer.forget(ended)
        self._sites_seen = {k: v for k, v in self._sites_seen.items() if k[0] not in ended}
        self._kernel_names = {k: v for k, v in self._kernel_names.items()
                              if k[0] not in ended}
        self._kernel_of = {k: v for k, v in self._kernel_of.items() if k[0] not in ended}
        self._sites = {k: v for k, v in self._sites.items() if k[0] not in ended}
        self._python = {k: v for k, v in self._python.items() if k[0] not in ended}
        self._last_usage = {k: v for k, v in self._last_usage.items() if k[0] not in ended}
        self._launch_raw = {k: v for k, v in self._launch_raw.items() if k[0] not in ended}
        self._launch_est = {k: v for k, v in self._launch_est.items() if k[0] not in ended}

    def shutdown(self) -> None:
        """Stop the thread, drain what the kernel holds and report a last interval."""
        self._stop.set()
        if self.duty is not None:
            self.duty.stop()
        for t in self._threads:
            t.join(30.0)
        self.drain(0)
        self.flush()
        self.symbolizer.close()
        self._natives.close()
        self.tracer.close()




def profile_exporters(cfg: Config) -> dict[str, Any]:
    """The `profiles` pipelines' exporters (the CPU profiler's factory); pprof and folded
    files are named gpu-<time>, apart from the CPU profiles' cpu-<time>."""
    if not any(p.signal == "profiles" for p in cfg.pipelines.values()):
        return {}
    exporters, off = build_profile_exporters(cfg.exporters_for("profiles"), prefix="gpu")
    for line in off:
        log.info("GPU profiles: %s", line)
    return exporters


def start_gpu_monitor(cfg: Config, libbpf_log: LibbpfLog,
                      metric_exporters: Mapping[str, MetricExporter],
                      resources: ProcessResources, stats: Stats,
                      profile_exporters_: Mapping[str, Any] | None = None,
                      tables: UnwindTables | None = None) -> GpuMonitor:
    """Load and attach the CUDA probes as `receivers.ebpf.gpu` says, and start the
    monitor's thread; raises BPFError when the probes cannot be loaded. `tables`: the
    agent's unwind tables (profiling.unwind_tables), for the allocation stacks."""
    r = cfg.receiver
    tracer = CudaTracer(libbpf_log, libraries=r.gpu_libraries,
                        unwind=tables.maps if tables is not None else None)
    duty = None
    if r.gpu_launch_duty_cycle < 1.0:
        duty = LaunchDuty(tracer.probes.set_launches, r.gpu_launch_duty_cycle,
                          r.gpu_launch_period_s)
    monitor = GpuMonitor(
        tracer, metric_exporters, resources, stats, duty=duty,
        profile_exporters=profile_exporters(cfg) if profile_exporters_ is None
        else profile_exporters_,
        interval_s=cfg.telemetry.metrics_interval_s, poll_interval_s=r.poll_interval_s,
        scan_interval_s=r.gpu_scan_interval_s,
        unwinder=tables.unwinder if tables is not None else None)
    monitor.start()
    log.info("GPU memory profiling: CUDA driver probes on %s; allocation stacks by %s",
             ", ".join(tracer.probes.attached.values()) or "no libcuda yet (processes are "
             f"scanned every {r.gpu_scan_interval_s:g}s)",
             "unwind tables" if tables is not None else "frame pointers")
    return monitor
