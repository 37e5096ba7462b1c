"""Agent capacity: the load the agent keeps up with on one core, and its memory with many
idle connections tracked.

Run as root from the repository root (after `make -C bpf`; needs a C compiler, cc/clang):

    sudo .venv/bin/python bench/agent_capacity.py [--part http|sse|grpc|wrk|idle|all] [--seconds 10]
        [--rates 1000,2000,5000,10000,15000,20000] [--refine 2] [--conns 64]
        [--sse-rates 25,50,100,200,400,600] [--sse-conns 128]
        [--grpc-rates 250,500,1000,2000] [--grpc-conns 16] [--wrk-conns 16]
        [--idle-conns 10000]
        [--idle-rate 1000] [--idle-rounds 2] [--drain 5] [--profile] [--compare N]
        [--exporter file|otlp] [--compare N [--base DIR]] [--out docs/performance.md]

Placement: the agent runs under `taskset -c 0` (--agent-cpu); this script and every load
peer are pinned to CPU 1 (--peer-cpu), so the agent has a core of its own. The BPF
programs run in the peers' syscalls, so their cost lands on the peers' core, not in the
agent's figures (bench/kernel_overhead.py measures it).

Each step is a fresh run: a server on a free 127.0.0.1 port, then the real agent
(`.venv/bin/otel-ebpf run -c <generated config>`: targets.ports = the server's port, the
built-in defaults otherwise (all protocols, batch processor defaults, 16 MiB ring polled
every 100 ms), spans to a file exporter in a temp folder, its own metrics to another) and
its `otel-ebpf ready`, then the load for --seconds. Measured per step:
  - achieved rate: what the load client completed over its window;
  - agent CPU: utime+stime from /proc/PID/stat over the load window, as % of its core,
    and per 1k req/s (CPU % / achieved krps); "us/req" is the agent's CPU from the start
    of the load until it is idle again (backlog worked off) per request, which stays
    honest when the agent falls behind (less the work lost to kernel drops);
  - spans: counted in the file exporter's output (CLIENT and SERVER kinds), --drain
    seconds after the load stops ("in time") and after the agent's SIGINT flush ("total");
    kernel drops, spans produced and spans dropped by the export queue from the agent's
    exit summary;
  - agent RSS: VmRSS at the end of the load, VmHWM (peak) over the run.
The agent keeps up with a step when: zero kernel drops, 2 spans per request (client +
server) in the file within --drain seconds of the end of the load, no span dropped by the
export queue, and agent CPU < --max-cpu % (100) of its core. A step whose load fell short
of the offered rate (< 95 %) is marked: the load, not the agent, was the limit. After the
steps, --refine more steps bisect between the highest step kept up with and the next.

Parts:
  http  HTTP/1.1 keep-alive GETs on --conns connections at fixed offered rates
        (bench/capacity/httpload.c, compiled into the temp folder: an epoll server answering
        200 with a 2-byte body, and an open-loop client: request n is due at t0 + n/rate,
        one request in flight per connection, no pipelining).
  sse   streaming chat completions from tests/support/openai_server.py (uvicorn): first
        token at 0 ms, 32 tokens 1 ms apart, at fixed offered streams/s from
        bench/capacity/sse_client.py (asyncio, raw sockets, --sse-conns keep-alive
        connections); chunks = SSE events received (role, 32 content, finish, [DONE]).
  grpc  gRPC unary calls (grpcio, tests/integration/peers/grpc_peer.py's server, a call
        answered "hello world") at fixed offered calls/s from bench/capacity/grpc_load.py
        (--grpc-conns channels, one call in flight on each; --grpc-rates); a call is seen
        at both ends: 2 spans.
  wrk   FastAPI under wrk: bench/apps/fastapi_app.py's `async def` endpoint under uvicorn
        (one worker, no access log) and `wrk -t 1 -c --wrk-conns` (16) closed loop, as fast
        as the server answers (bench/capacity/wrk_load.py), both on the peers' core: the
        agent's CPU per request where the server writes an answer's head and body in two
        syscalls (6 events a request at both ends). One step (--compare N: N rounds a side).
  idle  --idle-conns keep-alive connections to the httpload server, opened at --idle-rate
        per second (1000), one request and answer each, then held idle: the agent's VmRSS
        before, with them open (and tracked: both ends, so 2 per connection), and after
        they close; --idle-rounds times with the same agent (memory kept for reuse stays
        flat, a leak grows); plus the memlock of its BPF maps (kernel memory, not in RSS).
The agent is always this checkout's: it runs with PYTHONPATH = the repository root and
OTEL_EBPF_BPF_DIR = its bpf/build (the venv's editable install may point at another
checkout), and the folder its `otel_ebpf` comes from is checked before each start.
--exporter otlp (http part): spans go over OTLP/gRPC (the agent's otlp exporter, insecure,
its defaults otherwise) to a real receiver instead of the file: rotel's collector (the
`rotel` test dependency) with its blackhole exporter, logging a line per export request
with its span count; "spans in time" counts those (by kind: "otlp"). rotel runs on the
agent's core (--receiver-cpu to move it): on the peers' core, beside the open-loop load
client, it answered too late from 10,000 req/s on and the agent's export queue dropped
spans (its export thread waiting on rotel's answers, its own CPU under half a core);
on the agent's core it takes core time the agent could have had, not the agent's CPU.
--compare N (http, sse and wrk parts): instead of the steps, N rounds at each rate of the agent with
the compiled per-event path (otel_ebpf/_fast) and with the pure Python path
(OTEL_EBPF_PURE_PYTHON=1), interleaved (the order alternating per round): medians and
[min–max] of agent CPU and us/req (us/stream) side by side, kernel drops and rounds kept up
with.
With --base DIR, the two sides are the agent of another checkout (DIR, its extensions
built in place with `setup.py build_ext --inplace` and its BPF objects in DIR/bpf/build)
and this checkout's, both compiled: a before/after of a change, interleaved the same way.
--profile: after the steps of a part, one more run at the lowest rate the agent did not
keep up with (or the highest rate) with py-spy (`pip install py-spy`) sampling the agent
for the whole load (200 Hz, non-blocking, all threads, idle samples left out); a table of
the top 15 functions by own time (and their total time) is added.

Prints Markdown tables; --out appends them (bench/side_by_side.py publish()).
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import re
import shlex
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.agent_process import (  # noqa: E402
    START_TIMEOUT_S,
    VENV_BIN,
    AgentProcess,
    agent_tree,
    proc_cpu_s,
)
from bench.side_by_side import publish  # noqa: E402

CAPACITY = REPO / "bench" / "capacity"
CLK_TCK = os.sysconf("SC_CLK_TCK")
AGENT_STOP_TIMEOUT_S = 90.0
PEER_START_TIMEOUT_S = 30.0
SETTLE_S = 1.0
SPAN_KINDS = {2: "server", 3: "client"}
SSE_TOKENS, SSE_INTERVAL_MS = 32, 1.0
SSE_EVENTS_PER_STREAM = SSE_TOKENS + 3  # role chunk, 32 content chunks, finish, [DONE]


# --- processes -----------------------------------------------------------------------------

def cpu_busy_s(cpu: int) -> float:
    """Seconds CPU `cpu` has not been idle (/proc/stat: all but idle and iowait)."""
    for line in Path("/proc/stat").read_text().splitlines():
        if line.startswith(f"cpu{cpu} "):
            ticks = [int(x) for x in line.split()[1:]]
            return (sum(ticks[:8]) - ticks[3] - ticks[4]) / CLK_TCK
    return 0.0


def all_proc_cpu() -> dict[int, tuple[str, float, int]]:
    """Every process: (command name, CPU seconds, the CPU it last ran on)."""
    out = {}
    for d in Path("/proc").iterdir():
        if not d.name.isdigit():
            continue
        try:
            stat = (d / "stat").read_text()
        except OSError:
            continue
        fields = stat[stat.rindex(")") + 2:].split()
        out[int(d.name)] = (stat[stat.index("(") + 1:stat.rindex(")")],
                            (int(fields[11]) + int(fields[12])) / CLK_TCK, int(fields[36]))
    return out


def busiest_others(before: dict, after: dict, mine: set[int], window_s: float
                   ) -> list[str]:
    """Processes not started by this bench that used > 2 % of a CPU over the window."""
    rows = []
    for pid, (comm, cpu, last_cpu) in after.items():
        used = cpu - before.get(pid, (comm, 0.0, 0))[1]
        if pid not in mine and used > 0.02 * window_s:
            rows.append((used, f"{comm} (pid {pid}, CPU {last_cpu}) {pct(used, window_s):.0f} %"))
    return [text for _, text in sorted(rows, reverse=True)[:3]]


def bpf_mapped_rss_kib(pid: int) -> int:
    """Resident kB of the BPF maps process `pid` has mapped (/proc/PID/smaps), part of VmRSS."""
    total, in_bpf = 0, False
    for line in Path(f"/proc/{pid}/smaps").read_text().splitlines():
        if line[:1] in "0123456789abcdef" and "-" in line.split(" ", 1)[0]:
            in_bpf = line.rstrip().endswith("anon_inode:bpf-map")
        elif in_bpf and line.startswith("Rss:"):
            total += int(line.split()[1])
    return total


def bpf_memlock_kib(pid: int) -> int:
    """Sum of memlock over the BPF maps process `pid` holds open (kernel memory)."""
    total = 0
    fd_dir = Path(f"/proc/{pid}/fdinfo")
    for info in fd_dir.iterdir():
        try:
            text = info.read_text()
        except OSError:
            continue
        if "map_type:" in text:
            m = re.search(r"^memlock:\s*(\d+)", text, re.M)
            total += int(m[1]) if m else 0
    return total // 1024


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def wait_port(port: int, proc: subprocess.Popen, timeout_s: float = PEER_START_TIMEOUT_S) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise RuntimeError(f"{proc.args} exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=0.5).close()
            return
        except OSError:
            time.sleep(0.1)
    raise TimeoutError(f"nothing listens on 127.0.0.1:{port} after {timeout_s}s")


def stop(proc: subprocess.Popen, sig: int = signal.SIGTERM, timeout_s: float = 10.0) -> None:
    if proc.poll() is None:
        proc.send_signal(sig)
        try:
            proc.wait(timeout_s)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(5)


def last_json(text: str) -> dict:
    docs = [json.loads(x) for x in text.splitlines() if x.startswith("{")]
    return docs[-1] if docs else {}


def read_json_line(proc: subprocess.Popen, timeout_s: float) -> dict:
    """The next JSON line of a peer's stdout, waiting at most timeout_s."""
    import select

    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 0.5)
        if ready:
            line = proc.stdout.readline()
            if not line:
                break
            if line.startswith("{"):
                return json.loads(line)
    raise RuntimeError(f"{proc.args[:2]} gave no JSON line in {timeout_s:.0f} s "
                       f"(exit {proc.poll()})")


def build_httpload(workdir: Path) -> Path:
    exe = workdir / "httpload"
    cc = next((c for c in ("cc", "clang", "gcc") if shutil.which(c)), None)
    if cc is None:
        raise SystemExit("no C compiler (cc, clang or gcc) to build bench/capacity/httpload.c")
    subprocess.run([cc, "-O2", "-o", str(exe), str(CAPACITY / "httpload.c")], check=True,
                   timeout=120)
    return exe


# --- the agent -----------------------------------------------------------------------------

def agent_config(workdir: Path, ports: list[int], max_connections: int,
                 otlp_port: int | None = None) -> str:
    """Spans to the file exporter, or (otlp_port given) to the OTLP/gRPC exporter only."""
    if otlp_port is None:
        traces = {"file": {"path": str(workdir / "traces.jsonl")}}
    else:
        traces = {"otlp": {"endpoint": f"127.0.0.1:{otlp_port}", "tls": {"insecure": True}}}
    return yaml.safe_dump({
        "receivers": {"ebpf": {
            "targets": {"ports": ports},
            "connections": {"max": max_connections},
        }},
        "processors": {"batch": {}},  # the defaults
        "exporters": {**traces, "file/metrics": {"path": str(workdir / "metrics.jsonl")}},
        "service": {"pipelines": {
            "traces": {"receivers": ["ebpf"], "processors": ["batch"],
                       "exporters": list(traces)},
            "metrics": {"receivers": ["ebpf"], "exporters": ["file/metrics"]},
        }},
    })


class Agent(AgentProcess):
    """The real agent on its own core, started with a generated config from `tree` (this
    checkout by default); waits for ready. Its package's folder is checked."""

    def __init__(self, workdir: Path, ports: list[int], cpu: int,
                 max_connections: int = 65536, otlp_port: int | None = None,
                 tree: Path = REPO) -> None:
        self.traces = workdir / "traces.jsonl"
        self.receiver: Receiver | None = None
        with agent_tree(tree):
            where = subprocess.run(
                [sys.executable, "-c", "import otel_ebpf; print(otel_ebpf.__file__)"],
                capture_output=True, text=True, cwd=workdir, check=True).stdout.strip()
            if not Path(where).resolve().is_relative_to(tree.resolve()):
                raise RuntimeError(f"the agent would import {where}, not {tree}'s package")
            super().__init__(workdir, agent_config(workdir, ports, max_connections, otlp_port),
                             cpu, stop_timeout_s=AGENT_STOP_TIMEOUT_S)

    def span_counter(self) -> SpanCounter:
        """What counts the spans it exported: its file, or its receiver's log."""
        if self.receiver is not None:
            return RotelCounter(self.receiver.out)
        return SpanCounter(self.traces)


class Receiver:
    """A real OTLP/gRPC receiver for --exporter otlp: rotel's collector (the `rotel`
    package, a test dependency) on CPU `cpu`, dropping what it takes (its blackhole
    exporter) and logging one line per request with its span count, which RotelCounter
    sums."""

    def __init__(self, workdir: Path, cpu: int) -> None:
        try:
            import rotel
        except ImportError as exc:
            raise SystemExit("--exporter otlp needs rotel: .venv/bin/pip install -e '.[test]'"
                             ) from exc
        binary = Path(rotel.__file__).parent / "rotel-agent"
        self.port, http_port = free_port(), free_port()
        self.out = workdir / "rotel.out"
        with self.out.open("wb") as out:
            self.proc = subprocess.Popen(
                ["taskset", "-c", str(cpu), str(binary), "start",
                 "--otlp-grpc-endpoint", f"127.0.0.1:{self.port}",
                 "--otlp-http-endpoint", f"127.0.0.1:{http_port}",
                 "--exporter", "blackhole", "--debug-log", "traces",
                 "--debug-log-verbosity", "basic", "--log-format", "json",
                 "--pid-file", str(workdir / "rotel.pid"),
                 "--log-file", str(workdir / "rotel.log")],
                stdout=out, stderr=subprocess.STDOUT)
        wait_port(self.port, self.proc)

    def stop(self) -> None:
        stop(self.proc)


class SpanCounter:
    """Spans in the file exporter's output by kind, read incrementally (whole lines).

    Counted by the bytes of each span's `"kind":N` field, not by parsing the JSON: parsing
    the ~380 MB that 20k req/s write in 8 s takes ~3 s here, which the drain figure would
    report as the agent's lag. The agent's OTLP/JSON is compact and a string value cannot
    hold those bytes unescaped, so the count is exact (tests/unit/test_bench_capacity.py)."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0
        self.kinds: Counter[str] = Counter()

    @property
    def total(self) -> int:
        return sum(self.kinds.values())

    def _new_lines(self) -> bytes:
        """The whole lines written since the last call."""
        if not self.path.exists():
            return b""
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read()
        end = data.rfind(b"\n") + 1
        self.offset += end
        return data[:end]

    def poll(self) -> int:
        whole = self._new_lines()
        for kind in range(6):  # SpanKind 0..5
            if n := whole.count(b'"kind":%d' % kind):
                self.kinds[SPAN_KINDS.get(kind, "other")] += n
        return self.total

    def wait_for(self, expected: int, timeout_s: float, settle_s: float | None = None
                 ) -> float | None:
        """Poll until `expected` spans are in; the seconds it took, None past timeout_s
        (or once the count has not grown for settle_s)."""
        t0 = last_growth = time.monotonic()
        seen = -1
        while True:
            if self.poll() >= expected:
                return time.monotonic() - t0
            now = time.monotonic()
            if self.total != seen:
                seen, last_growth = self.total, now
            if now - t0 > timeout_s or (settle_s is not None and now - last_growth > settle_s):
                return None
            time.sleep(0.2)


class RotelCounter(SpanCounter):
    """Spans the OTLP receiver took: the `spans` of each "Received traces" line it logged
    (one per export request). Kinds are not in those lines: all are counted as "otlp"."""

    SPANS = re.compile(rb'"spans":\s*"?(\d+)')

    def poll(self) -> int:
        for line in self._new_lines().splitlines():
            if b"Received traces" in line and (m := self.SPANS.search(line)):
                self.kinds["otlp"] += int(m[1])
        return self.total


# --- one load step -------------------------------------------------------------------------

@dataclass
class Step:
    part: str
    offered: float
    achieved: float = 0.0
    requests: int = 0
    chunks: int = 0                 # SSE events (sse part)
    chunk_rate: float = 0.0
    window_s: float = 0.0
    load_cpu: float | None = None   # the load peers' CPU % of their core
    p99_ms: float | None = None
    agent_cpu: float | None = None  # % of its core over the load window
    others_cpu: float | None = None  # % of the agent's core busy with anything else
    others: list = field(default_factory=list)  # other busy processes during the load
    us_per_req: float | None = None
    spans_in_time: int = 0
    spans_total: int = 0
    drain_s: float | None = None
    kinds: Counter = field(default_factory=Counter)
    totals: dict = field(default_factory=dict)
    rss_kib: int = 0
    hwm_kib: int = 0
    agent_exit: int | None = None
    profile: list | None = None
    profile_cpu: float | None = None  # the agent's CPU % in the profiled run
    errors: int = 0

    @property
    def expected(self) -> int:
        return 2 * self.requests

    @property
    def drops(self) -> int | None:
        return self.totals.get("kernel.drops")

    @property
    def load_short(self) -> bool:
        return self.achieved < 0.95 * self.offered

    def kept_up(self, max_cpu: float) -> bool:
        return (self.drops == 0 and self.spans_in_time >= self.expected > 0
                and self.totals.get("spans.dropped", 0) == 0
                and self.agent_cpu is not None and self.agent_cpu < max_cpu)


def pct(cpu_s: float, window_s: float) -> float:
    return 100.0 * cpu_s / window_s if window_s > 0 else 0.0


def wait_idle(agent: Agent, timeout_s: float = 60.0) -> float:
    """Wait (bounded) until the agent has worked off its backlog: under 10 % CPU over half a
    second. Its CPU seconds then."""
    deadline = time.monotonic() + timeout_s
    before = agent.cpu_s()
    while time.monotonic() < deadline:
        time.sleep(0.5)
        now = agent.cpu_s()
        if now - before < 0.05:
            return now
        before = now
    return before


def measured_step(step: Step, agent: Agent, server_pid: int, load_cmd: list[str],
                  load_timeout_s: float, args, profile_to: Path | None) -> dict:
    """Run the load client against the traced server; fill in `step` (the load's CPU: the
    client's own report plus the server's over the same window)."""
    spy = None
    if profile_to is not None:
        spy = subprocess.Popen(
            [str(VENV_BIN / "py-spy"), "record", "--pid", str(agent.pid), "--format", "raw",
             "--rate", "200", "--nonblocking", "--duration", str(int(args.seconds)),
             "-o", str(profile_to)], stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        time.sleep(0.5)
    b0, procs0 = cpu_busy_s(args.agent_cpu), all_proc_cpu()
    s0, a0, t0 = proc_cpu_s(server_pid), agent.cpu_s(), time.monotonic()
    out = subprocess.run(load_cmd, capture_output=True, text=True, timeout=load_timeout_s)
    t1, a1, s1 = time.monotonic(), agent.cpu_s(), proc_cpu_s(server_pid)
    b1, procs1 = cpu_busy_s(args.agent_cpu), all_proc_cpu()
    step.rss_kib = agent.rss_kib()
    load = last_json(out.stdout)
    if not load:
        raise RuntimeError(f"load gave no summary (exit {out.returncode}): {out.stderr[-1500:]}")
    window = t1 - t0
    step.window_s = window
    step.agent_cpu = pct(a1 - a0, window)
    step.others_cpu = max(0.0, pct(b1 - b0 - (a1 - a0), window))
    mine = {os.getpid(), agent.pid, server_pid} | ({spy.pid} if spy else set())
    step.others = busiest_others(procs0, procs1, mine, window)
    step.load_cpu = pct(load.get("cpu_s", 0.0) + s1 - s0, window)
    step.errors = load.get("errors", 0)
    counter = agent.span_counter()
    step.requests = load["completed"]
    step.drain_s = counter.wait_for(2 * step.requests, args.drain)
    step.spans_in_time = counter.total
    a2 = wait_idle(agent)
    step.us_per_req = 1e6 * (a2 - a0) / step.requests if step.requests else None
    step.hwm_kib = agent.hwm_kib()
    if spy is not None:
        try:
            spy.wait(args.seconds + 30)
        except subprocess.TimeoutExpired:
            stop(spy, signal.SIGINT)
    step.agent_exit = agent.stop()
    step.totals = agent.summary()
    counter.poll()
    step.spans_total = counter.total
    step.kinds = counter.kinds
    if step.agent_exit != 0:
        print(f"agent exited with {step.agent_exit}:\n{agent.stderr[-1500:]}", file=sys.stderr)
    if profile_to is not None and profile_to.exists():
        step.profile = top_functions(profile_to)
    return load


def http_step(rate: float, args, exe: Path, profile: bool = False, pure: bool = False,
              tree: Path = REPO) -> Step:
    step = Step("http", rate)
    with tempfile.TemporaryDirectory(prefix="capacity-http-") as tmp:
        workdir = Path(tmp)
        port = free_port()
        max_s = args.seconds + START_TIMEOUT_S + AGENT_STOP_TIMEOUT_S + 60
        server = subprocess.Popen([str(exe), "server", str(port), str(max_s)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        agent = receiver = None
        try:
            wait_port(port, server)
            if args.exporter == "otlp":
                receiver = Receiver(workdir, args.agent_cpu if args.receiver_cpu is None
                                    else args.receiver_cpu)
            with pure_python(pure):
                agent = Agent(workdir, [port], args.agent_cpu, tree=tree,
                              otlp_port=receiver.port if receiver else None)
            agent.receiver = receiver
            time.sleep(SETTLE_S)
            load_cmd = [str(exe), "load", str(port), str(rate), str(args.seconds),
                        str(args.conns)]
            load = measured_step(step, agent, server.pid, load_cmd, args.seconds + 30, args,
                                 workdir / "profile.txt" if profile else None)
        finally:
            if agent is not None:
                agent.stop()
            if receiver is not None:
                receiver.stop()
            stop(server)
        step.achieved = load["rate"]
        step.p99_ms = load["p99_ms"]
    return step


@contextlib.contextmanager
def pure_python(on: bool):
    """The agent started inside takes the pure Python path (OTEL_EBPF_PURE_PYTHON=1)."""
    saved = os.environ.pop("OTEL_EBPF_PURE_PYTHON", None)
    if on:
        os.environ["OTEL_EBPF_PURE_PYTHON"] = "1"
    try:
        yield
    finally:
        os.environ.pop("OTEL_EBPF_PURE_PYTHON", None)
        if saved is not None:
            os.environ["OTEL_EBPF_PURE_PYTHON"] = saved


def compare_sides(args, part: str, rates: list[float], one, rounds: int) -> tuple:
    """`rounds` runs of two agents at each rate, interleaved (the order alternating per
    round): the compiled per-event path against pure Python, or with --base this checkout's
    agent against the one in the --base folder (both compiled). `one(rate, **side)` runs a
    step. The sides and {(rate, side name): steps}."""
    if args.base is not None:
        sides = ((f"before ({args.base.name})", dict(tree=args.base)),
                 ("after (this checkout)", dict(tree=REPO)))
    else:
        sides = (("pure Python", dict(pure=True)), ("compiled", dict(pure=False)))
    runs: dict[tuple[float, str], list[Step]] = {}
    for rate in rates:
        for i in range(rounds):
            for name, how in (sides if i % 2 == 0 else sides[::-1]):
                print(f"{part} {name}: offered {rate:g}/s for {args.seconds:g} s (round {i + 1})",
                      file=sys.stderr)
                s = one(rate, **how)
                print(f"  agent CPU {s.agent_cpu:.0f} %, {s.us_per_req or 0:.0f} us/req, others "
                      f"on its core {s.others_cpu:.0f} %, drops {s.drops}, spans "
                      f"{s.spans_in_time} of {s.expected}, kept up {s.kept_up(args.max_cpu)}",
                      file=sys.stderr)
                runs.setdefault((rate, name), []).append(s)
    return sides, runs


def cell(values: list[float | None], spec: str = ".0f") -> str:
    """median [min–max] of the values given (None left out)."""
    got = [v for v in values if v is not None]
    if not got:
        return "n/a"
    return (f"{format(statistics.median(got), spec)} "
            f"[{format(min(got), spec)}–{format(max(got), spec)}]")


def compare_table(args, part: str, rates: list[float], one, title: str,
                  columns: list[tuple[str, object]], spans_per: str) -> list[str]:
    """--compare: two agents at each rate side by side (compare_sides), one row per rate and
    agent; `columns` are (header, the cell of one rate's and agent's steps)."""
    sides, runs = compare_sides(args, part, rates, one, args.compare)
    what = ("this checkout against the one before" if args.base is not None
            else "compiled per-event path against pure Python")
    lines = [f"### {title.format(what=what)}, {args.compare} interleaved rounds per rate and "
             "agent, median [min–max])", "",
             "| " + " | ".join(["rate", "agent", *(h for h, _ in columns), "kernel drops",
                                "rounds kept up"]) + " |",
             "|---:|---|" + "---:|" * len(columns) + "---:|---|"]
    for rate in rates:
        for name, _ in sides:
            steps = runs[(rate, name)]
            lines.append(
                f"| {rate:g} | {name} | " + " | ".join(cell_of(steps) for _, cell_of in columns)
                + f" | {', '.join(str(s.drops) for s in steps)} | "
                f"{sum(s.kept_up(args.max_cpu) for s in steps)} of {len(steps)} |")
    lines += ["", f"Agent pinned to CPU {args.agent_cpu}, load peers to CPU {args.peer_cpu}; "
              f"each run a fresh agent with default settings ({args.exporter if part == 'http' else 'file'} "
              f"exporter). kept up = 0 kernel drops, all 2 spans/{spans_per} exported within "
              f"{args.drain:g} s, none queue-dropped, CPU < {args.max_cpu:g} %."]
    return lines


def per_k(steps: list[Step], rate_of) -> list[float | None]:
    """Agent CPU % per 1k (requests, chunks) per second, each step's."""
    return [s.agent_cpu / (rate_of(s) / 1000) if s.agent_cpu is not None and rate_of(s)
            else None for s in steps]


def compare_http(args, exe: Path, today: str) -> list[str]:
    return compare_table(
        args, "http", args.rates, lambda rate, **how: http_step(rate, args, exe, **how),
        f"HTTP/1.1, {{what}} ({today}, keep-alive GETs on {args.conns} connections, "
        f"open loop (rate: offered req/s), {args.exporter} exporter",
        [("achieved req/s", lambda st: cell([s.achieved for s in st])),
         ("agent CPU %", lambda st: cell([s.agent_cpu for s in st])),
         ("agent CPU % per 1k req/s", lambda st: cell(per_k(st, lambda s: s.achieved), ".2f")),
         ("agent us/req", lambda st: cell([s.us_per_req for s in st], ".1f")),
         ("others on its core %", lambda st: cell([s.others_cpu for s in st]))], "request")


def compare_sse(args, today: str) -> list[str]:
    return compare_table(
        args, "sse", args.sse_rates, lambda rate, **how: sse_step(rate, args, **how),
        f"LLM SSE streams, {{what}} ({today}, chat completions, {SSE_TOKENS} tokens "
        f"{SSE_INTERVAL_MS:g} ms apart, {SSE_EVENTS_PER_STREAM} SSE events per stream, up "
        f"to {args.sse_conns} concurrent streams, open loop (rate: offered streams/s)",
        [("chunks/s", lambda st: cell([s.chunk_rate for s in st])),
         ("agent CPU %", lambda st: cell([s.agent_cpu for s in st], ".1f")),
         ("agent CPU % per 1k chunks/s",
          lambda st: cell(per_k(st, lambda s: s.chunk_rate), ".2f")),
         ("agent us/stream", lambda st: cell([s.us_per_req for s in st])),
         ("others on its core %", lambda st: cell([s.others_cpu for s in st]))], "stream")


def compare_wrk(args, today: str) -> list[str]:
    return compare_table(
        args, "wrk", [0.0], lambda rate, **how: wrk_step(args, **how),
        f"FastAPI under wrk, {{what}} ({today}, `async def` endpoint, uvicorn one worker, "
        f"`wrk -t 1 -c {args.wrk_conns}` closed loop (rate 0: as fast as the server answers)",
        [("achieved req/s", lambda st: cell([s.achieved for s in st])),
         ("agent CPU %", lambda st: cell([s.agent_cpu for s in st])),
         ("agent us/req", lambda st: cell([s.us_per_req for s in st], ".1f")),
         ("load CPU % (its core)", lambda st: cell([s.load_cpu for s in st])),
         ("others on its core %", lambda st: cell([s.others_cpu for s in st]))], "request")


def peer_step(name: str, rate: float, args, server: list[str], load: list[str],
              profile: bool, tree: Path = REPO, pure: bool = False) -> tuple[Step, dict]:
    """One step against a Python server peer (`server`, given a free port after it), under
    a fresh agent, with the load command `load` (its port placeholder "{port}" filled in):
    the step and the load's summary."""
    step = Step(name, rate)
    with tempfile.TemporaryDirectory(prefix=f"capacity-{name}-") as tmp:
        workdir = Path(tmp)
        port = free_port()
        log = (workdir / "server.log").open("w")
        proc = subprocess.Popen([sys.executable, "-m", *server, str(port)], cwd=REPO,
                                stdout=log, stderr=subprocess.STDOUT)
        agent = None
        try:
            wait_port(port, proc)
            with pure_python(pure):
                agent = Agent(workdir, [port], args.agent_cpu, tree=tree)
            time.sleep(SETTLE_S)
            cmd = [str(port) if part == "{port}" else part for part in load]
            summary = measured_step(step, agent, proc.pid, cmd, args.seconds + 60, args,
                                    workdir / "profile.txt" if profile else None)
        finally:
            if agent is not None:
                agent.stop()
            stop(proc)
            log.close()
    return step, summary


def sse_step(rate: float, args, profile: bool = False, tree: Path = REPO,
             pure: bool = False) -> Step:
    step, load = peer_step(
        "sse", rate, args,
        ["tests.support.openai_server", "--first-token-delay", "0", "--token-interval",
         str(SSE_INTERVAL_MS / 1000), "--tokens", str(SSE_TOKENS), "--port"],
        [sys.executable, str(CAPACITY / "sse_client.py"), "{port}", str(rate),
         str(args.seconds), "--conns", str(args.sse_conns), "--tokens", str(SSE_TOKENS),
         "--interval-ms", str(SSE_INTERVAL_MS)], profile, tree, pure)
    step.achieved = load["streams_per_s"]
    step.chunks = load["events"]
    step.chunk_rate = load["events_per_s"]
    return step


def grpc_step(rate: float, args, profile: bool = False) -> Step:
    step, load = peer_step(
        "grpc", rate, args, ["tests.integration.peers.grpc_peer", "server"],
        [sys.executable, str(CAPACITY / "grpc_load.py"), "{port}", str(rate),
         str(args.seconds), "--conns", str(args.grpc_conns)], profile)
    step.achieved = load["rate"]
    step.p99_ms = load["p99_ms"]
    return step


def wrk_step(args, profile: bool = False, tree: Path = REPO, pure: bool = False) -> Step:
    """FastAPI (bench/apps/fastapi_app.py, `async def` endpoint) under uvicorn, one worker,
    driven by wrk at the rate it answers: both on the peers' core, the agent alone on its."""
    step, load = peer_step(
        "wrk", 0.0, args,
        ["uvicorn", "bench.apps.fastapi_app:app", "--host", "127.0.0.1", "--workers", "1",
         "--no-access-log", "--log-level", "warning", "--timeout-keep-alive", "60", "--port"],
        [sys.executable, str(CAPACITY / "wrk_load.py"), "{port}", f"{args.seconds:g}",
         "--conns", str(args.wrk_conns)], profile, tree, pure)
    step.achieved = step.offered = load["rate"]
    return step


def run_steps(name: str, rates: list[float], one, args) -> list[Step]:
    """Every rate in turn, then --refine bisection steps between the highest rate kept up
    with and the lowest one above it that was not."""
    steps: list[Step] = []

    def run(rate: float) -> Step:
        print(f"{name}: offered {rate:g}/s for {args.seconds:g} s...", file=sys.stderr)
        s = one(rate)
        print(f"  achieved {s.achieved:.0f}/s, agent CPU {s.agent_cpu:.0f} % (others on its "
              f"core {s.others_cpu:.0f} %{'; busy: ' + ', '.join(s.others) if s.others else ''}"
              "), spans "
              f"{s.spans_in_time}/{s.expected} in time, drops {s.drops}, "
              f"kept up: {s.kept_up(args.max_cpu)}", file=sys.stderr)
        steps.append(s)
        return s

    for rate in rates:
        run(rate)
    for _ in range(args.refine):
        ok = [s.offered for s in steps if s.kept_up(args.max_cpu)]
        lo = max(ok, default=0.0)
        above = [s.offered for s in steps if s.offered > lo and not s.kept_up(args.max_cpu)]
        if not above:
            break
        hi = min(above)
        mid = round((lo + hi) / 2, -1 if hi - lo > 100 else 0)
        if mid <= lo or mid >= hi:
            break
        run(mid)
    return sorted(steps, key=lambda s: s.offered)


def profile_at_saturation(name: str, steps: list[Step], one, args) -> None:
    """One more run, py-spy on, at the lowest rate not kept up with (else the highest);
    its table goes with that rate's row."""
    over = [s for s in steps if not s.kept_up(args.max_cpu)]
    target = over[0] if over else steps[-1]
    print(f"{name}: profiling the agent at {target.offered:g}/s...", file=sys.stderr)
    profiled = one(target.offered)
    target.profile = profiled.profile or [("py-spy gave no samples", 0.0, 0.0)]
    target.profile_cpu = profiled.agent_cpu


# --- idle connections ----------------------------------------------------------------------

def idle_part(args, exe: Path) -> list[str]:
    n = args.idle_conns
    with tempfile.TemporaryDirectory(prefix="capacity-idle-") as tmp:
        workdir = Path(tmp)
        port = free_port()
        max_s = 600
        server = subprocess.Popen([str(exe), "server", str(port), str(max_s)],
                                  stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
        agent = client = None
        rows: list[tuple[str, int, int, str]] = []
        try:
            wait_port(port, server)
            agent = Agent(workdir, [port], args.agent_cpu, max_connections=max(65536, 4 * n))
            time.sleep(2.0)
            memlock = bpf_memlock_kib(agent.pid)
            rows.append(("agent ready, no load", agent.rss_kib(), agent.hwm_kib(), ""))
            ring_kib = bpf_mapped_rss_kib(agent.pid)
            for rnd in range(1, args.idle_rounds + 1):
                tag = f"round {rnd}: " if args.idle_rounds > 1 else ""
                a0 = agent.cpu_s()
                counter = SpanCounter(agent.traces)
                before = counter.poll()
                client = subprocess.Popen(
                    [str(exe), "idle", str(port), str(n), str(max_s - 60), str(args.idle_rate)],
                    stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
                    text=True)
                ready = read_json_line(client, n / args.idle_rate + 60)
                answered = ready.get("answered", 0)
                took = counter.wait_for(before + 2 * answered, 30.0, settle_s=5.0)
                time.sleep(2.0)
                open_cpu = agent.cpu_s() - a0
                rows.append((f"{tag}{answered} connections open and idle "
                             f"({counter.total - before} of {2 * answered} spans, opened in "
                             f"{ready.get('open_s', 0):.1f} s, spans out "
                             f"{'n/a' if took is None else format(took, '.1f')} s later)",
                             agent.rss_kib(), agent.hwm_kib(),
                             f"{1e6 * open_cpu / max(answered, 1):.0f} us agent CPU per "
                             "connection"))
                time.sleep(5.0)
                rows.append((f"{tag}... held idle 5 s more", agent.rss_kib(), agent.hwm_kib(),
                             ""))
                client.stdin.write("close\n")
                client.stdin.flush()
                done = read_json_line(client, 60.0)
                client.wait(30)
                client = None
                time.sleep(5.0)  # the closes drained, a few sweeps
                rows.append((f"{tag}{done.get('closed', 0)} connections closed, 5 s later",
                             agent.rss_kib(), agent.hwm_kib(), ""))
        finally:
            if client is not None:
                stop(client)
            if agent is not None:
                agent.stop()
            stop(server)
        totals = agent.summary() if agent else {}
    lines = [
        f"### Agent memory with {n} idle tracked connections "
        f"({datetime.date.today().isoformat()})",
        "",
        "| moment | agent VmRSS (MiB) | VmHWM (MiB) | note |",
        "|---|---:|---:|---|",
    ]
    for label, rss, hwm, note in rows:
        lines.append(f"| {label} | {rss / 1024:.1f} | {hwm / 1024:.1f} | {note} |")
    lines += ["", f"Of the VmRSS, {ring_kib / 1024:.1f} MiB are BPF map pages mapped into the "
              "agent (the ring buffer's data pages, mapped twice so records can wrap: kernel "
              "memory the kernel maps whole at mmap time, not the agent's heap). Kernel side: "
              f"the agent's BPF maps hold {memlock / 1024:.1f} MiB (memlock), sized for connections.max = {max(65536, 4 * n)}. Exit totals: "
              f"connections.tracked {totals.get('connections.tracked', 'n/a')}, "
              f"connections.evicted {totals.get('connections.evicted', 'n/a')}, "
              f"kernel.drops {totals.get('kernel.drops', 'n/a')}, spans.produced "
              f"{totals.get('spans.produced', 'n/a')}, spans.dropped (export queue) "
              f"{totals.get('spans.dropped', 'n/a')}; agent exit "
              f"{agent.exit_code if agent else 'n/a'}. "
              f"Target: < 150 MiB RSS."]
    return lines


# --- py-spy ---------------------------------------------------------------------------------

def top_functions(raw: Path, count: int = 15) -> list[tuple[str, float, float]]:
    """(function, own %, total %) from py-spy's raw (collapsed) stacks, by own time."""
    own: Counter[str] = Counter()
    total: Counter[str] = Counter()
    samples = 0
    for line in raw.read_text(errors="replace").splitlines():
        stack, _, n = line.rpartition(" ")
        if not stack or not n.isdigit():
            continue
        weight = int(n)
        frames = [re.sub(r":\d+\)$", ")", f) for f in stack.split(";")]
        frames = [f for f in frames if not f.startswith(("process ", "thread "))]
        if not frames:
            continue
        samples += weight
        own[frames[-1]] += weight
        for f in set(frames):
            total[f] += weight
    if not samples:
        return []

    def short(f: str) -> str:
        return f.replace(str(REPO) + "/", "").replace(str(VENV_BIN.parent) + "/", "")

    return [(short(f), 100.0 * w / samples, 100.0 * total[f] / samples)
            for f, w in own.most_common(count)]


# --- tables --------------------------------------------------------------------------------

def fmt(v, spec: str = ".0f") -> str:
    return "n/a" if v is None else format(v, spec)


def steps_table(title: str, steps: list[Step], args, sse: bool, exporter: str = "file"
                ) -> list[str]:
    unit = "streams/s" if sse else "req/s"
    head = (f"| offered {unit} | achieved {unit} | "
            + ("chunks/s | " if sse else "p99 latency (ms) | ")
            + f"load CPU % (CPU {args.peer_cpu}) | agent CPU % | others on its core % | "
            "agent CPU % per 1k "
            + ("chunks/s" if sse else "req/s")
            + (" | agent us/stream" if sse else " | agent us/req")
            + " | kernel drops | spans expected | spans in time "
            "(drain s) | spans exported total | produced | queue-dropped | RSS / peak (MiB) "
            "| kept up |")
    lines = [title, "", head, "|" + "---:|" * (head.count("|") - 2) + "---|"]
    for s in steps:
        per_k = s.chunk_rate if sse else s.achieved
        per1k = s.agent_cpu / (per_k / 1000) if s.agent_cpu is not None and per_k else None
        kept = "yes" if s.kept_up(args.max_cpu) else "no"
        drain = fmt(s.drain_s, ".1f") if s.drain_s is not None else f">{args.drain:g}"
        if s.load_short:
            kept += " (load short)"
        if s.others_cpu is not None and s.others_cpu > 10:
            kept += " (core shared)"
        if s.errors:
            kept += f" ({s.errors} load errors)"
        lines.append(
            f"| {s.offered:g} | {s.achieved:.0f} | "
            + (f"{s.chunk_rate:.0f} | " if sse else f"{fmt(s.p99_ms, '.2f')} | ")
            + f"{fmt(s.load_cpu)} | {fmt(s.agent_cpu)} | {fmt(s.others_cpu)} | "
            f"{fmt(per1k, '.1f')}{'†' if s.drops else ''} | "
            f"{fmt(s.us_per_req)} | {fmt(s.drops)} | {s.expected} | {s.spans_in_time} "
            f"({drain}) | "
            f"{s.spans_total} | {s.totals.get('spans.produced', 'n/a')} | "
            f"{s.totals.get('spans.dropped', 'n/a')} | {s.rss_kib / 1024:.0f} / "
            f"{s.hwm_kib / 1024:.0f} | {kept} |")
    ok = [s for s in steps if s.kept_up(args.max_cpu)]
    best = max(ok, key=lambda s: s.offered, default=None)
    lines.append("")
    if best is None:
        lines.append(f"Kept up with: none of these {unit} steps.")
    else:
        lines.append(f"Kept up with: {best.achieved:.0f} {unit}"
                     + (f" ({best.chunk_rate:.0f} chunks/s)" if sse else "")
                     + f" at {fmt(best.agent_cpu)} % of its core.")
    bad = [s for s in steps
           if not s.kept_up(args.max_cpu) and s.offered > (best.offered if best else 0)]
    if bad:
        s = bad[0]
        why = []
        if s.drops:
            why.append(f"{s.drops} kernel drops")
        if s.spans_in_time < s.expected:
            why.append(f"{s.spans_in_time} of {s.expected} spans within {args.drain:g} s")
        if s.totals.get("spans.dropped"):
            why.append(f"{s.totals['spans.dropped']} spans dropped by the export queue")
        if s.agent_cpu is not None and s.agent_cpu >= args.max_cpu:
            why.append(f"CPU {s.agent_cpu:.0f} %")
        lines.append(f"Saturates by {s.offered:g} {unit}: " + ", ".join(why or ["load short"])
                     + ".")
    lines.append(
        f"Agent pinned to CPU {args.agent_cpu}, load peers to CPU {args.peer_cpu} "
        f"({os.cpu_count()} CPUs); {args.seconds:g} s per step, each a fresh agent with "
        f"default settings ({exporter} exporter). us/req (us/stream): the agent's CPU from the "
        f"load's start until it is idle again (its backlog worked off, at most 60 s after "
        f"the drain), per request; work lost to kernel drops is not in it. "
        f"kept up = 0 kernel drops, all 2 spans/request exported within {args.drain:g} s, "
        f"none queue-dropped, CPU < {args.max_cpu:g} %. †: kernel drops, so the agent did "
        f"not do all the work: not a cost figure. Others on its core: CPU {args.agent_cpu} "
        f"busy with anything but the agent (/proc/stat) during the load; over 10 % marks the "
        f"step (core shared): another process took time the agent could have had.")
    for s in steps:
        if s.others:
            lines.append(f"Other processes busy during the {s.offered:g} {unit} load: "
                         f"{', '.join(s.others)}.")
    for s in steps:
        if s.profile:
            lines += ["", f"py-spy on the agent at {s.offered:g} {unit} offered (a separate "
                      f"run at that rate, agent CPU {fmt(s.profile_cpu)} %; all "
                      "threads, non-idle samples; own = the function itself, total = with "
                      "what it calls):", "",
                      "| function | own % | total % |", "|---|---:|---:|"]
            lines += [f"| `{f}` | {o:.1f} | {t:.1f} |" for f, o, t in s.profile]
    return lines


# --- main ----------------------------------------------------------------------------------

def rates_arg(text: str) -> list[float]:
    rates = [float(x) for x in text.split(",") if x]
    if not rates or len(rates) > 20 or not all(0 < r <= 200_000 for r in rates):
        raise argparse.ArgumentTypeError("1..20 rates, each 0..200000")
    return rates


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--part", choices=("http", "sse", "grpc", "wrk", "idle", "all"),
                    default="all")
    ap.add_argument("--seconds", type=float, default=10.0, help="load per step")
    ap.add_argument("--rates", type=rates_arg,
                    default=rates_arg("1000,2000,5000,10000,15000,20000"),
                    help="HTTP requests/s offered, one step each")
    ap.add_argument("--conns", type=int, default=64, help="HTTP keep-alive connections")
    ap.add_argument("--sse-rates", type=rates_arg, default=rates_arg("25,50,100,200,400,600"),
                    help="streams/s offered, one step each")
    ap.add_argument("--sse-conns", type=int, default=128, help="SSE keep-alive connections")
    ap.add_argument("--grpc-rates", type=rates_arg, default=rates_arg("250,500,1000,2000"),
                    help="gRPC unary calls/s offered, one step each")
    ap.add_argument("--grpc-conns", type=int, default=16, help="gRPC channels")
    ap.add_argument("--wrk-conns", type=int, default=16,
                    help="wrk part: keep-alive connections, one request in flight on each")
    ap.add_argument("--refine", type=int, default=2, help="bisection steps after the rates")
    ap.add_argument("--idle-conns", type=int, default=10_000)
    ap.add_argument("--idle-rounds", type=int, default=2,
                    help="idle part: open/hold/close rounds with one agent (a leak grows)")
    ap.add_argument("--idle-rate", type=float, default=1000.0,
                    help="idle part: connections opened per second")
    ap.add_argument("--drain", type=float, default=5.0,
                    help="seconds after the load within which every span must be exported")
    ap.add_argument("--max-cpu", type=float, default=100.0, help="agent CPU %% limit")
    ap.add_argument("--agent-cpu", type=int, default=0)
    ap.add_argument("--peer-cpu", type=int, default=1)
    ap.add_argument("--profile", action="store_true", help="py-spy the agent at saturation")
    ap.add_argument("--compare", type=int, default=0,
                    help="http, sse and wrk parts: N interleaved rounds per rate, compiled vs "
                         "pure Python")
    ap.add_argument("--base", type=Path,
                    help="with --compare: the agent of this checkout (built) against this one's")
    ap.add_argument("--exporter", choices=("file", "otlp"), default="file",
                    help="http part: spans to the file exporter, or over OTLP/gRPC to rotel")
    ap.add_argument("--receiver-cpu", type=int,
                    help="--exporter otlp: the CPU rotel runs on (default: the agent's)")
    ap.add_argument("--out", type=Path, help="append the tables to this Markdown file")
    args = ap.parse_args()
    if os.geteuid() != 0:
        ap.error("run as root: the agent loads BPF programs")
    if not (0 < args.seconds <= 120 and 1 <= args.conns <= 4096 and 1 <= args.sse_conns <= 4096
            and 1 <= args.grpc_conns <= 256 and 1 <= args.wrk_conns <= 1024
            and 1 <= args.idle_conns <= 60_000 and 0 <= args.refine <= 5
            and 10 <= args.idle_rate <= 100_000 and 1 <= args.idle_rounds <= 5
            and 0 < args.drain <= 60):
        ap.error("--seconds 0..120, --conns/--sse-conns 1..4096, --grpc-conns 1..256, "
                 "--wrk-conns 1..1024, "
                 "--idle-conns 1..60000, "
                 "--refine 0..5, --drain 0..60")
    if args.base is not None and not (args.compare and (args.base / "otel_ebpf").is_dir()):
        ap.error("--base needs --compare N and a checkout of this repository")
    if args.agent_cpu == args.peer_cpu or max(args.agent_cpu, args.peer_cpu) >= os.cpu_count():
        ap.error(f"--agent-cpu and --peer-cpu: two different CPUs of {os.cpu_count()}")
    if args.profile and not (VENV_BIN / "py-spy").exists():
        ap.error("--profile needs py-spy in the venv: .venv/bin/pip install py-spy")
    os.sched_setaffinity(0, {args.peer_cpu})  # this script and every peer it starts
    if args.part in ("wrk", "all") and shutil.which("wrk") is None:
        ap.error("the wrk part needs wrk (make install puts it in: apt package wrk)")
    parts = ("http", "sse", "grpc", "wrk", "idle") if args.part == "all" else (args.part,)
    command = shlex.join(["sudo", ".venv/bin/python", "bench/agent_capacity.py", *sys.argv[1:]])
    lines = [f"`{command}`", ""]
    today = datetime.date.today().isoformat()
    with tempfile.TemporaryDirectory(prefix="capacity-") as tmp:
        exe = build_httpload(Path(tmp))
        if "http" in parts and args.compare:
            lines += compare_http(args, exe, today)
            lines.append("")
        elif "http" in parts:
            def http_one(rate: float) -> Step:
                return http_step(rate, args, exe)

            steps = run_steps("http", args.rates, http_one, args)
            if args.profile:
                profile_at_saturation("http", steps, lambda r: http_step(r, args, exe, True),
                                      args)
            lines += steps_table(
                f"### HTTP/1.1 capacity of the agent on one core ({today}, keep-alive GETs "
                f"on {args.conns} connections, open loop)", steps, args, sse=False,
                exporter=args.exporter)
            lines.append("")
        if "sse" in parts and args.compare:
            lines += compare_sse(args, today)
            lines.append("")
        elif "sse" in parts:
            steps = run_steps("sse", args.sse_rates, lambda r: sse_step(r, args), args)
            if args.profile:
                profile_at_saturation("sse", steps, lambda r: sse_step(r, args, True), args)
            lines += steps_table(
                f"### LLM SSE streams: capacity of the agent on one core ({today}, chat "
                f"completions, {SSE_TOKENS} tokens {SSE_INTERVAL_MS:g} ms apart, first at 0 ms, "
                f"{SSE_EVENTS_PER_STREAM} SSE events per stream, up to {args.sse_conns} "
                "concurrent streams, open loop)", steps, args, sse=True)
            lines.append("")
        if "grpc" in parts:
            steps = run_steps("grpc", args.grpc_rates, lambda r: grpc_step(r, args), args)
            if args.profile:
                profile_at_saturation("grpc", steps, lambda r: grpc_step(r, args, True), args)
            lines += steps_table(
                f"### gRPC unary calls: capacity of the agent on one core ({today}, grpcio "
                f"client and server, {args.grpc_conns} channels, one call in flight on each, "
                "open loop)", steps, args, sse=False)
            lines.append("")
        if "wrk" in parts and args.compare:
            lines += compare_wrk(args, today)
            lines.append("")
        elif "wrk" in parts:
            print(f"wrk: FastAPI for {args.seconds:g} s...", file=sys.stderr)
            steps = [wrk_step(args, args.profile)]
            lines += steps_table(
                f"### FastAPI under wrk: the agent's CPU per request on one core ({today}, "
                f"`async def` endpoint, uvicorn one worker, `wrk -t 1 -c {args.wrk_conns}` "
                "closed loop, both on the peers' core; offered = achieved)", steps, args,
                sse=False)
            lines.append("")
        if "idle" in parts:
            print(f"idle: {args.idle_conns} connections...", file=sys.stderr)
            lines += idle_part(args, exe)
    publish(lines, args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
