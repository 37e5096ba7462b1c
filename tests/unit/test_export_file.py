"""The file exporter: OTLP/JSON lines in the OTel Collector file exporter's shape."""

import json
import threading

import pytest
from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from opentelemetry.sdk.trace.export import SpanExportResult
from otel_ebpf.protocols.base import ConnInfo, NeutralSpan, Role, SpanEvent, SpanKind, StatusCode

from otel_ebpf.correlate import assign_ids
from otel_ebpf.export.file import FileExporterError, FileMetricExporter, FileSpanExporter
from otel_ebpf.spans.clock import KernelClock
from otel_ebpf.spans.convert import ready, resource_for

CONN = ConnInfo(pid=77, fd=3, generation=1, role=Role.CLIENT, transport="stream", family="ipv4")


def ready_spans(n: int = 2, service: str = "gateway"):
    spans = [
        NeutralSpan(
            name=f"POST /v1/chat/completions {i}",
            kind=SpanKind.CLIENT,
            start_ns=10_000 + i,
            end_ns=20_000 + i,
            conn=CONN,
            attributes={"http.response.status_code": 200, "server.address": "vllm", "ok": True, "ratio": 0.5},
            status=StatusCode.ERROR if i else StatusCode.UNSET,
            status_message="bad" if i else "",
            events=[SpanEvent("chunk", 15_000)],
        )
        for i in range(n)
    ]
    assign_ids(spans)
    spans[-1].parent_span_id = spans[0].span_id
    resource = resource_for({"service.name": service, "process.pid": 77})
    return spans, [ready(s, resource, KernelClock()) for s in spans]


def read_lines(path):
    return [json.loads(line) for line in path.read_text().splitlines()]


def test_span_lines_shape(tmp_path):
    path = tmp_path / "deep" / "dir" / "traces.jsonl"  # parent dirs are created
    exporter = FileSpanExporter(str(path))
    neutral, spans = ready_spans()
    assert exporter.export(spans) is SpanExportResult.SUCCESS
    assert exporter.export(spans[:1]) is SpanExportResult.SUCCESS
    exporter.shutdown()

    lines = read_lines(path)
    assert len(lines) == 2  # one ExportTraceServiceRequest per batch, one per line
    request = lines[0]
    assert list(request) == ["resourceSpans"]
    rs = request["resourceSpans"][0]
    resource_attrs = {a["key"]: a["value"] for a in rs["resource"]["attributes"]}
    assert resource_attrs["service.name"] == {"stringValue": "gateway"}
    assert resource_attrs["process.pid"] == {"intValue": "77"}  # int64 as a string
    scope = rs["scopeSpans"][0]
    assert scope["scope"]["name"] == "otel-ebpf"
    first, second = scope["spans"]
    assert first["traceId"] == neutral[0].trace_id.hex()  # hex, not base64
    assert first["spanId"] == neutral[0].span_id.hex()
    assert len(first["traceId"]) == 32 and first["traceId"] == first["traceId"].lower()
    assert second["parentSpanId"] == neutral[0].span_id.hex()
    assert "parentSpanId" not in first
    assert first["kind"] == 3  # enums as integers (CLIENT)
    assert isinstance(first["startTimeUnixNano"], str)
    assert int(first["endTimeUnixNano"]) - int(first["startTimeUnixNano"]) == 10_000
    assert first["events"][0]["name"] == "chunk"
    attrs = {a["key"]: a["value"] for a in first["attributes"]}
    assert attrs == {
        "http.response.status_code": {"intValue": "200"},
        "server.address": {"stringValue": "vllm"},
        "ok": {"boolValue": True},
        "ratio": {"doubleValue": 0.5},
    }
    assert second["status"] == {"code": 2, "message": "bad"}


def test_appends_and_is_thread_safe(tmp_path):
    path = tmp_path / "t.jsonl"
    path.write_text('{"resourceSpans":[]}\n')
    exporter = FileSpanExporter(str(path))
    _, spans = ready_spans(5)
    threads = [threading.Thread(target=lambda: [exporter.export(spans) for _ in range(20)]) for _ in range(4)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(30)
    exporter.shutdown()
    lines = read_lines(path)
    assert len(lines) == 81
    assert all(len(line["resourceSpans"][0]["scopeSpans"][0]["spans"]) == 5 for line in lines[1:])


def test_export_after_shutdown_fails(tmp_path):
    exporter = FileSpanExporter(str(tmp_path / "t.jsonl"))
    exporter.shutdown()
    assert exporter.export(ready_spans(1)[1]) is SpanExportResult.FAILURE


@pytest.mark.parametrize("case", ["is a directory", "parent is a file"])
def test_unwritable_path_fails_at_construction(tmp_path, case):
    (tmp_path / "a-file").write_text("")
    bad = tmp_path if case == "is a directory" else tmp_path / "a-file" / "sub" / "t.jsonl"
    with pytest.raises(FileExporterError) as info:
        FileSpanExporter(str(bad))
    assert info.value.path == str(bad)
    assert str(bad) in str(info.value)


def test_metrics_lines(tmp_path):
    path = tmp_path / "metrics.jsonl"
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    counter = provider.get_meter("m").create_counter("requests", unit="{request}")
    counter.add(3, {"route": "/a"})
    exporter = FileMetricExporter(str(path))
    exporter.export(reader.get_metrics_data())
    exporter.shutdown()
    provider.shutdown()

    (line,) = read_lines(path)
    metric = line["resourceMetrics"][0]["scopeMetrics"][0]["metrics"][0]
    assert metric["name"] == "requests" and metric["unit"] == "{request}"
    point = metric["sum"]["dataPoints"][0]
    assert point["asInt"] == "3"
    assert point["attributes"] == [{"key": "route", "value": {"stringValue": "/a"}}]
    assert metric["sum"]["aggregationTemporality"] == 2 and metric["sum"]["isMonotonic"] is True


def test_span_and_metric_exporters_share_one_file(tmp_path):
    path = tmp_path / "both.jsonl"
    spans_out, metrics_out = FileSpanExporter(str(path)), FileMetricExporter(str(path))
    assert spans_out._file is metrics_out._file
    spans_out.shutdown()
    assert not metrics_out._file.file.closed  # still in use by the metric exporter
    metrics_out.shutdown()
