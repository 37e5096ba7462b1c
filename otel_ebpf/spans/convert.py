"""A NeutralSpan made ready for export (its process's Resource, its wall-clock times), and
the SDK's ReadableSpan made from it for the exporters that take only those (otlphttp,
console): the agent's own encoders (export/otlp_proto.py, otlp_json.py) read the ready
NeutralSpan itself."""

from __future__ import annotations

import threading
from collections.abc import Mapping

from opentelemetry import trace as trace_api
from opentelemetry.sdk.resources import Resource
from opentelemetry.sdk.trace import Event, ReadableSpan
from opentelemetry.sdk.util.instrumentation import InstrumentationScope
from opentelemetry.trace import Link, SpanContext, TraceFlags, TraceState
from opentelemetry.trace.status import Status
from opentelemetry.trace.status import StatusCode as ApiStatusCode

from otel_ebpf import __version__
from otel_ebpf.protocols.base import AttributeValue, NeutralSpan, SpanKind, StatusCode
from otel_ebpf.spans.clock import KernelClock

SCOPE = InstrumentationScope("otel-ebpf", __version__)

# the API's SpanKind counts from 0, OTLP's (and ours) from 1: map by meaning, not value
_KINDS = {kind: trace_api.SpanKind[kind.name] for kind in SpanKind}
_STATUS = {code: ApiStatusCode[code.name] for code in StatusCode}
# a server or consumer span's parent, when known, is the peer's span: it came over the wire
_REMOTE_PARENT = frozenset({SpanKind.SERVER, SpanKind.CONSUMER})
_SAMPLED = TraceFlags(TraceFlags.SAMPLED)

_MAX_RESOURCES = 4096


class _SharedResource(Resource):
    """A Resource that hashes once. The OTLP encoder groups spans in a dict keyed by
    Resource, and Resource.__hash__ JSON-dumps every attribute: a fifth of the encoding
    time, per span, without this."""

    def __init__(self, attributes: Mapping[str, AttributeValue]) -> None:
        super().__init__(dict(attributes))
        self._hash = super().__hash__()

    def __hash__(self) -> int:
        return self._hash


_resources: dict[tuple, Resource] = {}
_resources_lock = threading.Lock()


def resource_for(attributes: Mapping[str, AttributeValue]) -> Resource:
    """One shared Resource per distinct attribute set (resources are per process): building
    one validates and copies every attribute, too much to do per span."""
    key = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in attributes.items()))
    with _resources_lock:
        resource = _resources.get(key)
        if resource is None:
            if len(_resources) >= _MAX_RESOURCES:  # processes come and go: bound it
                _resources.clear()
            resource = _resources[key] = _SharedResource(attributes)
        return resource


def ready(span: NeutralSpan, resource: Resource, clock: KernelClock) -> NeutralSpan:
    """Give the span what export needs beyond itself; returns the span.

    Its start and its end go through the clock's one mapping, so a span that lies inside
    another on the kernel clock lies inside it in wall time too (export/pipeline.py does
    the same inline)."""
    span.resource = resource
    span.wall_ns = clock.to_wall(span.start_ns)
    span.wall_end_ns = clock.to_wall(span.end_ns)
    return span


def event_wall(span: NeutralSpan, time_ns: int) -> int:
    """An event's wall time: placed between the span's wall start and end as its kernel
    time lies between the kernel ones, and kept inside the span. The writers need nothing
    but the span for it (the C one reads no clock), and where the mapping is a plain
    shift over the span (its offset still, as it is but while a clock move is taken up)
    this is the mapping's own value."""
    start, end = span.start_ns, span.end_ns
    if end == start:
        return span.wall_ns
    at = min(max(time_ns, start), end)
    return span.wall_ns + (span.wall_end_ns - span.wall_ns) * (at - start) // (end - start)


def has_remote_parent(span: NeutralSpan) -> bool:
    """A server or consumer span's parent came over the wire: the peer's span."""
    return bool(span.parent_span_id) and span.kind in _REMOTE_PARENT


def to_readable(span: NeutralSpan) -> ReadableSpan:
    """The SDK's ReadableSpan of a ready span (see ready)."""
    trace_id = int.from_bytes(span.trace_id, "big")
    state = TraceState.from_header([span.trace_state]) if span.trace_state else None
    context = SpanContext(trace_id, int.from_bytes(span.span_id, "big"), False, _SAMPLED, state)
    parent = None
    if span.parent_span_id:
        parent = SpanContext(
            trace_id,
            int.from_bytes(span.parent_span_id, "big"),
            span.kind in _REMOTE_PARENT,
            _SAMPLED,
        )
    status_code = _STATUS[span.status]
    # the SDK ignores (and warns about) a description on anything but ERROR
    description = (span.status_message or None) if status_code is ApiStatusCode.ERROR else None
    return ReadableSpan(
        name=span.name,
        context=context,
        parent=parent,
        resource=span.resource,
        attributes=span.attributes,
        events=[
            Event(e.name, dict(e.attributes), event_wall(span, e.time_ns)) for e in span.events
        ],
        links=[
            Link(SpanContext(int.from_bytes(link.trace_id, "big"),
                             int.from_bytes(link.span_id, "big"), True, _SAMPLED),
                 dict(link.attributes))
            for link in span.links
        ],
        kind=_KINDS[span.kind],
        status=Status(status_code, description),
        start_time=span.wall_ns,
        end_time=span.wall_end_ns,
        instrumentation_scope=SCOPE,
    )
