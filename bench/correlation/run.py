"""How well the agent sets span parents, against ground truth, at several concurrencies.

Run as root, from the repository root:

    sudo .venv/bin/python -m bench.correlation.run [--levels 1,8,64] [--requests N]
                                                   [--out docs/performance.md]
                                                   [--set PATH=VALUE]

For each level: a fresh agent (file exporter, the topology's ports selected), a fresh
topology (bench/correlation/topology.py), N requests from the load generator at that
concurrency, a pause of one correlation window, SIGINT to the agent (it flushes), then
`evaluate` scores every span's parent against what the services logged. Prints a table per
level; with --out, appends them in Markdown with the date and this command.
"""

from __future__ import annotations

import argparse
import datetime
import os
import shlex
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

from bench.correlation.evaluate import Report, evaluate, markdown_table, read_spans, summary_line
from bench.correlation.services import CLIENTS, LOOPS
from bench.correlation.topology import REPO, pick_ports, start_topology
from bench.two_nodes import parse_set
from tests.integration.conftest import AgentRun, agent_config, read_metrics

VENV_BIN = Path(sys.executable).parent
AGENT_START_TIMEOUT_S = 180.0  # a loaded machine: its /proc scans take a while
SETTLE_S = 3.0  # > the agent's default correlation window (2s): steady state, not shutdown


@dataclass
class LevelResult:
    concurrency: int
    load: dict
    report: Report
    agent_exit: int | None
    metrics: dict[str, int]
    workdir: Path


def start_agent(workdir: Path, ports: list[int], timeout_s: float = AGENT_START_TIMEOUT_S,
                record: bool = False, overrides: dict | None = None) -> AgentRun:
    """The real agent, selecting `ports`, writing spans and metrics to workdir/traces.jsonl;
    returns once it printed `otel-ebpf ready`. With `record`, its correlator's inputs and
    decisions go to workdir/correlation.jsonl (bench/correlation/record.py)."""
    traces, cfg, err = workdir / "traces.jsonl", workdir / "agent.yaml", workdir / "agent.err"
    cfg.write_text(agent_config(traces, ports, overrides=overrides))
    command, env = [str(VENV_BIN / "otel-ebpf"), "run", "-c", str(cfg)], None
    if record:
        command[:1] = [str(VENV_BIN / "python"), "-m", "bench.correlation.record"]
        path = os.environ.get("PYTHONPATH")
        env = {**os.environ, "BENCH_CORRELATION_RECORD": str(workdir / "correlation.jsonl"),
               "PYTHONPATH": f"{REPO}{os.pathsep + path if path else ''}"}
    with err.open("w") as err_file:
        proc = subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=err_file,
                                cwd=workdir, env=env)
    run = AgentRun(proc, traces, err)
    deadline = time.monotonic() + timeout_s
    while "otel-ebpf ready" not in run.stderr:
        if proc.poll() is not None or time.monotonic() > deadline:
            run.stop(5)
            raise RuntimeError(f"agent did not start (exit {proc.returncode}); log: {err}\n"
                               f"{run.stderr[-2000:]}")
        time.sleep(0.1)
    return run


def run_level(concurrency: int, requests: int, workdir: Path, deadline_s: float,
              legacy_every: int, record: bool = False, overrides: dict | None = None
              ) -> LevelResult:
    workdir.mkdir(parents=True, exist_ok=True)
    ports = pick_ports()
    agent = start_agent(workdir, sorted(ports.values()), record=record, overrides=overrides)
    topo = None
    try:
        topo = start_topology(workdir, ports)
        load = topo.run_load(requests, concurrency, deadline_s, legacy_every)
        if dead := topo.dead():
            print(f"  services died during the load: {dead} (logs in {workdir})")
        time.sleep(SETTLE_S)
    finally:
        try:
            exit_code = agent.stop()
        finally:
            if topo is not None:
                topo.stop()
    if exit_code != 0:
        print(f"  agent exited with {exit_code}; log: {agent.stderr_path}\n"
              f"{agent.stderr[-1500:]}")
    report = evaluate(read_spans(agent.traces), topo.truth())
    return LevelResult(concurrency, load, report, exit_code, read_metrics(agent.traces), workdir)


def _interpreter() -> str:
    """The services' interpreter: its version and where it lives (a venv's base)."""
    python = os.environ.get("BENCH_SERVICE_PYTHON") or sys.executable
    try:
        out = subprocess.run([python, "-c", "import sys; print(sys.version.split()[0], "
                              "sys.base_prefix)"], capture_output=True, text=True, timeout=30)
        version, base = out.stdout.split()
    except (OSError, ValueError, subprocess.SubprocessError):
        return python
    return f"CPython {version} ({base})"


def _version() -> str:
    try:
        head = subprocess.run(["git", "rev-parse", "--short", "HEAD"], cwd=REPO, text=True,
                              capture_output=True, timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"],
                               cwd=REPO, text=True, capture_output=True, timeout=10).stdout
    except (OSError, subprocess.SubprocessError):
        return "unknown commit"
    return f"commit {head}{' with uncommitted changes' if dirty.strip() else ''}"


def level_markdown(r: LevelResult) -> str:
    load = r.load
    drops = r.metrics.get("otel_ebpf.kernel.drops", 0)
    head = (f"### Concurrency {r.concurrency} ({load['ok']} of {load['sent']} requests ok in "
            f"{load['elapsed_s']:.1f} s; kernel drops {drops}; agent exit {r.agent_exit})")
    return f"{head}\n\n{markdown_table(r.report)}\n\n{summary_line(r.report)}\n"


def results_markdown(results: list[LevelResult], command: str) -> str:
    date = datetime.date.today().isoformat()
    return (
        f"\n## Span parents against ground truth\n\n`{command}`\n\n"
        f"{date}, {_version()}, services on {_interpreter()}, uvicorn's loop: "
        f"{os.environ.get('BENCH_LOOP', 'asyncio')}, gateway's client: "
        f"{os.environ.get('BENCH_GATEWAY_CLIENT', 'httpx')}. Topology (each its own "
        "process): load generator (threads, "
        "`requests`) -> gateway (FastAPI `async def`, one shared client) -> rag "
        "(FastAPI `def`, threadpool, `requests`) -> embedder, vectordb, llm (SSE stream); "
        "gateway -> legacy (gunicorn sync workers, Flask) -> embedder on every third request. "
        "Ground truth: a rid per request in `?rid=`, logged by each caller. Rows: "
        "cross-process = SERVER span's parent is its CLIENT span (load generator's included); "
        "asyncio / threadpool / thread = CLIENT span's parent is the gateway / rag / legacy "
        "SERVER span it was made for; root = load generator CLIENT spans (any parent is "
        "wrong). Precision = right / parents set; recall = right / true edges.\n\n"
        + "\n".join(level_markdown(r) for r in results))


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.correlation.run", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--levels", default="1,8,64", help="concurrencies, comma-separated")
    p.add_argument("--requests", type=int, default=200, help="requests per level")
    p.add_argument("--deadline", type=float, default=120.0,
                   help="seconds of load per level at most (the rest is not sent)")
    p.add_argument("--legacy-every", type=int, default=3,
                   help="every k-th gateway request also calls legacy (0: never)")
    p.add_argument("--workdir", type=Path, help="logs, ground truth, spans (default: a temp dir)")
    p.add_argument("--python", help="the interpreter the services run on (a venv's python "
                   "with fastapi, uvicorn, httpx, requests, flask, gunicorn); default: this one")
    p.add_argument("--loop", choices=LOOPS, default="asyncio",
                   help="the uvicorn services' event loop: asyncio, uvloop (needs uvloop where "
                   "the services run: --python), or mixed (gateway and llm on uvloop)")
    p.add_argument("--client", choices=CLIENTS, default="httpx",
                   help="the gateway's HTTP client (aiohttp needs aiohttp where it runs)")
    p.add_argument("--out", type=Path, help="append the Markdown tables to this file")
    p.add_argument("--record", action="store_true",
                   help="record the correlator's inputs and decisions, then print the evidence "
                   "behind each wrong or ambiguous in-process parent (bench/correlation/record.py)")
    p.add_argument("--set", action="append", default=[], metavar="PATH=VALUE",
                   help="an agent config override, e.g. receivers.ebpf.propagation.enabled=true "
                   "(repeatable)")
    a = p.parse_args(argv)
    if a.python:
        os.environ["BENCH_SERVICE_PYTHON"] = a.python
    os.environ["BENCH_LOOP"], os.environ["BENCH_GATEWAY_CLIENT"] = a.loop, a.client
    levels = [int(x) for x in a.levels.split(",") if x.strip()]
    if not levels or min(levels) < 1 or a.requests < 1:
        p.error("--levels must be positive integers and --requests at least 1")
    if os.geteuid() != 0:
        print("needs root (the agent loads BPF programs): run it with sudo", file=sys.stderr)
        return 1
    if not (REPO / "bpf/build/capture.bpf.o").is_file():
        print("bpf/build/capture.bpf.o not built: run `make -C bpf`", file=sys.stderr)
        return 1
    command = "sudo .venv/bin/python -m bench.correlation.run " + shlex.join(
        sys.argv[1:] if argv is None else argv)
    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="otel-ebpf-correlation-"))
    print(f"logs, ground truth and spans under {workdir}")
    results = []
    for level in levels:
        print(f"\nconcurrency {level}: {a.requests} requests ...", flush=True)
        result = run_level(level, a.requests, workdir / f"c{level}", a.deadline,
                           a.legacy_every, a.record, parse_set(a.set))
        results.append(result)
        print(level_markdown(result), flush=True)
    if a.record:
        from bench.correlation.record import explain

        explain(workdir)
    if a.out:
        with a.out.open("a") as f:
            f.write(results_markdown(results, command.strip()))
        print(f"appended to {a.out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
