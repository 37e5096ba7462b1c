"""SpanMetrics: span measurements -> cumulative OTLP histograms per process, through the
OTLP/JSON file exporter and a real OTLP receiver (rotel)."""

import json
import threading
import time

import pytest
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult
from otel_ebpf.protocols.base import (
    ConnInfo,
    Instrument,
    Measurement,
    NeutralSpan,
    ProtocolParser,
    Role,
    SpanKind,
)

from otel_ebpf.export.factory import DisabledExporter, build_metric_exporters
from otel_ebpf.export.file import FileMetricExporter
from otel_ebpf.export.span_metrics import SpanMetrics, gather_instruments
from otel_ebpf.spans.resources import ProcessResources
from otel_ebpf.telemetry import Stats

DURATION = Instrument("s", "Duration of a GenAI operation", (0.01, 0.1, 1.0, 10.0))
TOKENS = Instrument("{token}", "Tokens used", (1, 4, 16, 64, 256))
INSTRUMENTS = {"gen_ai.client.operation.duration": DURATION, "gen_ai.client.token.usage": TOKENS}
# pids that exist nowhere (above pid_max): the resource is the minimal one, from comm
PID_A, PID_B = 9_000_001, 9_000_002


def span(pid, comm, *measurements):
    conn = ConnInfo(pid=pid, fd=3, generation=1, role=Role.CLIENT, transport="stream",
                    family="ipv4", comm=comm)
    return NeutralSpan(name="chat m-7b", kind=SpanKind.CLIENT, start_ns=1, end_ns=2, conn=conn,
                       measurements=list(measurements))


def duration(value, **attrs):
    return Measurement("gen_ai.client.operation.duration", value,
                       {"gen_ai.request.model": "m-7b", **attrs})


def tokens(value, kind):
    return Measurement("gen_ai.client.token.usage", value, {"gen_ai.token.type": kind})


def requests(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def attrs_of(node):
    out = {}
    for a in node.get("attributes", []):
        value = a["value"]
        out[a["key"]] = next(iter(value.values()))
    return out


def by_pid(request):
    """{pid: {metric name: metric}} of one ExportMetricsServiceRequest."""
    out = {}
    for rm in request["resourceMetrics"]:
        pid = int(attrs_of(rm["resource"])["process.pid"])
        assert pid not in out, "one ResourceMetrics per process"
        (sm,) = rm["scopeMetrics"]
        assert sm["scope"] == {"name": "otel-ebpf", "version": "0.1.0"}
        out[pid] = {m["name"]: m for m in sm["metrics"]}
    return out


def points(metric):
    hist = metric["histogram"]
    assert hist["aggregationTemporality"] == 2  # CUMULATIVE
    return hist["dataPoints"]


@pytest.fixture
def file_metrics(tmp_path):
    path = tmp_path / "metrics.jsonl"
    exporter = FileMetricExporter(str(path))
    stats = Stats()
    made = []

    def make(**kwargs):
        kwargs.setdefault("interval_s", 3600)  # exports only when the test says
        m = SpanMetrics({"file": exporter}, INSTRUMENTS, ProcessResources(), stats, **kwargs)
        made.append(m)
        return m

    yield make, path, stats
    for m in made:
        m.shutdown()
    exporter.shutdown()


def test_buckets_sum_min_max_attributes_per_process(file_metrics):
    make, path, stats = file_metrics
    metrics = make()
    metrics.record([
        # 0.01 sits on a bound: upper bounds are inclusive, so bucket 0
        span(PID_A, "gateway", duration(0.01), duration(0.05), tokens(3, "input")),
        span(PID_A, "gateway", duration(2.5), duration(50.0), tokens(300, "input"),
             tokens(16, "output")),
        span(PID_B, "rag-svc", duration(0.2, **{"error.type": "timeout"})),
        span(PID_B, "rag-svc"),  # no measurements
    ])
    metrics.export()

    (request,) = requests(path)
    procs = by_pid(request)
    assert set(procs) == {PID_A, PID_B}
    resources = {int(attrs_of(rm["resource"])["process.pid"]): attrs_of(rm["resource"])
                 for rm in request["resourceMetrics"]}
    assert resources[PID_A]["service.name"] == "gateway"
    assert resources[PID_B]["service.name"] == "rag-svc"

    a = procs[PID_A]
    assert set(a) == {"gen_ai.client.operation.duration", "gen_ai.client.token.usage"}
    dur = a["gen_ai.client.operation.duration"]
    assert dur["unit"] == "s" and dur["description"] == "Duration of a GenAI operation"
    (p,) = points(dur)
    assert attrs_of(p) == {"gen_ai.request.model": "m-7b"}
    assert p["count"] == "4"  # uint64: a string in OTLP/JSON
    assert p["sum"] == pytest.approx(52.56)
    assert p["min"] == 0.01 and p["max"] == 50.0
    assert p["explicitBounds"] == [0.01, 0.1, 1.0, 10.0]
    assert [int(c) for c in p["bucketCounts"]] == [1, 1, 0, 1, 1]

    by_type = {attrs_of(p)["gen_ai.token.type"]: p for p in points(a["gen_ai.client.token.usage"])}
    assert set(by_type) == {"input", "output"}
    assert [int(c) for c in by_type["input"]["bucketCounts"]] == [0, 1, 0, 0, 0, 1]
    assert by_type["input"]["sum"] == 303 and by_type["input"]["count"] == "2"
    assert by_type["input"]["min"] == 3 and by_type["input"]["max"] == 300
    assert [int(c) for c in by_type["output"]["bucketCounts"]] == [0, 0, 1, 0, 0, 0]

    b = procs[PID_B]
    assert set(b) == {"gen_ai.client.operation.duration"}
    (p,) = points(b["gen_ai.client.operation.duration"])
    assert attrs_of(p) == {"gen_ai.request.model": "m-7b", "error.type": "timeout"}
    assert [int(c) for c in p["bucketCounts"]] == [0, 0, 1, 0, 0]
    assert p["count"] == "1" and p["sum"] == 0.2 and p["min"] == p["max"] == 0.2
    assert stats.total("metrics.measurements_dropped") == 0
    assert stats.total("metrics.exports_failed") == 0


def test_cumulative_across_exports_and_start_time_kept(file_metrics):
    make, path, _ = file_metrics
    metrics = make()
    before = time.time_ns()
    metrics.record([span(PID_A, "gateway", duration(0.5))])
    metrics.export()
    metrics.record([span(PID_A, "gateway", duration(5.0), duration(0.001))])
    metrics.export()
    metrics.export()  # nothing new: the same cumulative totals again

    first, second, third = (points(by_pid(r)[PID_A]["gen_ai.client.operation.duration"])[0]
                            for r in requests(path))
    assert [int(c) for c in first["bucketCounts"]] == [0, 0, 1, 0, 0]
    assert first["count"] == "1" and first["sum"] == 0.5
    assert [int(c) for c in second["bucketCounts"]] == [1, 0, 1, 1, 0]
    assert second["count"] == "3" and second["sum"] == pytest.approx(5.501)
    assert second["min"] == 0.001 and second["max"] == 5.0
    assert third["bucketCounts"] == second["bucketCounts"] and third["sum"] == second["sum"]
    start = int(first["startTimeUnixNano"])
    assert before <= start <= int(first["timeUnixNano"])
    assert int(second["startTimeUnixNano"]) == start == int(third["startTimeUnixNano"])
    assert int(first["timeUnixNano"]) <= int(second["timeUnixNano"]) <= int(third["timeUnixNano"])


def test_nothing_recorded_exports_nothing(file_metrics):
    make, path, stats = file_metrics
    metrics = make()
    metrics.record([])
    metrics.record([span(PID_A, "gateway")])
    metrics.export()
    metrics.shutdown()
    assert path.read_text() == ""
    assert stats.total("metrics.exports_failed") == 0


def test_undeclared_and_invalid_measurements_are_counted_and_dropped(file_metrics):
    make, path, stats = file_metrics
    metrics = make()
    metrics.record([span(PID_A, "gateway",
                         Measurement("gen_ai.server.time_to_first_token", 0.3),
                         Measurement("gen_ai.server.time_to_first_token", 0.4),
                         duration(float("nan")), duration(-1.0), duration(0.3))])
    snapshot = stats.snapshot()
    assert snapshot[("metrics.measurements_dropped", (("reason", "undeclared_instrument"),))] == 2
    assert snapshot[("metrics.measurements_dropped", (("reason", "invalid_value"),))] == 2
    metrics.export()
    (request,) = requests(path)
    (p,) = points(by_pid(request)[PID_A]["gen_ai.client.operation.duration"])
    assert p["count"] == "1" and p["sum"] == 0.3


def test_series_bound_refuses_and_counts_new_series_only(file_metrics):
    make, path, stats = file_metrics
    metrics = make(max_series=2)
    metrics.record([span(PID_A, "gateway", duration(0.5, route="a"), duration(0.5, route="b"))])
    # a third attribute set and a new process are refused; existing series still grow
    metrics.record([span(PID_A, "gateway", duration(0.5, route="c"), duration(0.7, route="a")),
                    span(PID_B, "rag-svc", duration(0.5), tokens(5, "input"))])
    assert stats.snapshot() == {
        ("metrics.measurements_dropped", (("reason", "series_limit"),)): 3
    }
    metrics.export()
    (request,) = requests(path)
    procs = by_pid(request)
    assert set(procs) == {PID_A}
    got = {attrs_of(p)["route"]: p for p in points(procs[PID_A]["gen_ai.client.operation.duration"])}
    assert set(got) == {"a", "b"}
    assert got["a"]["count"] == "2" and got["a"]["sum"] == pytest.approx(1.2)


def test_attribute_types_and_lists_make_distinct_series(file_metrics):
    make, path, _ = file_metrics
    metrics = make()
    metrics.record([span(PID_A, "gateway", duration(0.5, flag=True), duration(0.5, flag=1),
                         duration(0.5, tags=["x", "y"]), duration(0.6, tags=["x", "y"]))])
    metrics.export()
    (request,) = requests(path)
    pts = points(by_pid(request)[PID_A]["gen_ai.client.operation.duration"])
    assert sorted(p["count"] for p in pts) == ["1", "1", "2"]
    tagged = next(p for p in pts if "tags" in attrs_of(p))
    assert attrs_of(tagged)["tags"] == {"values": [{"stringValue": "x"}, {"stringValue": "y"}]}


def test_forget_exports_once_more_then_drops(file_metrics):
    make, path, _ = file_metrics
    metrics = make(linger_s=0)
    metrics.record([span(PID_A, "gateway", duration(0.5)), span(PID_B, "rag-svc", duration(0.5))])
    metrics.forget(PID_A)
    metrics.export()
    metrics.export()
    metrics.record([span(PID_A, "gateway", duration(2.0))])  # a new process, new series
    metrics.export()
    first, second, third = (by_pid(r) for r in requests(path))
    assert set(first) == {PID_A, PID_B} and set(second) == {PID_B} and set(third) == {PID_A, PID_B}
    (p,) = points(third[PID_A]["gen_ai.client.operation.duration"])
    assert p["count"] == "1" and p["sum"] == 2.0  # restarted, not added to the old series
    (old,) = points(first[PID_A]["gen_ai.client.operation.duration"])
    assert int(p["startTimeUnixNano"]) > int(old["startTimeUnixNano"])


def test_forget_lingers_for_late_spans(file_metrics):
    make, path, _ = file_metrics
    metrics = make(linger_s=3600)
    metrics.record([span(PID_A, "gateway", duration(0.5))])
    metrics.forget(PID_A)
    metrics.record([span(PID_A, "gateway", duration(0.5))])  # its last connection's span
    metrics.export()
    metrics.export()
    for request in requests(path):
        (p,) = points(by_pid(request)[PID_A]["gen_ai.client.operation.duration"])
        assert p["count"] == "2"


def test_shutdown_exports_last_time_and_ignores_later_records(file_metrics):
    make, path, _ = file_metrics
    metrics = make()
    metrics.record([span(PID_A, "gateway", duration(0.5))])
    metrics.shutdown()
    metrics.record([span(PID_A, "gateway", duration(0.5))])
    metrics.shutdown()  # idempotent: no second export
    (request,) = requests(path)
    (p,) = points(by_pid(request)[PID_A]["gen_ai.client.operation.duration"])
    assert p["count"] == "1"


def test_timer_exports_every_interval(file_metrics):
    make, path, _ = file_metrics
    metrics = make(interval_s=0.05)
    metrics.record([span(PID_A, "gateway", duration(0.5))])
    deadline = time.monotonic() + 10
    while time.monotonic() < deadline and len(path.read_text().splitlines()) < 2:
        time.sleep(0.02)
    assert len(requests(path)) >= 2


class _Hanging(MetricExporter):
    """Blocks in export until released: a backend that stopped answering."""

    def __init__(self):
        super().__init__()
        self.release = threading.Event()
        self.calls = 0

    def export(self, metrics_data, timeout_millis=10_000, **kwargs):
        self.calls += 1
        self.release.wait(30)
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis=10_000):
        return True

    def shutdown(self, timeout_millis=30_000, **kwargs):
        pass


class _Failing(_Hanging):
    def export(self, metrics_data, timeout_millis=10_000, **kwargs):
        raise RuntimeError("backend bug")


def test_slow_or_failing_exporter_does_not_hold_the_others(tmp_path):
    path = tmp_path / "metrics.jsonl"
    good = FileMetricExporter(str(path))
    hanging = _Hanging()
    stats = Stats()
    metrics = SpanMetrics(
        {"file": good, "slow": hanging, "bad": _Failing(), "off": DisabledExporter("off", "")},
        INSTRUMENTS, ProcessResources(), stats, interval_s=3600, export_timeout_s=0.2,
    )
    metrics.record([span(PID_A, "gateway", duration(0.5))])
    t0 = time.monotonic()
    metrics.export()
    metrics.export()  # the hung export still runs: this one skips that exporter
    assert time.monotonic() - t0 < 2.0
    hanging.release.set()
    # the hung export ends on its own thread: wait for it, so the last export reaches it
    deadline = time.monotonic() + 5
    while metrics._sender.busy["slow"].locked() and time.monotonic() < deadline:
        time.sleep(0.01)
    metrics.shutdown()
    good.shutdown()
    assert len(requests(path)) == 3
    snapshot = stats.snapshot()
    key = "metrics.exports_failed"
    assert snapshot[(key, (("exporter", "slow"), ("reason", "timeout")))] == 1
    assert snapshot[(key, (("exporter", "slow"), ("reason", "busy")))] == 1
    assert snapshot[(key, (("exporter", "bad"), ("reason", "failure")))] == 3
    assert not any(labels for (name, labels) in snapshot if ("exporter", "file") in labels)
    assert hanging.calls == 2  # the skipped export never reached it


def test_without_exporters_nothing_is_kept():
    stats = Stats()
    metrics = SpanMetrics({"off": DisabledExporter("off", "")}, INSTRUMENTS, ProcessResources(),
                          stats)
    metrics.record([span(PID_A, "gateway", duration(0.5), Measurement("nope", 1))])
    assert metrics.collect() is None
    assert stats.snapshot() == {}
    metrics.shutdown()


def test_gather_instruments_merges_parser_classes():
    class A(ProtocolParser):
        name = "a"
        instruments = {"gen_ai.client.operation.duration": DURATION}
        infer = parse = resync = stitch = to_spans = None

    class B(A):
        name = "b"
        instruments = {"gen_ai.client.token.usage": TOKENS,
                       # a conflicting redeclaration: the first one stays
                       "gen_ai.client.operation.duration": Instrument("ms", "x", (1.0,))}

    merged = gather_instruments([A(), B()])
    assert merged == INSTRUMENTS
    assert gather_instruments([object()]) == {}


def test_bad_boundaries_drop_the_instrument(file_metrics):
    make, _, stats = file_metrics
    bad = SpanMetrics({"x": _Hanging()}, {"h": Instrument("s", "", (1.0, 0.5))},
                      ProcessResources(), stats, interval_s=0)
    assert bad.instruments == {}
    bad.record([span(PID_A, "gateway", Measurement("h", 0.7))])
    assert stats.total("metrics.measurements_dropped") == 1


def test_histograms_reach_rotel_over_otlp_grpc(tmp_path):
    from tests.support.rotel import Rotel

    collector = Rotel(tmp_path)
    try:
        exporters = build_metric_exporters(
            {"otlp": {"endpoint": f"http://127.0.0.1:{collector.grpc_port}", "timeout": 5}})
        stats = Stats()
        metrics = SpanMetrics(exporters, INSTRUMENTS, ProcessResources(), stats, interval_s=3600)
        metrics.record([span(PID_A, "gateway", duration(0.05), duration(2.5), duration(0.07)),
                        span(PID_B, "rag-svc", tokens(20, "output"))])
        metrics.shutdown()
        exporters["otlp"].shutdown()
        text = collector.wait_for("-> Name: gen_ai.client.operation.duration",
                                  "-> Name: gen_ai.client.token.usage")
    finally:
        collector.stop()
    assert stats.total("metrics.exports_failed") == 0
    dur = text.split("-> Name: gen_ai.client.operation.duration", 1)[1].split("Metric #", 1)[0]
    assert "-> DataType: Histogram" in dur
    assert "-> AggregationTemporality: AGGREGATION_TEMPORALITY_CUMULATIVE" in dur
    assert "-> gen_ai.request.model: Str(m-7b)" in dur
    fields = dict(line.split(": ", 1) for line in dur.splitlines() if ": " in line)
    assert fields["Count"] == "3" and float(fields["Sum"]) == pytest.approx(2.62)
    assert "\nMin: 0.05\n" in dur and "\nMax: 2.5\n" in dur
    assert "ExplicitBounds #3: 10\n" in dur
    buckets = [line.rsplit(" ", 1)[1] for line in dur.splitlines() if line.startswith("Buckets #")]
    assert buckets == ["0", "2", "0", "1", "0"]
    assert "-> service.name: Str(gateway)" in text and "-> service.name: Str(rag-svc)" in text
    assert f"-> process.pid: Int({PID_A})" in text and f"-> process.pid: Int({PID_B})" in text
