"""Encoded spans carry the clock's mapping of their start and their end, and their events
between the two, whichever writer writes them: protobuf or JSON, in C or in Python."""

from __future__ import annotations

import orjson
import pytest
from opentelemetry.proto.collector.trace.v1.trace_service_pb2 import ExportTraceServiceRequest

from otel_ebpf import _fast
from otel_ebpf.export.otlp_json import spans_to_otlp_json
from otel_ebpf.export.otlp_proto import spans_to_otlp_proto
from tests.unit.otlp_samples import sample_spans, stepping_clock


def _proto_times(spans) -> list[tuple[int, int, list[int]]]:
    request = ExportTraceServiceRequest.FromString(spans_to_otlp_proto(spans))
    return [(s.start_time_unix_nano, s.end_time_unix_nano,
             [e.time_unix_nano for e in s.events])
            for rs in request.resource_spans for ss in rs.scope_spans for s in ss.spans]


def _json_times(spans) -> list[tuple[int, int, list[int]]]:
    document = orjson.loads(spans_to_otlp_json(spans))
    return [(int(s["startTimeUnixNano"]), int(s["endTimeUnixNano"]),
             [int(e["timeUnixNano"]) for e in s.get("events", [])])
            for rs in document["resourceSpans"] for ss in rs["scopeSpans"] for s in ss["spans"]]


@pytest.mark.parametrize("written_in", ["C", "Python"])
@pytest.mark.parametrize("times_of", [_proto_times, _json_times], ids=["proto", "json"])
def test_encoded_times_are_the_mapping_of_the_kernel_times(monkeypatch, written_in, times_of):
    if written_in == "Python":
        monkeypatch.setattr(_fast, "otlp", None)
    elif _fast.otlp is None:
        pytest.skip("otel_ebpf._fast.otlp is not built")
    clock = stepping_clock()
    spans = sample_spans(clock)
    # by resource, as written: the sample's spans alternate between two processes
    spans_in_order = spans[0::2] + spans[1::2]
    # the clock is absorbing a step: the end is not the start plus the kernel duration
    assert all(clock.to_wall(s.end_ns) - clock.to_wall(s.start_ns) != s.end_ns - s.start_ns
               for s in spans)
    expected = []
    for span in spans_in_order:
        start, end = clock.to_wall(span.start_ns), clock.to_wall(span.end_ns)
        # events are placed between the two as their kernel times lie between the span's
        events = [start + (end - start) * (e.time_ns - span.start_ns)
                  // (span.end_ns - span.start_ns) for e in span.events]
        expected.append((start, end, events))
    assert times_of(spans) == expected
    assert any(events for _, _, events in expected)
