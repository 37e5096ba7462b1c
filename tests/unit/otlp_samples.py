"""Spans of every shape the agent makes, ready for export, for the OTLP encoding tests; and
the SDK's ReadableSpans made of them, which the SDK's encoder takes."""

from __future__ import annotations

from opentelemetry.sdk.trace import ReadableSpan
from otel_ebpf.protocols.base import (
    ConnInfo,
    NeutralSpan,
    Role,
    SpanEvent,
    SpanKind,
    SpanLink,
    StatusCode,
)

from otel_ebpf.spans.clock import MIN_SAMPLE_GAP_NS, KernelClock
from otel_ebpf.spans.convert import ready, resource_for, to_readable
from tests.support.host_clock import HostClock

CONN = ConnInfo(pid=7, fd=3, generation=1, role=Role.SERVER, transport="stream", family="ipv4")


def neutral_span(i: int, kind: SpanKind, **kw) -> NeutralSpan:
    return NeutralSpan(
        name=f"GET {i}", kind=kind, start_ns=1_000 + i, end_ns=5_000 + i, conn=CONN,
        attributes={"http.request.method": "GET", "http.response.status_code": 200,
                    "gen_ai.request.temperature": 0.5, "gen_ai.request.stream": True,
                    "gen_ai.response.finish_reasons": ["stop", "length"],
                    "big": 2**40, "negative": -3, "empty": [], "ints": [1, 2],
                    "floats": [0.25], "unicode": "é→"},
        trace_id=bytes(range(1, 17)), span_id=bytes([i + 1] * 8), **kw)


def stepping_clock() -> KernelClock:
    """A clock absorbing a 1 s step of the wall clock from monotonic 0 on: over the
    sample spans the mapping is no plain shift, and their ends and events show it."""
    host = HostClock(mono=-MIN_SAMPLE_GAP_NS)
    clock = host.clock()
    host.mono, host.offset = 0, host.offset + 1_000_000_000
    clock.refresh()
    return clock


def sample_spans(clock: KernelClock | None = None) -> list[NeutralSpan]:
    """Two processes (resources), every span kind, parents, an error, events, links."""
    clock = clock or stepping_clock()
    resources = [resource_for({"service.name": "a", "process.pid": 1}),
                 resource_for({"service.name": "b", "process.pid": 2, "tags": ["x", "y"]})]
    spans = [
        neutral_span(0, SpanKind.SERVER, parent_span_id=bytes([9] * 8)),
        neutral_span(1, SpanKind.CLIENT, status=StatusCode.ERROR, status_message="boom"),
        neutral_span(2, SpanKind.PRODUCER, events=[SpanEvent("chunk", 3_000, {"n": 1}),
                                                   SpanEvent("bare", 3_500)]),
        neutral_span(3, SpanKind.CONSUMER, parent_span_id=bytes([8] * 8),
                     links=[SpanLink(bytes([5] * 16), bytes([6] * 8), {"why": "derived"}),
                            SpanLink(bytes([4] * 16), bytes([3] * 8))]),
        neutral_span(4, SpanKind.INTERNAL, status=StatusCode.OK, trace_state="ot=th:c"),
        neutral_span(5, SpanKind.CLIENT, status=StatusCode.OK, status_message="not said"),
    ]
    return [ready(s, resources[i % 2], clock) for i, s in enumerate(spans)]


def readable(spans: list[NeutralSpan]) -> list[ReadableSpan]:
    return [to_readable(s) for s in spans]
