"""The Unwinder as the CPU profiler and the GPU monitor share it: processes added from
either, the GPU monitor's announced at info (the line the GPU tests and the H200 script
wait for), a process's kernel entry forgotten however it ended. Kernel maps are stood in
for by recorders; the tables are built for real (of `sleep`: a few small files)."""

from __future__ import annotations

import logging
import subprocess
import threading
import time

from otel_ebpf.profiling.unwinder import Unwinder


class _Kernel:
    def __init__(self) -> None:
        self.rows: dict[int, int] = {}
        self.maps: dict[int, list] = {}
        self.forgot: list[int] = []

    def write_rows(self, start: int, rows: bytes) -> None:
        self.rows[start] = len(rows)

    def set_maps(self, pid: int, maps: list) -> None:
        self.maps[pid] = maps

    def forget(self, pid: int) -> None:
        self.forgot.append(pid)


def _settle(u: Unwinder, pid: int, timeout_s: float = 60.0) -> None:
    end = time.monotonic() + timeout_s
    while time.monotonic() < end:
        u.apply_ready()
        if u.ready(pid):
            u.apply_ready()
            return
        time.sleep(0.05)
    raise AssertionError("tables not built")


def test_shared_unwinder_announces_the_gpu_process(caplog):
    k = _Kernel()
    fails: list = []
    u = Unwinder(1 << 20, k.write_rows, k.set_maps, k.forget, lambda s, r: fails.append((s, r)))
    proc = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(0.2)
        caplog.set_level(logging.INFO, logger="otel_ebpf.profiling.unwinder")
        # the profiler adds it first (no announcement), from its thread
        t = threading.Thread(target=u.add, args=(proc.pid,))
        t.start()
        t.join()
        _settle(u, proc.pid)
        assert not [r for r in caplog.records if str(proc.pid) in r.getMessage()]
        assert k.maps[proc.pid], "no mapping with rows given to the kernel"
        # then the GPU monitor: its state is said at once, since nothing is left to build
        u.add(proc.pid, announce=True)
        lines = [r.getMessage() for r in caplog.records if f"pid {proc.pid}" in r.getMessage()]
        assert lines == [f"unwind tables in for pid {proc.pid}: {len(k.maps[proc.pid])} "
                         f"mappings, {sum(m[4] for m in k.maps[proc.pid])} rows"], lines
        u.tick()  # nothing changed: nothing more said
        u.add(proc.pid, announce=True)
        assert len([r for r in caplog.records if f"pid {proc.pid}" in r.getMessage()]) == 1
    finally:
        proc.kill()
        proc.wait()
    # the process went: a rescan drops it, and removing it still clears the kernel's entry
    u._procs[proc.pid] = (u._procs[proc.pid][0], 0.0, u._procs[proc.pid][2])
    u.tick()
    assert not u.has(proc.pid)
    u.remove(proc.pid)
    assert k.forgot == [proc.pid]
    assert not fails
    u.close()


def test_announced_while_building_then_in(caplog):
    k = _Kernel()
    u = Unwinder(1 << 20, k.write_rows, k.set_maps, k.forget, lambda s, r: None)
    proc = subprocess.Popen(["sleep", "60"])
    try:
        time.sleep(0.2)
        caplog.set_level(logging.INFO, logger="otel_ebpf.profiling.unwinder")
        u.add(proc.pid, announce=True)
        _settle(u, proc.pid)
        lines = [r.getMessage() for r in caplog.records if f"pid {proc.pid}" in r.getMessage()]
        assert len(lines) == 2, lines
        assert lines[0].endswith("files waiting for their tables")
        assert lines[1].startswith(f"unwind tables in for pid {proc.pid}:")
    finally:
        proc.kill()
        proc.wait()
        u.close()
