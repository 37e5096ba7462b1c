"""What walking GPU allocation stacks with unwind tables costs, per event, against the
frame-pointer walk: the CUDA probes (bpf/cuda.bpf.c) on the stand-in libcuda
(tests/support/cuda/libcuda.c), a Python program calling it through a library built
without frame pointers (tests/support/cuda/nofp_alloc.c: load path of ~20 native frames:
CPython, ctypes, libffi, the library) in a loop of N allocations (each freed) and N kernel
launches. Per mode (no probes, frame pointers, frame pointers with the caller's Python
frames walked at each call, unwind tables; --repeats runs each,
interleaved): the BPF programs' run time per call (kernel.bpf_stats_enabled, switched on
for the run and restored; `bpftool prog show`) for the return program (`cu_return`: the
allocation's walk, and the frees' cheap returns) and the launch program
(`cu_launch_kernel`: frame pointers always, a stack-trace map), and the program's own
time per call, probes' traps included.

Run as root from the repository root (after `make -C bpf`):

    sudo .venv/bin/python bench/gpu_unwind_cost.py [--calls 20000] [--repeats 3]
"""

from __future__ import annotations

import argparse
import json
import statistics
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from otel_ebpf.kernel.cuda_tracer import CudaTracer  # noqa: E402
from otel_ebpf.kernel.libbpf import LibbpfLog  # noqa: E402
from otel_ebpf.profiling.symbolizer import Symbolizer  # noqa: E402
from otel_ebpf.profiling.unwinder import UnwindTables  # noqa: E402
from tests.support.cuda import SRC, build_libcuda, build_nofp_alloc  # noqa: E402

PROGRAMS = ("cu_return", "cu_launch_kerne")  # bpftool shows names cut at 15 characters


def progs() -> dict[int, tuple[str, int, int]]:
    out = subprocess.run(["bpftool", "-j", "prog", "show"], capture_output=True, text=True)
    return {p["id"]: (p.get("name", ""), p.get("run_time_ns", 0), p.get("run_cnt", 0))
            for p in json.loads(out.stdout or "[]")
            if any(p.get("name", "").startswith(n) for n in PROGRAMS)}


def run(mode: str, calls: int, libcuda: Path, nofp: Path) -> dict:
    tables = UnwindTables(1 << 20, lambda s, r: None) if mode == "tables" else None
    before = set(progs())
    tracer = None
    if mode != "none":
        tracer = CudaTracer(LibbpfLog(), unwind=tables.maps if tables else None)
        tracer.probes.attach(str(libcuda))
    mine = set(progs()) - before
    app = subprocess.Popen([sys.executable, str(SRC / "nofp_app.py"), str(libcuda), str(nofp),
                            "gpu-cost-app", "loop", str(calls)], stdin=subprocess.PIPE,
                           stdout=subprocess.PIPE, text=True)
    stop = threading.Event()
    events = [0, 0]  # allocations, stacks walked whole (with nofp_allocator_reserve)

    def drain() -> None:
        while not stop.is_set():
            for ev in tracer.poll(50):
                if type(ev).__name__ == "GpuAlloc":
                    events[0] += 1
    try:
        assert app.stdout.readline().strip() == "ready"
        if mode == "python":  # the app's interpreter registered, as the GPU monitor does
            found = []
            sym = Symbolizer(on_python=lambda i: found.append(i) or tracer.set_python(
                i.pid, i.runtime, i.offsets.kernel_fields()))
            sym.process(app.pid)
            assert found, "the app's interpreter was not found"
            sym.close()
        if tables:
            tables.unwinder.add(app.pid)
            deadline = time.monotonic() + 120
            while not tables.unwinder.ready(app.pid) and time.monotonic() < deadline:
                time.sleep(0.1)
                tables.unwinder.apply_ready()
            tables.unwinder.apply_ready()
        drainer = threading.Thread(target=drain, daemon=True) if tracer else None
        if drainer:
            drainer.start()
        b0 = {k: v for k, v in progs().items() if k in mine}
        app.stdin.write("go\n")
        app.stdin.flush()
        timing = json.loads(app.stdout.readline())
        b1 = {k: v for k, v in progs().items() if k in mine}
        time.sleep(0.3)
        stop.set()
        if drainer:
            drainer.join(5)
        app.stdin.write("done\n")
        app.stdin.flush()
        app.wait(10)
    finally:
        if app.poll() is None:
            app.kill()
        if tracer is not None:
            counters = tracer.kernel_counters()
            tracer.close()
        else:
            counters = {}
        if tables is not None:
            tables.close()
    per = {}
    for name in PROGRAMS:
        ns = sum(b1[k][1] - b0.get(k, (0, 0, 0))[1] for k in b1 if b1[k][0].startswith(name))
        cnt = sum(b1[k][2] - b0.get(k, (0, 0, 0))[2] for k in b1 if b1[k][0].startswith(name))
        per[name] = (ns / cnt / 1000 if cnt else float("nan"), cnt)
    return {"mode": mode, **timing, "cu_return_us": per["cu_return"][0],
            "cu_return_runs": per["cu_return"][1], "bpf_launch_us": per["cu_launch_kerne"][0],
            "launch_runs": per["cu_launch_kerne"][1], "allocs_seen": events[0],
            "unwind_stacks": counters.get("unwind_stacks", 0),
            "unwind_table_frames": counters.get("unwind_table_frames", 0),
            "drops": counters.get("ringbuf_drops", 0)}


def _med(values: list[float]) -> str:
    values = [v for v in values if v == v]
    if not values:
        return "n/a"
    return f"{statistics.median(values):.2f} ({min(values):.2f}-{max(values):.2f})"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--calls", type=int, default=20000)
    ap.add_argument("--repeats", type=int, default=3)
    args = ap.parse_args()
    out = Path(tempfile.mkdtemp(prefix="gpu-unwind-cost-"))
    libcuda = build_libcuda(out)
    nofp = build_nofp_alloc(out)
    stats = Path("/proc/sys/kernel/bpf_stats_enabled")
    old = stats.read_text().strip()
    stats.write_text("1")
    runs: dict[str, list[dict]] = {}
    try:
        for _ in range(args.repeats):
            for mode in ("none", "fp", "python", "tables"):
                r = run(mode, args.calls, libcuda, nofp)
                print(json.dumps(r), flush=True)
                runs.setdefault(mode, []).append(r)
    finally:
        stats.write_text(old)
    print(f"\n{args.calls} allocations (each freed) and {args.calls} launches per run; "
          f"medians of {args.repeats} (min-max)\n")
    print("| stacks | cu_return per run (µs) | cu_launch_kernel per run (µs) | "
          "program: alloc + free (µs per pair) | program: launch (µs) | "
          "frames by table per allocation |")
    print("|---|---|---|---|---|---|")
    for mode in ("none", "fp", "python", "tables"):
        rs = runs[mode]
        frames = [r["unwind_table_frames"] / r["unwind_stacks"] for r in rs if r["unwind_stacks"]]
        print(f"| {dict(none='no probes', fp='frame pointers', python='frame pointers + Python frames', tables='unwind tables')[mode]} "
              f"| {_med([r['cu_return_us'] for r in rs])} "
              f"| {_med([r['bpf_launch_us'] for r in rs])} "
              f"| {_med([r['alloc_free_us'] for r in rs])} "
              f"| {_med([r['app_launch_us'] for r in rs])} "
              f"| {_med(frames)} |")


if __name__ == "__main__":
    main()
