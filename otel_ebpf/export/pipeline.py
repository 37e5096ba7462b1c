"""The export pipelines: neutral spans out to every trace exporter; the agent's counters
out to every metric exporter."""

from __future__ import annotations

import functools
import logging
import socket
import threading
from collections.abc import Iterable, Mapping
from typing import Any

from opentelemetry.metrics import CallbackOptions, Observation
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import MetricExporter, PeriodicExportingMetricReader
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace.export import SpanExporter

from otel_ebpf import __version__
from otel_ebpf.correlate import assign_ids
from otel_ebpf.export.factory import DisabledExporter
from otel_ebpf.export.metrics_send import CountedMetricExporter
from otel_ebpf.export.queue import ExportQueue
from otel_ebpf.protocols.base import NeutralSpan
from otel_ebpf.spans.clock import KernelClock
from otel_ebpf.spans.convert import resource_for
from otel_ebpf.spans.resources import ProcessResources
from otel_ebpf.telemetry import COUNTERS, Stats

log = logging.getLogger(__name__)


def _in_parallel(calls: Iterable[Any], timeout_s: float) -> None:
    """Run the calls on threads of their own, so one slow backend doesn't eat the others' time."""
    threads = [threading.Thread(target=call, daemon=True) for call in calls]
    for t in threads:
        t.start()
    for t in threads:
        t.join(timeout_s)


class TracePipeline:
    """Neutral spans -> IDs, wall times, per-process resources -> one queue per exporter."""

    def __init__(
        self,
        exporters: Mapping[str, SpanExporter],
        stats: Stats,
        resources: ProcessResources,
        clock: KernelClock,
        **queue_options: Any,
    ) -> None:
        self._stats = stats
        self._resources = resources
        self._clock = clock
        self.queues = {
            name: ExportQueue(exporter, name, stats, **queue_options)
            for name, exporter in exporters.items()
            if not isinstance(exporter, DisabledExporter)
        }

    def submit(self, spans: list[NeutralSpan]) -> None:
        """Make spans ready (IDs, resource, wall-clock start and end) and queue them for
        every exporter. Never blocks on a backend."""
        if not spans or not self.queues:
            return
        assign_ids(spans)
        resources: dict[int, Resource] = {}  # one /proc look-up per process per batch
        to_wall = self._clock.to_wall
        for span in spans:
            pid = span.conn.pid  # span.pid inline: a property is a Python call
            resource = resources.get(pid)
            if resource is None:
                attrs = self._resources.get(pid, span.conn.comm)
                resource = resources[pid] = resource_for(attrs)
            # convert.ready(span, resource, clock) inline: a call per span
            span.resource = resource
            span.wall_ns = to_wall(span.start_ns)
            span.wall_end_ns = to_wall(span.end_ns)
        for queue in self.queues.values():
            queue.put(spans)

    def flush(self, timeout_s: float = 30.0) -> None:
        _in_parallel((functools.partial(q.flush, timeout_s) for q in self.queues.values()), timeout_s)

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Export what is queued (each exporter within timeout_s), then shut exporters down."""
        _in_parallel(
            (functools.partial(q.shutdown, timeout_s) for q in self.queues.values()), timeout_s + 2.0
        )


class MetricsPipeline:
    """The agent's counters (telemetry.Stats) as `otel_ebpf.*` observable counters, read
    and exported every interval_s by one periodic reader per metric exporter."""

    def __init__(
        self,
        exporters: Mapping[str, MetricExporter],
        stats: Stats,
        interval_s: float = 60.0,
    ) -> None:
        self._stats = stats
        readers = [
            PeriodicExportingMetricReader(CountedMetricExporter(exporter, name, stats),
                                          export_interval_millis=interval_s * 1000)
            for name, exporter in exporters.items()
            if not isinstance(exporter, DisabledExporter)
        ]
        resource = Resource(
            {
                "service.name": "otel-ebpf",
                "host.name": socket.gethostname(),
                "telemetry.distro.name": "otel-ebpf",
                "telemetry.distro.version": __version__,
            }
        )
        # not the global provider: the agent's own metrics must not mix with anything else's
        self.provider = MeterProvider(metric_readers=readers, resource=resource)
        meter = self.provider.get_meter("otel-ebpf", __version__)
        for name, (unit, description) in COUNTERS.items():
            meter.create_observable_counter(
                f"otel_ebpf.{name}",
                callbacks=[functools.partial(self._observe, name)],
                unit=unit,
                description=description,
            )

    def _observe(self, name: str, options: CallbackOptions) -> Iterable[Observation]:
        series = [
            Observation(value, dict(labels))
            for (counter, labels), value in self._stats.snapshot().items()
            if counter == name
        ]
        # a counter never touched still reports 0, so dashboards see it exists
        return series or [Observation(0)]

    def force_flush(self, timeout_s: float = 10.0) -> bool:
        return self.provider.force_flush(int(timeout_s * 1000))

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """A last collection and export, then the exporters shut down."""
        self.provider.shutdown(timeout_millis=timeout_s * 1000)
