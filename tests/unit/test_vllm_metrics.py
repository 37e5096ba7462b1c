"""Reading vLLM's Prometheus histograms (tests/support/vllm_server.py): the figures the
real-engine test compares the agent's time to first token with."""

import math

import pytest

from tests.support.vllm_server import Histogram, parse_histogram

# the shape vLLM 0.32's /metrics gives (one engine, one model), counts made up
TEXT = """\
# HELP vllm:time_to_first_token_seconds Histogram of time to first token in seconds.
# TYPE vllm:time_to_first_token_seconds histogram
vllm:time_to_first_token_seconds_sum{engine="0",model_name="tiny-llama"} 0.35
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.01",model_name="tiny-llama"} 2.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.02",model_name="tiny-llama"} 6.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="0.04",model_name="tiny-llama"} 9.0
vllm:time_to_first_token_seconds_bucket{engine="0",le="+Inf",model_name="tiny-llama"} 10.0
vllm:time_to_first_token_seconds_count{engine="0",model_name="tiny-llama"} 10.0
# HELP vllm:e2e_request_latency_seconds Histogram of e2e request latency in seconds.
# TYPE vllm:e2e_request_latency_seconds histogram
vllm:e2e_request_latency_seconds_sum{engine="0",model_name="tiny-llama"} 9.0
vllm:e2e_request_latency_seconds_bucket{engine="0",le="+Inf",model_name="tiny-llama"} 10.0
vllm:e2e_request_latency_seconds_count{engine="0",model_name="tiny-llama"} 10.0
"""


def test_parse_takes_the_named_histogram_only():
    h = parse_histogram(TEXT, "vllm:time_to_first_token_seconds")
    assert (h.sum, h.count) == (0.35, 10)
    assert h.buckets == {0.01: 2, 0.02: 6, 0.04: 9, math.inf: 10}
    with pytest.raises(KeyError):
        parse_histogram(TEXT, "vllm:inter_token_latency_seconds")


def test_since_and_quantile_interpolate_inside_the_bucket():
    earlier = Histogram(0.05, 2, {0.01: 2, 0.02: 2, 0.04: 2, math.inf: 2})
    later = parse_histogram(TEXT, "vllm:time_to_first_token_seconds")
    d = later.since(earlier)
    assert d.count == 8 and d.sum == pytest.approx(0.30)
    assert d.buckets == {0.01: 0, 0.02: 4, 0.04: 7, math.inf: 8}
    assert d.quantile(0.5) == pytest.approx(0.02)  # rank 4: the top of (0.01, 0.02]
    assert d.quantile(0.25) == pytest.approx(0.015)  # rank 2: halfway through it
    assert d.quantile(1.0) == pytest.approx(0.04)  # in +Inf: its lower bound
    with pytest.raises(ValueError):
        Histogram(0.0, 0, {}).quantile(0.5)
