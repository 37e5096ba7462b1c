"""End to end against a real OTLP collector: rotel, over gRPC (`otlp`) and HTTP (`otlphttp`)."""

import os
import time

import pytest
from otel_ebpf.protocols.base import ConnInfo, NeutralSpan, Role, SpanKind, StatusCode

from otel_ebpf.export.factory import build_metric_exporters, build_span_exporters
from otel_ebpf.export.pipeline import MetricsPipeline, TracePipeline
from otel_ebpf.spans.clock import KernelClock
from otel_ebpf.spans.resources import ProcessResources
from otel_ebpf.telemetry import Stats
from tests.support.rotel import SEEN_TIMEOUT_S, Rotel, free_port


@pytest.fixture
def collector(tmp_path):
    c = Rotel(tmp_path)
    yield c
    c.stop()


def span(name: str, pid: int) -> NeutralSpan:
    now = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    conn = ConnInfo(pid=pid, fd=9, generation=1, role=Role.CLIENT, transport="stream", family="ipv4", comm="e2e-client")
    return NeutralSpan(
        name=name,
        kind=SpanKind.CLIENT,
        start_ns=now - 2_000_000,
        end_ns=now,
        conn=conn,
        attributes={"http.request.method": "POST", "http.response.status_code": 503, "gen_ai.request.model": "m-7b"},
        status=StatusCode.ERROR,
    )


@pytest.mark.parametrize("kind", ["otlp", "otlphttp"])
def test_spans_reach_the_collector(collector, kind):
    port = collector.grpc_port if kind == "otlp" else collector.http_port
    exporters = build_span_exporters({kind: {"endpoint": f"http://127.0.0.1:{port}", "timeout": 5}})
    stats = Stats()
    pipeline = TracePipeline(exporters, stats, ProcessResources(), KernelClock(), schedule_delay_s=0.1)
    batch = [span(f"chat via {kind}", os.getpid()), span(f"second via {kind}", 999_999)]
    pipeline.submit(batch)
    pipeline.flush(SEEN_TIMEOUT_S)
    pipeline.shutdown(10)
    assert stats.total("spans.exported") == 2 and stats.total("spans.failed") == 0

    text = collector.wait_for(f"Name           : chat via {kind}", f"Name           : second via {kind}")
    assert "-> http.request.method: Str(POST)" in text
    assert "-> http.response.status_code: Int(503)" in text
    assert "-> gen_ai.request.model: Str(m-7b)" in text
    assert "Kind           : SPAN_KIND_CLIENT" in text
    assert "STATUS_CODE_ERROR" in text
    assert f"Trace ID       : {batch[0].trace_id.hex()}" in text
    assert f"-> process.pid: Int({os.getpid()})" in text
    assert "-> service.name: Str(e2e-client)" in text  # the vanished pid's comm
    assert "-> telemetry.distro.name: Str(otel-ebpf)" in text
    assert "InstrumentationScope otel-ebpf" in text


def test_metrics_reach_the_collector(collector):
    stats = Stats()
    stats.add("spans.exported", 41, exporter="otlp")
    exporters = build_metric_exporters({"otlp": {"endpoint": f"http://127.0.0.1:{collector.grpc_port}", "timeout": 5}})
    MetricsPipeline(exporters, stats, interval_s=3600).shutdown(10)
    text = collector.wait_for("-> Name: otel_ebpf.spans.exported", "Value: 41")
    exported = text.split("-> Name: otel_ebpf.spans.exported", 1)[1].split("Metric #", 1)[0]
    assert "-> Unit: {span}" in exported and "-> IsMonotonic: true" in exported
    assert "-> exporter: Str(otlp)" in exported and "Value: 41" in exported
    assert "-> service.name: Str(otel-ebpf)" in text


@pytest.mark.parametrize("kind", ["otlp", "otlphttp"])
def test_unreachable_backend_counts_failed(kind):
    # nothing listens: the SDK retries with backoff until its timeout, then gives up
    exporters = build_span_exporters({kind: {"endpoint": f"http://127.0.0.1:{free_port()}", "timeout": 1}})
    stats = Stats()
    pipeline = TracePipeline(exporters, stats, ProcessResources(), KernelClock(), schedule_delay_s=0.05)
    pipeline.submit([span("lost", os.getpid())])
    pipeline.shutdown(10)
    assert stats.total("spans.failed") == 1 and stats.total("spans.exported") == 0
