"""End to end against a real OTLP collector: rotel, over gRPC (`otlp`) and HTTP (`otlphttp`)."""

import os
import socket
import subprocess
import time

import pytest

from otel_ebpf.export.factory import build_metric_exporters, build_span_exporters
from otel_ebpf.export.pipeline import MetricsPipeline, TracePipeline
from otel_ebpf.protocols.base import ConnInfo, NeutralSpan, Role, SpanKind, StatusCode
from otel_ebpf.spans.clock import KernelClock
from otel_ebpf.spans.resources import ProcessResources
from otel_ebpf.telemetry import Stats

rotel = pytest.importorskip("rotel")
ROTEL_AGENT = os.path.join(os.path.dirname(rotel.__file__), "rotel-agent")
if not os.access(ROTEL_AGENT, os.X_OK):
    pytest.skip("rotel-agent binary not found", allow_module_level=True)

START_TIMEOUT_S = 15.0
SEEN_TIMEOUT_S = 20.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_listening(port: int, proc: subprocess.Popen, deadline: float) -> None:
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"rotel exited with {proc.returncode}")
        try:
            with socket.create_connection(("127.0.0.1", port), timeout=0.2):
                return
        except OSError:
            time.sleep(0.05)
    raise TimeoutError(f"rotel not listening on {port}")


class Rotel:
    def __init__(self, tmp_path):
        self.grpc_port, self.http_port = free_port(), free_port()
        self.out = tmp_path / "rotel.out"
        self._out_file = open(self.out, "wb")  # noqa: SIM115
        self.proc = subprocess.Popen(
            [
                ROTEL_AGENT, "start",
                "--otlp-grpc-endpoint", f"127.0.0.1:{self.grpc_port}",
                "--otlp-http-endpoint", f"127.0.0.1:{self.http_port}",
                "--exporter", "blackhole",
                "--debug-log", "traces", "--debug-log", "metrics",
                "--debug-log-verbosity", "detailed",
                "--batch-timeout", "50ms",
                # its own files, so parallel runs never share the default /tmp/rotel-agent.pid
                "--pid-file", str(tmp_path / "rotel.pid"),
                "--log-file", str(tmp_path / "rotel.log"),
            ],
            stdout=self._out_file,
            stderr=subprocess.STDOUT,
        )
        deadline = time.monotonic() + START_TIMEOUT_S
        try:
            wait_listening(self.grpc_port, self.proc, deadline)
            wait_listening(self.http_port, self.proc, deadline)
        except Exception:
            self.stop()
            raise

    def output(self) -> str:
        return self.out.read_text(errors="replace")

    def wait_for(self, *needles: str) -> str:
        deadline = time.monotonic() + SEEN_TIMEOUT_S
        while time.monotonic() < deadline:
            text = self.output()
            if all(n in text for n in needles):
                return text
            time.sleep(0.1)
        missing = [n for n in needles if n not in self.output()]
        raise AssertionError(f"rotel never printed {missing}; it printed:\n{self.output()[-3000:]}")

    def stop(self) -> None:
        self.proc.terminate()
        try:
            self.proc.wait(5)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(5)
        self._out_file.close()


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
