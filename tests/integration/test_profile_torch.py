"""CPU profiles of a PyTorch program for real: the BPF sampler and the profiler's own
thread on a process that imports torch while it is profiled (thousands of code objects
made and freed: what once stopped the profiler), then runs torch.matmul from a Python
function. The profiler must stay alive, keep Python frames named and give the function
the share of CPU the program measured itself. Needs torch in this venv (CPU wheel)."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from tests.integration.conftest import REPO, REQUIRE_BPF, require_kernel
from tests.support.processes import stop_process

WORKLOAD = REPO / "tests/integration/peers/torch_workload.py"
FREQUENCY = 99
RUN_S = 8.0
UNNAMED = "<python_code_0x"


def require_torch() -> None:
    """Skip (fail under OTEL_EBPF_REQUIRE_BPF=1) when torch cannot be imported here."""
    probe = subprocess.run([sys.executable, "-c", "import torch"], capture_output=True,
                           text=True, timeout=300)
    if probe.returncode != 0:
        msg = ("the PyTorch profile tests need torch in this venv (`.venv/bin/pip install "
               f"torch`, the CPU wheel is enough): {probe.stderr.strip()[-200:]}")
        if REQUIRE_BPF:
            pytest.fail(msg)
        pytest.skip(msg)


def _wait_line(proc: subprocess.Popen) -> str:
    """The peer's next stdout line (bounded by the test's timeout); its death fails."""
    line = proc.stdout.readline()
    assert line, f"the workload exited ({proc.poll()}) before a line came"
    return line.strip()


def _folded(path: Path) -> list[tuple[list[str], int]]:
    """(frames root first, count) of every line of the folded files under `path`."""
    out = []
    for f in sorted(path.iterdir()):
        for line in f.read_text().splitlines():
            stack, _, n = line.rpartition(" ")
            out.append((stack.split(";")[1:], int(n)))  # the first field is the process
    return out


@pytest.mark.timeout(900)  # importing torch on a loaded 2-core machine takes a while
def test_torch_import_and_matmul_under_the_profiler(tmp_path):
    require_kernel()
    require_torch()
    from otel_ebpf.export.profile_exporters import build_profile_exporters
    from otel_ebpf.kernel.libbpf import LibbpfLog
    from otel_ebpf.profiling.profiler import CpuProfiler, ProfilerSettings
    from otel_ebpf.telemetry import Stats

    exporters, _ = build_profile_exporters({"folded": {"path": str(tmp_path / "folded")}})
    proc = subprocess.Popen([sys.executable, str(WORKLOAD), str(RUN_S)], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    stats = Stats()
    try:
        assert _wait_line(proc) == "READY"
        profiler = CpuProfiler(
            ProfilerSettings(frequency=FREQUENCY, interval_s=3600, pids=(proc.pid,)),
            exporters, LibbpfLog(), resources=lambda pid, comm: {"process.pid": pid},
            to_wall=lambda t: t, stats=stats)
        try:
            profiler.start()  # its own thread, as in the agent
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert _wait_line(proc) == "IMPORTED"
            measured = json.loads(_wait_line(proc))
            alive = profiler._thread is not None and profiler._thread.is_alive()
            profiler.stop()
        finally:
            profiler.close()
        proc.stdin.write("done\n")
        proc.stdin.flush()
    finally:
        stop_process(proc)
    assert alive, "the profiler's thread died"

    stacks = _folded(tmp_path / "folded")
    total = sum(n for _, n in stacks)
    # samples come with the CPU the program got (a busy machine gives it less)
    assert total >= 0.5 * measured["total_cpu_s"] * FREQUENCY, f"only {total} samples"
    hot = sum(n for frames, n in stacks if "torch_hot" in frames)
    share, want = hot / total, measured["torch_hot_cpu_s"] / measured["total_cpu_s"]
    # after the import every frame is of a live code object: all of them named
    after = [(frames, n) for frames, n in stacks if "main" in frames
             and "import_torch" not in frames]
    unnamed_after = sum(n for frames, n in after if any(f.startswith(UNNAMED) for f in frames))
    unnamed_all = sum(n for frames, n in stacks if any(f.startswith(UNNAMED) for f in frames))
    report = (f"torch_hot {share:.3f} sampled vs {want:.3f} measured; {total} samples, "
              f"{unnamed_all} with an unnamed frame ({unnamed_after} after the import); "
              f"failures {dict(profiler.failures)}")
    print(report)
    assert abs(share - want) <= 0.10, report
    assert sum(n for _, n in after) >= 0.5 * total, report
    assert unnamed_after <= 0.01 * total, report
    # what could not be named is counted, under the reasons the profiler gives
    counted = {dict(labels)["reason"] for (name, labels) in stats.snapshot()
               if name == "profiles.errors"}
    assert counted == {r for _, r in profiler.failures}


@pytest.mark.timeout(900)
def test_torch_matmul_stacks_reach_libtorch_with_unwind_tables(tmp_path):
    """libtorch and MKL have no frame pointers: with unwind tables the samples of the
    Python function go on through the dispatcher and at:: down to the BLAS kernel."""
    require_kernel()
    require_torch()
    from otel_ebpf.export.profile_exporters import build_profile_exporters
    from otel_ebpf.kernel.libbpf import LibbpfLog
    from otel_ebpf.profiling.profiler import CpuProfiler, ProfilerSettings
    from tests.integration.test_profile_unwind import wait_tables

    exporters, _ = build_profile_exporters({"folded": {"path": str(tmp_path / "folded")}})
    # torch imported before the profiler starts: its tables are built while the program
    # waits, so every sample of the measured part is walked with them
    proc = subprocess.Popen([sys.executable, str(WORKLOAD), str(RUN_S), "early"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert _wait_line(proc) == "READY"
        profiler = CpuProfiler(
            ProfilerSettings(frequency=FREQUENCY, interval_s=3600, pids=(proc.pid,),
                             unwind_tables=True),
            exporters, LibbpfLog(), resources=lambda pid, comm: {"process.pid": pid},
            to_wall=lambda t: t)
        try:
            wait_tables(profiler)
            builds = {b.path.rsplit("/", 1)[-1]: b for b in profiler.unwinder.builds}
            profiler.start()
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert _wait_line(proc) == "IMPORTED"
            measured = json.loads(_wait_line(proc))
            profiler.stop()
        finally:
            profiler.close()
        proc.stdin.write("done\n")
        proc.stdin.flush()
    finally:
        stop_process(proc)
    assert "libtorch_cpu.so" in builds, sorted(builds)

    stacks = _folded(tmp_path / "folded")
    hot = [(frames, n) for frames, n in stacks if "torch_hot" in frames]
    n_hot = sum(n for _, n in hot)
    assert n_hot >= 0.5 * measured["torch_hot_cpu_s"] * FREQUENCY, f"only {n_hot} samples"

    def through_libtorch(frames: list[str]) -> bool:
        below = frames[frames.index("torch_hot") + 1:]  # root first: what it called
        return any(f.startswith("at::") for f in below)

    reached = sum(n for frames, n in hot if through_libtorch(frames))
    blas = sum(n for frames, n in hot if through_libtorch(frames)
               and ("gemm" in frames[-1] or frames[-1].startswith("mkl_")))
    total = sum(n for _, n in stacks)
    share, want = n_hot / total, measured["torch_hot_cpu_s"] / measured["total_cpu_s"]
    report = (f"{reached}/{n_hot} torch_hot samples reach at:: frames, {blas} of them down "
              f"to a BLAS leaf; torch_hot {share:.3f} sampled vs {want:.3f} measured; "
              f"libtorch_cpu table {builds['libtorch_cpu.so'].rows} rows")
    print(report)
    assert reached >= 0.8 * n_hot, report
    assert abs(share - want) <= 0.10, report


# the frame between a dispatcher's Python frames and its worker's (docs/profiling.md)
WORKER = "[dispatched to worker threads]"


class _Batches:
    """A profile exporter that keeps what it is given."""

    def __init__(self) -> None:
        self.samples = []

    def export(self, batch) -> bool:
        self.samples.extend(batch.samples)
        return True

    def shutdown(self) -> None:
        pass


@pytest.mark.timeout(900)
def test_torch_intra_op_workers_carry_the_dispatching_python_function():
    """torch.set_num_threads(4): matmul's work runs on OpenMP/MKL worker threads, which
    have no Python thread state. Their samples must carry the Python function that
    dispatched the work (the main thread's torch_hot, at the instant of the sample),
    under the worker frame and with the dispatcher's thread id; and the function's share
    of the samples must then match the share of the process's CPU it measured (the
    workers' CPU included), which it cannot when the workers' samples have no caller."""
    require_kernel()
    require_torch()
    from otel_ebpf.kernel.libbpf import LibbpfLog
    from otel_ebpf.profiling.profiler import CpuProfiler, ProfilerSettings
    from otel_ebpf.telemetry import Stats

    kept = _Batches()
    stats = Stats()
    proc = subprocess.Popen([sys.executable, str(WORKLOAD), str(RUN_S), "early", "threads=4"],
                            stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert _wait_line(proc) == "READY"
        profiler = CpuProfiler(
            ProfilerSettings(frequency=FREQUENCY, interval_s=3600, pids=(proc.pid,)),
            {"kept": kept}, LibbpfLog(), resources=lambda pid, comm: {"process.pid": pid},
            to_wall=lambda t: t, stats=stats)
        try:
            profiler.start()
            proc.stdin.write("go\n")
            proc.stdin.flush()
            assert _wait_line(proc) == "IMPORTED"
            measured = json.loads(_wait_line(proc))
            profiler.stop()
        finally:
            profiler.close()
        proc.stdin.write("done\n")
        proc.stdin.flush()
    finally:
        stop_process(proc)

    main = measured["main_tid"]
    assert main == proc.pid and len(measured["threads"]) >= 4, measured
    samples = [s for s in kept.samples if s.resource.get("process.pid") == proc.pid]
    names = [[f.name for f in reversed(s.stack)] for s in samples]  # root first
    workers = [(s, n) for s, n in zip(samples, names) if s.attributes["thread.id"] != main]
    total = len(samples)
    # samples come with the CPU the program got (a busy machine gives it less)
    assert total >= 0.5 * measured["total_cpu_s"] * FREQUENCY, f"only {total} samples"
    assert len(workers) >= 0.1 * total, f"{len(workers)} of {total} samples on workers"

    def under_torch_hot(s, n) -> bool:
        """torch_hot, then the worker frame, then only the worker's own native frames."""
        if "torch_hot" not in n or WORKER not in n:
            return False
        at = n.index(WORKER)
        return (n[at - 1] == "torch_hot" and "torch_hot" not in n[at + 1:]
                and s.attributes.get("dispatcher.thread.id") == main)

    carried = sum(under_torch_hot(s, n) for s, n in workers)
    marked = sum(WORKER in n for _, n in workers)
    # a worker frame only on workers' samples, each with its dispatcher
    assert all(WORKER not in n for s, n in zip(samples, names)
               if s.attributes["thread.id"] == main)
    hot = sum("torch_hot" in n for n in names)
    share, want = hot / total, measured["torch_hot_cpu_s"] / measured["total_cpu_s"]
    failed = {dict(labels).get("reason"): v for (name, labels), v in stats.snapshot().items()
              if name == "profiles.python_walk_failed"}
    report = (f"{carried}/{len(workers)} worker samples carry torch_hot ({marked} marked); "
              f"torch_hot {share:.3f} of {total} samples vs {want:.3f} of the process's CPU "
              f"measured; without Python frames: {failed}")
    print(report)
    assert carried >= 0.8 * len(workers), report
    assert abs(share - want) <= 0.10, report
