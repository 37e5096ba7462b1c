"""The compiled span writers (otel_ebpf/_fast/otlp.c) against otel_ebpf/export/otlp_proto.py
and otlp_json.py, the reference: the same spans give the same bytes, attribute values of
every type, events and links included; what the C code leaves to Python (an unusual value
type, a number past 64 bits, IDs of another size) still comes out the same."""

from __future__ import annotations

import enum

import orjson
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.base import NeutralSpan, SpanEvent, SpanKind, SpanLink, StatusCode

from otel_ebpf import _fast
from otel_ebpf.export import otlp_json, otlp_proto
from otel_ebpf.spans.clock import KernelClock
from otel_ebpf.spans.convert import ready, resource_for
from tests.unit.otlp_samples import CONN, sample_spans

if _fast.PURE_PYTHON:
    pytest.skip("OTEL_EBPF_PURE_PYTHON=1: no compiled path to compare", allow_module_level=True)


class Color(enum.IntEnum):  # a subclass of int: Python's str(v) path, not C's int
    RED = 1


ENCODERS = (otlp_proto.spans_to_otlp_proto, otlp_json.spans_to_otlp_json)


def _both(spans, monkeypatch, encode) -> tuple[bytes, bytes]:
    assert _fast.otlp is not None, "otel_ebpf._fast.otlp is not built (make install)"
    fast = encode(spans)
    with monkeypatch.context() as m:
        m.setattr(_fast, "otlp", None)
        slow = encode(spans)
    return fast, slow


@pytest.mark.parametrize("encode", ENCODERS)
def test_sample_spans_byte_for_byte(monkeypatch, encode):
    fast, slow = _both(sample_spans(), monkeypatch, encode)
    assert fast == slow


text = st.text(max_size=40) | st.sampled_from(["\x00\x1f\"\\/\x7f", "é→\u2028", "\ud800"])
scalars = st.one_of(text, st.booleans(), st.integers(-(2**63), 2**64 - 1),
                    st.integers(-(2**70), 2**70), st.floats(), st.binary(max_size=8),
                    st.just(Color.RED))
values = st.one_of(scalars, st.lists(scalars, max_size=4), st.tuples(scalars, scalars),
                   st.lists(st.lists(scalars, max_size=2) | scalars, max_size=3))
attributes = st.dictionaries(text, values, max_size=8)


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(attrs=attributes, name=text, kind=st.sampled_from(list(SpanKind)),
       status=st.sampled_from(list(StatusCode)), message=text,
       times=st.tuples(st.integers(0, 2**62), st.integers(0, 2**62)),
       parent=st.one_of(st.just(b""), st.just(bytes(8)), st.binary(min_size=8, max_size=8)),
       ids=st.tuples(st.binary(min_size=16, max_size=16), st.binary(min_size=8, max_size=8)),
       events=st.lists(st.tuples(text, st.integers(0, 2**40), attributes), max_size=2),
       links=st.lists(st.tuples(st.binary(min_size=16, max_size=16),
                                st.binary(min_size=8, max_size=8), attributes), max_size=2),
       trace_state=st.just("") | st.just("ot=th:c") | text)
def test_random_spans_byte_for_byte(monkeypatch, attrs, name, kind, status, message, times,
                                    parent, ids, events, links, trace_state):
    span = NeutralSpan(name=name, kind=kind, start_ns=times[0], end_ns=times[1], conn=CONN,
                       attributes=attrs, status=status, status_message=message,
                       trace_id=ids[0], span_id=ids[1], parent_span_id=parent,
                       events=[SpanEvent(n, t, a) for n, t, a in events],
                       links=[SpanLink(t, s, a) for t, s, a in links], trace_state=trace_state)
    spans = [ready(span, resource_for({"service.name": "t"}), KernelClock())]
    for encode in ENCODERS:
        try:
            slow = encode(spans)
        except (UnicodeEncodeError, orjson.JSONEncodeError, struct_error()):
            # Python's own refusal (surrogates, a time past 64 bits): C leaves it to Python
            with pytest.raises((UnicodeEncodeError, orjson.JSONEncodeError, struct_error())):
                _both(spans, monkeypatch, encode)
            continue
        fast, slow = _both(spans, monkeypatch, encode)
        assert fast == slow


# times of any size the fields may hold: past 2^62 (where kernel and wall times added in
# signed 64 bits overflowed), past 64 bits, negative; events before, in and after the span
times = st.one_of(st.integers(0, 2**64 - 1), st.integers(2**62, 2**64 - 1),
                  st.integers(-(2**63), 2**65))


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow,
                                                                   HealthCheck.function_scoped_fixture])
@given(kernel=st.tuples(times, times), wall=st.tuples(times, times),
       events=st.lists(times, max_size=3))
def test_any_times_byte_for_byte(monkeypatch, kernel, wall, events):
    span = sample_spans()[2]
    span.start_ns, span.end_ns = kernel
    span.wall_ns, span.wall_end_ns = wall
    span.events = [SpanEvent("e", t) for t in events]
    for encode in ENCODERS:
        try:
            slow = encode([span])
        except struct_error():  # a time a fixed64 cannot hold: C leaves it to Python
            with pytest.raises(struct_error()):
                _both([span], monkeypatch, encode)
            continue
        fast, slow = _both([span], monkeypatch, encode)
        assert fast == slow


@pytest.mark.parametrize("encode", ENCODERS)
def test_times_past_2_to_the_62_are_written_in_c(monkeypatch, encode):
    span = sample_spans()[2]  # with events
    span.start_ns, span.end_ns = 2**63 - 10, 2**64 - 1
    span.wall_ns, span.wall_end_ns = 2**63 + 2**62, 2**64 - 1
    assert _fast.otlp.span(span) is not None
    assert _fast.otlp.span_json(span, orjson.dumps) is not None
    fast, slow = _both([span], monkeypatch, encode)
    assert fast == slow


def struct_error() -> type[Exception]:
    import struct  # noqa: PLC0415
    return struct.error


def test_common_spans_are_written_in_c():
    """Not vacuous: an HTTP span, events and links are all C's to write."""
    for span in sample_spans():
        assert _fast.otlp.span(span) is not None, span.name
        assert _fast.otlp.span_json(span, orjson.dumps) is not None, span.name
    # past 64 bits, other types and IDs not yet assigned are Python's to encode (or refuse)
    span = sample_spans()[0]
    for odd in (2**63, 2**64, -(2**63) - 1, Color.RED, object()):
        span.attributes = {"v": odd}
        assert _fast.otlp.span(span) is None
    span.attributes, span.span_id = {}, b""
    assert _fast.otlp.span(span) is None and _fast.otlp.span_json(span, orjson.dumps) is None


@pytest.mark.parametrize("encode", ENCODERS)
def test_a_batch_mixing_spans_c_writes_and_spans_it_leaves_to_python(monkeypatch, encode):
    spans = sample_spans()
    spans[1].attributes = {"odd": Color.RED, "big": 2**70}  # Python's, in the middle
    spans[-1].attributes = {"v": object()}  # and at the end
    assert _fast.otlp.span(spans[1]) is None and _fast.otlp.span(spans[-1]) is None
    fast, slow = _both(spans, monkeypatch, encode)
    assert fast == slow


@pytest.mark.parametrize("encode", ENCODERS)
def test_nested_sequences_and_signed_zeros_byte_for_byte(monkeypatch, encode):
    """Values the Python writers' pair cache once got wrong: a list holding a list (its key
    was unhashable: TypeError) and 0.0 after -0.0 (equal as keys: the cached -0.0 was
    written for it). Each span alone, in both orders, and after each other."""
    first, *_ = sample_spans()
    for attrs in ({"k": [[]]}, {"k": [[1, "a"], 2.5]}, {"k": ([],)},
                  {"z": -0.0}, {"z": 0.0}, {"z": float("nan")}, {"z": [-0.0, 0.0]}):
        first.attributes = dict(attrs)
        fast, slow = _both([first], monkeypatch, encode)
        assert fast == slow, attrs
        again_fast, again_slow = _both([first], monkeypatch, encode)
        assert again_fast == fast and again_slow == slow, attrs  # a cached pair: the same
    # 0.0 written after -0.0 is a positive zero (its own bits), in the reference alone too
    with monkeypatch.context() as m:
        m.setattr(_fast, "otlp", None)
        first.attributes = {"z": -0.0}
        negative = encode([first])
        first.attributes = {"z": 0.0}
        assert encode([first]) != negative
