"""Nothing is lost at the end of a connection: short-lived clients (redis-py against
Debian's redis-server; requests and curl against uvicorn) run N requests on one connection
and end, one after the other, while the test keeps the machine's memory and CPUs busy
(processes that fault in, copy and free memory, and spin). Every run must give exactly N
spans at each end, with the connection's attributes: none lost when the connection closes
(requests, curl), when the process exits with it open (redis), or when the process's main
thread ends long before its other thread is done with the connection.

The counts are read after the agent stopped (it drains the ring, ends every connection
and exports before it exits): how fast the machine is changes when spans come, never how
many."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path

import pytest

from otel_ebpf.kernel import abi
from otel_ebpf.kernel.libbpf import LibbpfLog
from otel_ebpf.kernel.socket_tracer import CaptureSettings, SocketTracer
from tests.support.ports import free_port
from tests.support.processes import stop_process

from .conftest import REPO, AgentRun, Span, read_metrics, require_kernel, require_peer

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(900)]

SERVER, CLIENT = 2, 3
N = 18  # requests per connection
RUNS = 12  # clients per kind
CLIENT_TIMEOUT_S = 120.0
# the pressure: memory workers (each faulting in, copying and freeing this much, over and
# over) and CPU spinners, ended by the test, and by themselves after PRESSURE_S at the latest
MEMORY_WORKERS, MEMORY_MIB, CPU_WORKERS = 2, 768, 1
PRESSURE_S = 600.0
COUNTERS = ("otel_ebpf.kernel.drops", "otel_ebpf.connections.incomplete",
            "otel_ebpf.records.after_close", "otel_ebpf.gaps")


@contextmanager
def pressure(tmp_path: Path) -> Iterator[None]:
    """Memory and CPU pressure for the length of the block; every worker ended after it,
    whatever happens inside."""
    procs: list[subprocess.Popen] = []
    try:
        for i in range(MEMORY_WORKERS + CPU_WORKERS):
            args = (["memory", str(PRESSURE_S), str(MEMORY_MIB)] if i < MEMORY_WORKERS
                    else ["cpu", str(PRESSURE_S)])
            with (tmp_path / f"pressure-{i}.err").open("w") as err:
                procs.append(subprocess.Popen(
                    [sys.executable, "-m", "tests.integration.peers.pressure", *args],
                    cwd=REPO, stdout=subprocess.PIPE, stderr=err, text=True,
                    start_new_session=True))
        for i, proc in enumerate(procs):  # working before the first client starts
            if proc.stdout.readline().strip() != "READY":  # type: ignore[union-attr]
                pytest.fail(f"pressure worker did not start ({proc.poll()}): "
                            f"{(tmp_path / f'pressure-{i}.err').read_text()}")
        yield
    finally:
        for proc in procs:
            stop_process(proc, grace_s=5.0, group=True)
            proc.stdout.close()  # type: ignore[union-attr]


@dataclass
class Run:
    """One client process: its pid, its local port, and its lifetime on the wall clock."""

    pid: int
    port: int
    t0: int
    t1: int

    def ran(self, span: Span) -> bool:
        return self.t0 <= span.start <= self.t1


def run_client(cmd: list[str]) -> tuple[int, str, int, int]:
    """(pid, stdout, wall-clock ns before it started, after it ended) of one client."""
    t0 = time.time_ns()
    proc = subprocess.Popen(cmd, cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                            text=True)
    try:
        out, err = proc.communicate(timeout=CLIENT_TIMEOUT_S)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait(10)
    t1 = time.time_ns()
    assert proc.returncode == 0, (cmd, proc.returncode, err[-2000:])
    return proc.pid, out, t0, t1


def python_client(kind: str, target: str) -> Run:
    pid, out, t0, t1 = run_client(
        [sys.executable, "-m", "tests.integration.peers.short_client", kind, target, str(N)])
    info = json.loads(out.strip().splitlines()[-1])
    assert info["pid"] == pid
    return Run(pid, info["port"], t0, t1)


def curl_client(base: str) -> Run:
    """curl with N URLs: one connection for all, closed when it is done."""
    cmd = ["curl", "-s", "--fail", "-w", "%{local_port} %{num_connects}\\n"]
    for i in range(N):
        cmd += ["-o", "/dev/null", f"{base}/items/{i}"]
    pid, out, t0, t1 = run_client(cmd)
    lines = [line.split() for line in out.splitlines()]
    assert len(lines) == N and len({port for port, _ in lines}) == 1, lines
    assert [connects for _, connects in lines] == ["1"] + ["0"] * (N - 1), lines
    return Run(pid, int(lines[0][0]), t0, t1)


def count_ends(agent: AgentRun, runs: list[Run], server_port: int,
               mine: Callable[[Span], bool]) -> list[str]:
    """Stop the agent, then each run's spans at each end: exactly N, or a line saying
    what is missing."""
    assert agent.stop() == 0, agent.stderr[-3000:]
    spans = [s for s in agent.spans() if mine(s)]
    wrong, seen = [], [0, 0]
    for run in runs:
        client = [s for s in spans if s.kind == CLIENT and s.resource.get("process.pid") == run.pid
                  and run.ran(s) and s.attrs.get("server.port") == server_port
                  and s.attrs.get("network.peer.port") == server_port]
        server = [s for s in spans if s.kind == SERVER and s.attrs.get("client.port") == run.port
                  and run.ran(s) and s.attrs.get("server.port") == server_port]
        seen[0] += len(client)
        seen[1] += len(server)
        if len(client) != N or len(server) != N:
            wrong.append(f"pid {run.pid} port {run.port}: {len(client)} client spans, "
                         f"{len(server)} server spans, not {N}")
    print(f"{len(runs)} runs of {N} requests: {seen[0]} client and {seen[1]} server spans, "
          f"{len(wrong)} runs short; {counters(agent)}")
    return wrong


def counters(agent: AgentRun) -> dict[str, int]:
    metrics = read_metrics(agent.traces)
    return {name: metrics.get(name, 0) for name in COUNTERS}


def redis_op(span: Span) -> bool:
    return span.attrs.get("db.system.name") == "redis" and span.name in ("SET", "GET")


def items(span: Span) -> bool:
    return str(span.attrs.get("url.path", "")).startswith("/items/")


def test_redis_clients_ending_under_pressure_lose_no_span(tmp_path, start_agent, redis_server):
    agent = start_agent([redis_server])
    with pressure(tmp_path):
        runs = [python_client("redis", str(redis_server)) for _ in range(RUNS)]
    wrong = count_ends(agent, runs, redis_server, redis_op)
    assert not wrong, (wrong, counters(agent))
    assert counters(agent)["otel_ebpf.records.after_close"] == 0


def test_http1_clients_ending_under_pressure_lose_no_span(tmp_path, start_agent, uvicorn_server):
    require_peer(None if shutil.which("curl") else "curl is not installed (APT_PACKAGES)")
    agent = start_agent([uvicorn_server])
    base = f"http://127.0.0.1:{uvicorn_server}"
    with pressure(tmp_path):
        runs = []
        for _ in range(RUNS):
            runs.append(python_client("requests", base))
            runs.append(curl_client(base))
    wrong = count_ends(agent, runs, uvicorn_server, items)
    assert not wrong, (wrong, counters(agent))
    assert counters(agent)["otel_ebpf.records.after_close"] == 0


def test_a_process_whose_main_thread_ends_first_keeps_its_connection(tmp_path, start_agent,
                                                                     redis_server):
    """The main thread ends (that thread alone) after the first commands; the process's
    other thread runs the rest on the same connection, then the process ends. The
    connection is the process's until then: every command at both ends, with its peer."""
    agent = start_agent([redis_server])
    with pressure(tmp_path):
        runs = [python_client("redis-first-thread-ends", str(redis_server))
                for _ in range(RUNS // 2)]
    wrong = count_ends(agent, runs, redis_server, redis_op)
    assert not wrong, (wrong, counters(agent))


# A process whose main thread ends before it does: the main thread starts a second one and
# ends itself alone (the exit syscall), or the second thread execs a new program (which
# ends the main thread); the process then waits for a line on its stdin and ends.
FIRST_THREAD_ENDS = """
import ctypes, os, sys, threading
def rest():
    if sys.argv[1] == "exec":
        os.execv(sys.executable, [sys.executable, "-c", "import sys; sys.stdin.readline()"])
    sys.stdin.readline()
threading.Thread(target=rest).start()
if sys.argv[1] == "exec":
    threading.Event().wait()  # ended by the exec
ctypes.CDLL(None).syscall(60, 0)  # SYS_exit: this thread only
"""


def main_thread_gone(pid: int, kind: str) -> bool:
    """The process's main thread has ended (or been replaced by the exec), the process not."""
    try:
        if kind == "exec":
            return b"readline" in Path(f"/proc/{pid}/cmdline").read_bytes()
        stat = Path(f"/proc/{pid}/task/{pid}/stat").read_text()
    except OSError:
        return False
    return stat.rpartition(")")[2].split()[0] in ("Z", "X")


@pytest.mark.parametrize("kind", ["exit", "exec"])
def test_the_exit_record_comes_when_the_last_thread_ends(kind):
    """The kernel's process-exit record ends every connection of the process in the agent,
    so it must come only when the process is gone, after every record of its threads:
    not when its main thread ends while another thread goes on, nor when a thread's exec
    replaces it."""
    require_kernel()
    tracer = SocketTracer(CaptureSettings(ports=(free_port(),)), LibbpfLog())
    proc = None
    try:
        proc = subprocess.Popen([sys.executable, "-c", FIRST_THREAD_ENDS, kind],
                                stdin=subprocess.PIPE)
        deadline = time.monotonic() + 30
        while not main_thread_gone(proc.pid, kind):
            assert proc.poll() is None and time.monotonic() < deadline, "main thread did not end"
            time.sleep(0.02)
        # the main thread's end is past: any record it made is in the ring already
        exits = [e for e in tracer.poll(0) if isinstance(e, abi.ProcessExit)
                 and e.pid == proc.pid]
        assert exits == [], "an exit record while the process still runs"
        proc.communicate(b"done\n", timeout=30)
        assert proc.returncode == 0
        exits = [e for e in tracer.poll(0) if isinstance(e, abi.ProcessExit)
                 and e.pid == proc.pid]
        assert len(exits) == 1
    finally:
        if proc is not None and proc.poll() is None:
            proc.kill()
            proc.wait(10)
        tracer.close()
