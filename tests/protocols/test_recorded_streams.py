"""Spans of recorded gRPC and SSE traffic stay what they were: a grpcio client and server
(200 unary calls on one channel) and 20 streamed chat completions from the test OpenAI
server, recorded by bench/record_streams.py, replayed at both ends through the connection
table and the correlator, whole and with writes cut at random points, syscalls lost and
batches of random size. Every span, field for field and attribute for attribute in its
order, must be what tests/protocols/data/streams_golden.json.gz holds, which

    .venv/bin/python bench/stream_pipeline.py --golden | gzip -9n > tests/protocols/data/streams_golden.json.gz

writes (run it only to record a change meant to change spans)."""

from __future__ import annotations

import gzip
import json
import random
from pathlib import Path

import pytest

from bench import stream_pipeline as sp
from tests.unit.span_traffic import plain

GOLDEN = Path(__file__).parent / "data" / "streams_golden.json.gz"
CASES = [f"{w}-{c}" for w in sp.WORKLOADS for c in ("whole", *sp.GOLDEN_SEEDS)]


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(gzip.decompress(GOLDEN.read_bytes()))


@pytest.mark.parametrize("case", CASES)
def test_spans_are_the_recorded_ones(golden, case):
    workload, _, variant = case.partition("-")
    chunks = sp.recording(workload)
    if variant == "whole":
        spans = sp.spans_of(sp.events(chunks, 2))
    else:
        rng = random.Random(int(variant))
        spans = sp.spans_of(sp.events(chunks, 2, rng), rng)
    assert len(spans) == len(golden[case])
    assert json.loads(json.dumps(plain(spans))) == golden[case]


def test_recordings_hold_what_they_claim():
    """200 calls answered OK at both ends; every SSE stream's events made content times."""
    spans = sp.spans_of(sp.events(sp.recording("grpc")))
    assert len(spans) == 400
    assert all(s.attributes.get("rpc.response.status_code") == "OK" for s in spans)
    sse = sp.spans_of(sp.events(sp.recording("sse")))
    assert len(sse) == 40 and all(s.name.startswith("chat") for s in sse)
