"""Sends MetricsData built outside the SDK's MeterProvider (metrics with a resource per
process, or with start times of their own) to every metric exporter, each on its own
thread, all within one deadline; outcomes other than success are counted."""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Mapping

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData

from otel_ebpf.export.factory import DisabledExporter
from otel_ebpf.telemetry import Stats

log = logging.getLogger(__name__)


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
        """Export `data` everywhere; {exporter: ok | failure | busy | timeout}."""
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
            result = self.exporters[name].export(data, timeout_millis=self._timeout_s * 1000)
            results[name] = "ok" if result is MetricExportResult.SUCCESS else "failure"
        except Exception:  # an exporter's bug must not stop the next export
            log.exception("%s: exporter %s raised", self._what, name)
            results[name] = "failure"
        finally:
            busy.release()
