"""The launch probes' duty cycle: its config (gpu.launches), the attached time of the
windows, the scale of each interval's launch counts, and how the estimate is marked in the
profiles and metrics."""

from __future__ import annotations

import textwrap

import pytest
from opentelemetry.sdk.resources import Resource

from otel_ebpf.config import ConfigError, parse_config
from otel_ebpf.gpu.duty import AttachLog, LaunchDuty, launch_scale
from otel_ebpf.gpu.ledger import ESTIMATED, site_profiles
from otel_ebpf.gpu.metrics import build_metrics
from otel_ebpf.kernel.cuda_abi import Api
from otel_ebpf.kernel.cuda_tracer import LaunchTotals, SiteTotals

MS = 1_000_000


def gpu(text: str, environ: dict | None = None):
    yaml = "receivers:\n  ebpf:\n    gpu:\n" + textwrap.indent(textwrap.dedent(text), "      ")
    return parse_config(yaml, environ or {}).receiver


def gpu_error(text: str, environ: dict | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        gpu(text, environ)
    return info.value


# -- config


def test_launch_duty_defaults_and_values():
    r = gpu("enabled: true\n")
    assert (r.gpu_launch_duty_cycle, r.gpu_launch_period_s) == (0.02, 1.0)
    r = gpu("launches: {duty_cycle: 0.2, period: 500ms}\n")
    assert (r.gpu_launch_duty_cycle, r.gpu_launch_period_s) == (0.2, 0.5)
    assert gpu("launches: {duty_cycle: 1}\n").gpu_launch_duty_cycle == 1.0
    # duty 1 is exact whatever the period: no window to bound
    assert gpu("launches: {duty_cycle: 1, period: 100ms}\n").gpu_launch_duty_cycle == 1.0


def test_launch_duty_from_the_environment():
    r = gpu("enabled: true\n", {"OTEL_EBPF_RECEIVERS_EBPF_GPU_LAUNCHES_DUTY_CYCLE": "0.1",
                                "OTEL_EBPF_RECEIVERS_EBPF_GPU_LAUNCHES_PERIOD": "2s"})
    assert (r.gpu_launch_duty_cycle, r.gpu_launch_period_s) == (0.1, 2.0)
    e = gpu_error("enabled: true\n", {"OTEL_EBPF_RECEIVERS_EBPF_GPU_LAUNCHES_DUTY_CYCLE": "0"})
    assert e.path == "OTEL_EBPF_RECEIVERS_EBPF_GPU_LAUNCHES_DUTY_CYCLE"


@pytest.mark.parametrize("value", [0, 0.0, -0.1, 1.5, "half", True])
def test_launch_duty_out_of_range_names_its_path(value):
    e = gpu_error(f"launches: {{duty_cycle: {value}}}\n")
    assert e.path == "receivers.ebpf.gpu.launches.duty_cycle"


def test_a_window_below_the_minimum_is_refused_with_the_least_duty_that_works():
    e = gpu_error("launches: {duty_cycle: 0.005, period: 1s}\n")  # a 5 ms window
    assert e.path == "receivers.ebpf.gpu.launches.duty_cycle"
    assert "at least 0.01 with period 1s" in str(e) and "10ms" in str(e)
    assert gpu("launches: {duty_cycle: 0.01, period: 1s}\n").gpu_launch_duty_cycle == 0.01
    e = gpu_error("launches: {duty_cycle: 0.05, period: 100ms}\n")
    assert "at least 0.1 with period 0.1s" in str(e)


def test_period_bounds():
    e = gpu_error("launches: {period: 10ms}\n")
    assert e.path == "receivers.ebpf.gpu.launches.period"


# -- the windows and the scale


def test_attached_time_is_the_windows_overlap_with_the_interval():
    log = AttachLog()
    for start in (100, 300, 500):  # windows of 50 ms every 200 ms
        log.opened(start * MS)
        log.closed((start + 50) * MS)
    assert log.attached_ns(0, 1000 * MS) == 150 * MS
    assert log.attached_ns(120 * MS, 320 * MS) == 50 * MS  # 30 of one, 20 of the next
    assert log.attached_ns(150 * MS, 300 * MS) == 0  # between windows
    assert log.attached_ns(0, 50 * MS) == 0
    log.opened(700 * MS)  # still open: counts up to the interval's end
    assert log.attached_ns(600 * MS, 720 * MS) == 20 * MS
    assert log.attached_ns(0, 800 * MS) == 250 * MS


def test_an_open_or_close_out_of_turn_is_ignored():
    log = AttachLog()
    log.closed(5 * MS)  # nothing open
    log.opened(10 * MS)
    log.opened(20 * MS)  # already open: the first opening stands
    log.closed(30 * MS)
    log.closed(40 * MS)
    assert log.attached_ns(0, 100 * MS) == 20 * MS


def test_scale_is_elapsed_over_attached():
    assert launch_scale(1000 * MS, 50 * MS) == pytest.approx(20.0)
    assert launch_scale(1000 * MS, 1000 * MS) == 1.0
    assert launch_scale(1000 * MS, 0) == 0.0  # nothing to estimate from: wait


class _Clock:
    def __init__(self) -> None:
        self.t = 0

    def __call__(self) -> int:
        self.t += MS  # each reading 1 ms later: an attach or detach call takes 1 ms
        return self.t


def test_a_window_opens_when_the_attach_returns_and_closes_when_the_detach_starts():
    calls, clock = [], _Clock()
    duty = LaunchDuty(calls.append, 0.05, 1.0, clock=clock)
    assert not duty.exact and duty.window_s == pytest.approx(0.05)
    duty._toggle(True)  # clock: 2 ms before, 3 ms after
    duty._toggle(False)  # 4 ms before, 5 ms after
    assert calls == [True, False]
    assert duty.attached_ns(0, 100 * MS) == 1 * MS  # 3 -> 4 ms
    assert (duty.windows, duty.attach_ns, duty.detach_ns) == (1, MS, MS)


def test_duty_one_is_attached_throughout_and_starts_no_thread():
    calls = []
    duty = LaunchDuty(calls.append, 1.0, 1.0)
    assert duty.exact
    duty.start()
    assert calls == [] and duty._thread is None
    t0 = duty.started_ns
    assert duty.attached_ns(t0, t0 + 10 * MS) == 10 * MS
    with pytest.raises(ValueError):
        LaunchDuty(calls.append, 0.0, 1.0)


# -- the estimate in profiles and metrics

A, B = (0x10, 0x20), (0x11, 0x21)


def _launch(stack, count, pid=7):
    return SiteTotals(pid, Api.LAUNCH_KERNEL, 0, stack, (), 0xF1, count, 0, 0)


def test_launch_counts_are_scaled_rounded_and_marked():
    seen: dict = {}
    out = site_profiles([_launch(A, 5), _launch(B, 3)], seen, 0, 1, None, 20.0)
    samples = {s.site.stack: s for s in out["launches"][0].samples}
    assert samples[A].values == (100,) and samples[B].values == (60,)
    assert all(dict(s.attributes)[ESTIMATED] is True for s in samples.values())
    # the next interval is a delta of the raw totals, scaled by its own factor
    out = site_profiles([_launch(A, 8), _launch(B, 3)], seen, 1, 2, None, 2.5)
    assert [(s.site.stack, s.values) for s in out["launches"][0].samples] == [(A, (8,))]


def test_an_interval_without_a_window_leaves_its_launches_for_the_next():
    seen: dict = {}
    copy = SiteTotals(7, Api.MEMCPY_HTOD, 0, A, (), 0, 2, 64, 10)
    out = site_profiles([_launch(A, 5), copy], seen, 0, 1, None, 0.0)
    assert out["launches"] == [] and out["copies"][0].samples[0].values == (2, 64, 10)
    out = site_profiles([_launch(A, 6), copy], seen, 1, 2, None, 10.0)
    assert out["launches"][0].samples[0].values == (60,)  # all 6, at this interval's scale
    assert out["copies"] == []  # copies are exact: consumed the first time


def test_exact_launch_counts_are_not_marked():
    out = site_profiles([_launch(A, 5)], {}, 0, 1)
    s = out["launches"][0].samples[0]
    assert s.values == (5,) and ESTIMATED not in dict(s.attributes)


def test_estimated_launch_metric_is_marked():
    def points(estimated):
        data = build_metrics([], [], [LaunchTotals(7, 0, (), 400)],
                             lambda pid: Resource({"process.pid": pid}), lambda pid: 1,
                             now_ns=2, launches_estimated=estimated)
        metric = data.resource_metrics[0].scope_metrics[0].metrics[0]
        return [(p.value, dict(p.attributes)) for p in metric.data.data_points]
    assert points(True) == [(400, {"gpu.device.index": 0, ESTIMATED: True})]
    assert points(False) == [(400, {"gpu.device.index": 0})]
