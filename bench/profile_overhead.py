"""CPU profiling overhead: the agent's own CPU while it profiles a busy 2-core machine,
at 19 Hz and at 99 Hz, and the BPF program's time per sample (charged to the sampled
programs, not the agent); with --unwind, frame pointers and unwind tables side by side in
one run (--repeats runs each: medians and spreads), and what building the unwind table of
a large library costs (--table-of FILE: libtorch_cpu.so), in a process of its own.

Run as root from the repository root (after `make -C bpf`):

    sudo .venv/bin/python bench/profile_overhead.py [--seconds 30] [--frequencies 19,99]
        [--out docs/performance.md]
    sudo .venv/bin/python bench/profile_overhead.py --unwind --repeats 3 --seconds 20 \
        --table-of .venv/lib/python3.11/site-packages/torch/lib/libtorch_cpu.so \
        --out docs/profiling.md

Setup per frequency: one busy Python workload per online CPU
(tests/integration/peers/cpu_workload.py: Python, zlib and kernel frames), then the real
agent (`otel-ebpf run -c <generated config>`: targets.pids = the workloads, a `profiles`
pipeline with a pprof and a folded exporter into a temp folder, export every 10 s, the
socket tracer as always). After its `otel-ebpf ready` and a 3 s warm-up, the agent's
utime+stime (/proc/PID/stat) over --seconds, as % of one core. The BPF program's
run time comes from kernel.bpf_stats_enabled (switched on for the run, then restored),
read with `bpftool prog show`. With --out, the table replaces the section of that name in
the file (or is appended).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
WORKLOAD = REPO / "tests/integration/peers/cpu_workload.py"
TORCH_WORKLOAD = REPO / "tests/integration/peers/torch_workload.py"
SECTION = "## CPU profiling overhead"
UNWIND_SECTION = "## Cost of unwind tables"
TICKS = os.sysconf("SC_CLK_TCK")


def cpu_s(pid: int) -> float:
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / TICKS


def profile_progs(name: str = "profile_cpu") -> dict[int, tuple[int, int]]:
    """id -> (run time ns, run count) of every loaded sampling program (bpftool here does
    not name owner pids: the agent's is the one that appears when it starts). A name
    ending in `*`: every program whose name starts so (bpftool cuts names at 15)."""
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True)
    match = (lambda n: n.startswith(name[:-1])) if name.endswith("*") else name.__eq__
    return {p["id"]: (p.get("run_time_ns", 0), p.get("run_cnt", 0))
            for p in json.loads(out.stdout or "[]") if match(p.get("name", ""))}


# the programs that remember who woke which thread of a Python process (a worker's
# dispatcher): run at every wake-up on the host, charged to the waking threads
WAKE_PROGS = "profile_wak*"  # profile_waking, profile_wakeup_new (cut at 15)


def _start_workloads(ncpu: int, seconds: float, torch_threads: int) -> list:
    if not torch_threads:
        workloads = [subprocess.Popen([sys.executable, str(WORKLOAD), str(seconds + 60)],
                                      stdout=subprocess.PIPE, text=True) for _ in range(ncpu)]
        for w in workloads:
            w.stdout.readline()
        return workloads
    # one torch program with intra-op threads: matmul on OpenMP/MKL workers, woken by
    # the main thread at every parallel region
    w = subprocess.Popen([sys.executable, str(TORCH_WORKLOAD), str(seconds + 120), "early",
                          f"threads={torch_threads}"], stdin=subprocess.PIPE,
                         stdout=subprocess.PIPE, text=True)
    assert w.stdout.readline().strip() == "READY"
    w.stdin.write("go\n")
    w.stdin.flush()
    assert w.stdout.readline().strip() == "IMPORTED"
    return [w]


def measure(freq: int, seconds: float, ncpu: int, unwind: bool = False,
            warmup_s: float = 3.0, torch_threads: int = 0) -> dict:
    workloads = _start_workloads(ncpu, seconds, torch_threads)
    tmp = Path(tempfile.mkdtemp(prefix="profile-bench-"))
    cfg = tmp / "config.yaml"
    cfg.write_text(f"""
receivers:
  ebpf:
    targets: {{pids: [{", ".join(str(w.pid) for w in workloads)}]}}
    profiling: {{frequency: {freq}, interval: 10s, unwind_tables: {str(unwind).lower()}}}
exporters:
  pprof: {{path: {tmp / "pprof"}}}
  folded: {{path: {tmp / "folded"}}}
  file: {{path: {tmp / "traces.jsonl"}}}
service:
  pipelines:
    traces: {{receivers: [ebpf], exporters: [file]}}
    profiles: {{receivers: [ebpf], exporters: [pprof, folded]}}
""")
    # on again for each run: another bench on a shared machine may have switched it off
    Path("/proc/sys/kernel/bpf_stats_enabled").write_text("1")
    before = set(profile_progs()) | set(profile_progs(WAKE_PROGS))
    agent = subprocess.Popen([str(REPO / ".venv/bin/otel-ebpf"), "run", "-c", str(cfg)],
                             stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.monotonic() + 180  # a loaded machine starts the agent slowly
        for line in agent.stderr:
            if "otel-ebpf ready" in line:
                break
            if time.monotonic() > deadline:
                raise TimeoutError("agent not ready")
        time.sleep(warmup_s)  # with tables: the workload's files are built by then (~1 s)
        mine = (set(profile_progs()) | set(profile_progs(WAKE_PROGS))) - before
        c0, t0 = cpu_s(agent.pid), time.monotonic()
        b0 = [sum(v[i] for k, v in profile_progs().items() if k in mine) for i in (0, 1)]
        w0 = [sum(v[i] for k, v in profile_progs(WAKE_PROGS).items() if k in mine)
              for i in (0, 1)]
        time.sleep(seconds)
        c1, t1 = cpu_s(agent.pid), time.monotonic()
        b1 = [sum(v[i] for k, v in profile_progs().items() if k in mine) for i in (0, 1)]
        w1 = [sum(v[i] for k, v in profile_progs(WAKE_PROGS).items() if k in mine)
              for i in (0, 1)]
    finally:
        agent.send_signal(signal.SIGINT)
        try:
            agent.wait(timeout=30)
        except subprocess.TimeoutExpired:
            agent.kill()
        for w in workloads:
            w.kill()
            w.wait()
    folded = list((tmp / "folded").glob("*.folded"))
    samples = sum(int(line.rsplit(" ", 1)[1]) for f in folded
                  for line in f.read_text().splitlines())
    runs = b1[1] - b0[1]
    return {"freq": freq, "unwind": unwind, "agent_pct": 100 * (c1 - c0) / (t1 - t0),
            "bpf_us": (b1[0] - b0[0]) / runs / 1000 if runs else float("nan"),
            "runs_per_s": runs / (t1 - t0), "samples": samples,
            "wake_pct": 100 * (w1[0] - w0[0]) / 1e9 / (t1 - t0),
            "wakes_per_s": (w1[1] - w0[1]) / (t1 - t0)}


TABLE_CHILD = """
import json, resource, sys, time
from otel_ebpf.profiling.unwind_tables import build_table
t0, c0 = time.monotonic(), time.process_time()
table = build_table(sys.argv[1])
print(json.dumps({"rows": len(table), "fdes": table.fdes, "bytes": len(table.rows),
                  "cpu_s": time.process_time() - c0, "wall_s": time.monotonic() - t0,
                  "peak_rss_kib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss}))
"""


def table_cost(path: str) -> dict:
    """Building one file's unwind table in a fresh interpreter: CPU, wall, peak memory."""
    base = subprocess.run([sys.executable, "-c", "import resource, otel_ebpf.profiling."
                           "unwind_tables; print(resource.getrusage(resource.RUSAGE_SELF)"
                           ".ru_maxrss)"], capture_output=True, text=True, check=True, cwd=REPO)
    out = subprocess.run([sys.executable, "-c", TABLE_CHILD, path], capture_output=True,
                         text=True, check=True, cwd=REPO)
    r = json.loads(out.stdout)
    r["base_rss_kib"] = int(base.stdout)
    r["size"] = os.path.getsize(path)
    return r


def _med(values: list[float]) -> str:
    values = [v for v in values if v == v]  # runs without BPF statistics (nan) left out
    if not values:
        return "n/a"
    if len(values) == 1:
        return f"{values[0]:.2f}"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def unwind_main(args, ncpu: int) -> None:
    stats_path = Path("/proc/sys/kernel/bpf_stats_enabled")
    old = stats_path.read_text().strip()
    stats_path.write_text("1")
    runs: dict[tuple[int, bool], list[dict]] = {}
    try:
        for _ in range(args.repeats):  # interleaved: the machine's load hits both alike
            for f in args.frequencies.split(","):
                for unwind in (False, True):
                    runs.setdefault((int(f), unwind), []).append(
                        measure(int(f), args.seconds, ncpu, unwind))
    finally:
        stats_path.write_text(old)
    lines = [UNWIND_SECTION, "",
             f"`sudo .venv/bin/python bench/profile_overhead.py --unwind --repeats "
             f"{args.repeats} --seconds {args.seconds:g}"
             + (" --table-of <libtorch_cpu.so>" if args.table_of else "") + "`: "
             f"{ncpu} CPUs, each busy with one profiled Python workload "
             "(tests/integration/peers/cpu_workload.py), the real agent as in "
             "docs/performance.md, frame pointers and unwind tables alternating run by "
             f"run; medians of {args.repeats} runs (min-max). Agent CPU: its utime+stime "
             "over the window; BPF µs per sample: charged to the sampled threads.", "",
             "| frequency | stacks | agent CPU (% of one core) | BPF program per sample (µs) "
             "| samples exported (per run) |", "|---|---|---|---|---|"]
    for (freq, unwind), rs in sorted(runs.items()):
        lines.append(f"| {freq} Hz | {'unwind tables' if unwind else 'frame pointers'} | "
                     f"{_med([r['agent_pct'] for r in rs])} | "
                     f"{_med([r['bpf_us'] for r in rs])} | "
                     f"{statistics.median(r['samples'] for r in rs):.0f} |")
    if args.table_of:
        t = table_cost(args.table_of)
        lines += ["", f"Building the table of `{Path(args.table_of).name}` "
                  f"({t['size'] / 2**20:.0f} MiB file): {t['fdes']} FDEs -> {t['rows']} rows, "
                  f"{t['bytes'] / 2**20:.1f} MiB of kernel memory; {t['cpu_s']:.1f} s of CPU "
                  f"({t['wall_s']:.1f} s wall), peak memory of the building process "
                  f"{t['peak_rss_kib'] / 1024:.0f} MiB (an interpreter with the module "
                  f"imported: {t['base_rss_kib'] / 1024:.0f} MiB)."]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        _replace_section(Path(args.out), UNWIND_SECTION, text)


def _replace_section(path: Path, section: str, text: str) -> None:
    doc = path.read_text()
    if section in doc:
        head, _, rest = doc.partition(section)
        nxt = rest.find("\n## ")
        doc = head + text + (rest[nxt + 1:] if nxt >= 0 else "")
    else:
        doc = doc.rstrip("\n") + "\n\n" + text
    path.write_text(doc)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--seconds", type=float, default=30)
    ap.add_argument("--frequencies", default="19,99")
    ap.add_argument("--out")
    ap.add_argument("--unwind", action="store_true",
                    help="frame pointers and unwind tables side by side")
    ap.add_argument("--repeats", type=int, default=1)
    ap.add_argument("--table-of", help="also measure building this file's unwind table")
    ap.add_argument("--torch-threads", type=int, default=0,
                    help="profile one torch program with this many intra-op threads "
                         "instead of a Python workload per CPU (prints, --out not used)")
    args = ap.parse_args()
    ncpu = os.cpu_count() or 2
    if args.unwind:
        unwind_main(args, ncpu)
        return
    stats_path = Path("/proc/sys/kernel/bpf_stats_enabled")
    old = stats_path.read_text().strip()
    stats_path.write_text("1")
    try:
        rows = [measure(int(f), args.seconds, ncpu, torch_threads=args.torch_threads)
                for f in args.frequencies.split(",") for _ in range(args.repeats)]
    finally:
        stats_path.write_text(old)
    if args.torch_threads:
        for r in rows:
            print(json.dumps(r))
        return
    lines = [SECTION, "",
             f"`sudo .venv/bin/python bench/profile_overhead.py --seconds {args.seconds:g}`: "
             f"{ncpu} CPUs, each busy with one profiled Python workload (Python, zlib and "
             "kernel frames, up to ~10 Python frames deep), the real agent with a profiles "
             "pipeline (pprof + folded exporters, export every 10 s) and its socket tracer. "
             "Agent CPU is its utime+stime over the window; the BPF program's time "
             "(stack copies and the Python frame walk) is charged to the sampled threads.",
             "", "| frequency | agent CPU (% of one core) | BPF program per sample (µs) "
             "| program runs/s | samples exported |", "|---|---|---|---|---|"]
    for r in rows:
        lines.append(f"| {r['freq']} Hz | {r['agent_pct']:.2f} | {r['bpf_us']:.1f} | "
                     f"{r['runs_per_s']:.0f} | {r['samples']} |")
    lines += ["", "Wake-up programs (a worker's dispatcher, docs/profiling.md): "
              + "; ".join(f"{r['freq']} Hz {r['wakes_per_s']:.0f} runs/s, "
                          f"{r['wake_pct']:.3f}% of one core" for r in rows)]
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        _replace_section(Path(args.out), SECTION, text)


if __name__ == "__main__":
    main()
