"""The SDK's OTLP/gRPC exporters (channel, TLS, headers, compression, retries and backoff
kept): spans encoded by otlp_proto (~5x cheaper per span) and sent as those bytes; metrics
sent to a backend that has no metrics service (Phoenix, Jaeger: traces only) said once, as
a warning with the fix."""

from __future__ import annotations

import logging
import threading
from collections.abc import Sequence
from typing import Any

import grpc
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceResponse
from opentelemetry.sdk.metrics.export import MetricExportResult, MetricsData

from otel_ebpf.export.otlp_proto import spans_to_otlp_proto
from otel_ebpf.protocols.base import NeutralSpan

log = logging.getLogger(__name__)

_EXPORT_METHOD = "/opentelemetry.proto.collector.trace.v1.TraceService/Export"


class _RawTraceStub:
    """The TraceService stub, sending the request bytes as they are: the SDK's stub
    serializes a message object, which would mean parsing the bytes we wrote into one
    first (~1.5 µs a span here, more than writing them)."""

    def __init__(self, channel: grpc.Channel) -> None:
        self.Export = channel.unary_unary(  # noqa: N815 (the stub's name)
            _EXPORT_METHOD, request_serializer=None,
            response_deserializer=ExportTraceServiceResponse.FromString)


class GrpcSpanExporter(OTLPSpanExporter):
    """The SDK's OTLP/gRPC span exporter (channel, TLS, headers, compression, retries and
    backoff kept) sending the bytes otlp_proto writes: `_translate_data` is the hook each
    SDK OTLP/gRPC exporter fills in to build its request, and the stub it calls is ours,
    which sends them unparsed. It takes ready NeutralSpans (spans/convert.py), not the
    SDK's spans."""

    takes_neutral_spans = True  # ExportQueue hands it the agent's spans

    def _initialize_channel_and_stub(self) -> None:  # the SDK's; also called on reconnects
        super()._initialize_channel_and_stub()
        self._client = _RawTraceStub(self._channel)

    def _translate_data(self, data: Sequence[NeutralSpan]) -> bytes:  # type: ignore[override]
        return spans_to_otlp_proto(data)


class _NotAccepted(Exception):
    """The backend answered UNIMPLEMENTED: it serves no OTLP metrics service."""


class _RefusalStub:
    """The SDK's MetricsService stub, with an UNIMPLEMENTED answer turned into _NotAccepted.
    The SDK logs every failed export at ERROR (at most once per 20 s); an exception that is
    not an RpcError passes its retry loop and its log line and reaches our export()."""

    def __init__(self, stub: Any) -> None:
        self._stub = stub

    def Export(self, *args: Any, **kwargs: Any) -> Any:  # noqa: N802 (the stub's name)
        try:
            return self._stub.Export(*args, **kwargs)
        except grpc.RpcError as e:
            if e.code() is grpc.StatusCode.UNIMPLEMENTED:
                raise _NotAccepted(e.details() or "") from e
            raise


class GrpcMetricExporter(OTLPMetricExporter):
    """The SDK's OTLP/gRPC metric exporter, except toward a backend that does not take
    metrics: one WARNING naming the fix the first time, then each export fails silently
    with `refused` set, so that senders count it (metrics.exports_failed, reason
    not_accepted). A later success (the endpoint now a Collector) clears it with an INFO
    line, and a refusal after that is said again."""

    def __init__(self, *args: Any, name: str = "otlp", **kwargs: Any) -> None:
        self.name = name
        self.refused = False
        self._said = threading.Lock()  # several senders share one exporter
        super().__init__(*args, **kwargs)

    def _initialize_channel_and_stub(self) -> None:  # the SDK's; also called on reconnects
        super()._initialize_channel_and_stub()
        self._client = _RefusalStub(self._client)

    def export(self, metrics_data: MetricsData, timeout_millis: float = 10_000,
               **kwargs: Any) -> MetricExportResult:
        try:
            result = super().export(metrics_data, timeout_millis=timeout_millis, **kwargs)
        except _NotAccepted as e:
            with self._said:
                first, self.refused = not self.refused, True
            if first:
                log.warning(
                    "exporter %s: the backend at %s does not accept metrics (UNIMPLEMENTED%s): "
                    "it takes traces only. Remove `%s` from service.pipelines.metrics.exporters, "
                    "or point it at an OpenTelemetry Collector. Metric exports to it are "
                    "counted in otel_ebpf.metrics.exports_failed{reason=not_accepted}, "
                    "without another message.",
                    self.name, self._endpoint, f": {e}" if str(e) else "", self.name)
            return MetricExportResult.FAILURE
        if result is MetricExportResult.SUCCESS and self.refused:
            with self._said:
                self.refused = False
            log.info("exporter %s: the backend at %s now accepts metrics", self.name, self._endpoint)
        return result
