"""The console exporter's three verbosities."""

import io

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from otel_ebpf.protocols.base import ConnInfo, NeutralSpan, Role, SpanEvent, SpanKind, StatusCode
from rich.console import Console

from otel_ebpf.correlate import assign_ids
from otel_ebpf.export.debug import DebugMetricExporter, DebugSpanExporter
from otel_ebpf.spans.clock import KernelClock
from otel_ebpf.spans.convert import resource_for, to_readable

CONN = ConnInfo(pid=5, fd=3, generation=1, role=Role.SERVER, transport="stream", family="ipv4")


def console():
    return Console(file=io.StringIO(), width=300, color_system=None)


def spans():
    neutral = [
        NeutralSpan(
            name="GET [/items]",  # brackets: must not be read as rich markup
            kind=SpanKind.SERVER,
            start_ns=1_000_000,
            end_ns=3_500_000,
            conn=CONN,
            attributes={"http.request.method": "GET", "url.path": "/items/" + "x" * 200},
            status=StatusCode.ERROR,
            status_message="500",
            events=[SpanEvent("first byte", 2_000_000, {"n": 1})],
        )
    ]
    assign_ids(neutral)
    return neutral, [to_readable(s, resource_for({"service.name": "shop"}), KernelClock()) for s in neutral]


def test_basic():
    out = console()
    DebugSpanExporter("basic", out).export(spans()[1] * 3)
    assert out.file.getvalue() == "Traces: 3 spans\n"


def test_normal_one_line_per_span():
    out = console()
    DebugSpanExporter("normal", out).export(spans()[1] * 2)
    lines = out.file.getvalue().splitlines()
    assert lines[0] == "Traces: 2 spans"
    assert len(lines) == 3
    assert lines[1].startswith("shop GET [/items] SERVER ERROR 2.500ms http.request.method=GET")
    assert lines[1].endswith("…")  # attributes shortened


def test_detailed_every_attribute():
    out = console()
    neutral, readable = spans()
    DebugSpanExporter("detailed", out).export(readable)
    text = out.file.getvalue()
    assert neutral[0].trace_id.hex() in text and neutral[0].span_id.hex() in text
    assert "-> url.path: '/items/" + "x" * 200 + "'" in text
    assert "-> service.name: 'shop'" in text
    assert "event first byte" in text and "-> n: 1" in text
    assert "status message : 500" in text


def test_metrics():
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    counter = provider.get_meter("m").create_counter("otel_ebpf.events", unit="{event}")
    counter.add(5, {"cpu": "0"})
    counter.add(2, {"cpu": "1"})
    data = reader.get_metrics_data()
    basic, detailed = console(), console()
    DebugMetricExporter("basic", basic).export(data)
    DebugMetricExporter("detailed", detailed).export(data)
    provider.shutdown()
    assert basic.file.getvalue() == "Metrics: 1 metrics, 2 data points\n"
    text = detailed.file.getvalue()
    assert "otel_ebpf.events ({event})" in text
    assert "{cpu=0} 5" in text and "{cpu=1} 2" in text


def test_default_console_is_stderr():
    assert DebugSpanExporter().console.stderr
