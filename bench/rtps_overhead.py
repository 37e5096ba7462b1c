"""CPU cost of tracing ROS 2 / DDS traffic: the agent's CPU while a Cyclone DDS publisher
sends RATE messages/s of SIZE bytes to SUBSCRIBERS subscribers for SECONDS, next to the same
run without the agent (the peers' own CPU as the baseline).

Run as root from the repository root (after `make -C bpf`):

    sudo .venv/bin/python bench/rtps_overhead.py [--rate 1000] [--seconds 20] [--size 256]
        [--subscribers 2] [--capture 2048] [--poll 200ms] [--protocols rtps]
        [--base DIR --rounds N] [--out docs/performance.md]

Each run uses a fresh DDS domain on 127.0.0.1 (tests/integration/peers/dds_peer.py, one
process per peer, unicast discovery). The traced run starts the real agent first
(`.venv/bin/otel-ebpf run -c <generated config>`: the domain's RTPS ports selected, file
exporter to a temp folder, ring buffer polled every --poll, --capture bytes per datagram,
the ros2-edge example's settings) and waits for `otel-ebpf ready`. The measured window runs
from the publisher's first write to its last acknowledgement: the agent's CPU is utime+stime
from /proc/PID/stat at both ends, the peers report their own (os.times()). After the run the
agent gets SIGINT; spans are counted in its file exporter's output and kernel drops read
from its exit summary. Until an `rtps` parser is installed the agent is run with the
protocols named by --fallback-protocols instead (datagrams captured and decoded, not
parsed) and the table says so; 0 spans are reported as 0.

With --base DIR (another checkout: its extensions built in place, its BPF objects in
DIR/bpf/build) the traced run is made --rounds times with each tree's agent, the order
alternating per round (a before/after of a change, on the same machine in one run): agent
CPU as median [min–max] per side, with each side's spans and kernel drops per round.

Prints a Markdown table (CPU as % of one core); --out appends it with the date and command.
"""

from __future__ import annotations

import argparse
import datetime
import json
import os
import re
import shlex
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

from bench.agent_process import AgentProcess, agent_tree, proc_cpu_s  # noqa: E402
from bench.side_by_side import rotated, spread  # noqa: E402
from tests.integration.conftest import read_spans  # noqa: E402
from tests.integration.peers.dds_peer import discovery_ports, peer_env, pick_domain  # noqa: E402

PEER_READY_TIMEOUT_S = 30.0


@dataclass
class Peer:
    proc: subprocess.Popen
    lines: list[dict] = field(default_factory=list)

    def read_until(self, event: str, timeout_s: float) -> dict:
        """Read JSON lines until one with `event` (bounded; fails if the peer exits)."""
        deadline = time.monotonic() + timeout_s
        while time.monotonic() < deadline:
            line = self.proc.stdout.readline()
            if not line:
                break
            if line.startswith("{"):
                doc = json.loads(line)
                self.lines.append(doc)
                if doc["event"] == event:
                    return doc
        raise RuntimeError(f"peer {self.proc.args[3]} gave no {event!r} line "
                           f"(exit {self.proc.poll()}): {self.lines[-3:]}")

    def finish(self, timeout_s: float) -> dict:
        """The peer's last line ("done") after it exits."""
        out, _ = self.proc.communicate(timeout=timeout_s)
        self.lines += [json.loads(x) for x in out.splitlines() if x.startswith("{")]
        return self.lines[-1] if self.lines else {}


def start_peer(role: str, domain: int, *args: str) -> Peer:
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.peers.dds_peer", role, "--domain", str(domain),
         "--summary-only", *args],
        cwd=REPO, env=peer_env(domain), stdout=subprocess.PIPE, stderr=subprocess.DEVNULL,
        text=True)
    return Peer(proc)


def agent_config(traces: Path, ports: list[int], capture: int, poll: str,
                 protocols: list[str]) -> str:
    return yaml.safe_dump({
        "receivers": {"ebpf": {
            "targets": {"ports": ports},
            "capture": {"max_bytes": capture},
            "ring_buffer": {"poll_interval": poll},
            "correlation": {"asyncio_tasks": False},
            "tls": {"openssl": False},
            "protocols": {"enabled": protocols},
        }},
        "processors": {"batch": {"timeout": "1s"}},
        "exporters": {"file": {"path": str(traces)}},
        "service": {
            "pipelines": {
                "traces": {"receivers": ["ebpf"], "processors": ["batch"], "exporters": ["file"]},
                "metrics": {"receivers": ["ebpf"], "exporters": ["file"]},
            },
            "telemetry": {"metrics": {"interval": "5s"}},
        },
    })


class Agent(AgentProcess):
    def __init__(self, workdir: Path, ports: list[int], args, protocols: list[str]) -> None:
        self.traces = workdir / "traces.jsonl"
        super().__init__(workdir, agent_config(self.traces, ports, args.capture, args.poll,
                                               protocols), stop_timeout_s=30.0)


@dataclass
class Result:
    label: str
    sent: int
    rate: float | None
    received: list[int]
    window_s: float
    pub_cpu: float | None
    sub_cpu: list[float | None]
    agent_cpu: float | None = None
    spans: int | None = None
    span_names: Counter = field(default_factory=Counter)
    drops: int | None = None
    events: int | None = None
    agent_exit: int | None = None


def pct(cpu_s: float | None, window_s: float) -> float | None:
    return None if cpu_s is None or window_s <= 0 else 100.0 * cpu_s / window_s


def run_once(label: str, args, protocols: list[str] | None) -> Result:
    """One run on a fresh domain: the agent first when `protocols` is given (so it sees
    discovery too), then the subscribers, then the publisher."""
    domain = pick_domain()
    count = int(args.rate * args.seconds)
    interval_ms = 1000.0 / args.rate
    agent = None
    with tempfile.TemporaryDirectory(prefix="rtps-bench-") as tmp:
        workdir = Path(tmp)
        if protocols is not None:
            agent = Agent(workdir, discovery_ports(domain), args, protocols)
        subs: list[Peer] = []
        pub = None
        try:
            for _ in range(args.subscribers):
                sub = start_peer("subscriber", domain, "--count", str(count),
                                 "--timeout", str(args.seconds * 3 + 30))
                sub.read_until("ready", PEER_READY_TIMEOUT_S)
                subs.append(sub)
            pub = start_peer("publisher", domain, "--count", str(count), "--interval-ms",
                             f"{interval_ms:.6f}", "--size", str(args.size), "--subscribers",
                             str(args.subscribers), "--ack-timeout", "30")
            pub.read_until("start", PEER_READY_TIMEOUT_S)
            t0, a0 = time.monotonic(), proc_cpu_s(agent.proc.pid) if agent else None
            done = pub.read_until("done", args.seconds * 3 + 60)
            t1, a1 = time.monotonic(), proc_cpu_s(agent.proc.pid) if agent else None
            pub.finish(30)
            sub_done = [s.finish(args.seconds * 3 + 60) for s in subs]
        finally:
            for p in [*subs, *([pub] if pub else [])]:
                if p.proc.poll() is None:
                    p.proc.kill()
                    p.proc.wait(5)
        window = t1 - t0
        result = Result(
            label=label, sent=done.get("published", 0), rate=done.get("rate"),
            received=[d.get("received", 0) for d in sub_done], window_s=window,
            pub_cpu=pct(done.get("cpu_s"), done.get("elapsed_s") or window),
            sub_cpu=[pct(d.get("cpu_s"), d.get("elapsed_s") or 0) for d in sub_done])
        if agent is not None:
            time.sleep(2.0)  # the batch timeout (1s) and a poll: spans reach the file
            result.agent_exit = agent.stop()
            result.agent_cpu = pct(a1 - a0, window)
            spans = read_spans(agent.traces)
            result.spans = len(spans)
            result.span_names = Counter(s.name for s in spans)
            totals = agent.summary()
            result.drops = totals.get("kernel.drops")
            result.events = totals.get("events")
            if result.agent_exit != 0:
                print(f"agent exited with {result.agent_exit}:\n{agent.stderr[-1500:]}",
                      file=sys.stderr)
    return result


def fmt(value: float | None, spec: str = ".1f") -> str:
    return "n/a" if value is None else format(value, spec)


def markdown(results: list[Result], args, protocols: list[str], note: str) -> str:
    lines = [
        f"### RTPS tracing overhead ({datetime.date.today().isoformat()}, "
        f"{args.rate} msg/s of {args.size} B to {args.subscribers} subscribers for "
        f"{args.seconds} s; capture {args.capture} B, poll {args.poll}, "
        f"protocols {protocols})",
        "",
        "| run | msgs/s sent | received (per subscriber) | publisher CPU % | "
        "subscriber CPU % | agent CPU % | spans | ring-buffer events | kernel drops |",
        "|---|---:|---:|---:|---:|---:|---:|---:|---:|",
    ]
    for r in results:
        lines.append(
            f"| {r.label} | {fmt(r.rate)} | {', '.join(map(str, r.received))} | "
            f"{fmt(r.pub_cpu)} | {', '.join(fmt(c) for c in r.sub_cpu)} | "
            f"{fmt(r.agent_cpu)} | {'n/a' if r.spans is None else r.spans} | "
            f"{'n/a' if r.events is None else r.events} | "
            f"{'n/a' if r.drops is None else r.drops} |")
    lines.append("")
    lines.append("CPU: user+system time over the publishing window, as % of one core "
                 f"({os.cpu_count()} CPUs here). Peers: Python `cyclonedds` "
                 "(tests/integration/peers/dds_peer.py), one process each.")
    traced = [r for r in results if r.spans is not None]
    for r in traced:
        top = ", ".join(f"{n} x{c}" for n, c in r.span_names.most_common(3)) or "none"
        lines.append(f"Spans by name ({r.label}): {top}; agent exit {r.agent_exit}.")
    if note:
        lines.append(note)
    return "\n".join(lines)


def publish(table: str, out: Path | None) -> None:
    """Print the table; with --out, append it after the command that made it."""
    print(table)
    if out:
        command = shlex.join(["sudo", ".venv/bin/python", "bench/rtps_overhead.py", *sys.argv[1:]])
        with out.open("a") as f:
            f.write(f"\n`{command}`\n\n{table}\n")


def compare(args, protocols: list[str]) -> str:
    """--rounds traced runs with the agent of --base and of this checkout, alternated."""
    sides = {f"before ({args.base})": args.base.resolve(), "this tree": REPO}
    runs: dict[str, list[Result]] = {label: [] for label in sides}
    for i in range(args.rounds):
        for label in rotated(list(sides), i):
            print(f"round {i + 1}/{args.rounds}: {label}...", file=sys.stderr)
            with agent_tree(sides[label]):
                runs[label].append(run_once(label, args, protocols))
    lines = [
        f"### RTPS tracing overhead, before and after ({datetime.date.today().isoformat()}, "
        f"{args.rate} msg/s of {args.size} B to {args.subscribers} subscribers for "
        f"{args.seconds} s; capture {args.capture} B, poll {args.poll}, {args.rounds} rounds "
        "a side, alternated)",
        "",
        "| agent | agent CPU % of a core | spans per round | kernel drops per round | "
        "agent exit |",
        "|---|---:|---:|---:|---:|",
    ]
    for label, results in runs.items():
        cpu = [r.agent_cpu for r in results if r.agent_cpu is not None]
        lines.append(
            f"| {label} | {spread(cpu) if cpu else 'n/a'} | "
            f"{', '.join(str(r.spans) for r in results)} | "
            f"{', '.join(str(r.drops) for r in results)} | "
            f"{', '.join(str(r.agent_exit) for r in results)} |")
    return "\n".join(lines)


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rate", type=float, default=1000.0, help="messages per second")
    ap.add_argument("--seconds", type=float, default=20.0)
    ap.add_argument("--size", type=int, default=256, help="bytes of each String_.data")
    ap.add_argument("--subscribers", type=int, default=2)
    ap.add_argument("--capture", type=int, default=2048, help="capture.max_bytes")
    ap.add_argument("--poll", default="200ms", help="ring_buffer.poll_interval")
    ap.add_argument("--protocols", default="rtps", help="protocols.enabled, comma-separated")
    ap.add_argument("--fallback-protocols", default="http1",
                    help="used when the agent does not know --protocols yet")
    ap.add_argument("--base", type=Path,
                    help="another checkout: its agent and this one's, side by side")
    ap.add_argument("--rounds", type=int, default=3, help="rounds a side with --base")
    ap.add_argument("--out", type=Path, help="append the table to this Markdown file")
    args = ap.parse_args()
    if os.geteuid() != 0:
        ap.error("run as root: the agent loads BPF programs")
    if not 1 <= args.rate <= 100_000 or not 0 < args.seconds <= 600:
        ap.error("--rate must be 1..100000 and --seconds 0..600")
    protocols = [p for p in args.protocols.split(",") if p]
    note = ""
    if args.base is not None:
        if not 1 <= args.rounds <= 20:
            ap.error("--rounds must be 1..20")
        if not (args.base / "bpf" / "build").is_dir():
            ap.error(f"--base {args.base}: no bpf/build there (make -C bpf in that checkout)")
        publish(compare(args, protocols), args.out)
        return 0

    print("baseline run (no agent)...", file=sys.stderr)
    base = run_once("without agent", args, None)
    print("traced run...", file=sys.stderr)
    try:
        traced = run_once("with agent", args, protocols)
    except RuntimeError as exc:
        if "unknown protocol" not in str(exc):
            raise
        fallback = [p for p in args.fallback_protocols.split(",") if p]
        said = re.search(r"unknown protocol\S* \[[^\]]*\]", str(exc))
        note = (f"The agent does not know {protocols} yet ({said[0] if said else 'unknown'}); "
                f"it ran with {fallback}: RTPS datagrams captured and decoded, not parsed.")
        print(note, file=sys.stderr)
        protocols = fallback
        traced = run_once("with agent", args, protocols)

    publish(markdown([base, traced], args, protocols, note), args.out)
    return 0


if __name__ == "__main__":
    sys.exit(main())
