"""Span measurements (parsers' and layers' `Measurement`s) as cumulative OTLP histograms,
one resource per traced process, exported every interval to every metric exporter."""

from __future__ import annotations

import bisect
import logging
import math
import threading
import time
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from itertools import pairwise
from typing import Any

from opentelemetry.sdk.metrics.export import (
    AggregationTemporality,
    Histogram,
    HistogramDataPoint,
    Metric,
    MetricExporter,
    MetricsData,
    ResourceMetrics,
    ScopeMetrics,
)
from opentelemetry.sdk.resources import Resource

from otel_ebpf.export.metrics_send import MetricsSender
from otel_ebpf.protocols.base import AttributeValue, Instrument, Measurements, NeutralSpan
from otel_ebpf.spans.convert import SCOPE, resource_for
from otel_ebpf.spans.resources import ProcessResources
from otel_ebpf.telemetry import Stats

log = logging.getLogger(__name__)

DEFAULT_MAX_SERIES = 10_000
# how long an ended process's series keep taking late spans (its connections' last spans
# come after the exit event, from the close or the idle sweep) before they are dropped
DEFAULT_LINGER_S = 5.0

# reasons a measurement is dropped (metrics.measurements_dropped{reason})
UNDECLARED = "undeclared_instrument"
INVALID_VALUE = "invalid_value"
SERIES_LIMIT = "series_limit"

SeriesKey = tuple[str, tuple[tuple[str, str, Any], ...]]


def _attributes_key(attributes: Mapping[str, AttributeValue]) -> tuple[tuple[str, str, Any], ...]:
    # lists are not hashable, as tuples they compare by value; the type keeps True, 1 and
    # 1.0 (equal in Python, different in OTLP) in series of their own
    return tuple(
        sorted(
            (k, type(v).__name__, tuple(v) if isinstance(v, list) else v)
            for k, v in attributes.items()
        )
    )


def gather_instruments(sources: Iterable[Any]) -> dict[str, Instrument]:
    """The instruments the classes of `sources` (parsers, layers) declare, merged by name.

    A name two classes declare differently keeps the first declaration (logged): a
    metric has one unit and one set of buckets, whoever records into it.
    """
    merged: dict[str, Instrument] = {}
    owner: dict[str, str] = {}
    for source in sources:
        cls = type(source)
        for name, instrument in (getattr(cls, "instruments", None) or {}).items():
            if name not in merged:
                merged[name], owner[name] = instrument, cls.__name__
            elif merged[name] != instrument:
                log.error("instrument %s: %s declares %r but %s declared %r first; keeping %s's",
                          name, cls.__name__, instrument, owner[name], merged[name], owner[name])
    return merged


def _valid_boundaries(name: str, instrument: Instrument) -> bool:
    bounds = instrument.boundaries
    if all(math.isfinite(b) for b in bounds) and all(a < b for a, b in pairwise(bounds)):
        return True
    log.error("instrument %s: boundaries %r are not finite and strictly increasing; "
              "its measurements are dropped", name, bounds)
    return False


@dataclass(slots=True)
class _Series:
    """One histogram data point's running totals (cumulative since `start_ns`)."""

    start_ns: int
    attributes: dict[str, AttributeValue]
    bucket_counts: list[int]
    count: int = 0
    sum: float = 0.0
    min: float = math.inf
    max: float = -math.inf

    def add_all(self, values: list[float], bounds: tuple[float, ...]) -> None:
        """add() for each value in turn, its bucket found in `bounds` (the same sums, in
        the same order)."""
        buckets = self.bucket_counts
        total, low, high = self.sum, self.min, self.max
        for value in values:
            total += value
            # bucket i holds (bounds[i-1], bounds[i]]: upper bounds are inclusive
            buckets[bisect.bisect_left(bounds, value)] += 1
            if value < low:
                low = value
            if value > high:
                high = value
        self.count += len(values)
        self.sum, self.min, self.max = total, low, high

    def add(self, value: float, bucket: int) -> None:
        self.count += 1
        self.sum += value
        self.bucket_counts[bucket] += 1
        if value < self.min:
            self.min = value
        if value > self.max:
            self.max = value


@dataclass(slots=True)
class _Process:
    """The series recorded against one process resource."""

    series: dict[SeriesKey, _Series] = field(default_factory=dict)
    ended_at: float | None = None  # monotonic time of forget(), while it lingers


class SpanMetrics:
    """Aggregates the measurements spans carry and exports them as histograms.

    record() is called from the capture loop; a daemon thread exports every interval_s,
    and shutdown() exports a last time. The exporters are borrowed (the agent's
    MetricsPipeline uses and shuts down the same objects): they are never shut down here.
    """

    def __init__(
        self,
        exporters: Mapping[str, MetricExporter],
        instruments: Mapping[str, Instrument],
        resources: ProcessResources,
        stats: Stats,
        interval_s: float = 60.0,
        *,
        max_series: int = DEFAULT_MAX_SERIES,
        export_timeout_s: float = 10.0,
        linger_s: float = DEFAULT_LINGER_S,
    ) -> None:
        # one export at a time per exporter, all within one deadline (export/metrics_send.py)
        self._sender = MetricsSender(exporters, stats, export_timeout_s, what="span metrics")
        self._exporters = self._sender.exporters
        self._instruments = {
            name: instrument
            for name, instrument in instruments.items()
            if _valid_boundaries(name, instrument)
        }
        self._process_resources = resources
        self._stats = stats
        self._interval_s = interval_s
        self._max_series = max_series
        self._export_timeout_s = export_timeout_s
        self._linger_s = linger_s

        self._lock = threading.Lock()
        self._processes: dict[Resource, _Process] = {}
        self._pid_resource: dict[int, Resource] = {}
        self._series_count = 0
        self._warned: set[str] = set()
        self._export_lock = threading.Lock()  # the timer's export and shutdown's, in turn
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None
        if self._exporters and interval_s > 0:
            self._thread = threading.Thread(
                target=self._run, name="otel-ebpf-span-metrics", daemon=True
            )
            self._thread.start()

    @property
    def instruments(self) -> Mapping[str, Instrument]:
        return self._instruments

    # -- recording (capture loop)

    def record(self, spans: Iterable[NeutralSpan]) -> None:
        """Add every measurement of `spans` to its series. Never raises on bad measurements:
        they are counted in `metrics.measurements_dropped{reason}`."""
        if not self._exporters or self._stopped.is_set():
            return
        pending = [span for span in spans if span.measurements]
        if not pending:
            return
        # a pid's resource is read from /proc once, outside the lock
        resources = self._pid_resource
        looked_up: dict[int, Resource] = {}
        for span in pending:
            pid = span.pid
            if pid not in resources and pid not in looked_up:
                if self._series_count >= self._max_series:
                    continue  # a new process would be refused anyway: spare the /proc reads
                looked_up[pid] = resource_for(self._process_resources.get(pid, span.conn.comm))

        dropped: dict[str, int] = {}
        now_ns = time.time_ns()
        with self._lock:
            if looked_up:
                if len(resources) + len(looked_up) > self._max_series:
                    resources.clear()  # pids that were never forgotten: bound the cache
                for pid, resource in looked_up.items():
                    resources.setdefault(pid, resource)
            # Measurements share attribute dicts (an LLM client span's ~31 per-chunk gaps are
            # one dict): a dict's sorted key is made once per call, keyed by its id (every
            # dict stays alive, and unchanged, for the call), and a run of measurements of
            # one instrument and one dict is added to its series in one step.
            keys: dict[int, tuple] = {}
            for span in pending:
                resource = resources.get(span.pid)
                measurements = span.measurements
                i, n = 0, len(measurements)
                while i < n:
                    first = measurements[i]
                    name, attributes = first.instrument, first.attributes
                    if type(first) is Measurements:  # a run made as one
                        if first.values:
                            self._add_run(resource, name, attributes, first.values, now_ns,
                                          keys, dropped)
                        i += 1
                        continue
                    j = i + 1
                    while (j < n and measurements[j].attributes is attributes
                           and measurements[j].instrument == name
                           and type(measurements[j]) is not Measurements):
                        j += 1
                    self._add_run(resource, name, attributes,
                                  [m.value for m in measurements[i:j]], now_ns, keys, dropped)
                    i = j
        for reason, n in dropped.items():
            self._stats.add("metrics.measurements_dropped", n, reason=reason)

    def _add_run(
        self,
        resource: Resource | None,
        name: str,
        attributes: Mapping[str, AttributeValue],
        values: Sequence[float],
        now_ns: int,
        keys: dict[int, tuple],
        dropped: dict[str, int],
    ) -> None:
        """_add for each of `values` in turn (the lock held), the drops counted in
        `dropped` by reason: the instrument, each value, then the series, in _add's order."""
        found, bounds = self._find(resource, name, attributes, now_ns, keys)
        if found is UNDECLARED:
            dropped[UNDECLARED] = dropped.get(UNDECLARED, 0) + len(values)
            return
        isfinite = math.isfinite
        valid = [v for v in values if isfinite(v) and v >= 0]  # histograms: non-negative
        if len(valid) < len(values):
            dropped[INVALID_VALUE] = dropped.get(INVALID_VALUE, 0) + len(values) - len(valid)
        if not valid:
            return
        if found is None:  # a new series, made for its first valid value
            found, bounds = self._find(resource, name, attributes, now_ns, keys, create=True)
        if type(found) is not _Series:
            dropped[SERIES_LIMIT] = dropped.get(SERIES_LIMIT, 0) + len(valid)
            return
        found.add_all(valid, bounds)

    def _find(
        self,
        resource: Resource | None,
        name: str,
        attributes: Mapping[str, AttributeValue],
        now_ns: int,
        keys: dict[int, tuple],
        create: bool = False,
    ) -> tuple[_Series | str | None, tuple[float, ...]]:
        """The series of (resource, name, attributes) and its instrument's boundaries (the
        lock held): UNDECLARED, None where there is no series yet, or (with `create`, as
        _add makes one for a valid value) the new series or SERIES_LIMIT."""
        instrument = self._instruments.get(name)
        if instrument is None:
            if name not in self._warned:
                self._warned.add(name)
                log.warning("measurement for undeclared instrument %r dropped", name)
            return UNDECLARED, ()
        process = self._processes.get(resource) if resource is not None else None
        attributes_key = keys.get(id(attributes))
        if attributes_key is None:
            attributes_key = keys[id(attributes)] = _attributes_key(attributes)
        key = (name, attributes_key)
        series = process.series.get(key) if process is not None else None
        if series is None and create:
            if resource is None or self._series_count >= self._max_series:
                return SERIES_LIMIT, ()
            if process is None:
                process = self._processes[resource] = _Process()
            series = process.series[key] = _Series(
                now_ns, dict(attributes), [0] * (len(instrument.boundaries) + 1)
            )
            self._series_count += 1
        return series, instrument.boundaries

    def _add(
        self,
        resource: Resource | None,
        name: str,
        value: float,
        attributes: Mapping[str, AttributeValue],
        now_ns: int,
    ) -> str | None:
        """Record one value (the lock held); the reason it was dropped, or None. The
        reference of record()'s loop, which finds a run's series once."""
        instrument = self._instruments.get(name)
        if instrument is None:
            if name not in self._warned:
                self._warned.add(name)
                log.warning("measurement for undeclared instrument %r dropped", name)
            return UNDECLARED
        if not math.isfinite(value) or value < 0:
            return INVALID_VALUE  # histograms take non-negative values (OTel API)
        process = self._processes.get(resource) if resource is not None else None
        key = (name, _attributes_key(attributes))
        series = process.series.get(key) if process is not None else None
        if series is None:
            if resource is None or self._series_count >= self._max_series:
                return SERIES_LIMIT
            if process is None:
                process = self._processes[resource] = _Process()
            series = process.series[key] = _Series(
                now_ns, dict(attributes), [0] * (len(instrument.boundaries) + 1)
            )
            self._series_count += 1
        # bucket i holds (bounds[i-1], bounds[i]]: upper bounds are inclusive
        series.add(value, bisect.bisect_left(instrument.boundaries, value))
        return None

    def forget(self, pid: int) -> None:
        """The process ended: its series are exported once more (after linger_s, which late
        spans still reach) and then dropped; a new process with this pid is looked up anew."""
        with self._lock:
            resource = self._pid_resource.pop(pid, None)
            process = self._processes.get(resource) if resource is not None else None
            if process is not None and process.ended_at is None:
                process.ended_at = time.monotonic()

    # -- collecting and exporting

    def collect(self) -> MetricsData | None:
        """Every series as it stands, one ResourceMetrics per process; None when there is
        none. Ended processes past their linger are included one last time and dropped."""
        now_ns = time.time_ns()
        now = time.monotonic()
        resource_metrics: list[ResourceMetrics] = []
        with self._lock:
            for resource, process in list(self._processes.items()):
                by_instrument: dict[str, list[HistogramDataPoint]] = {}
                for (name, _), s in process.series.items():
                    by_instrument.setdefault(name, []).append(
                        HistogramDataPoint(
                            attributes=dict(s.attributes),
                            start_time_unix_nano=s.start_ns,
                            time_unix_nano=now_ns,
                            count=s.count,
                            sum=s.sum,
                            bucket_counts=list(s.bucket_counts),
                            explicit_bounds=list(self._instruments[name].boundaries),
                            min=s.min,
                            max=s.max,
                        )
                    )
                metrics = [
                    Metric(
                        name=name,
                        description=self._instruments[name].description,
                        unit=self._instruments[name].unit,
                        data=Histogram(points, AggregationTemporality.CUMULATIVE),
                    )
                    for name, points in by_instrument.items()
                ]
                resource_metrics.append(
                    ResourceMetrics(resource, [ScopeMetrics(SCOPE, metrics, "")], "")
                )
                if process.ended_at is not None and now - process.ended_at >= self._linger_s:
                    del self._processes[resource]
                    self._series_count -= len(process.series)
                    # a late span may have cached the pid again: a new process reusing it
                    # must be looked up, not take this one's resource
                    pid = resource.attributes.get("process.pid")
                    if isinstance(pid, int) and self._pid_resource.get(pid) == resource:
                        del self._pid_resource[pid]
        if not resource_metrics:
            return None
        return MetricsData(resource_metrics)

    def export(self) -> None:
        """Collect and export to every exporter, each on its own thread for at most
        export_timeout_s; failures, timeouts and skips count in `metrics.exports_failed`."""
        with self._export_lock:
            data = self.collect()
            if data is not None:
                self._sender.send(data)

    def _run(self) -> None:
        while not self._stopped.wait(self._interval_s):
            try:
                self.export()
            except Exception:  # keep exporting next interval
                log.exception("span metrics: export failed")

    def shutdown(self) -> None:
        """Stop the timer and export a last time. Later record() calls are ignored."""
        if self._stopped.is_set():
            return
        self._stopped.set()
        if self._thread is not None:
            self._thread.join(self._export_timeout_s + 1.0)
        self.export()
