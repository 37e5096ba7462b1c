"""Sends MetricsData built outside the SDK's MeterProvider (metrics with a resource per
process, or with start times of their own) to every metric exporter, each on its own
thread, all within one deadline; outcomes other than success are counted, here and for the
exports the SDK's periodic reader makes (CountedMetricExporter)."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData

from otel_ebpf.export.factory import DisabledExporter
from otel_ebpf.telemetry import Stats

log = logging.getLogger(__name__)


def outcome(exporter: MetricExporter, result: MetricExportResult) -> str:
    """ok | not_accepted (a backend without metrics: the exporter has said so once, see
    otlp_grpc.GrpcMetricExporter) | failure."""
    if result is MetricExportResult.SUCCESS:
        return "ok"
    return "not_accepted" if getattr(exporter, "refused", False) else "failure"


class MetricsSender:
    """One export at a time per exporter: a backend still busy with the last export is
    skipped this time (cumulative data loses nothing by that). The exporters are borrowed:
    their owner (the agent's MetricsPipeline) shuts them down."""

    def __init__(self, exporters: Mapping[str, MetricExporter], stats: Stats,
                 timeout_s: float = 10.0, what: str = "metrics") -> None:
        self.exporters = {name: e for name, e in exporters.items()
                          if not isinstance(e, DisabledExporter)}
        self._stats = stats
        self._timeout_s = timeout_s
        self._what = what
        self.busy = {name: threading.Lock() for name in self.exporters}  # held while exporting

    def send(self, data: MetricsData) -> dict[str, str]:
        """Export `data` everywhere; {exporter: ok | failure | not_accepted | busy | timeout}."""
        results: dict[str, str] = {}
        threads = [threading.Thread(target=self._one, args=(name, data, results), daemon=True)
                   for name in self.exporters]
        for t in threads:
            t.start()
        deadline = time.monotonic() + self._timeout_s
        for t in threads:
            t.join(max(deadline - time.monotonic(), 0.0))
        outcomes = {name: results.get(name, "timeout") for name in self.exporters}
        for name, outcome in outcomes.items():
            if outcome != "ok":
                self._stats.add("metrics.exports_failed", 1, exporter=name, reason=outcome)
        return outcomes

    def _one(self, name: str, data: MetricsData, results: dict[str, str]) -> None:
        busy = self.busy[name]
        if not busy.acquire(blocking=False):
            results[name] = "busy"
            return
        try:
            exporter = self.exporters[name]
            result = exporter.export(data, timeout_millis=self._timeout_s * 1000)
            results[name] = outcome(exporter, result)
        except Exception:  # an exporter's bug must not stop the next export
            log.exception("%s: exporter %s raised", self._what, name)
            results[name] = "failure"
        finally:
            busy.release()


class CountedMetricExporter(MetricExporter):
    """`exporter` as the SDK's PeriodicExportingMetricReader gets it: the reader drops the
    result of each export, this counts those that fail in `metrics.exports_failed`, as
    MetricsSender does. It owns `exporter`: shutting it down shuts that down."""

    def __init__(self, exporter: MetricExporter, name: str, stats: Stats) -> None:
        super().__init__(preferred_temporality=exporter._preferred_temporality,
                         preferred_aggregation=exporter._preferred_aggregation)
        self.exporter = exporter
        self._name = name
        self._stats = stats

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        try:
            result = self.exporter.export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except Exception:
            self._stats.add("metrics.exports_failed", 1, exporter=self._name, reason="failure")
            raise  # the reader logs it
        if (reason := outcome(self.exporter, result)) != "ok":
            self._stats.add("metrics.exports_failed", 1, exporter=self._name, reason=reason)
        return result

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return self.exporter.force_flush(timeout_millis=timeout_millis)

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        self.exporter.shutdown(timeout_millis=timeout_millis, **kwargs)
