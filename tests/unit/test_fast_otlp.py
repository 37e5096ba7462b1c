"""The compiled Span writer (otel_ebpf/_fast/otlp.c) against otel_ebpf/export/otlp_proto.py,
the reference: the same spans give the same bytes, attribute values of every type included;
what the C code leaves to Python (an unusual value type, a number past 64 bits) still
comes out the same."""

from __future__ import annotations

import enum

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from otel_ebpf import _fast
from otel_ebpf.export import otlp_proto
from otel_ebpf.protocols.base import NeutralSpan, SpanKind, StatusCode
from otel_ebpf.spans.clock import KernelClock
from otel_ebpf.spans.convert import resource_for, to_readable

from tests.unit.otlp_samples import CONN, sample_spans

if _fast.PURE_PYTHON:
    pytest.skip("OTEL_EBPF_PURE_PYTHON=1: no compiled path to compare", allow_module_level=True)


class Color(enum.IntEnum):  # a subclass of int: Python's str(v) path, not C's int
    RED = 1


def _both(spans, monkeypatch) -> tuple[bytes, bytes]:
    assert _fast.otlp is not None, "otel_ebpf._fast.otlp is not built (make install)"
    fast = otlp_proto.spans_to_otlp_proto(spans)
    with monkeypatch.context() as m:
        m.setattr(_fast, "otlp", None)
        slow = otlp_proto.spans_to_otlp_proto(spans)
    return fast, slow


def test_sample_spans_byte_for_byte(monkeypatch):
    fast, slow = _both(sample_spans(), monkeypatch)
    assert fast == slow


scalars = st.one_of(st.text(max_size=40), st.booleans(), st.integers(-(2**63), 2**64 - 1),
                    st.floats(allow_nan=False), st.binary(max_size=8),
                    st.just(Color.RED))
values = st.one_of(scalars, st.lists(scalars, max_size=4), st.tuples(scalars, scalars))


@settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(attrs=st.dictionaries(st.text(max_size=20), values, max_size=8),
       name=st.text(max_size=300), kind=st.sampled_from(list(SpanKind)),
       status=st.sampled_from(list(StatusCode)), message=st.text(max_size=10),
       times=st.tuples(st.integers(0, 2**63), st.integers(0, 2**63)),
       parent=st.one_of(st.just(b""), st.binary(min_size=8, max_size=8)),
       ids=st.tuples(st.binary(min_size=16, max_size=16), st.binary(min_size=8, max_size=8)))
def test_random_spans_byte_for_byte(monkeypatch, attrs, name, kind, status, message, times,
                                    parent, ids):
    span = NeutralSpan(name=name, kind=kind, start_ns=times[0], end_ns=times[1], conn=CONN,
                       attributes=attrs, status=status,
                       status_message=message if status == StatusCode.ERROR else "",
                       trace_id=ids[0], span_id=ids[1], parent_span_id=parent)
    readable = [to_readable(span, resource_for({"service.name": "t"}), KernelClock())]
    try:
        slow = otlp_proto.spans_to_otlp_proto(readable)
    except (UnicodeEncodeError, AttributeError):  # Python's own failure (surrogates): C's too
        with pytest.raises((UnicodeEncodeError, AttributeError)):
            _both(readable, monkeypatch)
        return
    fast, slow = _both(readable, monkeypatch)
    assert fast == slow


def test_common_spans_are_written_in_c():
    """Not vacuous: an HTTP span's attributes are all C's to write."""
    readable = sample_spans()[0]
    ctx = readable.get_span_context()
    assert _fast.otlp.span(ctx.trace_id, ctx.span_id, b"", readable.parent.span_id, False,
                           readable.name, 3, 1, 2, readable.attributes, "", 0) is not None
    # past 64 bits and other types are Python's to encode (or to refuse)
    for odd in (2**64, -(2**63) - 1, Color.RED, object()):
        assert _fast.otlp.span(ctx.trace_id, ctx.span_id, b"", 0, False, "n", 1, 1, 2,
                               {"v": odd}, "", 0) is None
