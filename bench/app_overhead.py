"""Application overhead, side by side in one run: a FastAPI service untraced, traced by
otel-ebpf, and instrumented with the OpenTelemetry Python SDK.

Run as root from the repository root (after `make -C bpf`; `wrk`, `taskset` and `chrt`
installed, as `make deps` does):

    sudo .venv/bin/python bench/app_overhead.py [--rounds 3] [--rates 300,1000]
        [--seconds 10] [--out docs/performance.md]
        [--modes otel-ebpf,otel-sdk] [--warmup 1] [--wrk-connections 16] [--normal-priority]
        [--endpoints async,def,hop] [--stats] [--perf]
        [--loop uvloop --service-bin .venv-gateway/bin]

The service is bench/apps/fastapi_app.py under uvicorn, one worker, in a fresh process for
every endpoint, mode and round, pinned to core 1 (`taskset -c 1`). Endpoints (--endpoints,
each measured on its own, with its own tables): `async` GET /items/{id} (an `async def`
endpoint: a dict lookup, ~200 B of JSON), `def` GET /sync/items/{id} (the same in a `def`
endpoint, run on anyio's thread pool), `hop` GET /hop/items/{id} (a middle hop: an `async
def` endpoint that fetches the item from an upstream, a second instance of the app pinned
to core 0 at the load generators' priority, over a shared httpx.AsyncClient; the upstream's
port is selected too, so the hop's outbound calls are traced and need their parent).
--rates "" skips the fixed rates (wrk only); --stats counts each BPF program's runs under
wrk (kernel.bpf_stats_enabled, turned off again after each phase); --perf samples the
service under wrk (`perf record -g`, 999 Hz, the first 80 % of the phase) and reports the
share of its own CPU samples taken in tracing: a BPF program, a syscall tracepoint's entry
or a uprobe trap on the kernel call chain (bench/tracing_share.py). That share is the cost
to the program measured inside one run; the CPU-per-request ratio against the untraced run
also moves with the load the run got (a less busy server spends more per request). Everything else is pinned to core 0: the load generators and, in the
traced mode, the agent. The load generators run SCHED_FIFO (`chrt -f 10`): they are the
measuring instrument, and the agent's bursts on the shared core must not delay a request's
send, the read of its answer, or wrk (--normal-priority runs them like any process, and
then the generator's lateness shows up as latency of the otel-ebpf mode). Every round
(--rounds; the tables give medians) runs every mode once, in an order rotated each round
so that no mode always follows the same one (untraced always runs):

  untraced   the service alone
  otel-ebpf  `otel-ebpf run -c <generated config>` started first (taskset -c 0) and waited
             for (`otel-ebpf ready`): targets.ports = [the service's port], so both ends
             of every connection are traced (a CLIENT and a SERVER span per request); batch
             timeout 1s; spans to the file exporter in a temp folder, its own metrics (every
             1 s) to a second file; every other setting the default (asyncio task probes and
             OpenSSL probes on). OTEL_EBPF_* variables in the environment reach the agent
             (e.g. OTEL_EBPF_RECEIVERS_EBPF_CAPTURE_MAX_BYTES=1024).
  otel-ebpf-no-tasks  the same with correlation.asyncio_tasks: false: no uprobes on
             CPython's Context copies (two traps per copy; they are what joins an asyncio
             service's outbound calls to its requests).
  baseline   (with --baseline DIR) the agent of another source tree (an earlier commit,
             its bpf/ built), default settings: before and after side by side, interleaved.
  otel-sdk   the app instruments itself (OTEL_BENCH_SDK_TRACES): FastAPIInstrumentor with a
             TracerProvider, a BatchSpanProcessor (1 s delay) and the same kind of sink, the
             repository's OTLP/JSON file exporter (otel_ebpf/export/file.py), in the app's
             process, so the SDK's export thread shares core 1 (and the GIL) with the app.

Against each server, in order: for each of --rates, an open-loop generator
(bench/apps/open_loop.py: --warmup unrecorded seconds, then --seconds measured; requests
due at fixed times on 32 keep-alive connections; latency = response read - due time, so a
stall is never hidden); in the traced modes 2 s of rest, then the SERVER spans in the sink
are counted and the agent's last metrics read (were the fixed rates traced whole, and in
time?); then `wrk -t 1 -c WRK_CONNECTIONS -d SECONDS` (closed loop) for the maximum
throughput. Nothing else runs between phases. After the load the server gets SIGTERM (the
SDK flushes at exit); the agent gets 2 s more to export what it has (its batch timeout is
1 s), its spans are counted, then SIGINT; its spans are counted again and its exit summary
on stderr read (kernel.drops: records the kernel could not put in the full ring buffer;
spans.dropped: spans its full export queue refused).

What the tables report (medians over rounds; µs = microseconds):
  p50/p99          latency percentiles of the measured requests at a fixed rate
  added p50        the mode's p50 minus the untraced p50, same rate
  ratio            the mode's value over the untraced value
  app CPU/request  the service process's user+system CPU over the phase, per request
                   (kernel time in its syscalls included: where the BPF programs run)
  agent CPU        the agent's user+system CPU over the phase, % of one core (core 0)
  gen lag p99      how late the generator sent (its own lateness on core 0, and waits for
                   a free connection): a check that the instrument kept time
  max req/s        wrk's Requests/sec; "app CPU (% core 1)" well below 100 says the app was
                   not the bottleneck
  app-bound req/s  1e6 / app CPU per request under wrk: what the app's core would serve if
                   the app were the only bottleneck (the app's own cost, whatever the load)
  spans            spans in the sink, all rounds added up, by kind; SERVER spans per
                   request sent (warm-ups and wrk included)
Targets (docs/performance.md, "Where the targets stand"): otel-ebpf's added p50 at most 1/10
of the SDK's, and otel-ebpf's max throughput at least 95 % of the untraced one.

Prints Markdown; --out appends it with the command. Every load is bounded in count and
time and goes to 127.0.0.1 only.
"""

from __future__ import annotations

import argparse
import contextlib
import datetime
import json
import os
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from dataclasses import dataclass, field
from pathlib import Path

import orjson
import yaml

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

import bench.agent_process  # noqa: E402
from bench.agent_process import VENV_BIN, AgentProcess, agent_tree, proc_cpu_s  # noqa: E402
from bench.capacity.wrk_load import report as wrk_report  # noqa: E402
from bench.kernel_overhead import program_stats  # noqa: E402
from bench.side_by_side import publish  # noqa: E402
from bench.tracing_share import TracingShare, read as read_share, record  # noqa: E402
from tests.integration.conftest import read_metrics, wait_port  # noqa: E402
from tests.support.processes import stop_process  # noqa: E402
from tests.support.rotel import free_port  # noqa: E402

# a loaded machine: the agent's start (its /proc scans) may take longer than a minute
bench.agent_process.START_TIMEOUT_S = 180.0
MODES = ("untraced", "otel-ebpf", "otel-ebpf-no-tasks", "otel-sdk", "baseline")
# traced modes: the agent settings each changes from the defaults
AGENT_MODES = {"otel-ebpf": {}, "otel-ebpf-no-tasks": {"correlation": {"asyncio_tasks": False}},
               "baseline": {}}
APP = "bench.apps.fastapi_app:app"
# endpoint name -> the path wrk requests (the open-loop generator asks for /items/{id})
ENDPOINTS = {"async": "/items/42", "def": "/sync/items/42", "hop": "/hop/items/42"}
GENERATOR = REPO / "bench/apps/open_loop.py"
LOAD_CORE, APP_CORE = "0", "1"
LOAD_RT_PRIORITY = "10"  # SCHED_FIFO for the load generators (chrt -f)
AGENT_SETTLE_S = 2.0
KIND_NAMES = {1: "INTERNAL", 2: "SERVER", 3: "CLIENT"}


def count_spans(path: Path) -> Counter:
    """Spans in an OTLP/JSON lines file, by kind number."""
    kinds: Counter = Counter()
    if not path.exists():
        return kinds
    with path.open("rb") as f:
        for line in f:
            for rs in orjson.loads(line).get("resourceSpans", []):
                for ss in rs.get("scopeSpans", []):
                    kinds.update(s.get("kind", 0) for s in ss.get("spans", []))
    return kinds


def agent_config(traces: Path, metrics: Path, ports: list[int], settings: dict) -> str:
    return yaml.safe_dump({
        "receivers": {"ebpf": {"targets": {"ports": ports}, **settings}},
        "processors": {"batch": {"timeout": "1s"}},
        "exporters": {"file": {"path": str(traces)}, "file/metrics": {"path": str(metrics)}},
        "service": {
            "pipelines": {
                "traces": {"receivers": ["ebpf"], "processors": ["batch"],
                           "exporters": ["file"]},
                "metrics": {"receivers": ["ebpf"], "exporters": ["file/metrics"]},
            },
            "telemetry": {"metrics": {"interval": "1s"}},
        },
    })


class Agent(AgentProcess):
    """The real agent, pinned to the load core, selecting the app's port; from `tree` (its
    Python package and BPF objects) when given."""

    def __init__(self, workdir: Path, ports: list[int], settings: dict,
                 tree: Path | None = None) -> None:
        self.traces = workdir / "agent-traces.jsonl"
        self.metrics = workdir / "agent-metrics.jsonl"
        with agent_tree(tree) if tree is not None else contextlib.nullcontext():
            super().__init__(workdir, agent_config(self.traces, self.metrics, ports, settings),
                             LOAD_CORE)


@dataclass
class Phase:
    """One load phase against one server: a fixed rate, or wrk."""
    requests: int
    wall_s: float
    app_cpu_s: float
    agent_cpu_s: float | None
    p50_us: float | None = None
    p99_us: float | None = None
    lag_p99_us: float | None = None
    errors: int = 0
    rps: float | None = None

    @property
    def app_us_per_request(self) -> float:
        return 1e6 * self.app_cpu_s / max(1, self.requests)

    @property
    def agent_pct(self) -> float | None:
        return None if self.agent_cpu_s is None else 100 * self.agent_cpu_s / self.wall_s


@dataclass
class ServerRun:
    mode: str
    endpoint: str = "async"
    rates: dict[float, Phase] = field(default_factory=dict)
    wrk: Phase | None = None
    requests_sent: int = 0
    fixed_requests: int = 0
    fixed_server_spans: int = 0
    fixed_totals: dict[str, int] = field(default_factory=dict)
    spans: Counter = field(default_factory=Counter)
    spans_on_time: int | None = None
    totals: dict[str, int] = field(default_factory=dict)
    agent_exit: int | None = None
    programs: dict[str, tuple[float, float]] = field(default_factory=dict)  # runs/req, ns/run
    share: TracingShare | None = None  # --perf: the server's samples under wrk


# --loop and --service-bin: uvicorn's event loop, and the venv bin folder whose uvicorn
# runs the app (uvloop lives outside the main venv: make test's .venv-gateway has it)
SERVER = {"loop": "asyncio", "bin": VENV_BIN}


def start_server(workdir: Path, port: int, mode: str, core: str = APP_CORE,
                 upstream: int | None = None, name: str = "uvicorn", rt: bool = False
                 ) -> tuple[subprocess.Popen, Path]:
    log = workdir / f"{name}.log"
    env = {k: v for k, v in os.environ.items() if not k.startswith("OTEL_")}
    if mode == "otel-sdk" and core == APP_CORE:
        env["OTEL_BENCH_SDK_TRACES"] = str(workdir / "sdk-traces.jsonl")
    if upstream is not None:
        env["OTEL_BENCH_UPSTREAM"] = f"http://127.0.0.1:{upstream}"
    with log.open("w") as out:
        proc = subprocess.Popen(
            [*(["chrt", "-f", LOAD_RT_PRIORITY] if rt else []),
             "taskset", "-c", core, str(SERVER["bin"] / "uvicorn"), APP, "--host", "127.0.0.1",
             "--loop", SERVER["loop"],
             "--port", str(port), "--workers", "1", "--no-access-log", "--log-level", "warning",
             "--timeout-keep-alive", "60"],
            cwd=REPO, env=env, stdout=out, stderr=subprocess.STDOUT)
    try:
        wait_port(port, proc, log)
    except Exception:
        stop_process(proc)
        raise
    return proc, log


def cpu_of(proc: subprocess.Popen | None) -> float | None:
    return None if proc is None else proc_cpu_s(proc.pid)


def load_phase(cmd: list[str], timeout_s: float, server: subprocess.Popen,
               agent: Agent | None, args) -> tuple[str, float, float, float | None]:
    """Run one load generator on the load core; its stdout and the CPU the server and the
    agent spent meanwhile."""
    priority = [] if args.normal_priority else ["chrt", "-f", LOAD_RT_PRIORITY]
    a0, s0, t0 = cpu_of(agent.proc if agent else None), proc_cpu_s(server.pid), time.monotonic()
    out = subprocess.run([*priority, "taskset", "-c", LOAD_CORE, *cmd], capture_output=True,
                         text=True, timeout=timeout_s, check=True, cwd=REPO)
    wall = time.monotonic() - t0
    app_cpu = proc_cpu_s(server.pid) - s0
    agent_cpu = None if agent is None else proc_cpu_s(agent.proc.pid) - a0
    return out.stdout, wall, app_cpu, agent_cpu


def fixed_rate(port: int, rate: float, args, server, agent) -> tuple[Phase, int]:
    cmd = [sys.executable, str(GENERATOR), "--port", str(port), "--rate", str(rate),
           "--seconds", str(args.seconds), "--warmup", str(args.warmup)]
    stdout, wall, app_cpu, agent_cpu = load_phase(
        cmd, args.warmup + args.seconds + 60, server, agent, args)
    doc = json.loads(stdout.strip().splitlines()[-1])
    if doc["unfinished"] or doc["errors"]:
        print(f"  {rate:g} req/s: {doc['errors']} errors, {doc['unfinished']} unanswered",
              file=sys.stderr)
    phase = Phase(requests=doc["sent"], wall_s=wall, app_cpu_s=app_cpu, agent_cpu_s=agent_cpu,
                  p50_us=doc["p50_us"], p99_us=doc["p99_us"], lag_p99_us=doc["lag_p99_us"],
                  errors=doc["errors"] + doc["unfinished"])
    return phase, doc["sent"]


def max_throughput(port: int, args, server, agent, path: str = "/items/42") -> Phase:
    cmd = ["wrk", "-t", "1", "-c", str(args.wrk_connections), "-d", f"{args.seconds:g}s",
           f"http://127.0.0.1:{port}{path}"]
    stdout, wall, app_cpu, agent_cpu = load_phase(cmd, args.seconds + 60, server, agent, args)
    try:
        got = wrk_report(stdout)
    except ValueError as exc:
        raise RuntimeError(f"cannot read wrk's output:\n{stdout}") from exc
    if got["non_2xx"] or any(got["socket_errors"]):
        print(f"  wrk: {got['non_2xx']} non-2xx/3xx answers, socket errors (connect, read, "
              f"write, timeout) {got['socket_errors']}", file=sys.stderr)
    return Phase(requests=got["completed"], wall_s=wall, app_cpu_s=app_cpu,
                 agent_cpu_s=agent_cpu, rps=got["rate"], errors=got["non_2xx"])


def run_server(mode: str, args, endpoint: str = "async") -> ServerRun:
    """One fresh server (and agent) in `mode`: every fixed rate, then wrk."""
    result = ServerRun(mode, endpoint)
    port = free_port()
    up_port = free_port() if endpoint == "hop" else None
    with tempfile.TemporaryDirectory(prefix="app-bench-") as tmp:
        workdir = Path(tmp)
        ports = [port] + ([up_port] if up_port else [])
        tree = args.baseline if mode == "baseline" else None
        agent = Agent(workdir, ports, AGENT_MODES[mode], tree) if mode in AGENT_MODES else None
        sink = agent.traces if agent else workdir / "sdk-traces.jsonl"
        server = upstream = None
        try:
            if up_port:  # the hop's upstream: on the load core, its CPU not counted
                # at the generators' priority: wrk (SCHED_FIFO) would starve it otherwise
                upstream, _ = start_server(workdir, up_port, "untraced", LOAD_CORE,
                                           name="upstream", rt=not args.normal_priority)
            server, _ = start_server(workdir, port, mode, upstream=up_port)
            for rate in args.rates:
                result.rates[rate], sent = fixed_rate(port, rate, args, server, agent)
                result.requests_sent += sent
            result.fixed_requests = result.requests_sent
            if mode != "untraced":  # were the fixed rates traced whole, and in time?
                time.sleep(AGENT_SETTLE_S)
                result.fixed_server_spans = count_spans(sink)[2]
                if agent is not None:  # its own metrics, exported every second
                    result.fixed_totals = {k.removeprefix("otel_ebpf."): v for k, v in
                                           read_metrics(agent.metrics).items()}
            sysctl = Path("/proc/sys/kernel/bpf_stats_enabled")
            if agent is not None and args.stats:
                sysctl.write_text("1")
                before = program_stats(agent.proc.pid)
            # sampled for the middle of the wrk phase (perf stops itself before wrk does)
            sampler = (record(server.pid, args.seconds * 0.8, workdir / "server.perf")
                       if args.perf else None)
            try:
                result.wrk = max_throughput(port, args, server, agent, ENDPOINTS[endpoint])
            finally:
                if sampler is not None:
                    if sampler.wait(timeout=60) != 0:
                        raise RuntimeError(f"perf record: {sampler.stderr.read()[-500:]}")
                    result.share = read_share(workdir / "server.perf")
                if agent is not None and args.stats:
                    after = program_stats(agent.proc.pid)
                    sysctl.write_text("0")
                    for name, (n, t) in after.items():
                        n0, t0 = before.get(name, (0, 0))
                        if n > n0:
                            result.programs[name] = ((n - n0) / max(1, result.wrk.requests),
                                                     (t - t0) / (n - n0))
            result.requests_sent += result.wrk.requests
        finally:
            if server is not None:
                stop_process(server, grace_s=30)
            if upstream is not None:
                stop_process(upstream, grace_s=30)
            if agent is not None:
                time.sleep(AGENT_SETTLE_S)
                result.spans_on_time = sum(count_spans(agent.traces).values())
                result.agent_exit = agent.stop()
                result.totals = agent.summary()
                if result.agent_exit != 0:
                    print(f"agent exited with {result.agent_exit}:\n{agent.stderr[-1500:]}",
                          file=sys.stderr)
        result.spans = count_spans(sink)
    return result


def med(values: list[float | None]) -> float | None:
    values = [v for v in values if v is not None]
    return statistics.median(values) if values else None


def fmt(value: float | None, spec: str = ".0f") -> str:
    return "n/a" if value is None else format(value, spec)


def per_round(values: list[float | None]) -> str:
    return ", ".join(fmt(v) for v in values)


def agent_total(runs: list[ServerRun], key: str, fixed: bool = False) -> str:
    """An agent counter added up over runs: after the fixed rates, or at exit."""
    if not runs or runs[0].mode not in AGENT_MODES:
        return "n/a"
    return str(sum((r.fixed_totals if fixed else r.totals).get(key, 0) for r in runs))


def markdown(runs: dict[str, list[ServerRun]], args, endpoint: str = "async") -> list[str]:
    n, modes = len(runs["untraced"]), list(runs)
    load = ("normal priority" if args.normal_priority
            else f"SCHED_FIFO {LOAD_RT_PRIORITY} (chrt -f)")
    lines = [
        f"### Application overhead: FastAPI under uvicorn ({SERVER['loop']} loop), "
        f"`{endpoint}` endpoint "
        f"(GET {ENDPOINTS[endpoint]}; {datetime.date.today().isoformat()}, "
        f"median of {n} rounds, {args.seconds:g} s per phase)",
        "",
    ]
    if args.rates:
        lines += [
            "Fixed rate, open loop (latency from each request's due time):",
            "",
            "| rate (req/s) | mode | p50 (µs) | p50 per round | p99 (µs) | added p50 (µs) "
            "| p50 ratio | p99 ratio "
            "| app CPU/request (µs) | agent CPU (% core 0) | gen lag p99 (µs) | errors |",
            "|---:|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
        ]
    added: dict[tuple[float, str], float] = {}
    for rate in args.rates:
        base_p50 = med([r.rates[rate].p50_us for r in runs["untraced"]])
        base_p99 = med([r.rates[rate].p99_us for r in runs["untraced"]])
        for mode in modes:
            phases = [r.rates[rate] for r in runs[mode]]
            p50, p99 = med([p.p50_us for p in phases]), med([p.p99_us for p in phases])
            added[rate, mode] = p50 - base_p50
            lines.append(
                f"| {rate:g} | {mode} | {fmt(p50)} | {per_round([p.p50_us for p in phases])} | "
                f"{fmt(p99)} | {added[rate, mode]:+.0f} | "
                f"{p50 / base_p50:.2f} | {p99 / base_p99:.2f} | "
                f"{fmt(med([p.app_us_per_request for p in phases]))} | "
                f"{fmt(med([p.agent_pct for p in phases]), '.1f')} | "
                f"{fmt(med([p.lag_p99_us for p in phases]))} | "
                f"{sum(p.errors for p in phases)} |")
    base_rps = med([r.wrk.rps for r in runs["untraced"]])
    lines += [
        "",
        f"Maximum throughput, closed loop (`wrk -t 1 -c {args.wrk_connections} "
        f"-d {args.seconds:g}s`, one path):",
        "",
        "| mode | max req/s | per round | ratio | app CPU/request (µs) | per round | "
        "app CPU (% core 1) | app-bound req/s | ratio | agent CPU (% core 0) |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    rps: dict[str, float] = {}
    base_bound = med([1e6 / r.wrk.app_us_per_request for r in runs["untraced"]])
    for mode in modes:
        phases = [r.wrk for r in runs[mode]]
        rps[mode] = med([p.rps for p in phases])
        bound = med([1e6 / p.app_us_per_request for p in phases])
        lines.append(f"| {mode} | {rps[mode]:.0f} | {per_round([p.rps for p in phases])} | "
                     f"{rps[mode] / base_rps:.3f} | "
                     f"{fmt(med([p.app_us_per_request for p in phases]))} | "
                     f"{per_round([p.app_us_per_request for p in phases])} | "
                     f"{fmt(med([100 * p.app_cpu_s / p.wall_s for p in phases]))} | "
                     f"{bound:.0f} | {bound / base_bound:.3f} | "
                     f"{fmt(med([p.agent_pct for p in phases]), '.1f')} |")
    if len(modes) > 1:
        lines += [
            "",
            "Spans in the sink (OTLP/JSON file), all rounds added up; the agent's counters "
            "(its metrics after the fixed rates, its exit summary after wrk):",
            "",
            "| mode | phase | requests sent | SERVER spans | per request | spans by kind | "
            "kernel drops | spans dropped (export queue) | "
            f"spans exported only after {AGENT_SETTLE_S:g} s |",
            "|---|---|---:|---:|---:|---|---:|---:|---:|",
        ]
    for mode in modes[1:]:
        traced = mode in AGENT_MODES
        mine = runs[mode]
        fixed = sum(r.fixed_requests for r in mine)
        fixed_spans = sum(r.fixed_server_spans for r in mine)
        lines.append(f"| {mode} | fixed rates | {fixed} | {fixed_spans} | "
                     f"{fixed_spans / max(1, fixed):.3f} | | {agent_total(mine, 'kernel.drops', fixed=True)} | "
                     f"{agent_total(mine, 'spans.dropped', fixed=True)} | |")
        sent = sum(r.requests_sent for r in mine)
        kinds: Counter = sum((r.spans for r in mine), Counter())
        by_kind = ", ".join(f"{KIND_NAMES.get(k, k)} {c}" for k, c in sorted(kinds.items()))
        late = sum(sum(r.spans.values()) - (r.spans_on_time or 0) for r in mine)
        lines.append(f"| {mode} | all (wrk too) | {sent} | {kinds[2]} | "
                     f"{kinds[2] / max(1, sent):.3f} | {by_kind or 'none'} | "
                     f"{agent_total(mine, 'kernel.drops')} | {agent_total(mine, 'spans.dropped')} | "
                     f"{late if traced else 'n/a'} |")
    lines.append("")
    if any(r.programs for m in modes for r in runs[m]):
        lines += ["BPF programs under wrk (kernel.bpf_stats_enabled; medians over rounds; "
                  "all processes' runs, wrk's and the upstream's included):", "",
                  "| mode | program | runs per request | ns per run |", "|---|---|---:|---:|"]
        for mode in modes:
            names = sorted({n for r in runs[mode] for n in r.programs})
            for name in names:
                vals = [r.programs[name] for r in runs[mode] if name in r.programs]
                lines.append(f"| {mode} | {name} | {med([v[0] for v in vals]):.2f} | "
                             f"{med([v[1] for v in vals]):.0f} |")
        lines.append("")
    if any(r.share for m in modes for r in runs[m]):
        lines += perf_table(runs, modes)
    if {"otel-ebpf", "otel-sdk"} <= set(modes):
        for rate in args.rates:
            ebpf, sdk = added[rate, "otel-ebpf"], added[rate, "otel-sdk"]
            share = ebpf / sdk if sdk > 0 else float("nan")
            lines.append(f"- {rate:g} req/s: otel-ebpf adds {ebpf:+.0f} µs to the p50, the SDK "
                         f"{sdk:+.0f} µs: {share:.2f} of the SDK's (target ≤ 0.10: "
                         f"{'met' if share <= 0.10 else 'not met'}).")
    for mode in modes[1:]:
        share = rps[mode] / base_rps
        target = (f" (target ≥ 95 %: {'met' if share >= 0.95 else 'not met'})"
                  if mode in AGENT_MODES else "")
        lines.append(f"- Max throughput with {mode}: {100 * share:.1f} % of untraced{target}.")
        if mode in AGENT_MODES:
            cost = base_bound / med([1e6 / r.wrk.app_us_per_request for r in runs[mode]])
            met = "met" if cost <= 1 / 0.97 else "not met"
            lines.append(f"- App CPU per request under wrk with {mode}: {cost:.3f} of untraced "
                         f"(target ≤ 1/0.97 = 1.031: {met}).")
    if overrides := [k for k in sorted(os.environ) if k.startswith("OTEL_EBPF_")]:
        lines.append(f"- Agent settings from the environment: {', '.join(overrides)} "
                     "(values in the command above).")
    exits = sorted({r.agent_exit for m in AGENT_MODES for r in runs.get(m, [])}, key=str)
    lines.append(f"- Service: one uvicorn worker pinned to core 1; generators, wrk and the agent "
                 f"pinned to core 0 ({os.cpu_count()} CPUs here), the load at {load}; "
                 f"agent exits: {exits or 'n/a'}.")
    return lines


def perf_table(runs: dict[str, list[ServerRun]], modes: list[str]) -> list[str]:
    """--perf: the share of the app's own CPU samples under wrk taken in tracing (kernel
    call chains; bench/tracing_share.py), per round, and what it makes per request."""
    lines = ["Tracing's share of the app's own CPU under wrk (`perf record -g` on the app "
             "process; a sample counts when its kernel call chain holds a BPF program, a "
             "syscall tracepoint's entry or a uprobe trap; untraced is the control):", "",
             "| mode | samples | in tracing (%) | per round | µs per request | CPU ratio "
             "from it | where (% of the app's samples, all rounds) |",
             "|---|---:|---:|---:|---:|---:|---|"]
    for mode in modes:
        mine = [r for r in runs[mode] if r.share is not None]
        if not mine:
            continue
        total = TracingShare()
        for r in mine:
            total.add(r.share)
        fraction = med([r.share.fraction for r in mine])
        us = med([r.share.fraction * r.wrk.app_us_per_request for r in mine if r.wrk])
        where = ", ".join(f"{k} {100 * v / total.samples:.2f}"
                          for k, v in total.by_part.most_common(8))
        lines.append(f"| {mode} | {total.samples} | {100 * fraction:.2f} | "
                     f"{', '.join(f'{100 * r.share.fraction:.2f}' for r in mine)} | "
                     f"{fmt(us, '.1f')} | {1 / (1 - fraction):.3f} | {where or 'none'} |")
    return lines + [""]


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rounds", type=int, default=3)
    ap.add_argument("--rates", default="300,1000", help="fixed rates, requests/s, comma-separated")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds per phase")
    ap.add_argument("--warmup", type=float, default=1.0,
                    help="unrecorded seconds before each fixed-rate phase")
    ap.add_argument("--wrk-connections", type=int, default=16)
    ap.add_argument("--modes", default=",".join(MODES),
                    help="a subset to run (untraced always runs: it is the reference)")
    ap.add_argument("--normal-priority", action="store_true",
                    help="run the load generators at normal priority, not SCHED_FIFO")
    ap.add_argument("--endpoints", default=",".join(ENDPOINTS),
                    help=f"endpoints to measure, each on its own: {', '.join(ENDPOINTS)}")
    ap.add_argument("--stats", action="store_true",
                    help="count each BPF program's runs under wrk (kernel.bpf_stats_enabled)")
    ap.add_argument("--perf", action="store_true",
                    help="sample the app under wrk with perf: tracing's share of its CPU")
    ap.add_argument("--baseline", type=Path,
                    help="a source tree (bpf/ built) whose agent runs as mode `baseline`")
    ap.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio",
                    help="uvicorn's event loop for the service (and the hop's upstream)")
    ap.add_argument("--service-bin", type=Path, default=VENV_BIN,
                    help="the venv bin folder whose uvicorn runs the service (uvloop: "
                    ".venv-gateway/bin, which make test builds)")
    ap.add_argument("--out", type=Path, help="append the tables to this Markdown file")
    args = ap.parse_args()
    if not (args.service_bin / "uvicorn").is_file():
        ap.error(f"--service-bin: no uvicorn in {args.service_bin}")
    SERVER.update(loop=args.loop, bin=args.service_bin)
    if os.geteuid() != 0:
        ap.error("run as root: the agent loads BPF programs")
    if (os.cpu_count() or 1) < 2:
        ap.error("needs 2 CPUs: the service on core 1, the load and the agent on core 0")
    for tool in ("wrk", "taskset", "chrt", *(["perf"] if args.perf else [])):
        if shutil.which(tool) is None:
            ap.error(f"{tool} not found (make deps installs it)")
    args.rates = [float(r) for r in args.rates.split(",") if r]
    endpoints = [e for e in args.endpoints.split(",") if e]
    if not 1 <= args.rounds <= 20 or not 1 <= args.seconds <= 120:
        ap.error("--rounds must be 1..20, --seconds 1..120")
    if not endpoints or any(e not in ENDPOINTS for e in endpoints):
        ap.error(f"--endpoints: a comma-separated subset of {', '.join(ENDPOINTS)}")
    if not all(1 <= r <= 20_000 for r in args.rates) or not 0 <= args.warmup <= 10:
        ap.error("--rates must be 1..20000 requests/s, --warmup 0..10 s")

    modes = [m for m in MODES if m == "untraced" or m in args.modes.split(",")]
    if "baseline" in modes and not (args.baseline and (args.baseline / "bpf/build").is_dir()):
        ap.error("mode baseline needs --baseline DIR, a source tree with bpf/build")
    runs: dict[str, dict[str, list[ServerRun]]] = {e: {m: [] for m in modes} for e in endpoints}

    def one(mode: str, endpoint: str) -> float:
        run = run_server(mode, args, endpoint)
        runs[endpoint][mode].append(run)
        detail = ", ".join(f"{rate:g}/s p50 {p.p50_us:.0f} µs p99 {p.p99_us:.0f} µs"
                           for rate, p in run.rates.items())
        if mode != "untraced":
            detail += (f"; fixed rates: {run.fixed_server_spans} SERVER spans of "
                       f"{run.fixed_requests} requests")
        if run.totals:
            detail += (f"; agent: kernel.drops {run.totals.get('kernel.drops')}, spans.dropped "
                       f"{run.totals.get('spans.dropped')} (after the fixed rates "
                       f"{run.fixed_totals.get('kernel.drops')}, "
                       f"{run.fixed_totals.get('spans.dropped')})")
        print(f"  {mode}: {detail}", file=sys.stderr)
        return run.wrk.rps

    for r in range(args.rounds):  # every mode once a round, the order rotated each round
        shift = r % len(modes)
        for endpoint in endpoints:
            for mode in modes[shift:] + modes[:shift]:
                rps = one(mode, endpoint)
                print(f"round {r + 1}/{args.rounds} {endpoint:5s} {mode:9s} {rps:8.0f} req/s "
                      "max (wrk)", file=sys.stderr)
    overrides = [f"{k}={v}" for k, v in sorted(os.environ.items()) if k.startswith("OTEL_EBPF_")]
    command = shlex.join(["sudo", *overrides, ".venv/bin/python", "bench/app_overhead.py",
                          *sys.argv[1:]])
    tables = [line for e in endpoints for line in markdown(runs[e], args, e)]
    publish([f"`{command}`", "", *tables], args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
