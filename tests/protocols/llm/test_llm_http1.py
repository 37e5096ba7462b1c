"""The layers behind the real HTTP/1 parser and connection tracker: bytes in, GenAI and DB
spans out, with stream timing from the syscall times."""

from __future__ import annotations

import orjson
from otel_ebpf.protocols.base import Direction, Role, SpanKind
from otel_ebpf.protocols.http1 import HTTP1Parser
from otel_ebpf.protocols.llm import LLMLayer
from otel_ebpf.protocols.testing import ConnectionDriver, conn_info
from otel_ebpf.protocols.vectordb import VectorDBLayer

OUT, IN = Direction.EGRESS, Direction.INGRESS
LAYERS = (LLMLayer(), VectorDBLayer())


def post(path: bytes, doc: dict) -> bytes:
    data = orjson.dumps(doc)
    return (
        b"POST %s HTTP/1.1\r\nHost: api.openai.com\r\nContent-Type: application/json\r\n"
        b"Authorization: Bearer sk-secret\r\nContent-Length: %d\r\n\r\n%s" % (path, len(data), data)
    )


def test_streamed_chat_through_http1():
    t = ConnectionDriver(HTTP1Parser(), conn_info(Role.CLIENT), layers=LAYERS)
    t.feed(
        OUT,
        post(
            b"/v1/chat/completions",
            {
                "messages": [{"role": "user", "content": "hi"}],
                "model": "gpt-4o-mini",
                "stream": True,
                "stream_options": {"include_usage": True},
            },
        ),
        at=1_000,
    )
    t.feed(
        IN,
        b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream; charset=utf-8\r\n"
        b"Transfer-Encoding: chunked\r\n\r\n",
        at=400_000,
    )
    events = [
        {
            "id": "c1",
            "model": "gpt-4o-mini-x",
            "choices": [{"index": 0, "delta": {"role": "assistant"}}],
        },
        {
            "id": "c1",
            "model": "gpt-4o-mini-x",
            "choices": [{"index": 0, "delta": {"content": "Hi"}}],
        },
        {
            "id": "c1",
            "model": "gpt-4o-mini-x",
            "choices": [{"index": 0, "delta": {"content": "!"}}],
        },
        {
            "id": "c1",
            "model": "gpt-4o-mini-x",
            "choices": [{"index": 0, "delta": {}, "finish_reason": "stop"}],
        },
        {
            "id": "c1",
            "model": "gpt-4o-mini-x",
            "choices": [],
            "usage": {"prompt_tokens": 8, "completion_tokens": 2},
        },
    ]
    wire = [b"data: " + orjson.dumps(e) + b"\n\n" for e in events] + [b"data: [DONE]\n\n"]
    for i, chunk in enumerate(wire):
        t.feed(IN, b"%x\r\n%s\r\n" % (len(chunk), chunk), at=500_000 + i * 100_000)
    t.feed(IN, b"0\r\n\r\n", at=1_200_000)
    (span,) = t.spans()
    assert (span.name, span.kind) == ("chat gpt-4o-mini", SpanKind.CLIENT)
    attrs = span.attributes
    assert attrs["http.response.status_code"] == 200  # the HTTP attributes stay
    assert attrs["gen_ai.provider.name"] == "openai"
    assert attrs["gen_ai.response.time_to_first_chunk"] == (600_000 - 1_000) / 1e9
    assert attrs["otel_ebpf.gen_ai.time_per_output_token"] == 100_000 / 1e9
    assert (attrs["gen_ai.usage.input_tokens"], attrs["gen_ai.usage.output_tokens"]) == (8, 2)
    assert "sk-secret" not in orjson.dumps(attrs).decode()
    assert [m.instrument for m in span.measurements] == [
        "gen_ai.client.operation.duration",
        "gen_ai.client.token.usage",
        "gen_ai.client.token.usage",
        "gen_ai.client.operation.time_to_first_chunk",
        "gen_ai.client.operation.time_per_output_chunk",
    ]


def test_vector_search_through_http1():
    t = ConnectionDriver(HTTP1Parser(), conn_info(Role.CLIENT), layers=LAYERS)
    t.feed(OUT, post(b"/collections/docs/points/search", {"vector": [0.5, 0.5], "limit": 2}), at=10)
    reply = orjson.dumps({"result": [{"id": 1, "score": 1.0}], "status": "ok", "time": 0.0001})
    t.feed(
        IN,
        b"HTTP/1.1 200 OK\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s"
        % (len(reply), reply),
        at=2_000,
    )
    (span,) = t.spans()
    assert span.name == "search docs"
    assert (span.attributes["db.system.name"], span.attributes["db.vector.query.top_k"]) == (
        "qdrant",
        2,
    )
    assert span.attributes["db.response.returned_rows"] == 1
    assert span.measurements[0].instrument == "db.client.operation.duration"
