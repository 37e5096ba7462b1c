"""Cost of the CPython Context uprobes (correlation evidence for asyncio and thread pools)
on an asyncio program, side by side in one run:

  off       no probes attached
  probes    the PyContext_CopyCurrent entry/return pair attached (a copy per task created;
            a task step fires nothing)

Run as root:  .venv/bin/python bench/asyncio_probes_overhead.py [--rounds 5] [--steps 200000]
              [--out docs/performance.md]

A separate process times task steps (a task awaiting asyncio.sleep(0) in a loop: one step
each) and task creations; each round runs both modes; medians over rounds, ratio to off.
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

LOOP = r"""
import asyncio, json, sys, time
steps = int(sys.argv[1])

async def stepper(n):
    for _ in range(n):
        await asyncio.sleep(0)

async def nothing():
    return None

async def main():
    t0 = time.perf_counter_ns()
    await stepper(steps)
    t1 = time.perf_counter_ns()
    for _ in range(steps // 10):
        await asyncio.create_task(nothing())
    t2 = time.perf_counter_ns()
    print(json.dumps({"ns_per_step": (t1 - t0) / steps,
                      "ns_per_task": (t2 - t1) / (steps // 10)}))

asyncio.run(main())
"""


def run_loop(steps: int) -> dict:
    out = subprocess.run([sys.executable, "-c", LOOP, str(steps)], capture_output=True,
                         text=True, check=True, timeout=600)
    return json.loads(out.stdout)


def measure(mode: str, steps: int) -> dict:
    if mode == "off":
        return run_loop(steps)
    from otel_ebpf.kernel.asyncio_probes import interpreters_of
    from otel_ebpf.kernel.libbpf import LibbpfLog
    from otel_ebpf.kernel.socket_tracer import CaptureSettings, SocketTracer

    tracer = SocketTracer(CaptureSettings(ports=(1,)), LibbpfLog())
    try:
        if not sum(tracer.asyncio._attach(p) for p in interpreters_of("self")):
            raise SystemExit("this interpreter is not covered by the probes: nothing to measure")
        return run_loop(steps)
    finally:
        tracer.close()


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--steps", type=int, default=200_000)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    results: dict[str, list[dict]] = {"off": [], "probes": []}
    for r in range(args.rounds):
        for mode in results:
            results[mode].append(measure(mode, args.steps))
            print(f"round {r + 1}/{args.rounds} {mode:7s} {results[mode][-1]}", file=sys.stderr)
    med = {m: {k: statistics.median(x[k] for x in v) for k in v[0]} for m, v in results.items()}
    lines = [
        f"### CPython Context probes ({time.strftime('%Y-%m-%d')}, {args.steps} "
        f"task steps and {args.steps // 10} task creations, median of {args.rounds} rounds)",
        "",
        f"`sudo .venv/bin/python bench/asyncio_probes_overhead.py --rounds {args.rounds} "
        f"--steps {args.steps}`",
        "",
        "| mode | ns per task step | ns per task created and awaited | step ratio to off |",
        "|---|---:|---:|---:|",
    ]
    for mode, m in med.items():
        lines.append(f"| {mode} | {m['ns_per_step']:.0f} | {m['ns_per_task']:.0f} | "
                     f"{m['ns_per_step'] / med['off']['ns_per_step']:.2f} |")
    table = "\n".join(lines)
    print(table)
    if args.out:
        with args.out.open("a") as f:
            f.write("\n" + table + "\n")


if __name__ == "__main__":
    main()
