"""The direct OTLP protobuf span encoding is the SDK encoder's message, field for field,
for the ReadableSpans made of the same spans."""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_ebpf.export import otlp_proto
from otel_ebpf.export.otlp_grpc import GrpcSpanExporter
from otel_ebpf.export.otlp_proto import spans_to_otlp_proto
from tests.unit.otlp_samples import readable, sample_spans


def test_same_message_as_the_sdk_encoder():
    spans = sample_spans()
    assert ExportTraceServiceRequest.FromString(spans_to_otlp_proto(spans)) == \
        encode_spans(readable(spans))


def test_reused_pairs_give_the_same_bytes(monkeypatch):
    spans = sample_spans()
    monkeypatch.setattr(otlp_proto._fast, "otlp", None)  # the Python writer, with its cache
    first = spans_to_otlp_proto(spans)
    assert spans_to_otlp_proto(spans) == first
    monkeypatch.setattr(otlp_proto, "_pairs", {})
    monkeypatch.setattr(otlp_proto, "_PAIR_CACHE_MAX", 2)
    assert spans_to_otlp_proto(spans) == first
    assert len(otlp_proto._pairs) <= 2


def test_long_values_and_many_spans():
    """Lengths past one varint byte (a 300-byte name, a 20 kB attribute, 600 spans)."""
    spans = sample_spans() * 100
    spans[0].name = "n" * 300
    spans[1].attributes = {"big.text": "x" * 20_000}
    assert ExportTraceServiceRequest.FromString(spans_to_otlp_proto(spans)) == \
        encode_spans(readable(spans))


def test_the_grpc_exporter_sends_our_encoding():
    exporter = GrpcSpanExporter(endpoint="http://127.0.0.1:1", insecure=True)
    try:
        spans = sample_spans()
        request = exporter._translate_data(spans)
    finally:
        exporter.shutdown()
    assert ExportTraceServiceRequest.FromString(request) == encode_spans(readable(spans))


def test_equal_values_of_other_types_are_not_taken_from_the_cache(monkeypatch):
    """True == 1 == 1.0 as dict keys: the reused pairs must still keep each value's type."""
    monkeypatch.setattr(otlp_proto._fast, "otlp", None)
    spans = sample_spans()[:3]
    for span, value in zip(spans, (True, 1, 1.0), strict=True):
        span.attributes = {"n": value, "l": [value]}
    assert ExportTraceServiceRequest.FromString(spans_to_otlp_proto(spans)) == \
        encode_spans(readable(spans))
