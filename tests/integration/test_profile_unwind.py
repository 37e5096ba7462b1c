"""Native stacks without frame pointers, for real: the BPF walker with unwind tables on a
C program built with -fomit-frame-pointer (an rbp-based frame, a 5 KB frame), against the
frame-pointer walk on the same program."""

from __future__ import annotations

import subprocess
import time

import pytest

from tests.integration.conftest import require_kernel
from tests.support import unwind
from tests.support.processes import stop_process

FREQUENCY = 99
MIN_SAMPLES = 300


def wait_tables(profiler, deadline_s: float = 300.0) -> None:
    """Poll until the unwind tables of the targets are built and in the kernel."""
    end = time.monotonic() + deadline_s
    while time.monotonic() < end:
        profiler.poll(100)
        if profiler.unwinder.idle():
            profiler.poll(0)  # hands the last tables to their processes
            return
    pytest.fail(f"unwind tables not built after {deadline_s}s")


def _leaf_stacks(tmp_path, tables: bool) -> tuple[list[list[str]], dict]:
    from otel_ebpf.kernel.libbpf import LibbpfLog
    from otel_ebpf.profiling.profiler import CpuProfiler, ProfilerSettings

    exe = unwind.build(tmp_path)
    proc = subprocess.Popen([str(exe), "300"], stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "READY"
        profiler = CpuProfiler(
            ProfilerSettings(frequency=FREQUENCY, interval_s=3600, pids=(proc.pid,),
                             unwind_tables=tables),
            {}, LibbpfLog(), resources=lambda pid, comm: {}, to_wall=lambda t: t)
        try:
            if tables:
                wait_tables(profiler)
            profiler.pending.clear()
            end = time.monotonic() + 120
            while time.monotonic() < end and len(profiler.pending) < MIN_SAMPLES:
                profiler.poll(100)
            stacks = [[f.name for f in reversed(s.frames) if f.kind != "kernel"]
                      for s in profiler.pending if s.pid == proc.pid]
            counters = profiler.kernel_counters()
        finally:
            profiler.close()
    finally:
        stop_process(proc)
    return [s for s in stacks if s and s[-1] == "leaf_spin"], counters


def _has_chain(names: list[str]) -> bool:
    i = names.index("main") if "main" in names else -1
    return i >= 0 and names[i:] == unwind.CHAIN


def test_unwind_tables_recover_the_whole_chain(tmp_path):
    require_kernel()
    if unwind.compiler() is None:
        pytest.fail("no C compiler for the test program")
    leaves, counters = _leaf_stacks(tmp_path, tables=True)
    assert len(leaves) >= MIN_SAMPLES // 2, f"only {len(leaves)} samples in the leaf"
    whole = sum(_has_chain(s) for s in leaves)
    assert whole >= 0.9 * len(leaves), (whole, len(leaves), leaves[:5])
    assert counters["unwind_samples"] >= len(leaves)
    assert counters["unwind_table_frames"] >= 5 * whole
    # the walk reaches the C runtime below main (libc's __libc_start_main, _start)
    assert sum("__libc_start_main" in s for s in leaves) >= 0.9 * len(leaves)


def test_frame_pointers_alone_lose_the_chain(tmp_path):
    """The same program without tables: what the walker is for."""
    require_kernel()
    if unwind.compiler() is None:
        pytest.fail("no C compiler for the test program")
    leaves, counters = _leaf_stacks(tmp_path, tables=False)
    assert leaves, "no samples in the leaf"
    assert sum(_has_chain(s) for s in leaves) <= 0.1 * len(leaves)
    assert counters["unwind_samples"] == 0


def test_python_and_native_shares_hold_with_unwind_tables():
    """The profile of tests/integration/peers/cpu_workload.py (70% Python, 20% zlib under
    native_part) with tables: the same shares, zlib's frames below native_part, and the
    interpreter's frames (now found by the walk) replaced by the Python ones."""
    require_kernel()
    import sys

    from otel_ebpf.kernel.libbpf import LibbpfLog
    from otel_ebpf.profiling.profiler import CpuProfiler, ProfilerSettings
    from tests.integration.test_profiles_e2e import WORKLOAD, _shares

    proc = subprocess.Popen([sys.executable, str(WORKLOAD), "300"], stdout=subprocess.PIPE,
                            text=True)
    try:
        assert proc.stdout.readline().strip() == "READY"
        profiler = CpuProfiler(
            ProfilerSettings(frequency=FREQUENCY, interval_s=3600, pids=(proc.pid,),
                             unwind_tables=True),
            {}, LibbpfLog(), resources=lambda pid, comm: {}, to_wall=lambda t: t)
        try:
            wait_tables(profiler)
            profiler.pending.clear()
            # enough samples for shares, however little CPU a busy machine gives it
            end = time.monotonic() + 120
            while time.monotonic() < end and len(profiler.pending) < MIN_SAMPLES:
                profiler.poll(100)
            stacks = [([(f.name, f.module, f.kind) for f in s.frames], 1)
                      for s in profiler.pending if s.pid == proc.pid]
        finally:
            profiler.close()
    finally:
        stop_process(proc)
    total, hot, native, ordered = _shares(stacks)
    assert total >= MIN_SAMPLES, f"only {total} samples"
    assert abs(hot - 0.70) <= 0.10, f"python_hot share {hot:.2f}"
    assert abs(native - 0.20) <= 0.10, f"zlib share {native:.2f}"
    assert ordered == round(native * total), "native_part not below zlib's frames"
    # the walk went through the interpreter: no evaluator frame is left unreplaced
    # while Python frames remain, and the C runtime is reached below main
    names = [[n for n, _, _ in frames] for frames, _ in stacks]
    assert sum("Py_RunMain" in s or "Py_BytesMain" in s for s in names) >= 0.9 * total
