"""The direct OTLP/JSON span encoding says exactly what the protobuf route says (SDK
encoder, then protobuf's JSON mapping with hex IDs), for spans of every shape we make."""

from __future__ import annotations

import orjson
from opentelemetry.exporter.otlp.proto.common.trace_encoder import encode_spans
from otel_ebpf.protocols.base import (
    ConnInfo,
    NeutralSpan,
    Role,
    SpanEvent,
    SpanKind,
    SpanLink,
    StatusCode,
)

from otel_ebpf.export.file import to_otlp_json
from otel_ebpf.export.otlp_json import spans_to_otlp_json
from otel_ebpf.spans.clock import KernelClock
from otel_ebpf.spans.convert import resource_for, to_readable

CONN = ConnInfo(pid=7, fd=3, generation=1, role=Role.SERVER, transport="stream", family="ipv4")


def _span(i: int, kind: SpanKind, **kw) -> NeutralSpan:
    span = NeutralSpan(
        name=f"GET {i}", kind=kind, start_ns=1_000 + i, end_ns=5_000 + i, conn=CONN,
        attributes={"http.request.method": "GET", "http.response.status_code": 200,
                    "gen_ai.request.temperature": 0.5, "gen_ai.request.stream": True,
                    "gen_ai.response.finish_reasons": ["stop", "length"],
                    "big": 2**40, "empty": [], "ints": [1, 2], "floats": [0.25]},
        trace_id=bytes(range(1, 17)), span_id=bytes([i + 1] * 8), **kw)
    return span


def test_same_document_as_the_protobuf_route():
    clock = KernelClock()
    resources = [resource_for({"service.name": "a", "process.pid": 1}),
                 resource_for({"service.name": "b", "process.pid": 2, "tags": ["x", "y"]})]
    spans = [
        _span(0, SpanKind.SERVER, parent_span_id=bytes([9] * 8)),
        _span(1, SpanKind.CLIENT, status=StatusCode.ERROR, status_message="boom"),
        _span(2, SpanKind.PRODUCER, events=[SpanEvent("chunk", 3_000, {"n": 1}),
                                            SpanEvent("bare", 3_500)]),
        _span(3, SpanKind.CONSUMER, parent_span_id=bytes([8] * 8),
              links=[SpanLink(bytes([5] * 16), bytes([6] * 8), {"why": "derived"}),
                     SpanLink(bytes([4] * 16), bytes([3] * 8))]),
        _span(4, SpanKind.INTERNAL, status=StatusCode.OK),
    ]
    readable = [to_readable(s, resources[i % 2], clock) for i, s in enumerate(spans)]
    ours = orjson.loads(spans_to_otlp_json(readable))
    theirs = orjson.loads(to_otlp_json(encode_spans(readable)))
    assert ours == theirs


def test_one_line_per_request():
    clock = KernelClock()
    readable = [to_readable(_span(0, SpanKind.SERVER), resource_for({"service.name": "a"}),
                            clock)]
    line = spans_to_otlp_json(readable)
    assert line.endswith(b"\n") and line.count(b"\n") == 1
