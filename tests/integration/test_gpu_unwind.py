"""GPU allocation stacks through native code built without frame pointers, for real: the
agent (otel-ebpf run: GPU memory on, CPU profiles on, the stand-in libcuda) and a Python
program whose allocation goes load_model() -> ctypes -> a library built with
-O2 -fomit-frame-pointer (tests/support/cuda/nofp_alloc.c) -> cuMemAlloc_v2. With
`profiling.unwind_tables` the allocation's stack in the agent's GPU profile (folded
files) has every frame of that library between the Python site and the driver call;
without, the frame-pointer walk loses the library's middle frame (the control). The
Python allocation site is named either way."""

from __future__ import annotations

import re
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.integration.conftest import require_kernel
from tests.support.cuda import SRC, build_libcuda, build_nofp_alloc, compiler
from tests.support.processes import stop_process

pytestmark = pytest.mark.kernel
APP_NAME = "gpu-nofp-app"  # the app's process name: the CPU profiler's target too
CHAIN = ["load_model", "nofp_model_alloc", "nofp_allocator_reserve", "nofp_segment_grow"]


@pytest.fixture(scope="module")
def libs(tmp_path_factory) -> tuple[Path, Path]:
    if compiler() is None:
        pytest.fail("a C compiler is needed (make install brings clang)")
    out = tmp_path_factory.mktemp("nofpcuda")
    return build_libcuda(out), build_nofp_alloc(out)


def _gpu_stacks(folded: Path) -> list[list[str]]:
    """Frames (root first, the process name dropped) of the GPU profiles' folded lines
    that hold the app's allocation."""
    out = []
    for f in sorted(folded.glob("gpu-*.folded")):
        for line in f.read_text().splitlines():
            stack = line.rpartition(" ")[0].split(";")[1:]
            if "load_model" in stack:
                out.append(stack)
    return out


def _allocate(start_agent, tmp_path: Path, libs: tuple[Path, Path], tables: bool):
    require_kernel()
    libcuda, nofp = libs
    folded = tmp_path / f"folded-{tables}"
    run = start_agent([1], overrides={
        "receivers": {"ebpf": {
            "targets": {"process_names": [APP_NAME]},
            "gpu": {"enabled": True, "scan_interval": "200ms", "libraries": [str(libcuda)]},
            "profiling": {"frequency": 19, "interval": "1s", "unwind_tables": tables,
                          "unwind_table_mib": 64},
        }},
        "exporters": {"folded": {"path": str(folded)}},
        "service": {"pipelines": {"profiles": {"receivers": ["ebpf"],
                                               "exporters": ["folded"]}}},
    })
    app = subprocess.Popen([sys.executable, str(SRC / "nofp_app.py"), str(libcuda), str(nofp),
                            APP_NAME], stdin=subprocess.PIPE, stdout=subprocess.PIPE, text=True)
    try:
        assert app.stdout.readline().strip() == "ready"  # after cuInit
        # its interpreter known before it allocates (cuInit reached the agent)...
        run.wait_log(f"pid {app.pid} runs CPython", app, 60)
        if tables:  # ... and, with tables, every file it maps has its table in
            run.wait_log(f"unwind tables in for pid {app.pid}:", app, 240)
        app.stdin.write("go\n")
        app.stdin.flush()
        assert app.stdout.readline().strip().startswith("0x")
        deadline = time.monotonic() + 30
        while not _gpu_stacks(folded) and time.monotonic() < deadline:
            time.sleep(0.2)
    finally:
        stop_process(app)
    run.stop()
    stacks = _gpu_stacks(folded)
    assert stacks, f"no GPU profile with the allocation:\n{run.stderr[-3000:]}"
    return stacks, run.stderr


def _python_named(stack: list[str]) -> bool:
    """The Python site and its caller, in order, root first: <module> then load_model."""
    return "<module>" in stack and stack.index("<module>") < stack.index("load_model")


def test_allocation_stack_crosses_code_without_frame_pointers(start_agent, tmp_path, libs):
    stacks, log = _allocate(start_agent, tmp_path, libs, tables=True)
    print("with unwind tables:", ";".join(stacks[0]))
    for stack in stacks:
        # from the Python site through every frame of the library to the driver call's
        # caller (the leaf: the stack starts at cuMemAlloc_v2's return site)
        i = stack.index("load_model")
        below = [f for f in stack[i:] if f in CHAIN]
        assert below == CHAIN and stack[-1] == "nofp_segment_grow", stack
        # the native frames between them are the ctypes call (libffi, _ctypes), found too
        assert any("ffi_call" in f for f in stack[i:]), stack
        assert _python_named(stack), stack
    assert "allocation stacks by unwind tables" in log
    # the agent's totals at exit: the allocation was walked with the tables
    unwound = re.search(r"otel_ebpf\.gpu\.stacks\.unwound\D+(\d+)", log)
    assert unwound and int(unwound.group(1)) >= 1, log[-2000:]


def test_without_unwind_tables_the_library_frames_are_lost(start_agent, tmp_path, libs):
    """The control: the same program, frame pointers only."""
    stacks, log = _allocate(start_agent, tmp_path, libs, tables=False)
    print("frame pointers only:", ";".join(stacks[0]))
    for stack in stacks:
        assert stack[-1] == "nofp_segment_grow", stack  # the return site is always there
        assert "nofp_allocator_reserve" not in stack, stack
        assert _python_named(stack), stack
    assert "allocation stacks by frame pointers" in log
    unwound = re.search(r"otel_ebpf\.gpu\.stacks\.unwound\D+(\d+)", log)
    assert unwound is None or unwound.group(1) == "0"
