"""The direct OTLP protobuf span encoding is the SDK encoder's message, field for field."""

from __future__ import annotations

from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_ebpf.export import otlp_proto
from otel_ebpf.export.otlp_grpc import GrpcSpanExporter
from otel_ebpf.export.otlp_proto import spans_to_otlp_proto
from tests.unit.otlp_samples import sample_spans


def test_same_message_as_the_sdk_encoder():
    readable = sample_spans()
    assert ExportTraceServiceRequest.FromString(spans_to_otlp_proto(readable)) == \
        encode_spans(readable)


def test_reused_pairs_give_the_same_bytes(monkeypatch):
    readable = sample_spans()
    first = spans_to_otlp_proto(readable)
    assert spans_to_otlp_proto(readable) == first
    monkeypatch.setattr(otlp_proto, "_pairs", {})
    monkeypatch.setattr(otlp_proto, "_PAIR_CACHE_MAX", 2)
    assert spans_to_otlp_proto(readable) == first
    assert len(otlp_proto._pairs) <= 2


def test_long_values_and_many_spans():
    """Lengths past one varint byte (a 300-byte name, a 20 kB attribute, 600 spans)."""
    readable = sample_spans() * 120
    readable[0]._name = "n" * 300
    readable[1]._attributes = {"big.text": "x" * 20_000}
    assert ExportTraceServiceRequest.FromString(spans_to_otlp_proto(readable)) == \
        encode_spans(readable)


def test_the_grpc_exporter_sends_our_encoding():
    exporter = GrpcSpanExporter(endpoint="http://127.0.0.1:1", insecure=True)
    try:
        readable = sample_spans()
        request = exporter._translate_data(readable)
    finally:
        exporter.shutdown()
    assert request == encode_spans(readable)


def test_equal_values_of_other_types_are_not_taken_from_the_cache():
    """True == 1 == 1.0 as dict keys: the reused pairs must still keep each value's type."""
    readable = sample_spans()[:3]
    for span, value in zip(readable, (True, 1, 1.0)):
        span._attributes = {"n": value, "l": [value]}
    assert ExportTraceServiceRequest.FromString(spans_to_otlp_proto(readable)) == \
        encode_spans(readable)
