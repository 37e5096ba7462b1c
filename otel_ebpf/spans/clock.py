"""Kernel CLOCK_MONOTONIC nanoseconds (bpf_ktime_get_ns) to Unix epoch nanoseconds."""

from __future__ import annotations

import bisect
import time
from collections.abc import Callable

_SAMPLES = 5
# The mapping's offset moves toward the wall clock's by at most 1 ns per SLEW ns of
# monotonic time, so f(t) = t + offset(t) runs at 7/8 to 9/8 of the monotonic rate and never
# backwards, whatever the wall clock does. Why 1/8: the OS's own slews (NTP, chrony) move the
# monotonic clock with the wall clock and leave the offset alone; a VM host slewing the
# guest's wall clock (5 ms per second measured) moves it 25 times slower than this, so a
# slew is followed a sample behind; and a span's duration is bent by 1/8 at most, only
# while a step is taken up (a 1 s step in 8 s).
SLEW = 8
# A sample this close to the offset the mapping already heads to adds nothing: two
# monotonic reads around a wall read take several µs on a busy machine, and a knot per
# sample would only track that noise and shorten what the history reaches back to.
TOLERANCE_NS = 10_000
# refresh() is called on every pass of the agent loop; closer knots add nothing
MIN_SAMPLE_GAP_NS = 10_000_000
# knots kept. The wall clock moves against the monotonic one only now and then, so this
# reaches back hours; a VM host slewing it all along adds a knot per MIN_SAMPLE_GAP_NS,
# and it still reaches back ten seconds, past the correlator's hold on a span
HISTORY = 1024

Measure = Callable[[], tuple[int, int]]


def measure() -> tuple[int, int]:
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


def _toward(offset: int, target: int, elapsed_ns: int) -> int:
    """The offset `elapsed_ns` after a knot: moved from `offset` toward `target` at the
    bounded rate, and held there once reached."""
    step = elapsed_ns // SLEW
    return max(offset - step, min(offset + step, target))


class KernelClock:
    """One mapping of kernel monotonic time to wall time, for every timestamp of every span.

    The wall clock moves against the monotonic one (a VM host slews or steps it), and a
    trace view must see a span's children inside it: so every timestamp goes through the
    same non-decreasing function, never revised for a moment already passed. It is kept
    as knots (monotonic time, offset there, offset it heads to): refresh() measures the
    wall clock on every pass of the agent loop and, when the measured offset differs from
    where the mapping heads, adds a knot at the mapping's own value for that moment,
    heading to the new offset at the rate SLEW bounds. A slew is followed a sample behind;
    a step, forward or back, is absorbed over time instead of making time run backwards.
    """

    __slots__ = ("_knots", "_measure")

    def __init__(self, measure: Measure = measure) -> None:
        self._measure = measure
        mono, offset = measure()
        # one attribute store replaces the whole history: readers on other threads (the
        # profiler's) always see a matching one. Its last item is where the last knot's
        # offset reaches its target: past it, the mapping is a plain shift
        self._knots: tuple[tuple[int, ...], tuple[int, ...], tuple[int, ...], int] = (
            (mono,), (offset,), (offset,), mono)

    def refresh(self) -> None:
        """Measure the wall clock; a knot when the mapping must head elsewhere. The knot
        lies at the measurement, after every timestamp the agent loop has converted (it
        read them before): the mapping up to there stays as it was."""
        mono, offset = self._measure()
        monos, offsets, targets, _ = self._knots
        if mono - monos[-1] < MIN_SAMPLE_GAP_NS or abs(offset - targets[-1]) <= TOLERANCE_NS:
            return
        here = _toward(offsets[-1], targets[-1], mono - monos[-1])
        keep = -HISTORY + 1
        self._knots = (monos[keep:] + (mono,), offsets[keep:] + (here,),
                       targets[keep:] + (offset,), mono + SLEW * abs(offset - here))

    def to_wall(self, mono_ns: int) -> int:
        """The wall time of a kernel monotonic time."""
        monos, offsets, targets, settled = self._knots
        if mono_ns >= settled:  # most spans: after the last knot's offset reached its target
            return mono_ns + targets[-1]
        i = bisect.bisect_right(monos, mono_ns) - 1
        if i < 0:  # older than the history: the oldest offset is the nearest known
            return mono_ns + offsets[0]
        return mono_ns + _toward(offsets[i], targets[i], mono_ns - monos[i])
