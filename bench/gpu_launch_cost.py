"""The GPU launch probes' cost on a launch-bound PyTorch loop, and how good the duty
cycle's launch estimate is: the loop untraced, traced with the launch probes always
attached (gpu.launches.duty_cycle 1, exact counts) and traced with duty cycles below 1,
in interleaved rounds against one warm worker process, side by side in one run.

    sudo python3 bench/gpu_launch_cost.py [--rounds 5] [--seconds 10] [--duties 1,0.05]
                                          [--period 1] [--out summary.json]

The worker (this file with --worker, torch on the GPU) runs steps of 2,000 `x.mul_()` on
1,024 floats then a synchronize (tests/support/cuda/torch_planted.py's launch loop) when
told; a traced run loads the agent's real CUDA probes (CudaTracer), its GPU monitor
(Python frames walked at each launch, as the agent does once it knows the interpreter)
and, below duty 1, the duty cycle's timer thread, then reads the monitor's
`gpu.kernel.launches` for the run (the estimate, or the exact count) against the
worker's own count. Every round runs each mode once, the order rotated; the report
gives, per mode, the median and min-max of the run's speed over the same round's
untraced speed, of the launch count over the true count, and the attach and detach
calls' time per window. Needs root, the BPF objects (bpf/build or OTEL_EBPF_BPF_DIR),
libbpf, and torch with a CUDA device.

    sudo python3 bench/gpu_launch_cost.py --segments 8 [--seconds 3] [--duties 1,0.05]

--segments N: the drift-proof form. One agent (CUDA probes and GPU monitor) stays loaded
for the whole run and the worker's loop runs in short segments of --seconds each, the
launch probes detached ("launch probes off": what duty cycles would cost nothing over)
or in each mode, in N rounds ordered A B C C B A so a drifting GPU or host weighs on
every mode alike; each mode's ratio is to the mean of its round's "off" segments. The
probes that stay attached in every mode (allocations, copies, synchronize: one call a
step here) are in both sides of the ratio; the sequential form above compares with a
worker no agent traces at all."""

from __future__ import annotations

import argparse
import ctypes
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
LAUNCHES_PER_STEP = 2000


def worker(standin: str | None) -> None:
    """The launch-bound loop, run on command: `run STEPS` -> one JSON line. `standin`: a
    stand-in libcuda (tests/support/cuda/libcuda.c) called through ctypes instead of torch,
    to try the script on a machine without a GPU."""
    ctypes.CDLL(None).prctl(15, b"torch-launch", 0, 0, 0)  # PR_SET_NAME
    if standin:
        cuda = ctypes.CDLL(standin)
        cuda.cuInit(0)
        launch = cuda.cuLaunchKernel
        launch.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3

        def mul() -> None:
            launch(0x1000, 1, 1, 1, 32, 1, 1, 0, None, None, None)

        sync = cuda.cuCtxSynchronize
    else:
        import torch

        x = torch.ones(1024, device="cuda")

        def mul() -> None:
            x.mul_(1.0001)

        sync = torch.cuda.synchronize
    for _ in range(100):  # warm: kernels looked up, allocator primed
        mul()
    sync()
    print("ready", flush=True)
    for line in sys.stdin:
        steps = int(line.split()[1])
        t0 = time.perf_counter()
        for _ in range(steps):
            for _ in range(LAUNCHES_PER_STEP):
                mul()
            sync()
        seconds = time.perf_counter() - t0
        print(json.dumps({"steps_per_s": steps / seconds, "seconds": seconds,
                          "launches": steps * LAUNCHES_PER_STEP}), flush=True)


class _Collect:
    """A metric exporter that keeps what it is given."""

    def __init__(self) -> None:
        self.data: list = []

    def export(self, data, timeout_millis: float = 0, **_: object):
        from opentelemetry.sdk.metrics.export import MetricExportResult

        self.data.append(data)
        return MetricExportResult.SUCCESS

    def launches(self, pid: int) -> tuple[int, bool]:
        """The last gpu.kernel.launches of `pid`, summed over devices, and whether it is
        marked an estimate."""
        from otel_ebpf.gpu.ledger import ESTIMATED

        for data in reversed(self.data):
            total, marked, seen = 0, False, False
            for rm in data.resource_metrics:
                if rm.resource.attributes.get("process.pid") != pid:
                    continue
                for m in rm.scope_metrics[0].metrics:
                    if m.name == "gpu.kernel.launches":
                        for p in m.data.data_points:
                            total += p.value
                            marked |= bool(p.attributes.get(ESTIMATED))
                            seen = True
            if seen:
                return total, marked
        return 0, False


def traced_run(proc: subprocess.Popen, steps: int, duty_cycle: float, period_s: float
               ) -> dict:
    """One run of the worker under the agent's CUDA probes and GPU monitor."""
    from otel_ebpf.gpu.duty import LaunchDuty
    from otel_ebpf.gpu.monitor import GpuMonitor
    from otel_ebpf.kernel.cuda_tracer import CudaTracer
    from otel_ebpf.kernel.libbpf import LibbpfLog
    from otel_ebpf.spans.resources import ProcessResources
    from otel_ebpf.telemetry import Stats

    tracer = CudaTracer(LibbpfLog())
    duty = (LaunchDuty(tracer.probes.set_launches, duty_cycle, period_s)
            if duty_cycle < 1 else None)
    metrics = _Collect()
    monitor = GpuMonitor(tracer, {"c": metrics}, ProcessResources(), Stats(),
                         interval_s=3600, duty=duty)
    try:
        monitor.start()  # scan: libcuda of the worker probed, its interpreter known
        if proc.pid not in monitor._pythons:
            print(f"  note: no Python frames for pid {proc.pid}", file=sys.stderr)
        deadline = time.monotonic() + 10
        while duty is not None and duty.windows < 1 and time.monotonic() < deadline:
            time.sleep(0.005)  # the first window open: this flush starts the estimate
        time.sleep(0.01)
        monitor.flush()  # the counts from here on are the run's
        result = run(proc, steps)
        monitor.flush()
        count, marked = metrics.launches(proc.pid)
    finally:
        monitor.shutdown()
    out = {**result, "counted": count, "marked": marked}
    if duty is not None:
        out.update(windows=duty.windows,
                   attach_ms=duty.attach_ns / 1e6 / max(duty.windows, 1),
                   detach_ms=duty.detach_ns / 1e6 / max(duty.windows, 1))
    return out


def segmented(proc: subprocess.Popen, steps: int, duties: list[tuple[float, float]],
              rounds: int) -> list[dict]:
    """Segments of `steps` steps under one loaded agent, the launch probes detached (off),
    always attached (duty 1) or cycled, ordered A B C C B A per round."""
    from otel_ebpf.gpu.duty import LaunchDuty
    from otel_ebpf.gpu.monitor import GpuMonitor
    from otel_ebpf.kernel.cuda_tracer import CudaTracer
    from otel_ebpf.kernel.libbpf import LibbpfLog
    from otel_ebpf.spans.resources import ProcessResources
    from otel_ebpf.telemetry import Stats

    tracer = CudaTracer(LibbpfLog())
    monitor = GpuMonitor(tracer, {"c": _Collect()}, ProcessResources(), Stats(),
                         interval_s=3600)
    modes: list[tuple[float, float] | None] = [None, *duties]  # None: launch probes off
    runs: list[dict] = []
    try:
        monitor.start()
        if proc.pid not in monitor._pythons:
            print(f"  note: no Python frames for pid {proc.pid}", file=sys.stderr)
        for r in range(rounds):
            order = modes + modes[::-1]
            results: dict = {m: [] for m in modes}
            for mode in order:
                duty = None
                if mode is None or mode[0] < 1:
                    tracer.probes.set_launches(False)
                    if mode is not None:
                        duty = LaunchDuty(tracer.probes.set_launches, *mode)
                        duty.start()  # the first window opens at once
                else:
                    tracer.probes.set_launches(True)
                res = run(proc, steps)
                if duty is not None:
                    duty.stop()
                    res.update(windows=duty.windows)
                results[mode].append(res["steps_per_s"])
            base = statistics.fmean(results[None])
            for mode, rates in results.items():
                for rate in rates:
                    runs.append({"round": r, "steps_per_s": rate, "ratio": rate / base,
                                 "mode": "launch probes off" if mode is None
                                 else _name(mode)})
            print(f"round {r}: " + ", ".join(
                f"{'off' if m is None else _name(m)} "
                + "/".join(f"{x:.1f}" for x in rates)
                + ("" if m is None else f" ({statistics.fmean(rates) / base:.3f})")
                for m, rates in results.items()), flush=True)
    finally:
        monitor.shutdown()
    return runs


def summarize_segments(runs: list[dict], duties: list[tuple[float, float]],
                       args: argparse.Namespace, steps: int) -> None:
    """Per mode: steps/s over all its segments, and its ratio to the launch probes off,
    one value per round (the mean of the round's two segments of it)."""
    summary = []
    print("\n| mode | steps/s (all segments) | speed / launch probes off (per round) |")
    print("|---|---|---|")
    for mode in ["launch probes off"] + [_name(d) for d in duties]:
        rs = [x for x in runs if x["mode"] == mode]
        per_round = [statistics.fmean(x["ratio"] for x in rs if x["round"] == r)
                     for r in sorted({x["round"] for x in rs})]
        row = {"mode": mode, "steps_per_s": spread([x["steps_per_s"] for x in rs]),
               "ratio": "1" if mode == "launch probes off"
               else f"{spread(per_round)}, {len(per_round)} rounds"}
        summary.append(row)
        print("| " + " | ".join(row.values()) + " |")
    if args.out:
        Path(args.out).write_text(json.dumps({"runs": runs, "summary": summary,
                                              "steps": steps, "args": vars(args)}, indent=1))


def run(proc: subprocess.Popen, steps: int) -> dict:
    proc.stdin.write(f"run {steps}\n")
    proc.stdin.flush()
    line = proc.stdout.readline()
    if not line:
        raise RuntimeError(f"the worker ended: {proc.wait(10)}")
    return json.loads(line)


def _name(mode: tuple[float, float]) -> str:
    duty, period = mode
    return "duty 1" if duty >= 1 else f"duty {duty:g} / {period:g} s"


def spread(values: list[float]) -> str:
    return (f"{statistics.median(values):.3f} ({min(values):.3f}-{max(values):.3f})"
            if values else "-")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--worker", action="store_true", help=argparse.SUPPRESS)
    ap.add_argument("--rounds", type=int, default=5)
    ap.add_argument("--seconds", type=float, default=10.0,
                    help="length of one untraced run (the steps are fixed from it)")
    ap.add_argument("--duties", default="1,0.05",
                    help="duty cycles of the traced modes (1: always attached, exact), "
                    "each DUTY or DUTY@PERIOD_S")
    ap.add_argument("--period", type=float, default=1.0,
                    help="duty cycle period (s) where a mode names none")
    ap.add_argument("--segments", type=int, default=0, metavar="N",
                    help="N rounds of short segments under one loaded agent (see above) "
                    "instead of the sequential rounds")
    ap.add_argument("--python", default=sys.executable, help="the worker's interpreter")
    ap.add_argument("--out", help="write the runs and the summary as JSON here")
    ap.add_argument("--standin", help="a stand-in libcuda.so.1 instead of torch (no GPU: "
                    "tries the script, measures nothing of a GPU)")
    args = ap.parse_args()
    if args.worker:
        worker(args.standin)
        return
    duties = [(float(d.partition("@")[0]), float(d.partition("@")[2] or args.period))
              for d in args.duties.split(",")]
    proc = subprocess.Popen([args.python, __file__, "--worker"]
                            + (["--standin", args.standin] if args.standin else []),
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True,
                            env={**os.environ, "STANDIN_KERNEL_US": "1"})
    try:
        if proc.stdout.readline().strip() != "ready":
            raise SystemExit("the worker did not start")
        probe = run(proc, 10)
        steps = max(10, int(probe["steps_per_s"] * args.seconds))
        print(f"worker pid {proc.pid}: {probe['steps_per_s']:.1f} steps/s untraced "
              f"({probe['steps_per_s'] * LAUNCHES_PER_STEP:,.0f} launches/s); {steps} steps "
              f"a run ({steps * LAUNCHES_PER_STEP:,} launches)", flush=True)
        modes: list[tuple[float, float] | None] = [None, *duties]  # None: untraced
        runs: list[dict] = []
        if args.segments:
            runs = segmented(proc, steps, duties, args.segments)
        for r in range(0 if args.segments else args.rounds):
            order = modes[r % len(modes):] + modes[:r % len(modes)]
            results: dict = {}
            for mode in order:
                res = run(proc, steps) if mode is None else traced_run(
                    proc, steps, *mode)
                results[mode] = res
            base = results[None]["steps_per_s"]
            for mode, res in results.items():
                res.update(round=r, mode="untraced" if mode is None else _name(mode),
                           ratio=res["steps_per_s"] / base)
                runs.append(res)
            print(f"round {r}: " + ", ".join(
                f"{res['mode']} {res['steps_per_s']:.1f}/s ({res['ratio']:.3f})"
                + (f" count {res['counted'] / res['launches']:.3f}" if mode is not None
                   else "") for mode, res in results.items()), flush=True)
    finally:
        proc.stdin.close()
        proc.wait(30)
    if args.segments:
        summarize_segments(runs, duties, args, steps)
        return
    summary = []
    print("\n| mode | steps/s | traced/untraced | launches counted/true | marked estimated "
          "| windows per run | attach, detach per window (ms) |")
    print("|---|---|---|---|---|---|---|")
    for mode in ["untraced"] + [_name(d) for d in duties]:
        rs = [x for x in runs if x["mode"] == mode]
        row = {"mode": mode, "steps_per_s": spread([x["steps_per_s"] for x in rs]),
               "ratio": spread([x["ratio"] for x in rs]) if mode != "untraced" else "1",
               "count": spread([x["counted"] / x["launches"] for x in rs])
               if mode != "untraced" else "-",
               "marked": ",".join(sorted({str(x.get("marked")) for x in rs}))
               if mode != "untraced" else "-",
               "windows": spread([x["windows"] for x in rs]) if "windows" in rs[0] else "-",
               "toggle": (f"{spread([x['attach_ms'] for x in rs])}, "
                          f"{spread([x['detach_ms'] for x in rs])}")
               if "attach_ms" in rs[0] else "-"}
        summary.append(row)
        print("| " + " | ".join(row.values()) + " |")
    if args.out:
        Path(args.out).write_text(json.dumps({"runs": runs, "summary": summary,
                                              "steps": steps, "args": vars(args)}, indent=1))


if __name__ == "__main__":
    os.environ.setdefault("OTEL_EBPF_BPF_DIR", str(REPO / "bpf" / "build"))
    sys.path.insert(0, str(REPO))
    main()
