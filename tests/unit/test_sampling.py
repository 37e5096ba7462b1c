"""Consistent head sampling: thresholds as OpenTelemetry's tracestate `th` writes them,
the same decision for the same trace ID everywhere, and span metrics that still count
every span (the agent's emit path, with its real exporters, no kernel)."""

from __future__ import annotations

import os

import pytest
import yaml
from otel_ebpf.protocols.base import ConnInfo, Measurement, NeutralSpan, Role, SpanKind

from otel_ebpf.agent import Agent
from otel_ebpf.config import ConfigError, parse_config
from otel_ebpf.correlate.sampling import HeadSampler, th_value, threshold
from tests.integration.conftest import read_histograms, read_spans


@pytest.mark.parametrize(("ratio", "t", "th"), [
    (1.0, 0, "0"),
    (0.5, 0x80000000000000, "8"),
    (0.25, 0xC0000000000000, "c"),
    (0.1, 0xE6666666666666, "e6666666666666"),
    (2**-56, 0xFFFFFFFFFFFFFF, "ffffffffffffff"),
    (0.0, 1 << 56, None),
])
def test_thresholds(ratio, t, th):
    assert threshold(ratio) == t
    assert th_value(t) == th
    assert (f"th:{th}" in HeadSampler(ratio).describe()) if th else \
        "no trace" in HeadSampler(ratio).describe()


def test_kept_spans_carry_the_threshold_and_all_kept_spans_none():
    spans = [_span(i, os.urandom(16)) for i in range(200)]
    assert {s.trace_state for s in HeadSampler(0.25).keep(spans)} == {"ot=th:c"}
    assert HeadSampler(1.0).trace_state == ""  # nothing sampled away: nothing to say
    assert all(s.trace_state == "" for s in HeadSampler(1.0).keep([_span(0, bytes(16))]))


def test_decision_reads_the_last_56_bits_only():
    s = HeadSampler(0.25)
    at = bytes(9) + (0xC0000000000000).to_bytes(7, "big")
    below = bytes(9) + (0xC0000000000000 - 1).to_bytes(7, "big")
    assert s.keeps(at) and not s.keeps(below)
    assert s.keeps(b"\x00" * 8 + b"\x7f" + at[9:])  # the first 9 bytes never matter
    assert not s.keeps(b"\xff" * 9 + below[9:])


def test_two_samplers_agree_and_keep_the_share():
    ids = [os.urandom(16) for _ in range(20_000)]
    a, b = HeadSampler(0.25), HeadSampler(0.25)
    kept = [a.keeps(i) for i in ids]
    assert kept == [b.keeps(i) for i in ids]
    n, p = len(ids), 0.25
    sigma = (n * p * (1 - p)) ** 0.5
    assert abs(sum(kept) - n * p) < 5 * sigma


@pytest.mark.parametrize("ratio", ["1.5", "-0.1", "half", "nan"])
def test_ratio_is_validated(ratio):
    with pytest.raises(ConfigError, match="sampling.ratio"):
        parse_config(f"receivers: {{ebpf: {{sampling: {{ratio: {ratio}}}}}}}\n", {})
    with pytest.raises(ConfigError, match="OTEL_EBPF_RECEIVERS_EBPF_SAMPLING_RATIO"):
        parse_config("", {"OTEL_EBPF_RECEIVERS_EBPF_SAMPLING_RATIO": ratio})


def _span(i: int, trace_id: bytes) -> NeutralSpan:
    conn = ConnInfo(pid=9_000_003, fd=3, generation=1, role=Role.CLIENT, transport="stream",
                    family="ipv4", comm="client")
    return NeutralSpan(
        name="chat m", kind=SpanKind.CLIENT, start_ns=1_000 + i, end_ns=2_000 + i, conn=conn,
        trace_id=trace_id, span_id=(i + 1).to_bytes(8, "big"),
        measurements=[Measurement("gen_ai.client.operation.duration", 0.5,
                                  {"gen_ai.request.model": "m"})])


def test_span_metrics_count_spans_sampled_out(tmp_path):
    traces, metrics = tmp_path / "traces.jsonl", tmp_path / "metrics.jsonl"
    cfg = parse_config(yaml.safe_dump({
        "receivers": {"ebpf": {"sampling": {"ratio": 0.25}}},
        "exporters": {"file": {"path": str(traces)}, "file/m": {"path": str(metrics)}},
        "service": {"pipelines": {
            "traces": {"receivers": ["ebpf"], "exporters": ["file"]},
            "metrics": {"receivers": ["ebpf"], "exporters": ["file/m"]}}},
    }), {})
    agent = Agent(cfg)
    ids = [os.urandom(16) for _ in range(400)]
    # half the spans reach the agent without a trace ID: decided on the one they get
    spans = [_span(i, tid if i % 2 else b"") for i, tid in enumerate(ids)]
    agent._emit(spans)
    agent.shutdown()
    exported = read_spans(traces)
    expected = [s for s in spans if agent.sampler.keeps(s.trace_id)]
    assert 0 < len(exported) < len(spans)
    assert sorted(s.span_id for s in exported) == sorted(s.span_id.hex() for s in expected)
    assert agent.stats.total("spans.sampled_out") == len(spans) - len(exported)
    # each kept span says how it was sampled, as OpenTelemetry's tracestate writes it
    assert {s.trace_state for s in exported} == {f"ot=th:{th_value(agent.sampler.threshold)}"}
    (point,) = read_histograms(metrics)["gen_ai.client.operation.duration"]
    assert point.count == len(spans)  # every span, kept or not
