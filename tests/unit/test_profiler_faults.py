"""The profiler's user side with the addresses that broke it: pointers >= 2**63, negative,
unmapped, and addresses that hold no code object, read from a live interpreter in another
process; each costs its own frame only, and is counted by reason."""

from __future__ import annotations

import subprocess
import sys

import pytest

from otel_ebpf.kernel.cpu_sampler import PY_F_ENTRY, PY_OK, RawSample
from otel_ebpf.profiling.elf import ElfCache
from otel_ebpf.profiling.frames import PYTHON
from otel_ebpf.profiling.procmaps import ProcessMaps
from otel_ebpf.profiling.python_procs import CodeNames, ProcessMemory, find_interpreter
from otel_ebpf.profiling.symbolizer import Symbolizer

CHILD = """
import sys
def named_function(): pass
junk = [1, 2, 3]
print(id(named_function.__code__), id(junk), flush=True)
sys.stdin.read()
"""

# what a stale code-object pointer gave under `import torch`, and its neighbours
HUGE = 1 << 63
BAD_ADDRESSES = {
    "address_out_of_range": [HUGE, HUGE + 0x1000, (1 << 64) - 8, -8, -(1 << 63)],
    "unreadable": [0x10, 0x1000, 0x7FFF_FFFF_0000],  # nothing mapped there
}


@pytest.fixture
def child():
    proc = subprocess.Popen([sys.executable, "-c", CHILD], stdin=subprocess.PIPE,
                            stdout=subprocess.PIPE, text=True)
    try:
        code, junk = map(int, proc.stdout.readline().split())
        yield proc.pid, code, junk
    finally:
        proc.stdin.close()
        proc.wait(timeout=10)


def test_memory_reads_of_bad_addresses_fail_by_reason(child):
    pid, code, _ = child
    reasons: list[str] = []
    mem = ProcessMemory(pid)
    mem.on_failure = reasons.append
    try:
        for reason, addrs in BAD_ADDRESSES.items():
            for addr in addrs:
                before = len(reasons)
                assert mem.read(addr, 8) is None, hex(addr)
                assert mem.u64(addr) is None
                assert reasons[before:] == [reason, reason], hex(addr)
        # a read that would run past 2**63 from a valid-looking start
        assert mem.read(HUGE - 4, 8) is None
        assert reasons[-1] == "address_out_of_range"
        assert mem.read(code, 8) is not None  # the same reader still works
    finally:
        mem.close()


def test_code_names_of_bad_addresses(child):
    pid, code, junk = child
    interp = find_interpreter(pid, ProcessMaps(pid), ElfCache())
    assert interp is not None and interp.code_type and interp.str_type
    reasons: list[str] = []
    names = CodeNames(interp, on_failure=reasons.append)
    try:
        for addrs in BAD_ADDRESSES.values():
            for addr in addrs:
                f = names.frame(addr)
                assert f.kind == PYTHON and f.name.startswith("<python code"), hex(addr)
        # a live object that is not a code object (what a freed code object's memory can
        # hold by the time it is read): not named with its garbage
        assert names.frame(junk).name == f"<python code {junk:#x}>"
        assert "not_code" in reasons
        assert set(reasons) <= {"address_out_of_range", "unreadable", "not_code"}
        assert names.frame(code).name == "named_function"
    finally:
        names.close()


def test_unnamed_addresses_are_not_cached_for_good(child, monkeypatch):
    """An address that held no code object may hold one later (memory freed by `import`
    is reused by the functions that run next): it is asked again after a while."""
    import otel_ebpf.profiling.python_procs as pp
    pid, code, _ = child
    interp = find_interpreter(pid, ProcessMaps(pid), ElfCache())
    names = CodeNames(interp)
    try:
        monkeypatch.setattr(pp, "RETRY_UNNAMED_S", 0.0)
        real = names.mem.read
        names.mem.read = lambda addr, size: None  # the object is gone at first ...
        assert names.frame(code).name.startswith("<python code")
        names.mem.read = real  # ... and a code object is there at the next sample
        assert names.frame(code).name == "named_function"
    finally:
        names.close()


def test_a_sample_with_bad_addresses_keeps_its_good_frames(child):
    pid, code, _ = child
    failures: list[tuple[str, str]] = []
    sym = Symbolizer()
    sym.on_failure = lambda stage, reason: failures.append((stage, reason))
    try:
        py = (HUGE | PY_F_ENTRY, code, ((1 << 64) - 8), 0x1000 | PY_F_ENTRY)
        raw = RawSample(ts_ns=1, pid=pid, tid=pid, cpu=0, comm="child", kstack=(),
                        ustack=(HUGE, (1 << 64) - 1), py=py, py_status=PY_OK)
        stack = sym.stack(raw)
        names = [f.name for f in stack.frames if f.kind == PYTHON]
        assert names[1] == "named_function"
        assert sum(n.startswith("<python code") for n in names) == 3
        assert ("python", "address_out_of_range") in failures
        assert ("python", "unreadable") in failures
        assert sym.failures[("python", "address_out_of_range")] == 2
    finally:
        sym.close()


def test_a_failing_step_is_counted_not_raised(child, monkeypatch):
    """A step that raises (a malformed file, a bug) loses its part of one sample only."""
    pid, code, _ = child
    sym = Symbolizer()
    try:
        def broken(*_a, **_k):
            raise struct_error("unpack requires a buffer of 8 bytes")
        struct_error = __import__("struct").error
        monkeypatch.setattr(sym, "_user_frame", broken)
        raw = RawSample(ts_ns=1, pid=pid, tid=pid, cpu=0, comm="child", kstack=(),
                        ustack=(0x401000,), py=(code | PY_F_ENTRY,), py_status=PY_OK)
        stack = sym.stack(raw)
        assert [f.name for f in stack.frames if f.kind == PYTHON] == ["named_function"]
        assert sym.failures[("native", "error")] == 1
    finally:
        sym.close()


def test_a_workers_sample_shows_its_dispatchers_frames_marked(child):
    """A thread without Python state whose sample carries the frames of the thread that
    woke it: the worker frame between, the dispatcher in its attributes; a thread's own
    frames get neither."""
    from otel_ebpf.profiling.frames import WORKER_FRAME
    from otel_ebpf.profiling.profiler import _thread_attributes

    pid, code, _ = child
    sym = Symbolizer()
    try:
        worker = RawSample(ts_ns=1, pid=pid, tid=pid + 1, cpu=0, comm="worker", kstack=(),
                           ustack=(0x401000,), py=(code | PY_F_ENTRY,), py_status=PY_OK,
                           py_tid=pid, py_hops=1)
        stack = sym.stack(worker)
        assert [f.name for f in stack.frames][-2:] == [WORKER_FRAME.name, "named_function"]
        assert stack.dispatcher == pid
        assert _thread_attributes(stack) == {"thread.id": pid + 1, "thread.name": "worker",
                                             "dispatcher.thread.id": pid}
        own = sym.stack(RawSample(ts_ns=1, pid=pid, tid=pid, cpu=0, comm="child", kstack=(),
                                  ustack=(), py=(code | PY_F_ENTRY,), py_status=PY_OK,
                                  py_tid=pid))
        assert WORKER_FRAME not in own.frames and own.dispatcher == 0
        assert "dispatcher.thread.id" not in _thread_attributes(own)
    finally:
        sym.close()
