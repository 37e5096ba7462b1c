"""Starts the benchmark's services (gateway, rag, embedder, vectordb, llm under uvicorn;
legacy under gunicorn sync workers), each in its own process on a free 127.0.0.1 port, and
runs the load generator against them. `start_topology(tmpdir)` is what a test imports."""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from contextlib import ExitStack
from dataclasses import dataclass, field
from pathlib import Path

from tests.integration.conftest import wait_port

REPO = Path(__file__).resolve().parents[2]
SERVICES = ("gateway", "rag", "embedder", "vectordb", "llm", "legacy")
LEGACY_WORKERS = 2


def pick_ports(names: tuple[str, ...] = SERVICES) -> dict[str, int]:
    """One free 127.0.0.1 port per name, all different (sockets held until all are picked)."""
    with ExitStack() as stack:
        ports = {}
        for name in names:
            s = stack.enter_context(socket.socket())
            s.bind(("127.0.0.1", 0))
            ports[name] = s.getsockname()[1]
        return ports


class TopologyError(RuntimeError):
    """A service did not start; the message names its log."""


@dataclass
class Topology:
    ports: dict[str, int]
    workdir: Path
    truth_dir: Path
    env: dict[str, str]
    procs: dict[str, subprocess.Popen] = field(default_factory=dict)
    logs: dict[str, Path] = field(default_factory=dict)

    @property
    def gateway_port(self) -> int:
        return self.ports["gateway"]

    def truth(self) -> list[dict]:
        """Every ground-truth line written so far, by every service and the load generator."""
        return read_truth(self.truth_dir)

    def run_load(self, requests: int, concurrency: int, deadline_s: float = 120.0,
                 legacy_every: int = 3) -> dict:
        """Run the load generator in its own process; its summary (sent, ok, errors...)."""
        log = self.workdir / f"loadgen-c{concurrency}.log"
        with log.open("w") as err:
            out = subprocess.run(
                [service_python(), "-m", "bench.correlation.services", "loadgen",
                 "--requests", str(requests), "--concurrency", str(concurrency),
                 "--deadline", str(deadline_s), "--legacy-every", str(legacy_every)],
                cwd=REPO, env={**self.env, "OTEL_SERVICE_NAME": "loadgen"},
                stdout=subprocess.PIPE, stderr=err, text=True, timeout=deadline_s + 90)
        if out.returncode != 0:
            raise TopologyError(f"load generator exited with {out.returncode}; log: {log}")
        return json.loads(out.stdout.strip().splitlines()[-1])

    def dead(self) -> list[str]:
        return [name for name, p in self.procs.items() if p.poll() is not None]

    def stop(self, timeout_s: float = 10.0) -> None:
        """Stop every service and its children (each runs in its own process group)."""
        for proc in self.procs.values():
            _signal_group(proc, signal.SIGTERM)
        deadline = time.monotonic() + timeout_s
        for proc in self.procs.values():
            try:
                proc.wait(max(0.1, deadline - time.monotonic()))
            except subprocess.TimeoutExpired:
                _signal_group(proc, signal.SIGKILL)
                proc.wait(5)
            _signal_group(proc, signal.SIGKILL)  # gunicorn workers left behind, if any


def _signal_group(proc: subprocess.Popen, sig: int) -> None:
    try:
        os.killpg(proc.pid, sig)  # the group we made with start_new_session: ours alone
    except (ProcessLookupError, PermissionError):
        pass


def read_truth(truth_dir: Path) -> list[dict]:
    lines = []
    for path in sorted(Path(truth_dir).glob("*.jsonl")):
        for line in path.read_text().splitlines():
            if line.strip():
                lines.append(json.loads(line))
    return lines


def service_python() -> str:
    """The interpreter the services and the load generator run on: BENCH_SERVICE_PYTHON
    (another CPython with the services' packages: pyenv's 3.12, a distribution's stripped
    python3), else this one."""
    return os.environ.get("BENCH_SERVICE_PYTHON") or sys.executable


def _command(name: str, port: int) -> list[str]:
    if name == "legacy":
        return [service_python(), "-m", "gunicorn", "-w", str(LEGACY_WORKERS), "-k", "sync",
                "-b", f"127.0.0.1:{port}", "--log-level", "warning",
                "bench.correlation.services:make_legacy()"]
    return [service_python(), "-m", "bench.correlation.services", name]


def start_topology(tmpdir: Path | str, ports: dict[str, int] | None = None,
                   timeout_s: float = 30.0) -> Topology:
    """Start every service on `ports` (free ones when None) and wait until all listen.
    Logs and ground truth go under `tmpdir`. Raises TopologyError (naming the log) and
    stops what it started when a service fails."""
    workdir = Path(tmpdir)
    truth_dir = workdir / "truth"
    truth_dir.mkdir(parents=True, exist_ok=True)
    ports = ports or pick_ports()
    env = {**os.environ, "BENCH_PORTS": json.dumps(ports), "BENCH_TRUTH_DIR": str(truth_dir),
           "PYTHONUNBUFFERED": "1"}
    topo = Topology(ports, workdir, truth_dir, env)
    try:
        for name in SERVICES:
            log = workdir / f"{name}.log"
            topo.logs[name] = log
            with log.open("w") as out:
                topo.procs[name] = subprocess.Popen(
                    _command(name, ports[name]), cwd=REPO, stdout=out,
                    stderr=subprocess.STDOUT, env={**env, "OTEL_SERVICE_NAME": name},
                    start_new_session=True)
        for name in SERVICES:
            try:
                wait_port(ports[name], topo.procs[name], topo.logs[name], timeout_s)
            except (RuntimeError, TimeoutError) as e:
                raise TopologyError(f"{name} did not start (log: {topo.logs[name]}): {e}") from e
    except BaseException:
        topo.stop()
        raise
    return topo
