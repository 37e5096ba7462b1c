"""Random trace and span IDs for spans that correlation left without them."""

from __future__ import annotations

import random

from otel_ebpf.protocols.base import NeutralSpan


def random_id(nbytes: int) -> bytes:
    # Like the SDK's RandomIdGenerator: random.getrandbits is fast, reseeded after fork,
    # and all-zero IDs are invalid in W3C trace context and OTLP, so they are redrawn.
    while not (value := random.getrandbits(8 * nbytes)):
        pass
    return value.to_bytes(nbytes, "big")


_ZERO_TRACE, _ZERO_SPAN = bytes(16), bytes(8)


def _valid(value: bytes, nbytes: int) -> bool:
    return len(value) == nbytes and any(value)


def assign_ids(spans: list[NeutralSpan]) -> None:
    """Give every span without one a random 16-byte trace ID and 8-byte span ID, in place."""
    for span in spans:
        # _valid inline (two calls per span): of the right length, a value other than
        # all zeros is one with a byte that is not zero
        trace, span_id = span.trace_id, span.span_id
        if len(trace) != 16 or trace == _ZERO_TRACE:
            span.trace_id = random_id(16)
        if len(span_id) != 8 or span_id == _ZERO_SPAN:
            span.span_id = random_id(8)
