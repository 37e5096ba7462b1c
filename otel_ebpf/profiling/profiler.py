"""The CPU profiler at run time: drains the sampler, names each sample's frames right away
(while its code objects still exist), and every interval hands a ProfileBatch to the
profile exporters (OTLP, pprof, folded), with links to the spans the threads served.
No single sample, address, file or export stops it: each step is guarded and its failures
are counted (`profiles.errors` by stage and reason, otel_ebpf.* self-metrics)."""

from __future__ import annotations

import logging
import threading
import time
from collections import Counter, deque
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Protocol

from otel_ebpf.export.profiles import ProfileBatch, ProfileSample
from otel_ebpf.kernel.cpu_sampler import (PY_NO_DISPATCHER, PY_NO_THREAD, PY_READ_ERROR,
                                          CpuSampler)
from otel_ebpf.kernel.libbpf import LibbpfLog

from .links import ActiveSpans
from .python_procs import Interpreter
from .symbolizer import Stack, Symbolizer
from .unwinder import Unwinder, UnwindTables

log = logging.getLogger(__name__)

SAMPLE_TYPES = (("samples", "count"), ("cpu", "nanoseconds"))
# why a sample of a Python process has no Python frames (profiles.python_walk_failed):
# a thread without a thread state of its own (a native worker) that no thread of the
# process woke or created, or whose wakers have none either; the interpreter unreadable
WALK_FAILED = {PY_NO_THREAD: "no_dispatcher", PY_NO_DISPATCHER: "dispatcher_not_python",
               PY_READ_ERROR: "read_error"}
MAX_PENDING = 1_000_000  # samples held between exports; more are dropped and counted


class ProfileExporter(Protocol):
    def export(self, batch: ProfileBatch) -> bool: ...
    def shutdown(self) -> None: ...


@dataclass(frozen=True)
class ProfilerSettings:
    frequency: int = 19
    interval_s: float = 10.0
    # samples wait this long before export, so the spans their threads served (emitted
    # after the correlation window) can be linked
    link_delay_s: float = 3.0
    pids: tuple[int, ...] = ()
    process_names: tuple[str, ...] = ()
    poll_interval_s: float = 0.1
    # walk user stacks with unwind tables built from each file's call frame information
    # (code without frame pointers: libtorch, MKL, Debian's CPython); rows in all, 8 bytes
    # of kernel memory each (libtorch_cpu 2.13 alone: 2.6M)
    unwind_tables: bool = False
    unwind_rows: int = 4 << 20


class CpuProfiler:
    def __init__(self, settings: ProfilerSettings, exporters: Mapping[str, ProfileExporter],
                 libbpf_log: LibbpfLog, *, resources: Callable[[int, str], Mapping[str, Any]],
                 to_wall: Callable[[int], int], stats: Any = None,
                 spans: ActiveSpans | None = None, tables: UnwindTables | None = None) -> None:
        """`tables`: the agent's unwind tables, shared with the GPU probes (used when
        settings.unwind_tables); without, the profiler makes its own."""
        self.settings = settings
        self.exporters = dict(exporters)
        self.resources = resources
        self.to_wall = to_wall
        self.stats = stats
        self.spans = spans or ActiveSpans()
        # every failed step, by (stage, reason), also in stats as profiles.errors
        self.failures: Counter[tuple[str, str]] = Counter()
        self._own_tables = settings.unwind_tables and tables is None
        if self._own_tables:
            tables = UnwindTables(settings.unwind_rows, self._failed_unwind)
        self.tables = tables if settings.unwind_tables else None
        try:
            self.sampler = CpuSampler(settings.frequency, libbpf_log, pids=settings.pids,
                                      process_names=settings.process_names,
                                      unwind=self.tables.maps if self.tables else None)
        except BaseException:
            if self._own_tables:
                tables.close()
            raise
        self.symbolizer = Symbolizer(on_python=self._python_found, on_failure=self._failed)
        self.pending: list[Stack] = []
        self.pythons: dict[int, Interpreter] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._window_start = time.time_ns()
        self.unwinder: Unwinder | None = self.tables.unwinder if self.tables else None
        self._seen: set[int] = set(settings.pids)
        self._requested: deque[int] = deque()  # request_targets(), for the loop to add
        try:
            for pid in settings.pids:  # Python frames from the first sample on
                self.symbolizer.process(pid)
                self._unwind(pid)
            self.sampler.start()
        except BaseException:
            self.sampler.close()
            if self._own_tables:
                self.tables.close()
            raise

    def _failed_unwind(self, stage: str, reason: str) -> None:
        # before the symbolizer exists; counted as its failures are
        sym = getattr(self, "symbolizer", None)
        if sym is not None:
            sym.fail(stage, reason)
        else:
            self._failed(stage, reason)

    def _failed(self, stage: str, reason: str) -> None:
        self.failures[(stage, reason)] += 1
        if self.stats is not None:
            self.stats.add("profiles.errors", stage=stage, reason=reason)

    def _python_found(self, interp: Interpreter) -> None:
        self.pythons[interp.pid] = interp
        self.sampler.set_python(interp.pid, interp.runtime, interp.offsets.kernel_fields())
        log.info("pid %d runs CPython %d.%d: its Python frames are sampled", interp.pid,
                 *interp.version)

    def request_targets(self, pids: Iterable[int]) -> None:
        """More processes to sample, from another thread (a process name matched on the argv
        of a later exec): taken by the profiler's own loop at its next poll."""
        self._requested.extend(pids)

    def add_targets(self, pids: Iterable[int]) -> None:
        """More processes to sample (a process name matched after start)."""
        pids = list(pids)
        self.sampler.add_pids(pids)
        for pid in pids:
            self.symbolizer.process(pid)
            self._unwind(pid)

    def _unwind(self, pid: int) -> None:
        if self.unwinder is not None:
            try:
                # processes chosen by pid or name are few: when their tables are in is
                # said at info; a host-wide profile's processes are not
                self.unwinder.add(pid, announce=bool(self.settings.pids
                                                     or self.settings.process_names))
            except Exception as exc:
                self.symbolizer.fail("unwind", type(exc).__name__)

    # -- the loop

    def start(self) -> None:
        self._thread = threading.Thread(target=self.run, name="otel-ebpf-profiler",
                                        daemon=True)
        self._thread.start()

    def run(self) -> None:
        poll_ms = max(1, int(self.settings.poll_interval_s * 1000))
        next_export = time.monotonic() + self.settings.interval_s
        while not self._stop.is_set():
            try:
                self.poll(poll_ms)
                if time.monotonic() >= next_export:
                    next_export = time.monotonic() + self.settings.interval_s
                    self.export(final=False)
                    for pid in self.symbolizer.sweep():
                        self._seen.discard(pid)
                        if self.unwinder is not None:
                            self.unwinder.remove(pid)
            except Exception as exc:  # the steps are guarded; this is the last resort
                self.symbolizer.fail("loop", type(exc).__name__)
                log.debug("profiler loop", exc_info=True)
                self._stop.wait(self.settings.poll_interval_s)  # no busy loop on a fault

    def poll(self, timeout_ms: int) -> int:
        if self._requested:
            pids = []
            while self._requested:
                pids.append(self._requested.popleft())
            self.add_targets(pids)
        raws = self.sampler.poll(timeout_ms)
        for raw in raws:
            if self.stats is not None:
                if raw.py_status in WALK_FAILED:
                    self.stats.add("profiles.python_walk_failed",
                                   reason=WALK_FAILED[raw.py_status])
                elif raw.dispatched:
                    self.stats.add("profiles.worker_samples")
            if len(self.pending) >= MAX_PENDING:
                if self.stats is not None:
                    self.stats.add("profiles.samples_dropped")
                continue
            if self.unwinder is not None and raw.pid not in self._seen:
                self._seen.add(raw.pid)  # a child of a target: its tables too
                self._unwind(raw.pid)
            try:
                self.pending.append(self.symbolizer.stack(raw))
            except Exception as exc:  # the parts are guarded in stack(); this sample only
                self.symbolizer.fail("sample", type(exc).__name__)
        if self.unwinder is not None:
            try:
                self.unwinder.apply_ready()
                self.unwinder.tick()
            except Exception as exc:
                self.symbolizer.fail("unwind", type(exc).__name__)
        if self.stats is not None and raws:
            self.stats.add("profiles.samples", len(raws))
        return len(raws)

    def export(self, final: bool) -> ProfileBatch:
        """Export the samples old enough to be linked (all of them when final)."""
        now_mono = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        cutoff = now_mono if final else now_mono - int(self.settings.link_delay_s * 1e9)
        ready = [s for s in self.pending if s.ts_ns <= cutoff]
        self.pending = [s for s in self.pending if s.ts_ns > cutoff]
        end = time.time_ns()
        batch = self.batch(ready, self._window_start, end)
        self._window_start = end
        for name, exporter in self.exporters.items():
            try:
                ok = exporter.export(batch)
            except Exception as exc:  # one exporter's failure must not stop the others
                log.exception("profile exporter %s failed", name)
                self.symbolizer.fail("export", type(exc).__name__)
                ok = False
            if self.stats is not None and batch.samples:
                self.stats.add("profiles.exported" if ok else "profiles.export_failed",
                               len(batch.samples), exporter=name)
        self.spans.prune(cutoff - int(60e9))
        return batch

    def batch(self, stacks: list[Stack], start_ns: int, end_ns: int) -> ProfileBatch:
        period = int(1e9 / self.settings.frequency)
        samples = []
        for st in stacks:
            try:
                samples.append(ProfileSample(
                    stack=st.frames, values=(1, period),
                    resource=self._resource(st.pid, st.comm),
                    attributes=_thread_attributes(st),
                    link=self.spans.find(st.pid, st.tid, st.ts_ns),
                    timestamp_ns=self.to_wall(st.ts_ns)))
            except Exception as exc:  # this sample only
                self.symbolizer.fail("batch", type(exc).__name__)
        return ProfileBatch(SAMPLE_TYPES, start_ns, end_ns, samples,
                            period_type=("cpu", "nanoseconds"), period=period)

    def _resource(self, pid: int, comm: str) -> dict[str, Any]:
        try:
            return _scalars(self.resources(pid, comm))
        except Exception as exc:  # an unreadable /proc entry: the sample keeps its pid
            self.symbolizer.fail("resource", type(exc).__name__)
            return {"process.pid": pid}

    def kernel_counters(self) -> dict[str, int]:
        return self.sampler.kernel_counters()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=10)
            self._thread = None
        self.poll(0)
        self.export(final=True)

    def close(self) -> None:
        for exporter in self.exporters.values():
            exporter.shutdown()
        self.symbolizer.close()
        self.sampler.close()
        if self._own_tables and self.tables is not None:
            self.tables.close()  # shared tables are the agent's to close


def _thread_attributes(st: Stack) -> dict[str, Any]:
    attrs: dict[str, Any] = {"thread.id": st.tid, "thread.name": st.comm}
    if st.dispatcher:  # a worker's CPU shown under the Python stack that handed it work
        attrs["dispatcher.thread.id"] = st.dispatcher
    return attrs


def _scalars(attrs: Mapping[str, Any]) -> dict[str, Any]:
    """Resource attributes as the encoders take them: lists become one string."""
    return {k: (" ".join(map(str, v)) if isinstance(v, (list, tuple)) else v)
            for k, v in attrs.items()}
