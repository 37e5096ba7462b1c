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


class _HostClock:
    """A host whose wall clock the test moves against the monotonic one, as a VM host's
    time sync does (slews at 5 ms/s and steps were measured on our machines)."""

    CLOCK_MONOTONIC = time.CLOCK_MONOTONIC

    def __init__(self) -> None:
        self.mono = 10_000_000_000
        self.offset = 1_700_000_000_000_000_000

    def clock_gettime_ns(self, _clock: int) -> int:
        return self.mono

    def time_ns(self) -> int:
        return self.mono + self.offset


def _host(monkeypatch) -> _HostClock:
    import otel_ebpf.spans.clock as clock_module

    host = _HostClock()
    monkeypatch.setattr(clock_module, "time", host)
    return host


def test_a_step_dates_each_span_by_the_wall_clock_of_its_moment(monkeypatch):
    host = _host(monkeypatch)
    clock = KernelClock()
    before_step = host.mono + 5_000_000
    host.mono += 50_000_000
    clock.refresh()
    host.offset -= 360_000_000  # the host steps the wall clock back
    host.mono += 50_000_000
    clock.refresh()
    after_step = host.mono - 1_000_000
    old, new = host.offset + 360_000_000, host.offset
    # converted after the step, an earlier span still gets the offset it was made under
    assert clock.to_wall(before_step) == before_step + old
    assert clock.to_wall(host.mono) == host.mono + new
    # between the samples around the step the error is at most the step, and shrinks
    assert new <= clock.to_wall(after_step) - after_step <= old


def test_a_slew_is_followed_exactly_between_samples(monkeypatch):
    host = _host(monkeypatch)
    clock = KernelClock()
    start_mono, start_offset = host.mono, host.offset
    for _ in range(10):  # 5 ms of wall clock per second of monotonic, sampled every 100 ms
        host.mono += 100_000_000
        host.offset += 500_000
        clock.refresh()
    mid = start_mono + 250_000_000
    assert clock.to_wall(mid) == mid + start_offset + 1_250_000
    assert clock.to_wall(start_mono - 1) == start_mono - 1 + start_offset  # before the history


def test_history_is_bounded_and_samples_are_spaced(monkeypatch):
    from otel_ebpf.spans.clock import HISTORY, MIN_SAMPLE_GAP_NS

    host = _host(monkeypatch)
    clock = KernelClock()
    host.mono += MIN_SAMPLE_GAP_NS // 2
    host.offset += 7
    clock.refresh()  # too close to the last sample: kept as it was
    assert clock.offset_ns == host.offset - 7
    for _ in range(HISTORY * 2):
        host.mono += MIN_SAMPLE_GAP_NS
        clock.refresh()
    assert len(clock._history[0]) == len(clock._history[1]) == HISTORY
    assert clock.offset_ns == host.offset
