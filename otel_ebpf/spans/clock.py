"""Kernel CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns) to Unix epoch nanoseconds."""

from __future__ import annotations

import bisect
import time

_SAMPLES = 5
# how far back the offset history reaches: spans are converted well within this after
# they end (the correlator holds a span for at most a few seconds)
HISTORY = 256
# refresh() is called on every pass of the agent loop; closer samples add nothing
MIN_SAMPLE_GAP_NS = 10_000_000


def _measure() -> tuple[int, int]:
    """(monotonic, wall minus monotonic), from the tightest of a few (mono, wall, mono) reads.

    The smaller the gap between the two monotonic reads, the less a preemption or a
    slow clock read between them can skew the pair; the wall read is matched to the
    midpoint of the gap.
    """
    best_spread, best = None, (0, 0)
    for _ in range(_SAMPLES):
        before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        wall = time.time_ns()
        after = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
        spread = after - before
        if best_spread is None or spread < best_spread:
            mid = (before + after) // 2
            best_spread, best = spread, (mid, wall - mid)
    return best


class KernelClock:
    """Maps kernel monotonic time to the wall time that was in force at that moment.

    The wall clock moves against the monotonic one: NTP slews it, and a virtual machine's
    host may slew it fast (5 ms per second, measured here) or step it. An offset taken
    once, or taken at conversion time, dates a span by the wall clock of another moment;
    an SDK inside the program would have read the wall clock of the span's own moment.
    So the clock keeps a history of (monotonic, offset) samples, taken by refresh() on
    every pass of the agent loop, and converts a timestamp with the offset interpolated
    between the samples around it.
    """

    __slots__ = ("_history",)

    def __init__(self) -> None:
        mono, offset = _measure()
        # one attribute store replaces both tuples: readers on other threads (the
        # profiler's) always see a matching pair
        self._history: tuple[tuple[int, ...], tuple[int, ...]] = ((mono,), (offset,))

    @property
    def offset_ns(self) -> int:
        """The latest offset (wall minus monotonic)."""
        return self._history[1][-1]

    def refresh(self) -> None:
        mono, offset = _measure()
        monos, offsets = self._history
        if mono - monos[-1] < MIN_SAMPLE_GAP_NS:
            return
        self._history = (monos[-HISTORY + 1:] + (mono,), offsets[-HISTORY + 1:] + (offset,))

    def to_wall(self, mono_ns: int) -> int:
        monos, offsets = self._history
        if mono_ns >= monos[-1]:
            return mono_ns + offsets[-1]
        i = bisect.bisect_right(monos, mono_ns)
        if i == 0:  # older than the history: the oldest offset is the nearest known
            return mono_ns + offsets[0]
        m0, m1, o0, o1 = monos[i - 1], monos[i], offsets[i - 1], offsets[i]
        return mono_ns + o0 + (o1 - o0) * (mono_ns - m0) // (m1 - m0)
