"""ReadableSpans straight to OTLP protobuf bytes (an ExportTraceServiceRequest), written
field by field. The SDK's encoder builds a message object per span, attribute and value
(~50 µs a span here); the spans the agent makes repeat the same attribute pairs
(method, status, server address...), so each pair is encoded once and reused."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from opentelemetry.sdk.trace import ReadableSpan

from otel_ebpf import _fast

# OTLP's SpanKind counts from 1 (UNSPECIFIED = 0); the API's from 0 (INTERNAL = 0)
_KIND_OFFSET = 1
# SpanFlags: the span knows whether its parent is remote, and whether it is
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200
# encoded attribute pairs kept for reuse; cleared when full (values of high cardinality,
# like ports and paths, would otherwise keep it growing)
_PAIR_CACHE_MAX = 1 << 16

_fixed64 = struct.Struct("<Q").pack
_fixed32 = struct.Struct("<I").pack
_double = struct.Struct("<d").pack
_SMALL = [bytes((n,)) for n in range(128)]


def _varint(n: int) -> bytes:
    if n < 128:
        return _SMALL[n]
    out = bytearray()
    while n >= 128:
        out.append((n & 0x7F) | 0x80)
        n >>= 7
    out.append(n)
    return bytes(out)


def _field(tag: bytes, payload: bytes) -> bytes:
    """A length-delimited field: tag, length, payload."""
    return tag + _varint(len(payload)) + payload


def _any_value(v: Any) -> bytes:
    """An AnyValue message's bytes (the SDK's mapping: bool before int, sequences as arrays)."""
    t = type(v)
    if t is str:
        return _field(b"\x0a", v.encode())
    if t is bool:
        return b"\x10\x01" if v else b"\x10\x00"
    if t is int:
        return b"\x18" + _varint(v if v >= 0 else v + (1 << 64))
    if t is float:
        return b"\x21" + _double(v)
    if t in (list, tuple):
        return _field(b"\x2a", b"".join(_field(b"\x0a", _any_value(x)) for x in v))
    if t is bytes:
        return _field(b"\x3a", v)
    return _field(b"\x0a", str(v).encode())


_pairs: dict[tuple, bytes] = {}


def pair_cache_key(key: str, value: Any) -> tuple:
    """The pair's identity, types included: True == 1 == 1.0 as dict keys, and without its
    type a 1 after a True was written as the cached boolean."""
    if type(value) is list:
        return key, list, tuple((type(x), x) for x in value)
    return key, type(value), value


def _key_value(key: str, value: Any) -> bytes:
    """A KeyValue message's bytes, from the cache when this pair was seen before."""
    cache_key = pair_cache_key(key, value)
    encoded = _pairs.get(cache_key)
    if encoded is None:
        encoded = _field(b"\x0a", key.encode()) + _field(b"\x12", _any_value(value))
        if len(_pairs) >= _PAIR_CACHE_MAX:
            _pairs.clear()
        _pairs[cache_key] = encoded
    return encoded


def attributes(tag: bytes, attrs: Mapping[str, Any] | None) -> bytes:
    """Each attribute as a repeated KeyValue field with the given tag."""
    if not attrs:
        return b""
    return b"".join([_field(tag, _key_value(k, v)) for k, v in attrs.items()])


def _span(span: ReadableSpan) -> bytes:
    ctx = span.get_span_context()
    parent = span.parent
    fast = _fast.otlp
    if fast is not None and not span.events and not span.links:
        # the same bytes, written in C (otel_ebpf/_fast/otlp.c); None: a value it leaves here
        status = span.status
        encoded = fast.span(
            ctx.trace_id, ctx.span_id,
            ctx.trace_state.to_header().encode() if ctx.trace_state else b"",
            parent.span_id if parent is not None else 0,
            parent is not None and parent.is_remote, span.name,
            span.kind.value + _KIND_OFFSET, span.start_time, span.end_time, span.attributes,
            status.description or "", status.status_code.value)
        if encoded is not None:
            return encoded
    parts = [b"\x0a\x10", ctx.trace_id.to_bytes(16, "big"),
             b"\x12\x08", ctx.span_id.to_bytes(8, "big")]
    trace_state = ctx.trace_state.to_header() if ctx.trace_state else ""
    if trace_state:
        parts.append(_field(b"\x1a", trace_state.encode()))
    if parent is not None and parent.span_id:
        parts += (b"\x22\x08", parent.span_id.to_bytes(8, "big"))
    parts += (
        _field(b"\x2a", span.name.encode()),
        b"\x30", _SMALL[span.kind.value + _KIND_OFFSET],
        b"\x39", _fixed64(span.start_time),
        b"\x41", _fixed64(span.end_time),
        attributes(b"\x4a", span.attributes),
    )
    for event in span.events:
        parts.append(_field(b"\x5a", b"".join((
            b"\x09", _fixed64(event.timestamp),
            _field(b"\x12", event.name.encode()),
            attributes(b"\x1a", event.attributes)))))
    for link in span.links:
        remote = _IS_REMOTE if link.context.is_remote else 0
        parts.append(_field(b"\x6a", b"".join((
            b"\x0a\x10", link.context.trace_id.to_bytes(16, "big"),
            b"\x12\x08", link.context.span_id.to_bytes(8, "big"),
            attributes(b"\x22", link.attributes),
            b"\x35", _fixed32(_HAS_IS_REMOTE | remote)))))
    status = span.status
    body = b""
    if status.description:
        body += _field(b"\x12", status.description.encode())
    if status.status_code.value:
        body += b"\x18" + _SMALL[status.status_code.value]
    parts.append(_field(b"\x7a", body))
    remote = _IS_REMOTE if parent is not None and parent.is_remote else 0
    parts += (b"\x85\x01", _fixed32(_HAS_IS_REMOTE | remote))
    return b"".join(parts)


def by_resource_and_scope(spans: Iterable[ReadableSpan]) -> list[tuple[Any, dict[Any, list]]]:
    """[(resource, {scope: [span, ...]})], in first-seen order: the nesting OTLP wants.
    Resources are shared objects (spans/convert.py), grouped by identity, not by hash."""
    groups: dict[int, tuple[Any, dict[Any, list]]] = {}
    for span in spans:
        resource = span.resource
        entry = groups.get(id(resource))
        if entry is None:
            entry = groups[id(resource)] = (resource, {})
        entry[1].setdefault(span.instrumentation_scope, []).append(span)
    return list(groups.values())


def _scope(scope: Any) -> bytes:
    if scope is None:
        return b""
    out = _field(b"\x0a", scope.name.encode())
    if scope.version:
        out += _field(b"\x12", scope.version.encode())
    return out


def spans_to_otlp_proto(spans: Sequence[ReadableSpan]) -> bytes:
    """One ExportTraceServiceRequest, serialized."""
    out = []
    for resource, scopes in by_resource_and_scope(spans):
        parts = [_field(b"\x0a", attributes(b"\x0a", resource.attributes))]
        for scope, members in scopes.items():
            scope_spans = _field(b"\x0a", _scope(scope)) + b"".join(
                [_field(b"\x12", _span(s)) for s in members])
            parts.append(_field(b"\x12", scope_spans))
        if resource.schema_url:
            parts.append(_field(b"\x1a", resource.schema_url.encode()))
        out.append(_field(b"\x0a", b"".join(parts)))
    return b"".join(out)
