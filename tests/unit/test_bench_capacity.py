"""bench/agent_capacity.py counts spans in the file exporter's output by the bytes of their
kind field: the same counts as parsing the JSON, also when attribute values and names hold
those bytes (escaped in a JSON string), and across reads that end mid-line."""

from __future__ import annotations

import json
from pathlib import Path

from otel_ebpf.protocols.base import ConnInfo, NeutralSpan, Role, SpanKind

from bench import agent_capacity as capacity
from otel_ebpf.correlate import assign_ids
from otel_ebpf.export.file import FileSpanExporter
from otel_ebpf.spans.clock import KernelClock
from otel_ebpf.spans.convert import ready, resource_for

CONN = ConnInfo(pid=7, fd=3, generation=1, role=Role.CLIENT, transport="stream", family="ipv4")
TRICKY = '{"kind":2} "kind":3'  # what a span's kind field looks like, inside a string


def _spans(kinds):
    spans = [NeutralSpan(name=f"GET /{TRICKY}/{i}", kind=kind, start_ns=1_000 + i,
                         end_ns=2_000 + i, conn=CONN, attributes={"note": TRICKY})
             for i, kind in enumerate(kinds)]
    assign_ids(spans)
    resource = resource_for({"service.name": "svc", "process.pid": 7})
    return [ready(s, resource, KernelClock()) for s in spans]


def _parsed(path: Path) -> dict[int, int]:
    counts: dict[int, int] = {}
    for line in path.read_text().splitlines():
        for rs in json.loads(line)["resourceSpans"]:
            for ss in rs["scopeSpans"]:
                for s in ss["spans"]:
                    counts[s["kind"]] = counts.get(s["kind"], 0) + 1
    return counts


def test_counts_equal_the_parsed_ones(tmp_path):
    path = tmp_path / "traces.jsonl"
    exporter = FileSpanExporter(str(path))
    counter = capacity.SpanCounter(path)
    assert counter.poll() == 0
    batches = [[SpanKind.SERVER, SpanKind.CLIENT, SpanKind.CLIENT],
               [SpanKind.INTERNAL, SpanKind.SERVER], [SpanKind.PRODUCER]]
    for batch in batches:
        exporter.export(_spans(batch))
        counter.poll()
    exporter.shutdown()
    parsed = _parsed(path)
    assert parsed == {2: 2, 3: 2, 1: 1, 4: 1}
    assert counter.kinds == {"server": 2, "client": 2, "other": 2}
    assert counter.total == sum(parsed.values())


def test_a_line_cut_by_the_read_is_counted_once_whole(tmp_path):
    path = tmp_path / "traces.jsonl"
    exporter = FileSpanExporter(str(path))
    exporter.export(_spans([SpanKind.SERVER, SpanKind.CLIENT]))
    exporter.shutdown()
    line = path.read_bytes()
    cut = line.index(b'"kind":3') + 3
    other = tmp_path / "growing.jsonl"
    other.write_bytes(line[:cut])
    counter = capacity.SpanCounter(other)
    assert counter.poll() == 0  # no whole line yet
    with other.open("ab") as f:
        f.write(line[cut:])
    assert counter.poll() == 2 and counter.kinds == {"server": 1, "client": 1}


def test_otlp_receiver_counts_what_the_agents_exporter_sent(tmp_path):
    """--exporter otlp: the real receiver (rotel) the bench starts takes the agent's OTLP/gRPC
    exporter's requests, and the counter sums the spans of each request it logged."""
    from otel_ebpf.export.otlp_grpc import GrpcSpanExporter  # noqa: PLC0415

    receiver = capacity.Receiver(tmp_path, 0)
    try:
        exporter = GrpcSpanExporter(endpoint=f"127.0.0.1:{receiver.port}", insecure=True)
        for n in (3, 1, 5):
            assert exporter.export(_spans([SpanKind.CLIENT, SpanKind.SERVER] * n)).name == \
                "SUCCESS"
        exporter.shutdown()
        counter = capacity.RotelCounter(receiver.out)
        assert counter.wait_for(18, 10.0) is not None
        assert counter.total == 18 and dict(counter.kinds) == {"otlp": 18}
    finally:
        receiver.stop()
