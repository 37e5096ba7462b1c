"""Ready NeutralSpans straight to OTLP protobuf bytes (an ExportTraceServiceRequest),
written field by field. The SDK's encoder builds a message object per span, attribute and value
(~50 µs a span here); the spans the agent makes repeat the same attribute pairs
(method, status, server address...), so each pair is encoded once and reused."""

from __future__ import annotations

import struct
from collections.abc import Iterable, Mapping, Sequence
from typing import Any

from otel_ebpf import _fast
from otel_ebpf.protocols.base import NeutralSpan, StatusCode
from otel_ebpf.spans.convert import SCOPE, event_wall, has_remote_parent

# SpanFlags: the span knows whether its parent is remote, and whether it is
_HAS_IS_REMOTE, _IS_REMOTE = 0x100, 0x200
# encoded attribute pairs kept for reuse; cleared when full (values of high cardinality,
# like ports and paths, would otherwise keep it growing)
_PAIR_CACHE_MAX = 1 << 16

_INT64_MIN, _INT64_MAX = -(2**63), 2**63 - 1
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
        if not _INT64_MIN <= v <= _INT64_MAX:  # not an int64: its digits, as text
            return _field(b"\x0a", str(v).encode())
        return b"\x18" + _varint(v if v >= 0 else v + (1 << 64))
    if t is float:
        return b"\x21" + _double(v)
    if t in (list, tuple):
        return _field(b"\x2a", b"".join(_field(b"\x0a", _any_value(x)) for x in v))
    if t is bytes:
        return _field(b"\x3a", v)
    return _field(b"\x0a", str(v).encode())


_pairs: dict[tuple, bytes] = {}


def _scalar_key(value: Any) -> tuple | None:
    t = type(value)
    if t is str or t is int or t is bool or t is bytes:
        return t, value
    if t is float:  # by its bits: -0.0 == 0.0, and NaN equals nothing
        return t, value.hex()
    return None


def pair_cache_key(key: str, value: Any) -> tuple | None:
    """The pair's identity, types included (True == 1 == 1.0 as dict keys, and without its
    type a 1 after a True was written as the cached boolean; a float by its bits), or None
    for a value not worth or not safe to cache (a sequence holding a sequence, another
    object): written each time."""
    t = type(value)
    if t is list or t is tuple:
        items = []
        for x in value:
            item = _scalar_key(x)
            if item is None:
                return None
            items.append(item)
        return key, t, tuple(items)
    scalar = _scalar_key(value)
    return None if scalar is None else (key, *scalar)


def _key_value(key: str, value: Any) -> bytes:
    """A KeyValue message's bytes, from the cache when this pair was seen before."""
    cache_key = pair_cache_key(key, value)
    encoded = None if cache_key is None else _pairs.get(cache_key)
    if encoded is None:
        encoded = _field(b"\x0a", key.encode()) + _field(b"\x12", _any_value(value))
        if cache_key is not None:
            if len(_pairs) >= _PAIR_CACHE_MAX:
                _pairs.clear()
            _pairs[cache_key] = encoded
    return encoded


def attributes(tag: bytes, attrs: Mapping[str, Any] | None) -> bytes:
    """Each attribute as a repeated KeyValue field with the given tag."""
    if not attrs:
        return b""
    return b"".join([_field(tag, _key_value(k, v)) for k, v in attrs.items()])


def span_proto(span: NeutralSpan) -> bytes:
    """The Span message of a ready NeutralSpan (spans/convert.py: ready), as the SDK's
    encoder writes it for the ReadableSpan made of it; the reference for the C writer."""
    parts = [b"\x0a\x10", span.trace_id, b"\x12\x08", span.span_id]
    if len(span.trace_id) != 16 or len(span.span_id) != 8:
        raise ValueError(f"span {span.name!r}: IDs not assigned")
    if span.trace_state:
        parts.append(_field(b"\x1a", span.trace_state.encode()))
    parent = span.parent_span_id
    if parent and int.from_bytes(parent, "big"):
        parts += (b"\x22\x08", parent)
    parts += (
        _field(b"\x2a", span.name.encode()),
        b"\x30", _SMALL[span.kind],
        b"\x39", _fixed64(span.wall_ns),
        b"\x41", _fixed64(span.wall_end_ns),
        attributes(b"\x4a", span.attributes),
    )
    for event in span.events:
        parts.append(_field(b"\x5a", b"".join((
            b"\x09", _fixed64(event_wall(span, event.time_ns)),
            _field(b"\x12", event.name.encode()),
            attributes(b"\x1a", event.attributes)))))
    for link in span.links:
        parts.append(_field(b"\x6a", b"".join((
            b"\x0a\x10", link.trace_id, b"\x12\x08", link.span_id,
            attributes(b"\x22", link.attributes),
            b"\x35", _fixed32(_HAS_IS_REMOTE | _IS_REMOTE)))))  # a link is to a peer's span
    body = b""
    if span.status == StatusCode.ERROR and span.status_message:
        body += _field(b"\x12", span.status_message.encode())
    if span.status:
        body += b"\x18" + _SMALL[span.status]
    parts.append(_field(b"\x7a", body))
    remote = _IS_REMOTE if has_remote_parent(span) else 0
    parts += (b"\x85\x01", _fixed32(_HAS_IS_REMOTE | remote))
    return b"".join(parts)


def by_resource(spans: Iterable[NeutralSpan]) -> list[tuple[Any, list[NeutralSpan]]]:
    """[(resource, [span, ...])], in first-seen order: the nesting OTLP wants (one scope,
    the agent's). Resources are shared objects (spans/convert.py), grouped by identity,
    not by hash."""
    groups: dict[int, tuple[Any, list[NeutralSpan]]] = {}
    for span in spans:
        resource = span.resource
        entry = groups.get(id(resource))
        if entry is None:
            entry = groups[id(resource)] = (resource, [])
        entry[1].append(span)
    return list(groups.values())


def _scope(scope: Any) -> bytes:
    if scope is None:
        return b""
    out = _field(b"\x0a", scope.name.encode())
    if scope.version:
        out += _field(b"\x12", scope.version.encode())
    return out


def spans_to_otlp_proto(spans: Sequence[NeutralSpan]) -> bytes:
    """One ExportTraceServiceRequest of ready spans, serialized."""
    scope = _field(b"\x0a", _scope(SCOPE))
    out = []
    fast = _fast.otlp
    for resource, members in by_resource(spans):
        if fast is not None:  # the same bytes, written in C (otel_ebpf/_fast/otlp.c)
            encoded = fast.spans(members, span_proto)  # what it leaves to C: span_proto's
        else:
            encoded = b"".join([_field(b"\x12", span_proto(s)) for s in members])
        parts = [_field(b"\x0a", attributes(b"\x0a", resource.attributes)),
                 _field(b"\x12", scope + encoded)]
        if resource.schema_url:
            parts.append(_field(b"\x1a", resource.schema_url.encode()))
        out.append(_field(b"\x0a", b"".join(parts)))
    return b"".join(out)
