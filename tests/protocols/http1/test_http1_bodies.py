"""Bodies a layer wants: read into timed pieces (not skipped), across uncaptured middles,
with the layer's enrich called on the finished exchange."""

from __future__ import annotations

import pytest
from otel_ebpf.protocols.base import Direction, Role
from otel_ebpf.protocols.http1 import HTTP1Parser
from otel_ebpf.protocols.testing import ConnectionDriver, EchoLayer, conn_info

OUT, IN = Direction.EGRESS, Direction.INGRESS


def _client(layer: EchoLayer) -> ConnectionDriver:
    return ConnectionDriver(HTTP1Parser(), conn_info(Role.CLIENT), layers=(layer,))


def test_length_body_is_read_with_head_and_tail_of_a_long_write():
    layer = EchoLayer()
    t = _client(layer)
    body = b'{"messages":"' + b"x" * 10_000 + b'","model":"m7"}'
    t.feed(OUT, b"POST /api/chat HTTP/1.1\r\nHost: h\r\nContent-Type: application/json\r\n"
           b"Content-Length: %d\r\n\r\n" % len(body), at=100)
    # one write: 1000 bytes captured, the middle not, the last 20 bytes sent as a tail
    t.feed(OUT, body[:1000], gap=len(body) - 1020, tail=body[-20:], at=200)
    t.feed(IN, b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: 11\r\n\r\n"
           b'{"id":"r1"}', at=300)
    (span,) = t.spans()
    assert span.name == "echo /api/chat"
    ex = layer.seen
    assert ex.request_content_type == "application/json" and ex.status == 200
    req = ex.request_body
    assert req.size == len(body) and req.lost == len(body) - 1020 and not req.complete
    assert req.contiguous() == body[:1000] and req.tail() == body[-20:]
    assert [p.ns for p in req.pieces] == [200, 200]
    assert ex.response_body.complete and ex.response_body.contiguous() == b'{"id":"r1"}'
    assert span.attributes["http.request.body.size"] == len(body)
    assert ex.start_ns == 100 and ex.request_end_ns == 200 and ex.response_start_ns == 300
    assert t.resyncs == 1  # the uncaptured middle is a gap, stepped over, not a resync
    assert t.invalid == 0


def test_chunked_sse_pieces_carry_each_chunks_time():
    layer = EchoLayer()
    t = _client(layer)
    t.feed(OUT, b"POST /api/s HTTP/1.1\r\nHost: h\r\nContent-Length: 2\r\n\r\n{}", at=10)
    t.feed(IN, b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
           b"Transfer-Encoding: chunked\r\n\r\n", at=1_000)
    events = [b"data: a\n\n", b"data: bb\n\n", b"data: [DONE]\n\n"]
    for i, ev in enumerate(events):
        t.feed(IN, b"%x\r\n%s\r\n" % (len(ev), ev), at=2_000 + i * 500)
    t.feed(IN, b"0\r\n\r\n", at=4_000)
    (span,) = t.spans()
    body = layer.seen.response_body
    assert [(p.offset, p.ns, p.data) for p in body.pieces] == [
        (0, 2_000, events[0]), (9, 2_500, events[1]), (19, 3_000, events[2])]
    assert body.complete and span.end_ns == 4_000
    assert span.attributes["http.response.body.size"] == sum(map(len, events))


@pytest.mark.parametrize("split", [1, 3, 7])
def test_chunked_body_read_in_any_split(split):
    layer = EchoLayer()
    t = _client(layer)
    t.feed(OUT, b"POST /api/s HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
    wire = (b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
            b"5\r\nhello\r\n6\r\n world\r\n0\r\n\r\n")
    for i in range(0, len(wire), split):
        t.feed(IN, wire[i : i + split])
    t.feed(OUT, b"GET /next HTTP/1.1\r\n\r\n")
    t.feed(IN, b"HTTP/1.1 204 No Content\r\n\r\n")
    spans = t.spans()
    assert [s.name for s in spans] == ["echo /api/s", "GET"]
    assert layer.seen.response_body.contiguous() == b"hello world"
    assert layer.seen.response_body.complete
    assert t.invalid == 0


def test_lost_bytes_inside_a_chunk_are_stepped_over():
    layer = EchoLayer()
    t = _client(layer)
    t.feed(OUT, b"POST /api/s HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
    t.feed(IN, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    t.feed(IN, b"a\r\n0123", gap=6)  # the chunk's last 6 data bytes were not captured
    t.feed(IN, b"\r\n3\r\nxyz\r\n0\r\n\r\n")
    (span,) = t.spans()
    body = layer.seen.response_body
    assert body.size == 13 and body.lost == 6 and body.tail() == b"xyz"
    assert body.contiguous() == b"0123"
    assert span.attributes["http.response.status_code"] == 200


def test_body_until_close_is_read_and_ends_at_close():
    layer = EchoLayer()
    t = _client(layer)
    t.feed(OUT, b"POST /api/s HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
    t.feed(IN, b"HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\ndata: 1\n\n")
    t.feed(IN, b"data: 2\n\n", gap=5)
    t.close()
    (span,) = t.spans()
    body = layer.seen.response_body
    assert body.contiguous() == b"data: 1\n\ndata: 2\n\n" and body.lost == 5
    assert span.attributes["http.response.body.size"] == 23


def test_requests_no_layer_wants_are_skipped_as_before():
    layer = EchoLayer()
    t = _client(layer)
    t.feed(OUT, b"POST /other HTTP/1.1\r\nContent-Length: 5000\r\n\r\n" + b"y" * 100, gap=4900)
    t.feed(IN, b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nok")
    (span,) = t.spans()
    assert span.name == "POST" and not hasattr(layer, "seen")
    assert span.attributes["http.request.body.size"] == 5000


def test_body_keep_limit_keeps_times_but_not_bytes():
    layer = EchoLayer()
    layer.body_limit = 8
    t = _client(layer)
    t.feed(OUT, b"POST /api/s HTTP/1.1\r\nContent-Length: 0\r\n\r\n")
    t.feed(IN, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n")
    for piece in (b"12345", b"67890", b"abc"):
        t.feed(IN, b"%x\r\n%s\r\n" % (len(piece), piece))
    t.feed(IN, b"0\r\n\r\n")
    t.spans()
    body = layer.seen.response_body
    assert [p.data for p in body.pieces] == [b"12345", b"678", b""]
    assert body.size == 13 and body.kept == 8 and not body.complete


@pytest.mark.parametrize("reading", [True, False])
def test_a_chunked_answer_cut_by_the_close_is_still_the_answer(reading):
    """An SSE client stops reading after `data: [DONE]` and closes: over TLS it never reads
    the record with the last chunk. The response is what came, marked incomplete."""
    layer = EchoLayer()
    t = _client(layer)
    target = b"/api/s" if reading else b"/plain"
    t.feed(OUT, b"POST %s HTTP/1.1\r\nContent-Length: 0\r\n\r\n" % target, at=10)
    t.feed(IN, b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n", at=20)
    t.feed(IN, b"e\r\ndata: [DONE]\n\n\r\n", at=30)
    t.close()
    (span,) = t.spans()
    assert span.attributes["http.response.status_code"] == 200
    assert span.attributes["otel_ebpf.http.response.incomplete"] is True
    assert "error.type" not in span.attributes and span.end_ns == 30
    if reading:
        assert layer.seen.response_body.contiguous() == b"data: [DONE]\n\n"
