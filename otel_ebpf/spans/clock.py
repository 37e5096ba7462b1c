"""Kernel CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns) to Unix epoch nanoseconds."""

from __future__ import annotations

import time

_SAMPLES = 5


def _measure_offset() -> int:
    """Wall minus monotonic, from the tightest of a few (mono, wall, mono) samples.

    The smaller the gap between the two monotonic reads, the less a preemption or a
    slow clock read between them can skew the pair; the wall read is matched to the
    midpoint of the gap.
    """
    best_spread, best_offset = None, 0
    for _ in range(_SAMPLES):
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        wall = time.time_ns()
        after = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        spread = after - before
        if best_spread is None or spread < best_spread:
            best_spread, best_offset = spread, wall - (before + after) // 2
    return best_offset


class KernelClock:
    """Maps kernel monotonic time to wall time.

    The offset drifts as NTP slews the wall clock (the monotonic clock is slewed too,
    but never stepped), so the agent calls refresh() every second.
    """

    __slots__ = ("offset_ns",)

    def __init__(self) -> None:
        self.offset_ns = _measure_offset()

    def refresh(self) -> None:
        # one attribute store: readers on other threads see the old or the new offset
        self.offset_ns = _measure_offset()

    def to_wall(self, mono_ns: int) -> int:
        return mono_ns + self.offset_ns
