"""A traces-only backend (a gRPC server with only the OTLP TraceService, as Phoenix is, in
a process of its own): metric exports to it are said once, as a WARNING naming the fix,
never as an ERROR, and counted in otel_ebpf.metrics.exports_failed; spans still go."""

from __future__ import annotations

import logging
import os
import subprocess
import sys
import time
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest

from otel_ebpf.export.factory import build_metric_exporters
from otel_ebpf.export.metrics_send import MetricsSender
from otel_ebpf.export.pipeline import MetricsPipeline
from otel_ebpf.telemetry import Stats
from tests.support.processes import stop_process
from tests.support.rotel import Rotel, free_port

from .conftest import REPO, VENV_BIN, read_metrics, require_kernel, wait_port

FIX = "Remove `otlp` from service.pipelines.metrics.exporters, or point it at an OpenTelemetry Collector"


class Backend:
    def __init__(self, tmp_path: Path) -> None:
        self.port = free_port()
        self.out = tmp_path / "backend.out"
        self.proc = subprocess.Popen(
            [sys.executable, "-m", "tests.support.traces_only_backend", str(self.port)],
            cwd=REPO, stdout=self.out.open("w"), stderr=subprocess.STDOUT)
        wait_port(self.port, self.proc, self.out)

    def spans(self) -> int:
        return sum(int(line.split()[1]) for line in self.out.read_text().splitlines()
                   if line.startswith("spans "))


@pytest.fixture
def backend(tmp_path: Path) -> Iterator[Backend]:
    b = Backend(tmp_path)
    yield b
    stop_process(b.proc)


def wait_until(predicate, timeout_s: float, what: str) -> None:
    deadline = time.monotonic() + timeout_s
    while not predicate():
        assert time.monotonic() < deadline, what
        time.sleep(0.05)


def test_metrics_refused_once_as_a_warning_then_counted(backend, caplog):
    caplog.set_level(logging.DEBUG)
    endpoint = f"127.0.0.1:{backend.port}"
    exporters = build_metric_exporters({"otlp": {"endpoint": endpoint, "tls": {"insecure": True}}})
    stats = Stats()
    stats.add("events", 1)
    pipeline = MetricsPipeline(exporters, stats, interval_s=0.1)  # the agent's own counters
    sender = MetricsSender(exporters, stats)  # span, GPU and RDMA metrics take this way
    try:
        def refused() -> int:
            return sum(v for (name, labels), v in stats.snapshot().items()
                       if name == "metrics.exports_failed"
                       and dict(labels) == {"exporter": "otlp", "reason": "not_accepted"})
        wait_until(lambda: refused() >= 5, 60, "the periodic exports were not counted")
        for _ in range(3):
            assert sender.send(pipeline_data(stats)) == {"otlp": "not_accepted"}
    finally:
        pipeline.shutdown(10)
    warnings = [r for r in caplog.records if r.levelno == logging.WARNING]
    assert len(warnings) == 1, [r.getMessage() for r in warnings]
    message = warnings[0].getMessage()
    assert endpoint in message and "does not accept metrics (UNIMPLEMENTED" in message
    assert FIX in message
    errors = [r.getMessage() for r in caplog.records if r.levelno >= logging.ERROR]
    assert errors == []


def pipeline_data(stats: Stats):
    """MetricsData of the agent's counters, as MetricsSender's callers build their own."""
    from opentelemetry.sdk.metrics import MeterProvider
    from opentelemetry.sdk.metrics.export import InMemoryMetricReader
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    provider.get_meter("t").create_counter("otel_ebpf.events").add(stats.total("events"))
    data = reader.get_metrics_data()
    provider.shutdown()
    return data


def test_a_refusing_backend_replaced_by_a_collector_is_used_again(tmp_path, caplog):
    """The endpoint is pointed at a Collector (rotel here) later: metrics go again, an INFO
    line says so, and a later refusal would be said again."""
    caplog.set_level(logging.INFO)
    backend = Backend(tmp_path)
    port = backend.port
    exporters = build_metric_exporters(
        {"otlp": {"endpoint": f"127.0.0.1:{port}", "tls": {"insecure": True}, "timeout": 2}})
    stats = Stats()
    stats.add("events", 7)
    sender = MetricsSender(exporters, stats, timeout_s=5)
    collector = None
    try:
        assert sender.send(pipeline_data(stats)) == {"otlp": "not_accepted"}
        assert exporters["otlp"].refused
        stop_process(backend.proc)
        collector = Rotel(tmp_path, grpc_port=port)
        outcomes: list[dict] = []

        def sent() -> bool:  # the channel reconnects with backoff: try until it takes them
            outcomes.append(sender.send(pipeline_data(stats)))
            return outcomes[-1] == {"otlp": "ok"}
        wait_until(sent, 60, f"the collector never took the metrics: {outcomes[-3:]}")
        collector.wait_for("otel_ebpf.events")
    finally:
        if collector is not None:
            collector.stop()
        exporters["otlp"].shutdown()
    assert not exporters["otlp"].refused
    infos = [r.getMessage() for r in caplog.records if "now accepts metrics" in r.getMessage()]
    assert infos == [f"exporter otlp: the backend at 127.0.0.1:{port} now accepts metrics"]
    assert sum(1 for r in caplog.records if "does not accept metrics" in r.getMessage()) == 1


def test_agent_with_the_default_config_warns_once(backend, tmp_path, uvicorn_server):
    """`make run` pointed at a traces-only backend by OTEL_EXPORTER_OTLP_ENDPOINT: spans
    arrive, the metrics refusal is one WARNING, no ERROR however long it runs."""
    require_kernel()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_EXPORTER_OTLP", "OTEL_EBPF_"))}
    env.update({
        "OTEL_EXPORTER_OTLP_ENDPOINT": f"http://127.0.0.1:{backend.port}",
        "OTEL_EBPF_SERVICE_TELEMETRY_METRICS_INTERVAL": "1s",  # many refusals in a short test
        "OTEL_EBPF_RECEIVERS_EBPF_TARGETS_PORTS": str(uvicorn_server),
    })
    err = tmp_path / "agent.err"
    agent = subprocess.Popen([str(VENV_BIN / "otel-ebpf"), "run", "-c", str(REPO / "config/default.yaml")],
                             stdout=subprocess.DEVNULL, stderr=err.open("w"), cwd=tmp_path, env=env)
    try:
        wait_until(lambda: "otel-ebpf ready" in err.read_text(errors="replace")
                   or agent.poll() is not None, 90, "agent did not start")
        assert agent.poll() is None, err.read_text()[-3000:]
        path = f"/items/{uuid.uuid4().hex[:8]}"
        subprocess.run(["curl", "-s", "-o", "/dev/null", f"http://127.0.0.1:{uvicorn_server}{path}"],
                       check=True, timeout=30)
        wait_until(lambda: backend.spans() >= 2, 60, "no spans reached the traces-only backend")
        metrics = tmp_path / "otel-ebpf-traces.jsonl"  # the file exporter also gets the counters

        def refusals() -> int:
            return read_metrics(metrics).get("otel_ebpf.metrics.exports_failed", 0) if metrics.exists() else 0
        wait_until(lambda: refusals() >= 3, 60, f"refusals not counted:\n{err.read_text()[-3000:]}")
    finally:
        stop_process(agent, grace_s=30)
    text = err.read_text(errors="replace")
    assert text.count("does not accept metrics") == 1, text[-5000:]
    warning = next(line for line in text.splitlines() if "does not accept metrics" in line)
    assert " WARNING " in warning and FIX in warning and f"127.0.0.1:{backend.port}" in warning
    assert " ERROR " not in text and "UNIMPLEMENTED" in warning, text[-5000:]
