"""How far the host moved the wall clock against the monotonic clock while a test ran.

A test compares the wall times a client read (time.time_ns) with the span times the agent
derived from kernel monotonic time. A virtual machine's host may step or slew the wall
clock (5 ms per second was measured on our machines, more while a new machine catches
up); the agent's mapping follows it a sample behind and takes up a step gradually, so
while the clock moves its span times lie between the old and the new wall time. Tests
allow what the clock itself moved, no more: on a quiet clock they are as strict as their
fixed allowance.
"""

from __future__ import annotations

import time


def wall_offset_ns() -> int:
    before = time.clock_gettime_ns(time.CLOCK_MONOTONIC)
    wall = time.time_ns()
    return wall - (before + time.clock_gettime_ns(time.CLOCK_MONOTONIC)) // 2


_baseline = [wall_offset_ns()]


def start_watch() -> None:
    """Called as each test starts (tests/integration/conftest.py)."""
    _baseline[0] = wall_offset_ns()


def slack_ns(base_ns: int) -> int:
    """base_ns plus how far the wall clock moved since the test started."""
    return base_ns + abs(wall_offset_ns() - _baseline[0])


# A span's answer ends at the return of the write that sent its last byte, and the peer may
# read those bytes before that write returns (the writer preempted after the copy): a server
# span may end after its client span on the kernel clock itself, by the rest of that write.
# Not a clock move: nesting checks of span ends allow this much, their starts none.
WRITE_RETURN_NS = 5_000_000
