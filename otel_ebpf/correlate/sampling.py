"""Consistent head sampling: a trace is kept or dropped by its trace ID alone.

OpenTelemetry's consistent probability sampling: the last 56 bits of the trace ID are its
randomness R (W3C Trace Context level 2 makes them random; ours are random or a SHA-256),
and a trace is kept when R >= T, the rejection threshold T = (1 - ratio) * 2^56. Every
agent with the same ratio, on any host, keeps exactly the same traces without talking.
`th_value` is T as the tracestate `ot=th:` field writes it (what a Collector's
probabilistic sampler reads).
"""

from __future__ import annotations

from fractions import Fraction

from otel_ebpf.protocols.base import NeutralSpan

RANDOM_BITS = 56
_MAX = 1 << RANDOM_BITS
_HEX_DIGITS = RANDOM_BITS // 4


def threshold(ratio: float) -> int:
    """The rejection threshold T for a ratio in [0, 1]: 0 keeps all, 2^56 none."""
    if not 0.0 <= ratio <= 1.0:
        raise ValueError(f"a sampling ratio is from 0 to 1, not {ratio!r}")
    # exactly, from the float's own value: (1 - ratio) * 2^56 in floats is off by a few
    return min(_MAX, max(0, round((1 - Fraction(ratio)) * _MAX)))


def th_value(t: int) -> str | None:
    """T as the tracestate `th` value (14 hex digits, trailing zeros dropped; `0` for
    everything), or None for T = 2^56, which keeps nothing and so is never written."""
    if t >= _MAX:
        return None
    return f"{t:0{_HEX_DIGITS}x}".rstrip("0") or "0"


class HeadSampler:
    """keep(spans) -> the spans of kept traces; every span has its trace ID by then
    (assign_ids), so a root without one is decided on the ID it will be exported with."""

    def __init__(self, ratio: float) -> None:
        self.ratio = ratio
        self.threshold = threshold(ratio)
        th = th_value(self.threshold)
        # what a kept span says of its sampling, for a Collector or backend to count with
        self.trace_state = f"ot=th:{th}" if th is not None and self.threshold else ""

    def describe(self) -> str:
        th = th_value(self.threshold)
        return (f"sampling.ratio {self.ratio:g}: a trace is exported when its ID's last 56 "
                f"bits are at least the threshold (tracestate th:{th})" if th is not None
                else "sampling.ratio 0: no trace is exported")

    def keeps(self, trace_id: bytes) -> bool:
        return int.from_bytes(trace_id[-7:], "big") >= self.threshold

    def keep(self, spans: list[NeutralSpan]) -> list[NeutralSpan]:
        """The spans of kept traces, each with the `ot=th:` tracestate of this ratio."""
        if self.threshold == 0:
            return spans
        keeps = self.keeps
        kept = [s for s in spans if keeps(s.trace_id)]
        for span in kept:
            span.trace_state = self.trace_state
        return kept
