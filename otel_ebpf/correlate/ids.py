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


def _valid(value: bytes, nbytes: int) -> bool:
    return len(value) == nbytes and any(value)


def assign_ids(spans: list[NeutralSpan]) -> None:
    """Give every span without one a random 16-byte trace ID and 8-byte span ID, in place."""
    for span in spans:
        if not _valid(span.trace_id, 16):
            span.trace_id = random_id(16)
        if not _valid(span.span_id, 8):
            span.span_id = random_id(8)
