"""KernelClock: kernel monotonic ns -> Unix epoch ns, one non-decreasing mapping."""

import time

from hypothesis import given, settings
from hypothesis import strategies as st

from otel_ebpf.spans.clock import HISTORY, MIN_SAMPLE_GAP_NS, SLEW, TOLERANCE_NS, KernelClock
from tests.support.host_clock import HostClock

MS = 1_000_000
S = 1_000_000_000


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


def test_kernel_timestamps_are_recent_wall_times():
    # bpf_ktime_get_ns counts from boot: a span from a second ago is a second ago in wall time
    clock = KernelClock()
    one_second_ago = time.clock_gettime_ns(time.CLOCK_MONOTONIC) - 1_000_000_000
    assert abs(clock.to_wall(one_second_ago) - (time.time_ns() - 1_000_000_000)) < 5_000_000


def _step(host: HostClock, clock: KernelClock, by_ns: int) -> int:
    """The host steps its wall clock by `by_ns` and the clock samples it 10 ms later;
    returns the moment of that sample."""
    host.offset += by_ns
    host.mono += MIN_SAMPLE_GAP_NS
    clock.refresh()
    return host.mono


def test_a_step_forward_is_absorbed_at_the_bounded_rate():
    host = HostClock()
    clock, old = host.clock(), host.offset
    knot = _step(host, clock, 360 * MS)
    assert clock.to_wall(knot) == knot + old  # the mapping did not jump
    # then its offset climbs 1 ns per SLEW ns until it is the wall clock's
    assert clock.to_wall(knot + SLEW * MS) == knot + SLEW * MS + old + MS
    caught_up = knot + SLEW * 360 * MS
    assert clock.to_wall(caught_up - SLEW) == caught_up - SLEW + host.offset - 1
    for t in (caught_up, caught_up + 1, caught_up + 60 * S):
        assert clock.to_wall(t) == t + host.offset


def test_a_step_back_never_makes_time_run_backwards():
    host = HostClock()
    clock, old = host.clock(), host.offset
    knot = _step(host, clock, -360 * MS)
    assert clock.to_wall(knot) == knot + old
    times = range(knot - 10, knot + SLEW * 360 * MS + 10, 7_919)
    walls = [clock.to_wall(t) for t in times]
    assert walls == sorted(walls)
    # 1 ns of offset given back per SLEW ns: wall time runs at 7/8 of the monotonic rate
    assert clock.to_wall(knot + SLEW * MS) - clock.to_wall(knot) == (SLEW - 1) * MS
    caught_up = knot + SLEW * 360 * MS
    assert clock.to_wall(caught_up) == caught_up + host.offset


def test_values_already_given_are_never_revised():
    host = HostClock()
    clock = host.clock()
    given_before = {}
    for change in (0, 2 * MS, -700 * MS, 0, 5 * S, 40_000):
        _step(host, clock, change)
        for t in range(host.mono - 30 * MS, host.mono + 1, MS):
            given_before.setdefault(t, clock.to_wall(t))
    assert {t: clock.to_wall(t) for t in given_before} == given_before


def test_a_slew_is_followed_a_sample_behind():
    host = HostClock()
    clock = host.clock()
    rate = 5  # ns of wall clock per µs of monotonic: 5 ms per second, as measured on VMs
    truth = {}  # the wall clock's offset at moments between samples
    for _ in range(300):  # 3 s, sampled every 10 ms
        for t in range(host.mono, host.mono + MIN_SAMPLE_GAP_NS, MS):
            truth[t] = host.offset + rate * (t - host.mono) // 1000
        host.offset += rate * MIN_SAMPLE_GAP_NS // 1000
        host.mono += MIN_SAMPLE_GAP_NS
        clock.refresh()
    drift_per_sample = rate * MIN_SAMPLE_GAP_NS // 1000  # 50 µs
    for t, offset in truth.items():
        assert 0 <= offset - (clock.to_wall(t) - t) <= drift_per_sample


def test_samples_within_the_tolerance_add_no_knot():
    host = HostClock()
    clock = host.clock()
    later = host.mono + 20 * S
    at_first = clock.to_wall(later)
    for jitter in (TOLERANCE_NS, -TOLERANCE_NS, 3_000, 0):  # the noise of a busy machine
        host.offset += jitter
        host.mono += MIN_SAMPLE_GAP_NS
        clock.refresh()
        host.offset -= jitter
    assert clock.to_wall(later) == at_first


def test_history_is_bounded_and_samples_are_spaced():
    host = HostClock()
    clock = host.clock()
    host.mono += MIN_SAMPLE_GAP_NS // 2
    host.offset += 1 * MS
    clock.refresh()  # too close to the last knot: kept as it was
    assert clock.to_wall(host.mono + S) == host.mono + S + host.offset - MS
    for _ in range(HISTORY * 2):
        host.mono += MIN_SAMPLE_GAP_NS
        host.offset += 2 * TOLERANCE_NS  # a slew: a knot every sample
        clock.refresh()
    monos, offsets, targets, _ = clock._knots
    assert len(monos) == len(offsets) == len(targets) == HISTORY
    assert targets[-1] == host.offset


# a host's history: (monotonic time until the next sample, how its wall clock moved) per
# sample; moves from noise to slews to steps of seconds, either way
moves = st.one_of(st.just(0), st.integers(-TOLERANCE_NS, TOLERANCE_NS),
                  st.integers(-100_000, 100_000), st.integers(-10 * S, 10 * S))
histories = st.lists(st.tuples(st.integers(0, 300 * MS), moves), min_size=1, max_size=40)


@settings(max_examples=300, deadline=None)
@given(history=histories, data=st.data())
def test_a_child_inside_its_parent_stays_inside_after_mapping(history, data):
    """Whatever the wall clock did, and whenever each span is converted after it ends."""
    assert len(history) < HISTORY  # older than the history, a time is not held still
    host = HostClock()
    clock = host.clock()
    first, last = host.mono - S, host.mono + sum(gap for gap, _ in history)
    parent_start, child_start, child_end, parent_end = sorted(
        data.draw(st.lists(st.integers(first, last), min_size=4, max_size=4)))
    # each is converted at a sample of its own, at or after its end
    spans = {"parent": (parent_start, parent_end), "child": (child_start, child_end)}
    convert_at = {name: data.draw(st.integers(0, len(history))) for name in spans}
    walls = {}
    for i, (gap, move) in enumerate([(0, 0), *history]):
        host.mono += gap
        host.offset += move
        clock.refresh()
        for name, (start, end) in spans.items():
            if name not in walls and end <= host.mono and (i >= convert_at[name]
                                                           or i == len(history)):
                walls[name] = clock.to_wall(start), clock.to_wall(end)
    (ps, pe), (cs, ce) = walls["parent"], walls["child"]
    assert ps <= cs <= ce <= pe


@settings(max_examples=300, deadline=None)
@given(history=histories, data=st.data())
def test_the_mapping_rises_at_a_bounded_rate_and_ends_on_the_wall_clock(history, data):
    host = HostClock()
    clock = host.clock()
    first = host.mono
    for gap, move in history:
        host.mono += gap
        host.offset += move
        clock.refresh()
    t1, t2 = sorted(data.draw(st.lists(st.integers(first, host.mono), min_size=2, max_size=2)))
    rise, elapsed = clock.to_wall(t2) - clock.to_wall(t1), t2 - t1
    assert abs(rise - elapsed) <= elapsed // SLEW + 1  # so never backwards: SLEW > 1
    # once the wall clock holds still, the mapping reaches it (to within the noise allowed)
    host.mono += MIN_SAMPLE_GAP_NS
    clock.refresh()
    behind = host.offset - (clock.to_wall(host.mono) - host.mono)
    later = host.mono + SLEW * abs(behind)
    assert abs(host.offset - (clock.to_wall(later) - later)) <= TOLERANCE_NS
