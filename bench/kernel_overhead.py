"""Kernel cost of socket capture: ns added to each write()+read() pair on a loopback TCP
connection, side by side in one run, for four modes:

  off        no BPF program attached (the baseline)
  filtered   programs attached, the connection not selected (targets.ports elsewhere)
  floor      the least a syscall-tracepoint capture does (bench/kernel/floor.bpf.c,
             compiled here with clang): the loop's process selected by its tgid, a write's
             entry time kept per thread, each write's and read's first 256 B copied into a
             ring buffer record at its return; no connection state, no Context. What the
             machine and its kernel charge any such capture: `traced` minus `floor` is the
             agent's programs' own work
  traced     programs attached, the connection selected: every call copies its payload

Run as root:  .venv/bin/python bench/kernel_overhead.py [--rounds 5] [--iterations 50000]
              [--size 256] [--baseline DIR] [--stats] [--pipe] [--python-context]
              [--out docs/performance.md]

--pipe runs the pairs on a pipe instead, in four modes: `off`, `filtered` (programs
loaded, no pipe selected: receivers.ebpf.pipes empty, the default), `unselected` (pipes of
another process name selected: what every other process's pipe read and write pays) and
`selected` (the loop's process selected by name, run through a link named `pipe-bench`:
every call's payload copied, never muted, as an MCP server's stdin and stdout are).

Each round runs every mode once, in a fresh process; the table reports medians over
rounds and the ratio to `off`. The ring buffer is drained concurrently, as the agent does.
--baseline DIR adds `filtered-baseline` and `traced-baseline`: the same with another
source tree (an earlier commit's checkout, its bpf/build and C extensions built), before and
after side by side. Those modes run in a process of their own with DIR's loader and BPF
objects, so a tree whose settings layout (.rodata) differs from this one's still loads. --stats turns kernel.bpf_stats_enabled on while a traced mode runs (and back off)
and adds a table of each program's runs per write+read pair and ns per run, read from the
kernel's counters of this process's programs. --python-context makes the loop a registered
Python process, as a Python server is (the Context probes attached to it, one Context copied
before its warm-up): each traced call then also reads the thread's Context
(bpf/include/py_context.bpf.h); the count of data events that carried one is reported.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import re
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))
# a --baseline mode's own process: that tree's otel_ebpf (loader, settings layout)
if os.environ.get("OTEL_EBPF_BENCH_TREE"):
    sys.path.insert(0, os.environ["OTEL_EBPF_BENCH_TREE"])

from bench.side_by_side import cost_table, publish, rounds, spread  # noqa: E402

LOOP = r"""
import json, os, socket, sys, time
port, n, size, kind = int(sys.argv[1]), int(sys.argv[2]), int(sys.argv[3]), sys.argv[4]
if kind == "pipe":
    fb, fa = os.pipe()
else:
    srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    srv.bind(("127.0.0.1", port)); srv.listen()
    a = socket.create_connection(("127.0.0.1", port)); b, _ = srv.accept()
    fa, fb = a.fileno(), b.fileno()
msg = b"x" * size
if len(sys.argv) > 5:  # --python-context: wait for the probes, then register (one copy)
    print("ready", flush=True); sys.stdin.readline()
    import contextvars; contextvars.copy_context()
for _ in range(1000):  # warm up
    os.write(fa, msg); os.read(fb, size)
t0 = time.perf_counter_ns()
for _ in range(n):
    os.write(fa, msg); os.read(fb, size)
print(json.dumps({"ns_per_pair": (time.perf_counter_ns() - t0) / n}))
"""
PIPE = False  # --pipe: the loop writes and reads a pipe instead of a TCP connection
# --python-context: the loop registers as a Python process (the Context probes attached to
# it, one Context copied before the warm-up), so each traced call reads its Context
PY_CONTEXT = False


def free_port() -> int:
    import socket

    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


PIPE_NAME = "pipe-bench"  # the selected loop's command name (--pipe, mode `selected`)


def run_loop(port: int, iterations: int, size: int, executable: str = sys.executable,
             on_ready=None) -> float:
    """ns per write+read pair of the loop; `on_ready(pid)` runs once the loop's process is
    up, before its first pair (the floor's selection, the Context probes' attach)."""
    cmd = [executable, "-c", LOOP, str(port), str(iterations), str(size),
           "pipe" if PIPE else "tcp"]
    if on_ready is None:
        out = subprocess.run(cmd, capture_output=True, text=True, check=True, timeout=600)
        return json.loads(out.stdout)["ns_per_pair"]
    with subprocess.Popen(cmd + ["ctx"], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
                          text=True) as proc:
        assert proc.stdout.readline().strip() == "ready"
        on_ready(proc.pid)
        out, _ = proc.communicate("go\n", timeout=600)
    if proc.returncode:
        raise RuntimeError(f"loop failed ({proc.returncode})")
    return json.loads(out)["ns_per_pair"]


def program_stats(pid: int | str = "self") -> dict[str, tuple[int, int]]:
    """(run count, run ns) of each BPF program process `pid` holds, by name (the kernel
    counts them while kernel.bpf_stats_enabled is 1)."""
    ids = []
    for fd in os.listdir(f"/proc/{pid}/fdinfo"):
        try:
            m = re.search(r"^prog_id:\s+(\d+)", Path(f"/proc/{pid}/fdinfo/{fd}").read_text(), re.M)
        except OSError:
            continue
        if m:
            ids.append(m[1])
    out: dict[str, tuple[int, int]] = {}
    for prog_id in set(ids):
        info = subprocess.run(["bpftool", "-j", "prog", "show", "id", prog_id],
                              capture_output=True, text=True, timeout=10)
        if info.returncode == 0:
            doc = json.loads(info.stdout)
            out[doc.get("name", prog_id)] = (doc.get("run_cnt", 0), doc.get("run_time_ns", 0))
    return out


STATS: dict[str, list[dict[str, tuple[float, float]]]] = {}


@contextlib.contextmanager
def program_runs(mode: str, stats: bool, pairs: int, prefix: str = "") -> Iterator[None]:
    """With `stats`: kernel.bpf_stats_enabled on around the block (off again after it,
    however it ends), and each of this process's programs (those named `prefix...`) that
    ran meanwhile recorded under STATS[mode]: its runs per pair and ns per run."""
    if not stats:
        yield
        return
    sysctl = Path("/proc/sys/kernel/bpf_stats_enabled")
    sysctl.write_text("1")
    try:
        before = program_stats()
        yield
        after = program_stats()
    finally:
        sysctl.write_text("0")
    runs: dict[str, tuple[float, float]] = {}
    for name, (n, t) in after.items():
        n0, t0 = before.get(name, (0, 0))
        if name.startswith(prefix) and n > n0:
            runs[name] = ((n - n0) / pairs, (t - t0) / (n - n0))
    STATS.setdefault(mode, []).append(runs)


WITH_CONTEXT = [0]  # data events drained that carried a Context (--python-context)
FLOOR_RECORDS = [0]  # records the floor's programs sent


def measure(mode: str, iterations: int, size: int, baseline: Path | None = None,
            stats: bool = False) -> tuple[float, int, int]:
    """ns per write+read pair in `mode`, events the tracer drained, events it dropped."""
    from otel_ebpf.kernel.libbpf import LibbpfLog
    from otel_ebpf.kernel.socket_tracer import CaptureSettings, SocketTracer

    port = free_port()
    if mode == "off":
        return run_loop(port, iterations, size), 0, 0
    if mode == "floor":
        return measure_floor(port, iterations, size, stats)
    if mode.endswith("-baseline"):
        return measure_in(baseline, mode.removesuffix("-baseline"), iterations, size, stats)
    selected = port if mode.startswith("traced") else free_port()
    pipes = {"selected": (PIPE_NAME,), "unselected": ("no-such-name",)}.get(mode, ())
    executable = sys.executable
    if mode == "selected":  # comm comes from the name exec'd: a link to the interpreter
        link = Path(f"/tmp/otel-ebpf-bench-{os.getpid()}") / PIPE_NAME
        link.parent.mkdir(exist_ok=True)
        if not link.exists():
            link.symlink_to(sys.executable)
        executable = str(link)
    tracer = SocketTracer(CaptureSettings(ports=(selected,), capture_max=4096,
                                          pipe_process_names=pipes), LibbpfLog())
    drained, stop = [0], threading.Event()

    def drain() -> None:
        while not stop.is_set():
            events = tracer.poll(100)
            drained[0] += len(events)
            WITH_CONTEXT[0] += sum(1 for e in events if getattr(e, "task", 0)
                                   and type(e).__name__ == "DataEvent")

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    def probe_context(pid: int) -> None:  # --python-context: the loop a registered process
        if not tracer.asyncio.scan([pid]):
            raise RuntimeError("the Context probes did not attach to the loop")

    try:
        with program_runs(mode, stats, iterations + 1000):
            ns = run_loop(port, iterations, size, executable,
                          probe_context if PY_CONTEXT else None)
    finally:
        stop.set()
        thread.join(5)
        drained[0] += len(tracer.poll(0))
        drops = sum(tracer.kernel_counters()["ringbuf_drops"])
        tracer.close()
    return ns, drained[0], drops


FLOOR_SOURCE = REPO / "bench" / "kernel" / "floor.bpf.c"


def floor_object() -> Path:
    """bench/kernel/floor.bpf.c compiled as bpf/Makefile compiles the agent's (clang, CO-RE
    against bpf/build/vmlinux.h), into a folder of this run."""
    build = REPO / "bpf" / "build"
    if not (build / "vmlinux.h").is_file():
        raise SystemExit("bpf/build/vmlinux.h is missing: run `make -C bpf` first")
    arch = {"x86_64": "x86", "aarch64": "arm64"}.get(os.uname().machine, os.uname().machine)
    out = Path(f"/tmp/otel-ebpf-bench-{os.getpid()}") / "floor.bpf.o"
    if not out.is_file():
        out.parent.mkdir(exist_ok=True)
        subprocess.run(["clang", "-g", "-O2", "-target", "bpf", f"-D__TARGET_ARCH_{arch}",
                        f"-I{build}", f"-I{REPO / 'bpf' / 'include'}", "-c", str(FLOOR_SOURCE),
                        "-o", str(out)], check=True, timeout=120)
    return out


def measure_floor(port: int, iterations: int, size: int, stats: bool) -> tuple[float, int, int]:
    """The `floor` mode: bench/kernel/floor.bpf.c's programs on the loop's process alone,
    their ring drained concurrently as the agent's is."""
    from otel_ebpf.kernel.libbpf import LibbpfLog
    from otel_ebpf.kernel.loader import BPFObject, RingBuffer

    obj = BPFObject("floor", LibbpfLog(), floor_object())
    obj.load()
    obj.attach_all()
    ring = RingBuffer([obj.map("floor_events")])
    drained, stop = [0], threading.Event()

    def drain() -> None:
        while not stop.is_set():
            drained[0] += len(ring.drain(100))

    def select(pid: int) -> None:
        obj.map("floor_target").update(bytes(4), pid.to_bytes(4, "little"))

    thread = threading.Thread(target=drain, daemon=True)
    thread.start()
    try:
        with program_runs("floor", stats, iterations + 1000, prefix="floor_"):
            ns = run_loop(port, iterations, size, on_ready=select)
    finally:
        stop.set()
        thread.join(5)
        drained[0] += len(ring.drain(0))
        ring.close()
        obj.close()
    FLOOR_RECORDS[0] += drained[0]
    return ns, drained[0], 0


def measure_in(tree: Path, mode: str, iterations: int, size: int,
               stats: bool) -> tuple[float, int, int]:
    """measure(mode) in a process of its own running tree's otel_ebpf and BPF objects; its
    program stats go under `<mode>-baseline`."""
    env = dict(os.environ, OTEL_EBPF_BENCH_TREE=str(tree),
               OTEL_EBPF_BPF_DIR=str(tree / "bpf/build"), PYTHONPATH=str(tree))
    cmd = [sys.executable, __file__, "--one", mode, "--iterations", str(iterations),
           "--size", str(size)] + (["--stats"] if stats else []) + (["--pipe"] if PIPE else []) \
        + (["--python-context"] if PY_CONTEXT else [])
    out = subprocess.run(cmd, env=env, capture_output=True, text=True, timeout=900)
    if out.returncode:
        raise RuntimeError(f"baseline {mode} failed:\n{out.stderr[-2000:]}")
    doc = json.loads(out.stdout.splitlines()[-1])
    for per_round in doc["stats"].get(mode, []):
        STATS.setdefault(f"{mode}-baseline", []).append(
            {name: tuple(v) for name, v in per_round.items()})
    WITH_CONTEXT[0] += doc.get("with_context", 0)
    return doc["ns"], doc["drained"], doc["drops"]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--iterations", type=int, default=50_000)
    ap.add_argument("--size", type=int, default=256)
    ap.add_argument("--baseline", type=Path, help="a source tree whose bpf/build is the 'before'")
    ap.add_argument("--stats", action="store_true", help="per-program runs and ns (bpf_stats)")
    ap.add_argument("--pipe", action="store_true", help="pairs on a pipe, not TCP")
    ap.add_argument("--python-context", action="store_true",
                    help="the loop a registered Python process: each call reads its Context")
    ap.add_argument("--out", type=Path, help="append the table to this Markdown file")
    ap.add_argument("--one", help=argparse.SUPPRESS)  # one mode, JSON out (--baseline's)
    args = ap.parse_args()
    global PIPE, PY_CONTEXT
    PIPE, PY_CONTEXT = args.pipe, args.python_context
    if args.one:
        ns, drained, drops = measure(args.one, args.iterations, args.size, None, args.stats)
        print(json.dumps({"ns": ns, "drained": drained, "drops": drops, "stats": STATS,
                          "with_context": WITH_CONTEXT[0]}))
        return
    modes: tuple[str, ...] = ("off", "filtered", "unselected", "selected") if PIPE \
        else ("off", "filtered", "floor", "traced")
    if args.baseline:
        modes += ("filtered-baseline", "traced-baseline")
    totals = [0, 0]  # events drained, drops

    def one(mode: str) -> float:
        traced = mode.startswith("traced") or mode in ("selected", "floor")
        ns, events, drops = measure(mode, args.iterations, args.size, args.baseline,
                                    args.stats and traced)
        if traced and mode != "floor":  # the floor's records are counted on their own
            totals[0] += events
        totals[1] += drops
        return ns

    results = rounds(modes, args.rounds, one, "ns per write+read")
    lines = cost_table(
        f"### Kernel cost per syscall{' on a pipe' if PIPE else ''} "
        f"({time.strftime('%Y-%m-%d')}, {args.iterations} write+read pairs of {args.size} B, "
        f"median of {args.rounds} rounds)",
        "write+read", "syscall", results)
    lines += ["", "Spread over rounds, ns per write+read: "
              + "; ".join(f"{m} {spread(v)}" for m, v in results.items()) + "."]
    traced_modes = sum(1 for m in modes if m.startswith("traced") or m == "selected")
    if "floor" in modes:
        lines += ["", f"Records the floor's programs sent: {FLOOR_RECORDS[0]} of "
                  f"{2 * (args.iterations + 1000) * args.rounds} expected (2 per pair, "
                  "warm-up included)."]
    expected = 2 * (args.iterations + 1000) * args.rounds * traced_modes
    lines += ["", f"Data events drained while traced: {totals[0]} of {expected} expected "
              f"(2 per pair, warm-up included); ring-buffer drops: {totals[1]}."
              + (f" With a Context (--python-context): {WITH_CONTEXT[0]}." if PY_CONTEXT
                 else "")]
    if STATS:
        lines += ["", "BPF programs while traced (kernel.bpf_stats_enabled; medians over "
                  "rounds): runs per write+read pair, ns per run",
                  "", "| mode | program | runs per pair | ns per run |", "|---|---|---:|---:|"]
        for mode, per_round in STATS.items():
            names = sorted({n for r in per_round for n in r})
            for name in names:
                runs = [r[name][0] for r in per_round if name in r]
                ns = [r[name][1] for r in per_round if name in r]
                lines.append(f"| {mode} | {name} | {statistics.median(runs):.2f} | "
                             f"{statistics.median(ns):.0f} |")
    publish(lines, args.out)


if __name__ == "__main__":
    main()
