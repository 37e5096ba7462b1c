"""Spans stay what they were: recorded random traffic over many HTTP/1 connections (both
ends or one, syscalls cut anywhere, captures cut short, events lost, tails, asyncio task
births, LLM and vector-DB calls, closes and sweeps) goes through the connection table and
the correlator, and every span, field for field and attribute for attribute in its order,
must be what the recording holds (tests/unit/span_traffic.py made it). Run with the
compiled per-event path and with the pure Python one: both must give the recorded spans."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from otel_ebpf.protocols.http1 import parse as http1_parse
from otel_ebpf.protocols.http2 import parse as h2parse
from otel_ebpf.protocols.http2 import stitch as h2stitch
from otel_ebpf.protocols.llm import stream as llm_stream

from otel_ebpf import _fast
from tests.unit import span_traffic

GOLDEN = Path(__file__).parent / "data" / "spans_golden.json.gz"


@pytest.fixture(scope="module")
def golden() -> dict:
    return json.loads(gzip.decompress(GOLDEN.read_bytes()))


@pytest.mark.parametrize("compiled", [True, False], ids=["compiled", "pure_python"])
@pytest.mark.parametrize("seed", list(span_traffic.SEEDS))
def test_spans_are_the_recorded_ones(golden, monkeypatch, seed, compiled):
    if compiled and _fast.PURE_PYTHON:
        pytest.skip("OTEL_EBPF_PURE_PYTHON=1: no compiled path")
    if not compiled:
        for name in ("otlp", "ring", "conn", "correlate", "table"):
            monkeypatch.setattr(_fast, name, None)
        for module in (http1_parse, h2parse, h2stitch, llm_stream):  # protocol accelerators
            monkeypatch.setattr(module, "compiled", None)
    spans = json.loads(json.dumps(span_traffic.plain(span_traffic.spans_of(
        span_traffic.traffic(seed)))))
    assert spans == golden[str(seed)]
