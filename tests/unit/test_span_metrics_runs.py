"""SpanMetrics.record finds the series of a run of measurements (one instrument, one
attributes dict; or a Measurements, a run made as one object) once and a dict's sorted key
once per call: held to its reference, one value at a time through SpanMetrics._add, on
drawn spans."""

import math
import random

import pytest
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from otel_ebpf.protocols.base import (
    ConnInfo,
    Measurement,
    Measurements,
    NeutralSpan,
    Role,
    SpanKind,
)

from otel_ebpf.export import span_metrics as sm
from otel_ebpf.export.span_metrics import SpanMetrics
from otel_ebpf.spans.resources import ProcessResources
from otel_ebpf.telemetry import Stats

from tests.unit.test_span_metrics import INSTRUMENTS

NAMES = [*INSTRUMENTS, "gen_ai.undeclared"]
# pids that exist nowhere (above pid_max): the resource is the minimal one, from comm
PIDS = [9_000_001, 9_000_002, 9_000_003]
VALUES = [0.0, 0.01, 0.05, 1.0, 3, 16, 300, 1e9, -1.0, math.nan, math.inf, -0.0, True]


class _Idle(MetricExporter):
    def __init__(self) -> None:
        super().__init__()

    def export(self, metrics_data, timeout_millis: float = 10_000, **kwargs) -> MetricExportResult:
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs) -> None:
        pass


def _draw_spans(rng: random.Random) -> list[NeutralSpan]:
    # a few dicts shared across measurements and spans, as the layers share them, and
    # equal dicts that are other objects (the same series, found by value)
    dicts = [{"gen_ai.request.model": "m-7b"}, {"gen_ai.request.model": "m-7b"},
             {"gen_ai.token.type": "input"}, {"server.port": 8000, "flag": True},
             {"server.port": 8000.0, "flag": 1}, {"tags": ["a", "b"]}, {}]
    spans = []
    for _ in range(rng.randint(0, 6)):
        pid = rng.choice(PIDS)
        conn = ConnInfo(pid=pid, fd=3, generation=1, role=Role.CLIENT, transport="stream",
                        family="ipv4", comm=f"proc-{pid % 10}")
        measurements = []
        for _ in range(rng.randint(0, 5)):
            name, attrs = rng.choice(NAMES), rng.choice(dicts)
            # runs of one instrument and one dict, as an LLM span's per-chunk gaps: one
            # Measurement each, or all in one Measurements (empty ones too)
            values = [rng.choice(VALUES) for _ in range(rng.choice((0, 1, 1, 2, 31)))]
            if rng.random() < 0.3:
                measurements.append(Measurements(name, values, attrs))
            else:
                measurements += [Measurement(name, value, attrs) for value in values]
        spans.append(NeutralSpan(name="chat m-7b", kind=SpanKind.CLIENT, start_ns=1, end_ns=2,
                                 conn=conn, measurements=measurements))
    return spans


def _reference_record(metrics: SpanMetrics, spans: list[NeutralSpan]) -> None:
    """record() with its loop as it was: _add for every measurement."""
    pending = [s for s in spans if s.measurements]
    resources = metrics._pid_resource
    looked_up = {}
    for s in pending:
        if s.pid not in resources and s.pid not in looked_up:
            if metrics._series_count >= metrics._max_series:
                continue
            looked_up[s.pid] = sm.resource_for(metrics._process_resources.get(s.pid, s.conn.comm))
    dropped: dict[str, int] = {}
    with metrics._lock:
        if looked_up:
            if len(resources) + len(looked_up) > metrics._max_series:
                resources.clear()
            for pid, resource in looked_up.items():
                resources.setdefault(pid, resource)
        for s in pending:
            resource = resources.get(s.pid)
            for m in s.measurements:
                values = m.values if isinstance(m, Measurements) else [m.value]
                for value in values:
                    reason = metrics._add(resource, m.instrument, value, m.attributes, 1)
                    if reason:
                        dropped[reason] = dropped.get(reason, 0) + 1
    for reason, n in dropped.items():
        metrics._stats.add("metrics.measurements_dropped", n, reason=reason)


def _state(metrics: SpanMetrics, stats: Stats) -> tuple:
    series = {
        (resource.attributes.get("process.pid"), key):
            (s.attributes, s.bucket_counts, s.count, s.sum, s.min, s.max)
        for resource, process in metrics._processes.items()
        for key, s in process.series.items()
    }
    return series, metrics._series_count, dict(metrics._pid_resource), stats.snapshot()


@pytest.mark.parametrize("seed", range(200))
def test_record_matches_one_measurement_at_a_time(seed, monkeypatch):
    monkeypatch.setattr(sm.time, "time_ns", lambda: 1)
    rng = random.Random(seed)
    max_series = rng.choice((1, 3, 6, 10_000))
    sides = []
    for _ in range(2):
        stats = Stats()
        sides.append((SpanMetrics({"idle": _Idle()}, INSTRUMENTS, ProcessResources(), stats,
                                  interval_s=0, max_series=max_series), stats))
    (fast, fast_stats), (ref, ref_stats) = sides
    for _ in range(rng.randint(1, 4)):
        batch = _draw_spans(rng)
        fast.record(batch)
        _reference_record(ref, batch)
        assert _state(fast, fast_stats) == _state(ref, ref_stats)
    for m in (fast, ref):
        m.shutdown()


def test_drawn_spans_reach_every_reason():
    """The draws above cross each outcome: series made, refused at the limit, undeclared
    instruments and invalid values."""
    reasons = set()
    made = 0
    for seed in range(200):
        rng = random.Random(seed)
        max_series = rng.choice((1, 3, 6, 10_000))
        stats = Stats()
        metrics = SpanMetrics({"idle": _Idle()}, INSTRUMENTS, ProcessResources(), stats,
                              interval_s=0, max_series=max_series)
        for _ in range(rng.randint(1, 4)):
            metrics.record(_draw_spans(rng))
        made += metrics._series_count
        reasons |= {dict(labels)["reason"] for (name, labels) in stats.snapshot()
                    if name == "metrics.measurements_dropped"}
        metrics.shutdown()
    assert made > 0
    assert reasons == {sm.UNDECLARED, sm.INVALID_VALUE, sm.SERIES_LIMIT}
