"""The running agent: kernel events -> connection table -> spans -> export, in one loop."""

from __future__ import annotations

import functools
import gc
import logging
import signal
import sys
import threading
import time
from types import FrameType
from typing import TYPE_CHECKING

from otel_ebpf import _fast
from otel_ebpf.config import SIGNALS, Config
from otel_ebpf.conntrack.nat import NatLookup
from otel_ebpf.conntrack.table import ConnTable
from otel_ebpf.correlate import Correlator, assign_ids
from otel_ebpf.correlate.propagation import RemoteContexts
from otel_ebpf.correlate.sampling import HeadSampler
from otel_ebpf.export.factory import (
    DisabledExporter,
    build_metric_exporters,
    build_span_exporters,
    export_ports,
)
from otel_ebpf.export.pipeline import MetricsPipeline, TracePipeline
from otel_ebpf.export.span_metrics import SpanMetrics, gather_instruments
from otel_ebpf.kernel.abi import (ConnOpen, ContextIn, ContextOut, ProcessExec, ProcessExit,
                                  ProcessFork)
from otel_ebpf.kernel.asyncio_probes import calls_out
from otel_ebpf.kernel.libbpf import LibbpfLog
from otel_ebpf.kernel.propagation import PropagationSettings
from otel_ebpf.kernel.socket_tracer import CaptureSettings, SocketTracer, argv_matches
from otel_ebpf.profiling.links import ActiveSpans, ServerThreads
from otel_ebpf.protocols.registry import Registry
from otel_ebpf.spans.clock import KernelClock
from otel_ebpf.spans.pods import PodMetadata, PodMetadataSettings, pod_resource
from otel_ebpf.spans.redact import QueryRedactor
from otel_ebpf.spans.resources import ProcessResources
from otel_ebpf.telemetry import Stats

if TYPE_CHECKING:  # the GPU monitor is imported when it is enabled
    from otel_ebpf.gpu.monitor import GpuMonitor

log = logging.getLogger("otel_ebpf")

READY_LINE = "otel-ebpf ready"
SWEEP_INTERVAL_S = 1.0
# A poll's events are taken this many at a time, each part through the table and the
# correlator before the next: a 100 ms poll at 10k req/s holds ~4,000 events, and the
# frames made of a whole poll no longer sit in the CPU's caches when the correlator reaches
# them (docs/decisions.md, "The agent's interpreter: the collector, the GIL, a poll in
# parts"). The poll's spans go to the exporters together: making them ready reads each
# process's start time from /proc once per call, to tell a reused pid
HANDLE_EVENTS = 256
DROP_WARN_INTERVAL_S = 10.0


def capture_settings(cfg: Config, wide_prefixes: tuple[str, ...] = ()) -> CaptureSettings:
    r = cfg.receiver
    # every signal's exporters: a profiles-only OTLP endpoint is an export of ours as well
    exporters = {name: settings for signal in SIGNALS
                 for name, settings in cfg.exporters_for(signal).items()}
    return CaptureSettings(
        capture_max=r.capture_max_bytes,
        ring_buffer_bytes=r.ring_buffer_size_mib << 20,
        wakeup_fill_percent=r.wakeup_fill_percent,
        max_connections=r.max_connections,
        pids=r.targets.pids,
        process_names=r.targets.process_names,
        ports=r.targets.ports,
        ignored_ports=tuple(sorted(export_ports(exporters))),
        wide_prefixes=wide_prefixes,
        wide_capture=r.capture_llm_max_bytes,
        tail_capture=min(r.capture_llm_tail_bytes, r.capture_llm_max_bytes),
        pipe_pids=r.pipe_pids,
        pipe_process_names=r.pipe_process_names,
        propagation=PropagationSettings(r.propagation_trusted_networks, r.propagation_cgroup)
        if r.propagation_enabled else None,
    )


def pod_metadata(r, stats: Stats) -> PodMetadata | None:
    """The pod list poller receivers.ebpf.kubernetes.metadata asks for, or None."""
    if r.pod_metadata_source == "none":
        return None
    return PodMetadata(PodMetadataSettings(
        r.pod_metadata_source, r.pod_metadata_endpoint, r.k8s_node_name,
        r.pod_metadata_interval_s, token_file=r.pod_metadata_token_file,
        ca_file=r.pod_metadata_ca_file, insecure_skip_verify=r.pod_metadata_insecure), stats)


def _log_disabled(*exporter_sets: dict) -> None:
    reasons = {name: e.reason for exporters in exporter_sets for name, e in exporters.items()
               if isinstance(e, DisabledExporter)}
    for reason in reasons.values():
        log.info("%s", reason)


# The cyclic collector's thresholds once started: a young collection every 20,000 net
# allocations instead of 700, older ones 50 and 100 times rarer than the next younger.
# Per exchange the agent makes dozens of container objects (events, frames, records,
# requests, spans, their attribute dicts) that live for a poll's batch and are freed by
# reference counting, never in a cycle; at 700 a young pass runs every few exchanges, walks
# the batch's live objects and promotes them, so that the older passes walk them too.
GC_THRESHOLDS = (20_000, 50, 100)
# How long the thread running the per-event path keeps the GIL while an exporter's thread
# waits for it (Python's default is 5 ms): an OTLP/gRPC export takes the GIL several times
# per request (its call, the answer, the channel's own thread), each wait up to this long
# while the agent is busy (docs/decisions.md, "The agent's interpreter: the collector, the
# GIL, a poll in parts")
SWITCH_INTERVAL_S = 0.001


def _tune_gc() -> None:
    """After start-up: the objects made so far (modules, config, BPF objects, exporters)
    are frozen out of every later collection, which then walks only what the agent made
    since; they live as long as the agent anyway. Measured in the running agent
    (bench/agent_capacity.py, HTTP/1 at 10,000 req/s, both ends): 41 µs of agent CPU per
    request with the defaults, 35 with the start-up heap frozen, 32 frozen and with these
    thresholds (docs/performance.md)."""
    gc.collect()
    gc.freeze()
    gc.set_threshold(*GC_THRESHOLDS)


class Agent:
    """Owns every part; `run()` loops until stop() (or SIGINT/SIGTERM), then flushes."""

    def __init__(self, cfg: Config) -> None:
        self.cfg = cfg
        self.stats = Stats()
        self.clock = KernelClock()
        r = cfg.receiver
        self.pods = pod_metadata(r, self.stats)
        enrich = None
        if self.pods is not None or r.k8s_node_name:
            enrich = functools.partial(pod_resource, pods=self.pods, node_name=r.k8s_node_name)
        self.resources = ProcessResources(command_args=r.command_args, enrich=enrich)
        self.sampler = HeadSampler(r.sampling_ratio)
        self._stop = threading.Event()
        # the options load_config built each plugin with (correlation headers included)
        self.registry = Registry.from_config(r.protocols_enabled, r.plugin_options())
        self.correlator = Correlator(self.stats, int(r.correlation_window_s * 1e9),
                                     r.correlation_headers, max_requests=r.max_connections * 4)
        # one trace across hosts: contexts to and from the TCP option (propagation.enabled)
        self.remote = RemoteContexts(self.correlator, int(r.propagation_wait_s * 1e9)) \
            if r.propagation_enabled else None
        self._arrived: list[tuple[tuple[str, int, str, int, int], bytes, bool]] = []
        # conntrack, for client connections through NAT (correlation.nat)
        self.nat = NatLookup(self.stats) if r.correlation_nat else None
        self.table = ConnTable(self.registry, self.stats, r.max_connections,
                               int(r.idle_timeout_s * 1e9), nat=self.nat)
        span_exporters = build_span_exporters(cfg.exporters_for("traces"))
        metric_exporters = build_metric_exporters(cfg.exporters_for("metrics"))
        _log_disabled(span_exporters, metric_exporters)
        batch = cfg.processors
        self.traces = TracePipeline(
            span_exporters, self.stats, self.resources, self.clock,
            max_queue_size=batch.max_queue_size, max_batch_size=batch.batch_size,
            schedule_delay_s=batch.batch_timeout_s,
        )
        self.metrics = MetricsPipeline(metric_exporters, self.stats,
                                       cfg.telemetry.metrics_interval_s)
        # the same exporter objects as self.metrics: exported from two threads (the OTLP and
        # file exporters take that), shut down by self.metrics alone
        instruments = gather_instruments(
            [*self.registry.parsers, *getattr(self.registry, "layers", ())])
        self.redact_query = QueryRedactor(r.redact_query_params)
        self.span_metrics = SpanMetrics(metric_exporters, instruments, self.resources,
                                        self.stats, cfg.telemetry.metrics_interval_s)
        self.libbpf_log = LibbpfLog()
        self.tracer: SocketTracer | None = None
        # CPU profiles, when a profiles pipeline exists: samples link to the server spans
        # their threads were serving (docs/profiling.md)
        self.profiler = None
        self.server_threads = ServerThreads(ActiveSpans()) if any(
            p.signal == "profiles" for p in cfg.pipelines.values()) else None
        self._primed: set[int] = set()
        # process names matched on a later exec's argv as well as on the kernel's comm
        self._argv_names = frozenset(cfg.receiver.targets.process_names)
        # GPU memory (receivers.ebpf.gpu): its metrics go to the metrics pipeline's exporters
        self._metric_exporters = metric_exporters
        self.gpu: GpuMonitor | None = None
        # unwind tables (profiling.unwind_tables): one set for the CPU samples and the GPU
        # allocation stacks, made in start() when either is on
        self.unwind_tables = None
        self.rdma = None  # RDMA ports, verbs and NCCL (receivers.ebpf.rdma), same exporters
        self._drops_warned, self._drops_warned_at = 0, float("-inf")

    def stop(self, *_: object) -> None:
        self._stop.set()

    def install_signal_handlers(self) -> None:
        def handler(signum: int, _frame: FrameType | None) -> None:
            log.info("received %s, flushing", signal.Signals(signum).name)
            self.stop()

        signal.signal(signal.SIGINT, handler)
        signal.signal(signal.SIGTERM, handler)

    def start(self) -> None:
        log.info("compiled path %s", _fast.status()[1])
        if self.sampler.threshold:
            log.info("%s", self.sampler.describe())
        if self.pods is not None:
            self.pods.start()
            log.info("pod metadata from the %s at %s, every %gs",
                     self.pods.settings.source.replace("_", " "), self.pods.settings.url(),
                     self.pods.settings.interval_s)
        self.tracer = SocketTracer(capture_settings(self.cfg, self.registry.wide_prefixes()),
                                   self.libbpf_log)
        if self.cfg.receiver.correlation_asyncio_tasks:
            self.tracer.asyncio.leaf_copies = self.cfg.receiver.correlation_leaf_copies
            self.tracer.asyncio.scan_all()
        if self.cfg.receiver.tls_openssl:
            self.tracer.ssl.scan_all()
        log.info("attached %d programs; parsers: %s; layers over HTTP: %s",
                 self.tracer.programs, ", ".join(p.name for p in self.registry.parsers),
                 ", ".join(layer.name for layer in self.registry.layers) or "none")
        if self.tracer.propagation is not None:
            prop = self.tracer.propagation
            log.info("trace context TCP option on the sockets of cgroup %s; trusted: %s",
                     prop.cgroup, ", ".join(str(n) for n in prop.nets) or "none")
        r = self.cfg.receiver
        if r.profiling_unwind_tables and (r.gpu_enabled or self.server_threads is not None):
            from otel_ebpf.profiling.unwinder import UnwindTables  # noqa: PLC0415
            self.unwind_tables = UnwindTables(
                r.profiling_unwind_table_mib << 20 >> 3,
                lambda stage, reason: self.stats.add("profiles.errors", stage=stage,
                                                     reason=reason))
        if r.gpu_enabled:
            from otel_ebpf.gpu.monitor import start_gpu_monitor  # noqa: PLC0415
            self.gpu = start_gpu_monitor(self.cfg, self.libbpf_log, self._metric_exporters,
                                         self.resources, self.stats, tables=self.unwind_tables)
        if self.server_threads is not None:
            self._start_profiler()
        if self.cfg.receiver.rdma_enabled:
            self._start_rdma()
        _tune_gc()
        sys.setswitchinterval(SWITCH_INTERVAL_S)
        print(READY_LINE, file=sys.stderr, flush=True)

    def _start_rdma(self) -> None:
        from otel_ebpf.rdma import RdmaReceiver, RdmaSettings  # noqa: PLC0415
        r = self.cfg.receiver
        self.rdma = RdmaReceiver(RdmaSettings(r.rdma_sysfs_root, r.rdma_interval_s),
                                 self._metric_exporters, self.resources, self.stats,
                                 self.libbpf_log)
        self.rdma.start()

    def _start_profiler(self) -> None:
        from otel_ebpf.export.profile_exporters import build_profile_exporters  # noqa: PLC0415
        from otel_ebpf.kernel.socket_tracer import matching_pids  # noqa: PLC0415
        from otel_ebpf.profiling.profiler import CpuProfiler, ProfilerSettings  # noqa: PLC0415
        r = self.cfg.receiver
        exporters, off = build_profile_exporters(self.cfg.exporters_for("profiles"))
        for line in off:
            log.info("%s", line)
        names = r.targets.process_names
        pids = tuple(sorted(set(r.targets.pids) | (matching_pids(names) if names else set())))
        self.profiler = CpuProfiler(
            ProfilerSettings(frequency=r.profiling_frequency, interval_s=r.profiling_interval_s,
                             link_delay_s=r.correlation_window_s + 1.0, pids=pids,
                             process_names=names, unwind_tables=r.profiling_unwind_tables,
                             unwind_rows=r.profiling_unwind_table_mib << 20 >> 3),
            exporters, self.libbpf_log, resources=self.resources.get,
            to_wall=self.clock.to_wall, stats=self.stats, spans=self.server_threads.spans,
            tables=self.unwind_tables)
        self.profiler.start()
        log.info("CPU profiling at %d Hz to %s", r.profiling_frequency,
                 ", ".join(exporters) or "no exporter")

    def run(self) -> None:
        assert self.tracer is not None, "start() first"
        poll_ms = max(1, int(self.cfg.receiver.poll_interval_s * 1000))
        retire_probes = self.cfg.receiver.correlation_asyncio_tasks
        next_sweep = time.monotonic() + SWEEP_INTERVAL_S
        while not self._stop.is_set():
            # every record sent before this moment is read by the poll (the ring hands
            # records over in the order they were reserved)
            drained_ns = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
            events = self.tracer.poll(poll_ms)
            # a sample of the wall clock (the host may be slewing or stepping it) after the
            # poll: the mapping heads for it from a moment after every one it has mapped
            self.clock.refresh()
            if events:
                self._new_processes(events)
                if len(events) <= HANDLE_EVENTS:
                    self._emit(self._handle(events))
                else:
                    spans = []
                    for i in range(0, len(events), HANDLE_EVENTS):
                        spans += self._handle(events[i : i + HANDLE_EVENTS])
                    self._emit(spans)
            if retire_probes:
                # at every poll: a busy leaf makes thousands of copies a second
                self.tracer.asyncio.retire(self._primed)
            if time.monotonic() >= next_sweep:
                next_sweep = time.monotonic() + SWEEP_INTERVAL_S
                now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
                self._emit(self.correlator.on_spans(self.table.sweep(now, drained_ns), now))
                self._update_kernel_counters()
                if self.nat is not None:
                    self.nat.sweep()
        # drain what the kernel still holds, then close every connection
        self._emit(self._handle(self.tracer.poll(0)))
        self._emit(self.correlator.on_spans(self.table.close_all()))
        self._emit(self.correlator.flush())

    def _handle(self, events: list) -> list:
        """Events -> spans with their IDs: requests are correlated as they are made,
        before the spans of the batch (which may be their parents) are decided."""
        spans = self.table.handle(events)
        if self.table.to_mute and self.tracer is not None:
            # no parser wants these: the kernel stops copying their bytes
            self.tracer.mute(self.table.to_mute)
            self.table.to_mute.clear()
        self.correlator.observe(self.table.observed)
        if self.remote is not None:
            self._exchange_contexts()
        if self.server_threads is not None:
            self.server_threads.observe(self.table.observed)
        self.table.observed.clear()
        return self.correlator.on_spans(spans)

    def _exchange_contexts(self) -> None:
        """After the requests of a batch are decided: the contexts that arrived settle the
        server requests they name; the trace of each new call to another host goes to the
        kernel, for the connection's next segment."""
        remote, arrived = self.remote, self._arrived
        now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        if arrived:
            remote.incoming(arrived, now)
            self.stats.add("propagation.contexts", len(arrived), outcome="received")
            self._arrived = []
        else:
            remote.resolve(now)
        carrier, conns = self.tracer.propagation, self.table.conns
        sent = unsent = 0
        for out in remote.outgoing():
            conn = conns.get(out.conn_key)
            info = None if conn is None else conn.info  # None: closed, its segments gone
            if info is not None and carrier is not None and carrier.send(
                    info.local_addr, info.local_port, info.remote_addr, info.remote_port,
                    out.key[4], out.trace_id, out.sampled):
                sent += 1
            else:
                unsent += 1
        if sent:  # counted per batch: Stats.add takes a lock
            self.stats.add("propagation.contexts", sent, outcome="sent")
        if unsent:
            self.stats.add("propagation.contexts", unsent, outcome="unsent")

    def _new_processes(self, events: list) -> None:
        """A process's first connection: read its resource now (short-lived clients such as
        curl are gone by the time their spans are exported) and probe its asyncio. The
        Context probes follow processes: on at exec and fork, kept where a process calls
        out, off at exit."""
        tasks = self.tracer.asyncio if self.cfg.receiver.correlation_asyncio_tasks else None
        for ev in events:
            kind = type(ev)
            if kind is ConnOpen:
                pid = ev.key[0]
                if tasks is not None and calls_out(ev):
                    tasks.calling_out(pid)
                if pid not in self._primed:
                    self._primed.add(pid)
                    self.resources.prime(pid, ev.comm)
                    if tasks is not None:
                        tasks.scan([pid])
                    if self.cfg.receiver.tls_openssl:
                        self.tracer.ssl.scan([pid])
            elif kind is ProcessExit:
                self._primed.discard(ev.pid)
                if self._argv_names:
                    self.tracer.forget_pid(ev.pid)
                if tasks is not None:
                    tasks.exited(ev.pid)
            elif kind is ProcessExec:
                if self._argv_names:
                    self._select_by_argv(ev.pid)
                if tasks is not None:
                    tasks.execed(ev.pid)
                if self.cfg.receiver.tls_openssl:
                    # a static build is known by its executable now; a libssl it loads later
                    # is looked for again at its first connection
                    self.tracer.ssl.scan([ev.pid])
                self.span_metrics.forget(ev.pid)
            elif kind is ProcessFork and tasks is not None:
                tasks.forked(ev.pid)
            elif kind is ContextOut and self.remote is not None:
                self.remote.queued_at_send([ev])
            elif kind is ContextIn and self.remote is not None:
                # the request it names as this server sees it: client end, server end, seq
                self._arrived.append(((ev.remote_addr, ev.remote_port, ev.local_addr,
                                       ev.local_port, ev.seq), ev.trace_id,
                                      bool(ev.flags & 1)))

    def _select_by_argv(self, pid: int) -> None:
        """A program started after the agent, selected by a process name that only its argv
        shows (`python3 train.py` has comm python3): traced and, with profiling, sampled
        from here on (what it did before this event was not selected)."""
        if not argv_matches(pid, self._argv_names):
            return
        if self.tracer.add_pid(pid):
            log.info("pid %d started after the agent is selected: its argv matches "
                     "targets.process_names", pid)
            if self.profiler is not None:
                self.profiler.request_targets([pid])

    def _emit(self, spans: list) -> None:
        if not spans:
            return
        self.stats.add("spans.produced", len(spans))
        timed_out = sum(1 for s in spans if s.attributes.get("error.type") == "timeout")
        if timed_out:
            self.stats.add("records.timed_out", timed_out)
        self.redact_query.apply(spans)  # before any exporter (or span metric) sees a URL
        kept = spans
        if self.sampler.threshold:
            assign_ids(spans)  # a root decided on the trace ID it is exported with
            kept = self.sampler.keep(spans)
            if len(kept) != len(spans):
                self.stats.add("spans.sampled_out", len(spans) - len(kept))
        self.traces.submit(kept)
        if self.server_threads is not None:
            self.server_threads.emitted(spans)
        self.span_metrics.record(spans)  # every span, sampled out or not

    def _update_kernel_counters(self) -> None:
        assert self.tracer is not None
        counters = self.tracer.kernel_counters()
        for cpu, n in enumerate(counters["ringbuf_drops"]):
            self.stats.set_total("kernel.drops", n, cpu=str(cpu))
        self._warn_drops(counters["ringbuf_drops"])
        self.stats.set_total("kernel.truncations", sum(counters["truncated"]))
        self.stats.set_total("kernel.widened", sum(counters["widened"]))
        self.stats.set_total("kernel.muted", sum(counters["muted"]))
        if self.tracer.propagation is not None:
            kernel = self.tracer.propagation.counters()
            for name, event in (("prop_written", "written"), ("prop_no_room", "no_room"),
                                ("prop_received", "received"), ("prop_refused", "refused"),
                                ("prop_untrusted_dst", "untrusted_destination"),
                                ("prop_at_send", "queued_at_send"),
                                ("prop_slots_full", "slots_full")):
                self.stats.set_total("propagation.options", kernel.get(name, 0), event=event)
        self.stats.set_total("tls.unbound", sum(counters["tls_unbound"]))
        self.stats.set_total("tls.uncovered", len(self.tracer.ssl.static_uncovered))
        tasks = self.tracer.asyncio
        self.stats.set_total("context_probes.attached", tasks.attached)
        self.stats.set_total("context_probes.retired", tasks.retired_count)

    def _warn_drops(self, per_cpu: list[int]) -> None:
        """A log line when the kernel dropped events since the last one (at most one per
        DROP_WARN_INTERVAL_S): the metric alone goes unseen when nobody graphs it."""
        total = sum(per_cpu)
        now = time.monotonic()
        if total <= self._drops_warned or now - self._drops_warned_at < DROP_WARN_INTERVAL_S:
            return
        by_cpu = ", ".join(f"cpu{cpu}={n}" for cpu, n in enumerate(per_cpu) if n)
        log.warning("kernel ring buffer full: %d events dropped (%d in all: %s); raise "
                    "receivers.ebpf.ring_buffer.size_mib or lower its poll_interval",
                    total - self._drops_warned, total, by_cpu)
        self._drops_warned, self._drops_warned_at = total, now

    def shutdown(self) -> None:
        if self.profiler is not None:
            self.profiler.stop()
            self.profiler.close()
            self.profiler = None
        if self.gpu is not None:  # before the metric exporters it borrows shut down
            self.gpu.shutdown()
            self.gpu = None
        if self.rdma is not None:  # likewise
            self.rdma.shutdown()
            self.rdma = None
        if self.unwind_tables is not None:  # after both of its users
            self.unwind_tables.close()
            self.unwind_tables = None
        if self.tracer is not None:
            self._update_kernel_counters()
            self.tracer.close()
            self.tracer = None
        if self.nat is not None:
            self.nat.close()
        if self.pods is not None:
            self.pods.stop()
        self.traces.shutdown()
        self.span_metrics.shutdown()
        self.metrics.shutdown()

    def summary(self) -> dict[str, int]:
        return self.stats.totals()
