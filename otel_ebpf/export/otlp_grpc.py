"""The SDK's OTLP/gRPC span exporter (its channel, TLS, headers, compression, retries and
backoff kept) with the span encoding swapped for otlp_proto's, ~5x cheaper per span."""

from __future__ import annotations

from collections.abc import Sequence

from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest
from opentelemetry.sdk.trace import ReadableSpan

from otel_ebpf.export.otlp_proto import spans_to_otlp_proto


class GrpcSpanExporter(OTLPSpanExporter):
    """`_translate_data` is the hook each SDK OTLP/gRPC exporter fills in to build its
    request. Ours parses the bytes we wrote into the request message (upb, ~1 µs a span),
    so the gRPC stub and everything around it stay the SDK's."""

    def _translate_data(self, data: Sequence[ReadableSpan]) -> ExportTraceServiceRequest:
        return ExportTraceServiceRequest.FromString(spans_to_otlp_proto(data))
