"""Kernel cost of socket capture: ns added to each write()+read() pair on a loopback TCP
connection, side by side in one run, for three modes:

  off        no BPF program attached (the baseline)
  filtered   programs attached, the connection not selected (targets.ports elsewhere)
  traced     programs attached, the connection selected: every call copies its payload

Run as root:  .venv/bin/python bench/kernel_overhead.py [--rounds 5] [--iterations 50000]
              [--size 256] [--out docs/performance.md]

Each round runs every mode once, in a fresh process; the table reports medians over
rounds and the ratio to `off`. The ring buffer is drained concurrently, as the agent does.
"""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.side_by_side import cost_table, publish, rounds  # noqa: E402

LOOP = r"""
import json, os, socket, sys, time
port, n, size = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3])
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind(("127.0.0.1", port)); srv.listen()
a = socket.create_connection(("127.0.0.1", port)); b, _ = srv.accept()
fa, fb, msg = a.fileno(), b.fileno(), b"x" * size
for _ in range(1000):  # warm up
    os.write(fa, msg); os.read(fb, size)
t0 = time.perf_counter_ns()
for _ in range(n):
    os.write(fa, msg); os.read(fb, size)
print(json.dumps({"ns_per_pair": (time.perf_counter_ns() - t0) / n}))
"""


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def run_loop(port: int, iterations: int, size: int) -> float:
    out = subprocess.run([sys.executable, "-c", LOOP, str(port), str(iterations), str(size)],
                         capture_output=True, text=True, check=True, timeout=600)
    return json.loads(out.stdout)["ns_per_pair"]


def measure(mode: str, iterations: int, size: int) -> tuple[float, int, int]:
    """ns per write+read pair in `mode`, events the tracer drained, events it dropped."""
    from otel_ebpf.kernel.libbpf import LibbpfLog
    from otel_ebpf.kernel.socket_tracer import CaptureSettings, SocketTracer

    port = free_port()
    if mode == "off":
        return run_loop(port, iterations, size), 0, 0
    selected = port if mode == "traced" else free_port()
    tracer = SocketTracer(CaptureSettings(ports=(selected,), capture_max=4096), LibbpfLog())
    drained, stop = [0], threading.Event()

    def drain() -> None:
        while not stop.is_set():
            drained[0] += len(tracer.ring.drain(100))

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        ns = run_loop(port, iterations, size)
    finally:
        stop.set()
        thread.join(5)
        drained[0] += len(tracer.ring.drain(0))
        drops = sum(tracer.kernel_counters()["ringbuf_drops"])
        tracer.close()
    return ns, drained[0], drops


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--out", type=Path, help="append the table to this Markdown file")
    args = ap.parse_args()
    modes = ("off", "filtered", "traced")
    totals = [0, 0]  # events drained, drops

    def one(mode: str) -> float:
        ns, events, drops = measure(mode, args.iterations, args.size)
        totals[0] += events
        totals[1] += drops
        return ns

    results = rounds(modes, args.rounds, one, "ns per write+read")
    lines = cost_table(
        f"### Kernel cost per syscall ({time.strftime('%Y-%m-%d')}, "
        f"{args.iterations} write+read pairs of {args.size} B, median of {args.rounds} rounds)",
        "write+read", "syscall", results)
    expected = 2 * (args.iterations + 1000) * args.rounds
    lines += ["", f"Data events drained while traced: {totals[0]} of {expected} expected "
              f"(2 per pair, warm-up included); ring-buffer drops: {totals[1]}."]
    publish(lines, args.out)


if __name__ == "__main__":
    main()
