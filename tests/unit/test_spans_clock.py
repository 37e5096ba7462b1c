"""KernelClock: kernel monotonic ns -> Unix epoch ns."""

import time

from otel_ebpf.spans.clock import KernelClock


def test_now_maps_to_now():
    clock = KernelClock()
    before = time.time_ns()
    wall = clock.to_wall(time.clock_gettime_ns(time.CLOCK_MONOTONIC))
    after = time.time_ns()
    # the offset comes from the tightest sample pair: well under a millisecond off
    assert before - 1_000_000 <= wall <= after + 1_000_000


def test_conversion_keeps_durations_and_order():
    clock = KernelClock()
    assert clock.to_wall(2_000_000_123) - clock.to_wall(1_000_000_000) == 1_000_000_123


def test_refresh_is_stable():
    clock = KernelClock()
    first = clock.offset_ns
    for _ in range(20):
        clock.refresh()
        # no NTP step in a few microseconds: the offset barely moves
        assert abs(clock.offset_ns - first) < 1_000_000


def test_kernel_timestamps_are_recent_wall_times():
    # bpf_ktime_get_ns counts from boot: a span from a second ago is a second ago in wall time
    clock = KernelClock()
    one_second_ago = time.clock_gettime_ns(time.CLOCK_MONOTONIC) - 1_000_000_000
    assert abs(clock.to_wall(one_second_ago) - (time.time_ns() - 1_000_000_000)) < 5_000_000
