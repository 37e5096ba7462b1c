"""The direct OTLP/JSON span encoding says exactly what the protobuf route says (SDK
encoder, then protobuf's JSON mapping with hex IDs) for the ReadableSpans made of the same
spans, for spans of every shape we make."""

from __future__ import annotations

import orjson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans

from otel_ebpf.export import otlp_json
from otel_ebpf.export.file import to_otlp_json
from otel_ebpf.export.otlp_json import spans_to_otlp_json
from tests.unit.otlp_samples import readable, sample_spans


def test_same_document_as_the_protobuf_route():
    spans = sample_spans()
    ours = orjson.loads(spans_to_otlp_json(spans))
    theirs = orjson.loads(to_otlp_json(encode_spans(readable(spans))))
    assert ours == theirs


def test_reused_pairs_give_the_same_document(monkeypatch):
    spans = sample_spans()
    monkeypatch.setattr(otlp_json._fast, "otlp", None)  # the Python writer, with its cache
    first = spans_to_otlp_json(spans)
    assert spans_to_otlp_json(spans) == first  # every pair from the cache now
    monkeypatch.setattr(otlp_json, "_pairs", {})
    monkeypatch.setattr(otlp_json, "_PAIR_CACHE_MAX", 2)  # cleared again and again
    assert spans_to_otlp_json(spans) == first
    assert len(otlp_json._pairs) <= 2


def test_one_line_per_request():
    line = spans_to_otlp_json(sample_spans()[:1])
    assert line.endswith(b"\n") and line.count(b"\n") == 1


def test_equal_values_of_other_types_are_not_taken_from_the_cache(monkeypatch):
    """True == 1 == 1.0 as dict keys: the reused pairs must still keep each value's type."""
    monkeypatch.setattr(otlp_json._fast, "otlp", None)
    spans = sample_spans()[:3]
    for span, value in zip(spans, (True, 1, 1.0), strict=True):
        span.attributes = {"n": value, "l": [value]}
    assert orjson.loads(spans_to_otlp_json(spans)) == orjson.loads(
        to_otlp_json(encode_spans(readable(spans))))
