"""Memory and CPU pressure for kernel tests, bounded in time and size:

    python -m tests.integration.peers.pressure memory SECONDS MIB
    python -m tests.integration.peers.pressure cpu SECONDS

`memory` maps MIB of anonymous memory and, until SECONDS have passed, writes a byte in
every page of it (a page fault and a zeroed page each), copies it whole (memory
bandwidth) and gives it back to the kernel (MADV_DONTNEED: the pages are freed, the next
pass faults them in again), over and over: the allocation churn of an allocator-heavy job
such as a sanitizer run. `cpu` spins. Both print READY once working and exit by
themselves after SECONDS (the test also kills them)."""

from __future__ import annotations

import mmap
import sys
import time

PAGE = mmap.PAGESIZE


def memory(seconds: float, mib: int) -> None:
    size = mib << 20
    area = mmap.mmap(-1, size, flags=mmap.MAP_PRIVATE | mmap.MAP_ANONYMOUS)
    view = memoryview(area)
    pages = size // PAGE
    ones, half = b"\x01" * pages, size // 2
    deadline = time.monotonic() + seconds
    ready = False
    while time.monotonic() < deadline:
        view[::PAGE] = ones  # every page faulted in and zeroed by the kernel first
        view[:half] = view[half:]  # copied across
        if not ready:
            print("READY", flush=True)
            ready = True
        area.madvise(mmap.MADV_DONTNEED)  # freed: the next pass faults them in again
    view.release()
    area.close()


def cpu(seconds: float) -> None:
    deadline = time.monotonic() + seconds
    print("READY", flush=True)
    x = 0
    while time.monotonic() < deadline:
        for i in range(10_000):
            x += i * i


if __name__ == "__main__":
    if sys.argv[1] == "memory":
        memory(float(sys.argv[2]), int(sys.argv[3]))
    else:
        cpu(float(sys.argv[2]))
