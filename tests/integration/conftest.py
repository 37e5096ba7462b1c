"""Fixtures for kernel tests: the real agent (real BPF programs) and real peers, each in
its own process, talking over 127.0.0.1 only; every wait is bounded."""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path

import pytest
import yaml

from tests.support.ports import free_port
from tests.support.processes import stop_process
from tests.support.wallclock import start_watch

REPO = Path(__file__).resolve().parents[2]
VENV_BIN = Path(sys.executable).parent
REQUIRE_BPF = os.environ.get("OTEL_EBPF_REQUIRE_BPF") == "1"
# HTTP servers' keep-alive idle timeout for the peers tests start: longer than any test may
# run (pytest's timeout, pyproject.toml), so a connection a test holds open while an agent
# starts is never closed under it. uvicorn's default, 5 s, is shorter than an agent's
# start on a busy machine: the connection test_agent_restart keeps across two agents died.
KEEP_ALIVE_S = 3600
# An agent's start attaches uprobes to the libraries of every running Python and OpenSSL
# user on the host, seconds each when the machine is loaded (70 s seen with 2 cores shared
# by several test runs): the bound for "otel-ebpf ready" is generous, the wait ends on it.
AGENT_START_TIMEOUT_S = 180.0


def require_kernel() -> None:
    """Skip (or, under OTEL_EBPF_REQUIRE_BPF=1, fail) when BPF cannot be loaded here."""
    reasons = []
    if os.geteuid() != 0:
        reasons.append("not root")
    if not (REPO / "bpf/build/capture.bpf.o").is_file():
        reasons.append("bpf/build/capture.bpf.o not built (make -C bpf)")
    if reasons:
        msg = "kernel test needs: " + "; ".join(reasons)
        if REQUIRE_BPF:
            pytest.fail(msg)
        pytest.skip(msg)


def require_peer(reason: str | None) -> None:
    """Skip (or, under OTEL_EBPF_REQUIRE_BPF=1, fail: CI installs every peer with
    `make test`) when a peer's support module says why it cannot run here."""
    if reason:
        if REQUIRE_BPF:
            pytest.fail(reason)
        pytest.skip(reason)


def wait_port(port: int, proc: subprocess.Popen, log: Path, timeout_s: float = 20.0) -> None:
    """Wait until `proc` listens on `port`; fail with its output when it dies first."""
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"server exited with {proc.returncode}:\n{log.read_text()[-2000:]}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout_s}s")


@dataclass
class Span:
    name: str
    kind: int
    start: int
    end: int
    attrs: dict
    resource: dict
    status: dict
    trace_id: str
    span_id: str
    parent_span_id: str = ""
    links: list = field(default_factory=list)
    trace_state: str = ""


def _value(v: dict):
    (kind, val), = v.items()
    if kind == "intValue":
        return int(val)
    if kind == "arrayValue":
        return [_value(x) for x in val.get("values", [])]
    return val


def read_spans(path: Path) -> list[Span]:
    spans: list[Span] = []
    if not path.exists():
        return spans
    for line in path.read_text().splitlines():
        doc = json.loads(line)
        for rs in doc.get("resourceSpans", []):
            res = {a["key"]: _value(a["value"]) for a in rs["resource"].get("attributes", [])}
            for ss in rs.get("scopeSpans", []):
                for s in ss.get("spans", []):
                    spans.append(Span(
                        name=s["name"], kind=s["kind"], start=int(s["startTimeUnixNano"]),
                        end=int(s["endTimeUnixNano"]),
                        attrs={a["key"]: _value(a["value"]) for a in s.get("attributes", [])},
                        resource=res, status=s.get("status", {}), trace_id=s["traceId"],
                        span_id=s["spanId"], parent_span_id=s.get("parentSpanId", ""),
                        links=s.get("links", []), trace_state=s.get("traceState", "")))
    return spans


def _sums(path: Path):
    """Every export of every sum in a file exporter's output, in order: (name, data points)."""
    if not path.exists():
        return
    for line in path.read_text().splitlines():
        for rm in json.loads(line).get("resourceMetrics", []):
            for sm in rm.get("scopeMetrics", []):
                for m in sm.get("metrics", []):
                    yield m["name"], m.get("sum", {}).get("dataPoints", [])


def read_metric_by(path: Path, name: str, label: str) -> dict[str, int]:
    """The latest value of each point of the sum `name`, by the value of its attribute
    `label`; a point without attributes (a declared counter's zero) under ""."""
    out: dict[str, int] = {}
    for metric, points in _sums(path):
        if metric != name:
            continue
        for point in points:
            attrs = {a["key"]: a["value"].get("stringValue")
                     for a in point.get("attributes", [])}
            if label in attrs:
                out[attrs[label]] = int(point.get("asInt", 0))
            elif not attrs:
                out[""] = int(point.get("asInt", 0))
    return out


def read_metrics(path: Path) -> dict[str, int]:
    """Latest value of each otel_ebpf.* sum, summed over its data points."""
    return {metric: sum(int(p.get("asInt", 0)) for p in points)
            for metric, points in _sums(path)}


@dataclass
class HistogramPoint:
    resource: dict
    attrs: dict
    count: int
    sum: float
    bounds: list[float]
    buckets: list[int]


def read_histograms(path: Path) -> dict[str, list[HistogramPoint]]:
    """The latest data point of each histogram series (cumulative), by metric name."""
    latest: dict[tuple, HistogramPoint] = {}
    if not path.exists():
        return {}
    for line in path.read_text().splitlines():
        for rm in json.loads(line).get("resourceMetrics", []):
            res = {a["key"]: _value(a["value"]) for a in rm["resource"].get("attributes", [])}
            for sm in rm.get("scopeMetrics", []):
                for m in sm.get("metrics", []):
                    for p in m.get("histogram", {}).get("dataPoints", []):
                        attrs = {a["key"]: _value(a["value"]) for a in p.get("attributes", [])}
                        key = (m["name"], json.dumps(res, sort_keys=True),
                               json.dumps(attrs, sort_keys=True))
                        latest[key] = HistogramPoint(
                            res, attrs, int(p.get("count", 0)), float(p.get("sum", 0.0)),
                            [float(b) for b in p.get("explicitBounds", [])],
                            [int(c) for c in p.get("bucketCounts", [])])
    out: dict[str, list[HistogramPoint]] = {}
    for (name, _, _), point in latest.items():
        out.setdefault(name, []).append(point)
    return out


@dataclass
class AgentRun:
    proc: subprocess.Popen
    traces: Path
    stderr_path: Path
    stopped: bool = False
    exit_code: int | None = None
    extra: dict = field(default_factory=dict)

    def spans(self) -> list[Span]:
        return read_spans(self.traces)

    def wait_for(self, predicate: Callable[[list[Span]], bool], timeout_s: float = 20.0
                 ) -> list[Span]:
        deadline = time.monotonic() + timeout_s
        while True:
            spans = self.spans()
            if predicate(spans) or time.monotonic() > deadline:
                return spans
            time.sleep(0.2)

    def wait_log(self, text: str, proc: subprocess.Popen, timeout_s: float) -> None:
        """Wait until the agent's log says `text`; fail when `proc` (the program watched)
        or the agent ends first, or after `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while text not in self.stderr:
            if proc.poll() is not None:
                pytest.fail(f"the program ended ({proc.returncode}) before {text!r}")
            if self.proc.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"no {text!r} in the agent's log after {timeout_s}s:\n"
                            f"{self.stderr[-3000:]}")
            time.sleep(0.1)

    def stop(self, timeout_s: float = 30.0) -> int:
        if not self.stopped:
            self.proc.send_signal(signal.SIGINT)
            try:
                self.exit_code = self.proc.wait(timeout_s)
            except subprocess.TimeoutExpired:
                self.proc.kill()
                self.exit_code = self.proc.wait(30)  # SIGKILL waits for uprobe teardown
            self.stopped = True
        return self.exit_code  # type: ignore[return-value]

    @property
    def stderr(self) -> str:
        return self.stderr_path.read_text(errors="replace")


def _merge(base: dict, over: dict) -> dict:
    for key, value in over.items():
        if isinstance(value, dict) and isinstance(base.get(key), dict):
            _merge(base[key], value)
        else:
            base[key] = value
    return base


def agent_config(traces: Path, ports: list[int], exporters: dict | None = None,
                 response_timeout: str = "5s", targets: dict | None = None,
                 overrides: dict | None = None) -> str:
    """A config that selects `ports`, writes spans and metrics to `traces`, and also
    exports spans to `exporters` ({instance: settings}); `overrides` is merged in last."""
    exporters = exporters or {}
    return yaml.safe_dump(_merge({
        "receivers": {"ebpf": {
            "targets": targets or {"ports": ports},
            "ring_buffer": {"poll_interval": "50ms"},
            "protocols": {"http1": {"response_timeout": response_timeout}},
        }},
        "processors": {"batch": {"timeout": "200ms"}},
        "exporters": {"file": {"path": str(traces)}, **exporters},
        "service": {
            "pipelines": {
                "traces": {"receivers": ["ebpf"], "processors": ["batch"],
                           "exporters": ["file", *exporters]},
                "metrics": {"receivers": ["ebpf"], "exporters": ["file"]},
            },
            "telemetry": {"metrics": {"interval": "1s"}},
        },
    }, overrides or {}))


@pytest.fixture
def start_agent(tmp_path: Path) -> Iterator[Callable[..., AgentRun]]:
    runs: list[AgentRun] = []
    start_watch()  # span times are checked against how far the wall clock moves from here

    def start(ports: list[int], exporters: dict | None = None,
              timeout_s: float = AGENT_START_TIMEOUT_S,
              response_timeout: str = "5s", targets: dict | None = None,
              overrides: dict | None = None) -> AgentRun:
        require_kernel()
        traces = tmp_path / f"traces-{len(runs)}.jsonl"
        cfg = tmp_path / f"agent-{len(runs)}.yaml"
        cfg.write_text(agent_config(traces, ports, exporters, response_timeout, targets,
                                    overrides))
        err = tmp_path / f"agent-{len(runs)}.err"
        out = tmp_path / f"agent-{len(runs)}.out"  # the debug exporter's console, if any
        proc = subprocess.Popen(
            [str(VENV_BIN / "otel-ebpf"), "run", "-c", str(cfg)],
            stdout=out.open("w"), stderr=err.open("w"), cwd=tmp_path,
        )
        run = AgentRun(proc, traces, err, extra={"stdout": out, "config": cfg})
        runs.append(run)
        deadline = time.monotonic() + timeout_s
        while "otel-ebpf ready" not in run.stderr:
            if proc.poll() is not None or time.monotonic() > deadline:
                run.stop(5)
                pytest.fail(f"agent did not start (exit {proc.returncode}):\n{run.stderr}")
            time.sleep(0.1)
        return run

    yield start
    for run in runs:
        run.stop()


@pytest.fixture
def uvicorn_server(tmp_path: Path) -> Iterator[int]:
    """The test ASGI app under uvicorn on a free 127.0.0.1 port."""
    port = free_port()
    log_path = tmp_path / "uvicorn.log"
    log = log_path.open("w")
    proc = subprocess.Popen(
        [str(VENV_BIN / "uvicorn"), "tests.integration.peers.http_app:app",
         "--host", "127.0.0.1", "--port", str(port), "--no-access-log",
         "--timeout-keep-alive", str(KEEP_ALIVE_S)],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
        env={**os.environ, "OTEL_SERVICE_NAME": "test-http-app"},
    )
    try:
        wait_port(port, proc, log_path)
        yield port
    finally:
        stop_process(proc)


@pytest.fixture
def redis_server(tmp_path: Path) -> Iterator[int]:
    """Debian's redis-server on a free 127.0.0.1 port, nothing saved to disk."""
    binary = shutil.which("redis-server")
    require_peer(None if binary else "redis-server is not installed (make install: APT_PACKAGES)")
    port = free_port()
    log = tmp_path / "redis.log"
    proc = subprocess.Popen(
        [binary, "--port", str(port), "--bind", "127.0.0.1", "--save", "", "--appendonly", "no",
         "--dir", str(tmp_path), "--logfile", str(log)],
        stdout=subprocess.DEVNULL, stderr=subprocess.STDOUT)
    log.touch()
    try:
        wait_port(port, proc, log)
        yield port
    finally:
        proc.terminate()
        proc.wait(10)


@pytest.fixture
def relay(tmp_path: Path, uvicorn_server: int) -> Iterator[tuple[int, int]]:
    """A thread-per-request relay in front of the uvicorn app: (relay port, app port)."""
    port = free_port()
    log = tmp_path / "relay.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.peers.relay", str(port),
         f"http://127.0.0.1:{uvicorn_server}"],
        cwd=REPO, stdout=log.open("w"), stderr=subprocess.STDOUT)
    try:
        wait_port(port, proc, log)
        yield port, uvicorn_server
    finally:
        proc.kill()
        proc.wait(5)


def run_client(kind: str, port: int, paths: list[str], scheme: str = "http",
               env: dict | None = None) -> list[dict]:
    """Run a client in its own process; return its per-request timings."""
    out = subprocess.run(
        [sys.executable, "-m", "tests.integration.peers.http_client", kind,
         f"{scheme}://127.0.0.1:{port}", *paths],
        cwd=REPO, capture_output=True, text=True, timeout=60, check=True,
        env={**os.environ, **(env or {})},
    )
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
