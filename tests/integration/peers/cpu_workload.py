"""A CPU-bound program with a known profile: about 70% of its time in the Python function
`python_hot`, 20% inside zlib's C code called from `native_part`, 10% in `other_part`.
Runs until killed or for argv[1] seconds; prints READY when it starts working."""

import random
import sys
import time
import zlib

DATA = bytes((i * 7919) % 251 ^ (i >> 7) % 13 for i in range(32 * 1024))
# One round: 70% + 20% + 10% of a slice of CPU time (thread_time: preemption by other
# programs on a busy machine does not shift the shares). The slice length is random: a
# fixed 10 ms round would run in lockstep with a 99 Hz sampler and bias it.
SLICE_S = (0.003, 0.017)


def python_hot(until: float) -> int:
    x = 0
    while time.thread_time() < until:
        for i in range(200):
            x += i * i
    return x


def native_part(until: float) -> int:
    n = 0
    while time.thread_time() < until:
        n += len(zlib.compress(DATA, 6))
    return n


def other_part(until: float) -> int:
    y = 0
    while time.thread_time() < until:
        y += sum(range(100))
    return y


def main() -> None:
    duration = float(sys.argv[1]) if len(sys.argv) > 1 else 30.0
    end = time.monotonic() + duration
    print("READY", flush=True)
    while time.monotonic() < end:
        t, slice_s = time.thread_time(), random.uniform(*SLICE_S)
        python_hot(t + 0.7 * slice_s)
        native_part(t + 0.9 * slice_s)
        other_part(t + slice_s)


if __name__ == "__main__":
    main()
