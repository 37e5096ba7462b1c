"""TracePipeline and MetricsPipeline end to end, into OTLP/JSON files."""

import json
import threading

from otel_ebpf.protocols.base import ConnInfo, NeutralSpan, Role, SpanKind

from otel_ebpf.export.factory import (DisabledExporter, build_metric_exporters,
                                      build_span_exporters)
from otel_ebpf.export.pipeline import MetricsPipeline, TracePipeline
from otel_ebpf.spans.clock import KernelClock
from otel_ebpf.spans.resources import ProcessResources
from otel_ebpf.telemetry import COUNTERS, Stats


def conn(pid, comm):
    return ConnInfo(pid=pid, fd=3, generation=1, role=Role.SERVER, transport="stream", family="ipv4", comm=comm)


def span(name, pid, comm):
    return NeutralSpan(name=name, kind=SpanKind.SERVER, start_ns=1, end_ns=2, conn=conn(pid, comm),
                       attributes={"http.request.method": "GET"})


def lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_trace_pipeline_fans_out_with_per_process_resources(tmp_path):
    proc = tmp_path / "proc"
    (proc / "100").mkdir(parents=True)
    (proc / "100" / "stat").write_text("100 (python3) S " + " ".join(["0"] * 18 + ["55"] + ["0"] * 20))
    (proc / "100" / "cmdline").write_bytes(b"/venv/bin/python\0-m\0uvicorn\0app:app\0")
    (proc / "100" / "environ").write_bytes(b"OTEL_SERVICE_NAME=catalog\0")

    exporters = build_span_exporters(
        {
            "file/a": {"path": str(tmp_path / "a.jsonl")},
            "file/b": {"path": str(tmp_path / "b.jsonl")},
            "otlp": {"endpoint": ""},  # disabled: no queue, no thread
        }
    )
    stats = Stats()
    pipeline = TracePipeline(
        exporters, stats, ProcessResources(proc_root=str(proc)), KernelClock(), schedule_delay_s=60
    )
    assert set(pipeline.queues) == {"file/a", "file/b"}
    batch = [span("GET /a", 100, "python3"), span("GET /b", 100, "python3"), span("GET /c", 200, "curl")]
    pipeline.submit(batch)
    pipeline.submit([])
    pipeline.shutdown(10)

    assert all(len(s.trace_id) == 16 and len(s.span_id) == 8 for s in batch)
    for name in ("a", "b"):
        (request,) = lines(tmp_path / f"{name}.jsonl")
        by_service = {}
        for rs in request["resourceSpans"]:
            attrs = {a["key"]: a["value"] for a in rs["resource"]["attributes"]}
            by_service[attrs["service.name"]["stringValue"]] = [
                s["name"] for ss in rs["scopeSpans"] for s in ss["spans"]
            ]
        # the live process's own OTEL_SERVICE_NAME; the vanished one's comm
        assert by_service == {"catalog": ["GET /a", "GET /b"], "curl": ["GET /c"]}
        spans_out = request["resourceSpans"][0]["scopeSpans"][0]["spans"]
        assert spans_out[0]["traceId"] == batch[0].trace_id.hex()
    assert stats.total("spans.exported") == 6
    assert {labels for (n, labels) in stats.snapshot() if n == "spans.exported"} == {
        (("exporter", "file/a"),),
        (("exporter", "file/b"),),
    }


def test_metrics_pipeline_through_file(tmp_path):
    path = tmp_path / "metrics.jsonl"
    stats = Stats()
    stats.add("spans.exported", 7, exporter="otlp")
    stats.add("spans.exported", 2, exporter="file")
    stats.add("events", 100)
    pipeline = MetricsPipeline(build_metric_exporters({"file": {"path": str(path)}}), stats, interval_s=3600)
    pipeline.shutdown(10)  # the final collection is exported

    (request,) = lines(path)
    rm = request["resourceMetrics"][0]
    resource = {a["key"]: a["value"]["stringValue"] for a in rm["resource"]["attributes"]}
    assert resource["service.name"] == "otel-ebpf" and resource["host.name"]
    metrics = {m["name"]: m for sm in rm["scopeMetrics"] for m in sm["metrics"]}
    assert set(metrics) == {f"otel_ebpf.{name}" for name in COUNTERS}
    exported = metrics["otel_ebpf.spans.exported"]
    assert exported["unit"] == "{span}" and exported["description"] == COUNTERS["spans.exported"][1]
    assert exported["sum"]["isMonotonic"] is True
    points = {
        p["attributes"][0]["value"]["stringValue"]: p["asInt"] for p in exported["sum"]["dataPoints"]
    }
    assert points == {"otlp": "7", "file": "2"}
    assert metrics["otel_ebpf.events"]["sum"]["dataPoints"][0]["asInt"] == "100"
    assert metrics["otel_ebpf.gaps"]["sum"]["dataPoints"][0]["asInt"] == "0"  # untouched: still reported


def _reader_threads() -> set[threading.Thread]:
    """The SDK's periodic metric readers alive now (each runs a thread of this name)."""
    return {t for t in threading.enumerate() if t.name == "OtelPeriodicExportingMetricReader"}


def test_metrics_pipeline_without_exporters_is_inert(tmp_path):
    """Only disabled exporters: no reader, so no thread and no export; one real exporter
    next to it gets its reader, thread and export (the control that the count can move)."""
    exporters = build_metric_exporters({"otlp": {"endpoint": ""}})
    assert [type(e) for e in exporters.values()] == [DisabledExporter]
    stats = Stats()
    stats.add("events", 5)
    before = _reader_threads()
    inert = MetricsPipeline(exporters, stats, interval_s=0.05)
    assert not _reader_threads() - before
    assert inert.force_flush(1)  # nothing to collect, nothing to wait for
    inert.shutdown(1)

    path = tmp_path / "metrics.jsonl"
    live = MetricsPipeline(build_metric_exporters({"file": {"path": str(path)}}), stats,
                           interval_s=3600)
    assert len(_reader_threads() - before) == 1
    live.shutdown(10)
    (request,) = lines(path)
    metrics = {m["name"]: m for sm in request["resourceMetrics"][0]["scopeMetrics"]
               for m in sm["metrics"]}
    assert metrics["otel_ebpf.events"]["sum"]["dataPoints"][0]["asInt"] == "5"
