"""LLMLayer.enrich: an HTTP span becomes a GenAI span with exact attributes, stream timing
from the injected kernel times, and the GenAI histograms' measurements."""

from __future__ import annotations

import orjson
import pytest
from otel_ebpf.protocols.base import Measurement, Measurements, Role, SpanKind, StatusCode
from otel_ebpf.protocols.llm import LLMLayer
from otel_ebpf.protocols.llm.spans import INSTRUMENTS

from .build import (
    HTTP_KEYS,
    REQ_END,
    REQ_START,
    Lost,
    body,
    exchange,
    gapped,
    http_span,
    layer_attributes,
    sse,
)

MS = 1_000_000  # ns


def enrich(ex, options=None):
    span = http_span(ex)
    http_before = dict(span.attributes)
    LLMLayer(options).enrich(ex, span)
    # the HTTP attributes stay (server.* may only be added)
    assert {k: span.attributes[k] for k in http_before} == http_before
    return span


def req(doc) -> bytes:
    return orjson.dumps(doc)


# OpenAI chat completions, streamed ---------------------------------------------------------

CHAT_REQUEST = req(
    {
        "messages": [{"role": "user", "content": "Say hello"}],
        "model": "gpt-4o-mini",
        "stream": True,
        "stream_options": {"include_usage": True},
        "max_tokens": 100,
        "temperature": 0.5,
    }
)


def chunk(delta: dict | None = None, finish=None, usage=None, choices=True) -> str:
    doc = {
        "id": "chatcmpl-1",
        "object": "chat.completion.chunk",
        "model": "gpt-4o-mini-2024-07-18",
        "system_fingerprint": "fp_1",
        "choices": [{"index": 0, "delta": delta or {}, "finish_reason": finish}] if choices else [],
    }
    if usage is not None:
        doc["usage"] = usage
    return orjson.dumps(doc).decode()


STREAM_TIMES = [
    5 * MS,
    6 * MS,
    6 * MS + 500_000,
    7 * MS + 500_000,
    7 * MS + 600_000,
    7 * MS + 700_000,
]


def chat_stream(usage: bool = True):
    events = sse(
        chunk({"role": "assistant", "content": ""}),  # an opener: no content yet
        chunk({"content": "Hel"}),
        chunk({"content": "lo"}),
        chunk({"content": " world"}),
        chunk(finish="stop"),
        chunk(
            usage={
                "prompt_tokens": 12,
                "completion_tokens": 4,
                "prompt_tokens_details": {"cached_tokens": 0},
            },
            choices=False,
        )
        + "\n\ndata: [DONE]"
        if usage
        else "[DONE]",
    )
    return body(*zip(events, STREAM_TIMES, strict=True))


def test_openai_stream_client_span():
    ex = exchange(
        "/v1/chat/completions",
        body(CHAT_REQUEST),
        chat_stream(),
        response_type="text/event-stream; charset=utf-8",
        host="api.openai.com",
    )
    span = enrich(ex)
    assert (span.name, span.kind, span.status) == (
        "chat gpt-4o-mini",
        SpanKind.CLIENT,
        StatusCode.UNSET,
    )
    attrs = layer_attributes(span)
    timing = {k: attrs.pop(k) for k in list(attrs) if k.startswith("otel_ebpf.") or "time_to" in k}
    assert attrs == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.request.max_tokens": 100,
        "gen_ai.request.temperature": 0.5,
        "gen_ai.request.stream": True,
        "gen_ai.response.id": "chatcmpl-1",
        "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "gen_ai.response.finish_reasons": ["stop"],
        "gen_ai.usage.input_tokens": 12,
        "gen_ai.usage.output_tokens": 4,
        "openai.response.system_fingerprint": "fp_1",
    }
    # first content: the "Hel" chunk at 6 ms, from the request's first byte at 1 ms
    assert timing["gen_ai.response.time_to_first_chunk"] == 0.005
    assert timing["otel_ebpf.gen_ai.response.chunk_count"] == 3
    assert timing["otel_ebpf.gen_ai.response.chunk_gap.max"] == 0.001
    assert timing["otel_ebpf.gen_ai.response.chunk_gap.mean"] == pytest.approx(0.00075, rel=1e-12)
    # (7.5 ms - 6 ms) / (4 output tokens - 1)
    assert timing["otel_ebpf.gen_ai.time_per_output_token"] == pytest.approx(0.0005, rel=1e-12)
    assert timing["otel_ebpf.gen_ai.output_tokens.source"] == "usage"
    assert len(timing) == 6
    common = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "server.address": "api.openai.com",
        "server.port": 8000,
    }
    assert span.measurements == [
        Measurement(
            "gen_ai.client.operation.duration", (7 * MS + 700_000 - REQ_START) / 1e9, common
        ),
        Measurement("gen_ai.client.token.usage", 12, {**common, "gen_ai.token.type": "input"}),
        Measurement("gen_ai.client.token.usage", 4, {**common, "gen_ai.token.type": "output"}),
        Measurement("gen_ai.client.operation.time_to_first_chunk", 0.005, common),
        Measurements("gen_ai.client.operation.time_per_output_chunk", [0.0005, 0.001], common),
    ]
    assert {m.instrument for m in span.measurements} <= set(INSTRUMENTS)


def test_openai_stream_server_span_counts_from_the_request_end():
    ex = exchange(
        "/v1/chat/completions",
        body(CHAT_REQUEST),
        chat_stream(),
        response_type="text/event-stream",
        role=Role.SERVER,
        host="10.0.0.1:8000",
    )
    span = enrich(ex)
    assert (span.name, span.kind) == ("chat gpt-4o-mini", SpanKind.SERVER)
    attrs = span.attributes
    # the "Hel" chunk written at 6 ms; the request's last byte read at 1.2 ms
    assert attrs["gen_ai.response.time_to_first_chunk"] == (6 * MS - REQ_END) / 1e9
    assert attrs["gen_ai.provider.name"] == "openai_compatible"
    assert "openai.response.system_fingerprint" not in attrs  # openai.* only for provider openai
    common = {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai_compatible",
        "gen_ai.request.model": "gpt-4o-mini",
        "gen_ai.response.model": "gpt-4o-mini-2024-07-18",
        "server.address": "10.0.0.1",
        "server.port": 8000,
    }
    assert span.measurements[0] == Measurement(
        "gen_ai.server.request.duration", (7 * MS + 700_000 - REQ_START) / 1e9, common
    )
    assert span.measurements[1] == Measurement("gen_ai.server.time_to_first_token", 0.0048, common)
    assert span.measurements[2].instrument == "gen_ai.server.time_per_output_token"
    assert span.measurements[2].value == pytest.approx(0.0005, rel=1e-12)
    assert span.measurements[2].attributes == common
    assert len(span.measurements) == 3


def test_stream_without_usage_counts_chunks_for_time_per_token():
    ex = exchange(
        "/v1/chat/completions",
        body(CHAT_REQUEST),
        chat_stream(usage=False),
        response_type="text/event-stream",
    )
    span = enrich(ex)
    attrs = span.attributes
    assert attrs["gen_ai.usage.output_tokens"] == 3  # the content chunks, counted
    assert attrs["otel_ebpf.gen_ai.output_tokens.source"] == "chunks"
    # an estimate is no reported usage: the token histogram does not take it
    assert not [m for m in span.measurements
                if m.attributes.get("gen_ai.token.type") == "output"]
    # (7.5 ms - 6 ms) / (3 content chunks - 1)
    assert attrs["otel_ebpf.gen_ai.time_per_output_token"] == pytest.approx(0.00075, rel=1e-12)


def test_tool_call_deltas_are_content():
    tool = {
        "tool_calls": [
            {
                "index": 0,
                "id": "call_1",
                "type": "function",
                "function": {"name": "get_weather", "arguments": ""},
            }
        ]
    }
    events = sse(
        chunk({"role": "assistant", "content": None}),
        chunk(tool),
        chunk({"tool_calls": [{"index": 0, "function": {"arguments": '{"city":'}}]}),
        chunk(finish="tool_calls"),
    )
    ex = exchange(
        "/v1/chat/completions",
        body(CHAT_REQUEST),
        body(*zip(events, [2 * MS, 3 * MS, 4 * MS, 5 * MS], strict=True)),
        response_type="text/event-stream",
    )
    attrs = enrich(ex).attributes
    assert attrs["gen_ai.response.time_to_first_chunk"] == 0.002
    assert attrs["otel_ebpf.gen_ai.response.chunk_count"] == 2
    assert attrs["gen_ai.response.finish_reasons"] == ["tool_calls"]


def test_several_choices_keep_their_finish_reasons_in_order():
    events = sse(
        *(
            orjson.dumps(
                {
                    "id": "c",
                    "model": "m",
                    "choices": [{"index": i, "delta": {"content": "x"}, "finish_reason": r}],
                }
            ).decode()
            for i, r in ((1, "length"), (0, "stop"))
        )
    )
    ex = exchange(
        "/v1/chat/completions",
        body(req({"model": "m", "n": 2, "stream": True})),
        body(*events),
        response_type="text/event-stream",
    )
    attrs = enrich(ex).attributes
    assert attrs["gen_ai.response.finish_reasons"] == ["stop", "length"]
    assert attrs["gen_ai.request.choice.count"] == 2


# OpenAI, whole JSON -------------------------------------------------------------------------


def test_openai_chat_json():
    response = req(
        {
            "id": "chatcmpl-9",
            "object": "chat.completion",
            "model": "gpt-4o-2024-08-06",
            "service_tier": "default",
            "system_fingerprint": "fp_9",
            "choices": [
                {
                    "index": 0,
                    "message": {"role": "assistant", "content": "Hi"},
                    "finish_reason": "stop",
                }
            ],
            "usage": {
                "prompt_tokens": 20,
                "completion_tokens": 2,
                "total_tokens": 22,
                "prompt_tokens_details": {"cached_tokens": 16},
                "completion_tokens_details": {"reasoning_tokens": 0},
            },
        }
    )
    request = req(
        {"model": "gpt-4o", "messages": [{"role": "user", "content": "Hi"}], "n": 1, "top_p": 0.1}
    )
    ex = exchange(
        "/v1/chat/completions", body(request), body((response, 9 * MS)), host="api.openai.com:443"
    )
    span = enrich(ex)
    assert span.name == "chat gpt-4o"
    assert layer_attributes(span) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4o",
        "gen_ai.request.top_p": 0.1,
        "gen_ai.response.id": "chatcmpl-9",
        "gen_ai.response.model": "gpt-4o-2024-08-06",
        "gen_ai.response.finish_reasons": ["stop"],
        "gen_ai.usage.input_tokens": 20,
        "gen_ai.usage.output_tokens": 2,
        "gen_ai.usage.cache_read.input_tokens": 16,
        "openai.response.service_tier": "default",
        "openai.response.system_fingerprint": "fp_9",
    }
    assert [m.instrument for m in span.measurements] == [
        "gen_ai.client.operation.duration",
        "gen_ai.client.token.usage",
        "gen_ai.client.token.usage",
    ]
    assert span.measurements[0].value == (9 * MS - REQ_START) / 1e9


def test_legacy_completions_json():
    response = req(
        {
            "id": "cmpl-1",
            "object": "text_completion",
            "model": "davinci-002",
            "choices": [{"text": " there", "index": 0, "finish_reason": "length"}],
            "usage": {"prompt_tokens": 3, "completion_tokens": 16},
        }
    )
    ex = exchange(
        "/v1/completions",
        body(req({"model": "davinci-002", "prompt": "hi", "max_tokens": 16})),
        body(response),
    )
    span = enrich(ex)
    assert span.name == "text_completion davinci-002"
    assert span.attributes["gen_ai.response.finish_reasons"] == ["length"]
    assert span.attributes["gen_ai.request.max_tokens"] == 16


def test_openai_embeddings():
    response = req(
        {
            "object": "list",
            "data": [{"object": "embedding", "index": 0, "embedding": [0.1, -0.2]}],
            "model": "text-embedding-3-small",
            "usage": {"prompt_tokens": 5, "total_tokens": 5},
        }
    )
    request = req(
        {
            "input": "hello",
            "model": "text-embedding-3-small",
            "encoding_format": "float",
            "dimensions": 2,
        }
    )
    span = enrich(exchange("/v1/embeddings", body(request), body(response)))
    assert span.name == "embeddings text-embedding-3-small"
    assert layer_attributes(span) == {
        "gen_ai.operation.name": "embeddings",
        "gen_ai.provider.name": "openai_compatible",
        "gen_ai.request.model": "text-embedding-3-small",
        "gen_ai.request.encoding_formats": ["float"],
        "gen_ai.embeddings.dimension.count": 2,
        "gen_ai.response.model": "text-embedding-3-small",
        "gen_ai.usage.input_tokens": 5,
    }
    usage = [m for m in span.measurements if m.instrument == "gen_ai.client.token.usage"]
    assert [(m.value, m.attributes["gen_ai.token.type"]) for m in usage] == [(5, "input")]


def test_embeddings_response_cut_by_the_keep_limit_still_gives_usage():
    """Many vectors: the response's middle is not kept; model and usage close it."""
    vectors = [{"object": "embedding", "index": i, "embedding": [0.5] * 64} for i in range(500)]
    response = req(
        {
            "object": "list",
            "data": vectors,
            "model": "bge-m3",
            "usage": {"prompt_tokens": 900, "total_tokens": 900},
        }
    )
    span = enrich(
        exchange(
            "/v1/embeddings",
            body(req({"model": "bge-m3", "input": ["x"] * 500})),
            gapped(response, head=16 * 1024, tail=256, ns=3 * MS),
        )
    )
    assert span.attributes["gen_ai.response.model"] == "bge-m3"
    assert span.attributes["gen_ai.usage.input_tokens"] == 900


# Responses API -----------------------------------------------------------------------------


def responses_event(kind: str, **fields) -> bytes:
    return f"event: {kind}\ndata: {orjson.dumps({'type': kind, **fields}).decode()}\n\n".encode()


def test_responses_api_stream():
    created = {
        "id": "resp_1",
        "object": "response",
        "status": "in_progress",
        "model": "gpt-4.1-2025-04-14",
        "output": [],
        "usage": None,
    }
    completed = {
        **created,
        "status": "completed",
        "output": [
            {
                "type": "message",
                "id": "msg_1",
                "role": "assistant",
                "content": [{"type": "output_text", "text": "Hi there"}],
            }
        ],
        "usage": {
            "input_tokens": 10,
            "input_tokens_details": {"cached_tokens": 0},
            "output_tokens": 3,
            "output_tokens_details": {"reasoning_tokens": 0},
            "total_tokens": 13,
        },
    }
    events = [
        responses_event("response.created", response=created),
        responses_event("response.output_item.added", output_index=0, item={"type": "message"}),
        responses_event("response.output_text.delta", output_index=0, delta="Hi"),
        responses_event("response.output_text.delta", output_index=0, delta=" there"),
        responses_event("response.output_text.done", output_index=0, text="Hi there"),
        responses_event("response.completed", response=completed),
    ]
    times = [2 * MS, 3 * MS, 4 * MS, 6 * MS, 6 * MS + 1, 7 * MS]
    request = req({"model": "gpt-4.1", "input": "hi", "stream": True, "max_output_tokens": 64})
    span = enrich(
        exchange(
            "/v1/responses",
            body(request),
            body(*zip(events, times, strict=True)),
            response_type="text/event-stream",
            host="api.openai.com",
        )
    )
    attrs = layer_attributes(span)
    assert span.name == "chat gpt-4.1"
    assert {k: attrs[k] for k in attrs if k.startswith("gen_ai.") and "time" not in k} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "openai",
        "gen_ai.request.model": "gpt-4.1",
        "gen_ai.request.max_tokens": 64,
        "gen_ai.request.stream": True,
        "gen_ai.response.id": "resp_1",
        "gen_ai.response.model": "gpt-4.1-2025-04-14",
        "gen_ai.response.finish_reasons": ["completed"],
        "gen_ai.usage.input_tokens": 10,
        "gen_ai.usage.output_tokens": 3,
    }
    assert attrs["gen_ai.response.time_to_first_chunk"] == 0.003
    assert attrs["otel_ebpf.gen_ai.response.chunk_count"] == 2
    assert attrs["otel_ebpf.gen_ai.time_per_output_token"] == 0.001  # (6 - 4) ms / (3 - 1)


def test_responses_api_incomplete_json():
    response = req(
        {
            "id": "resp_2",
            "object": "response",
            "status": "incomplete",
            "incomplete_details": {"reason": "max_output_tokens"},
            "model": "o4-mini",
            "output": [],
            "usage": {
                "input_tokens": 50,
                "output_tokens": 64,
                "output_tokens_details": {"reasoning_tokens": 64},
            },
        }
    )
    span = enrich(
        exchange("/v1/responses", body(req({"model": "o4-mini", "input": "x"})), body(response))
    )
    assert span.attributes["gen_ai.response.finish_reasons"] == ["max_output_tokens"]
    assert span.attributes["gen_ai.usage.reasoning.output_tokens"] == 64


# Anthropic ---------------------------------------------------------------------------------


def anthropic_event(kind: str, **fields) -> bytes:
    return f"event: {kind}\ndata: {orjson.dumps({'type': kind, **fields}).decode()}\n\n".encode()


ANTHROPIC_STREAM = [
    anthropic_event(
        "message_start",
        message={
            "id": "msg_01",
            "type": "message",
            "role": "assistant",
            "model": "claude-sonnet-4-5-20250929",
            "content": [],
            "stop_reason": None,
            "usage": {
                "input_tokens": 25,
                "cache_read_input_tokens": 100,
                "cache_creation_input_tokens": 0,
                "output_tokens": 1,
            },
        },
    ),
    anthropic_event("content_block_start", index=0, content_block={"type": "text", "text": ""}),
    anthropic_event("ping"),
    anthropic_event("content_block_delta", index=0, delta={"type": "text_delta", "text": "Hello"}),
    anthropic_event("content_block_delta", index=0, delta={"type": "text_delta", "text": "!"}),
    anthropic_event("content_block_stop", index=0),
    anthropic_event(
        "message_delta",
        delta={"stop_reason": "end_turn", "stop_sequence": None},
        usage={"output_tokens": 15},
    ),
    anthropic_event("message_stop"),
]
ANTHROPIC_TIMES = [
    3 * MS,
    3 * MS + 10,
    3 * MS + 20,
    4 * MS,
    11 * MS,
    11 * MS + 10,
    11 * MS + 20,
    11 * MS + 30,
]


def test_anthropic_stream():
    request = req(
        {
            "model": "claude-sonnet-4-5",
            "max_tokens": 1024,
            "stream": True,
            "system": "be nice",
            "messages": [{"role": "user", "content": "Hello"}],
        }
    )
    span = enrich(
        exchange(
            "/v1/messages",
            body(request),
            body(*zip(ANTHROPIC_STREAM, ANTHROPIC_TIMES, strict=True)),
            response_type="text/event-stream",
            host="api.anthropic.com",
        )
    )
    assert span.name == "chat claude-sonnet-4-5"
    attrs = layer_attributes(span)
    assert {k: attrs[k] for k in attrs if not k.startswith("otel_ebpf.")} == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "anthropic",
        "gen_ai.request.model": "claude-sonnet-4-5",
        "gen_ai.request.max_tokens": 1024,
        "gen_ai.request.stream": True,
        "gen_ai.response.id": "msg_01",
        "gen_ai.response.model": "claude-sonnet-4-5-20250929",
        "gen_ai.response.finish_reasons": ["end_turn"],
        # semconv: Anthropic's input_tokens + cache reads + cache writes
        "gen_ai.usage.input_tokens": 125,
        "gen_ai.usage.cache_read.input_tokens": 100,
        "gen_ai.usage.output_tokens": 15,
        "gen_ai.response.time_to_first_chunk": 0.003,  # first content_block_delta at 4 ms
    }
    assert attrs["otel_ebpf.gen_ai.time_per_output_token"] == pytest.approx(0.007 / 14, rel=1e-12)
    assert attrs["otel_ebpf.gen_ai.response.chunk_gap.max"] == 0.007


def test_anthropic_error_event_inside_a_200_stream():
    stream = [
        ANTHROPIC_STREAM[0],
        anthropic_event("error", error={"type": "overloaded_error", "message": "Overloaded"}),
    ]
    span = enrich(
        exchange(
            "/v1/messages",
            body(req({"model": "claude-x", "stream": True})),
            body(*stream),
            response_type="text/event-stream",
        )
    )
    assert span.attributes["error.type"] == "overloaded_error"
    assert span.status == StatusCode.ERROR
    assert span.attributes["gen_ai.provider.name"] == "anthropic_compatible"
    assert span.measurements[0].attributes["error.type"] == "overloaded_error"


def test_anthropic_json():
    response = req(
        {
            "id": "msg_2",
            "type": "message",
            "role": "assistant",
            "model": "claude-haiku-4-5",
            "content": [{"type": "text", "text": "Hi"}],
            "stop_reason": "max_tokens",
            "usage": {
                "input_tokens": 7,
                "cache_creation_input_tokens": 3,
                "cache_read_input_tokens": 0,
                "output_tokens": 5,
            },
        }
    )
    span = enrich(
        exchange(
            "/v1/messages",
            body(req({"model": "claude-haiku-4-5", "max_tokens": 5})),
            body(response),
            host="api.anthropic.com",
        )
    )
    attrs = span.attributes
    assert (
        attrs["gen_ai.usage.input_tokens"],
        attrs["gen_ai.usage.cache_creation.input_tokens"],
    ) == (10, 3)
    assert "gen_ai.usage.cache_read.input_tokens" not in attrs
    assert attrs["gen_ai.response.finish_reasons"] == ["max_tokens"]
    assert "gen_ai.request.stream" not in attrs


# Ollama ------------------------------------------------------------------------------------


def ollama_line(content: str, done: bool = False, **extra) -> bytes:
    doc = {
        "model": "llama3.2",
        "created_at": "2025-01-01T00:00:00Z",
        "message": {"role": "assistant", "content": content},
        "done": done,
        **extra,
    }
    return orjson.dumps(doc) + b"\n"


def test_ollama_chat_stream_is_the_default():
    lines = [
        ollama_line("The"),
        ollama_line(" sky"),
        ollama_line(" is"),
        ollama_line("", True, done_reason="stop", prompt_eval_count=26, eval_count=298),
    ]
    times = [5 * MS, 6 * MS, 8 * MS, 9 * MS]
    request = req(
        {
            "model": "llama3.2",
            "messages": [{"role": "user", "content": "why blue?"}],
            "options": {"temperature": 0.2},
        }
    )
    span = enrich(
        exchange(
            "/api/chat",
            body(request),
            body(*zip(lines, times, strict=True)),
            response_type="application/x-ndjson",
            host="localhost:11434",
        )
    )
    assert span.name == "chat llama3.2"
    attrs = layer_attributes(span)
    assert attrs == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "ollama",
        "gen_ai.request.model": "llama3.2",
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.stream": True,  # Ollama streams unless told not to: the body proves it
        "gen_ai.response.model": "llama3.2",
        "gen_ai.response.finish_reasons": ["stop"],
        "gen_ai.usage.input_tokens": 26,
        "gen_ai.usage.output_tokens": 298,
        "gen_ai.response.time_to_first_chunk": 0.004,
        "otel_ebpf.gen_ai.response.chunk_count": 3,
        "otel_ebpf.gen_ai.response.chunk_gap.max": 0.002,
        "otel_ebpf.gen_ai.response.chunk_gap.mean": 0.0015,
        "otel_ebpf.gen_ai.time_per_output_token": pytest.approx(0.003 / 297, rel=1e-12),
        "otel_ebpf.gen_ai.output_tokens.source": "usage",
    }


def test_ollama_generate_json_and_embed():
    response = req(
        {
            "model": "llama3.2",
            "response": "Because",
            "done": True,
            "done_reason": "stop",
            "prompt_eval_count": 5,
            "eval_count": 10,
        }
    )
    span = enrich(
        exchange(
            "/api/generate",
            body(req({"model": "llama3.2", "prompt": "Why", "stream": False})),
            body(response),
        )
    )
    assert span.name == "text_completion llama3.2"
    assert (
        span.attributes["gen_ai.usage.input_tokens"],
        span.attributes["gen_ai.usage.output_tokens"],
    ) == (5, 10)
    assert "gen_ai.request.stream" not in span.attributes
    embed = req({"model": "all-minilm", "embeddings": [[0.1, 0.2]], "prompt_eval_count": 8})
    span = enrich(
        exchange("/api/embed", body(req({"model": "all-minilm", "input": ["a"]})), body(embed))
    )
    assert span.name == "embeddings all-minilm"
    assert span.attributes["gen_ai.usage.input_tokens"] == 8
    assert "gen_ai.usage.output_tokens" not in span.attributes


# errors ------------------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("status", "error_body", "expected"),
    [
        (
            400,
            {
                "error": {
                    "message": "too long",
                    "type": "invalid_request_error",
                    "param": None,
                    "code": "context_length_exceeded",
                }
            },
            "context_length_exceeded",
        ),
        (429, {"error": {"message": "slow down", "type": "requests", "code": None}}, "requests"),
        (
            529,
            {"type": "error", "error": {"type": "overloaded_error", "message": "Overloaded"}},
            "overloaded_error",
        ),
        (404, {"error": 'model "x" not found, try pulling it first'}, "404"),
        (500, None, "500"),
    ],
)
def test_http_errors(status, error_body, expected):
    response = body(req(error_body)) if error_body is not None else None
    span = enrich(exchange("/v1/chat/completions", body(CHAT_REQUEST), response, status=status))
    assert span.attributes["error.type"] == expected
    assert span.name == "chat gpt-4o-mini"
    duration = span.measurements[0]
    assert duration.instrument == "gen_ai.client.operation.duration"
    assert duration.attributes["error.type"] == expected
    assert len(span.measurements) == 1  # no usage, no chunks


def test_server_error_records_only_the_duration():
    ex = exchange(
        "/v1/chat/completions",
        body(CHAT_REQUEST),
        body(req({"error": {"type": "BadRequestError", "code": 400}})),
        status=400,
        role=Role.SERVER,
    )
    span = enrich(ex)
    assert span.attributes["error.type"] == "BadRequestError"
    assert [m.instrument for m in span.measurements] == ["gen_ai.server.request.duration"]


def test_no_response_keeps_the_http_error():
    ex = exchange("/v1/chat/completions", body(CHAT_REQUEST), None, status=None)
    span = http_span(ex)
    span.attributes["error.type"] = "connection_closed"
    LLMLayer().enrich(ex, span)
    assert span.attributes["error.type"] == "connection_closed"
    assert span.measurements[0].attributes["error.type"] == "connection_closed"
    assert span.name == "chat gpt-4o-mini"


# names and providers -----------------------------------------------------------------------


def test_name_falls_back_to_the_response_model_then_the_operation():
    prompt = req(
        {
            "messages": [{"role": "user", "content": "x" * 50_000}],
            "model": "lost-in-gap",
            "padding": "y" * 50_000,
        }
    )
    response = req({"id": "c", "model": "served-model", "choices": []})
    span = enrich(exchange("/v1/chat/completions", gapped(prompt, 4096, 64), body(response)))
    assert span.name == "chat served-model"
    assert "gen_ai.request.model" not in span.attributes
    span = enrich(exchange("/v1/chat/completions", None, None, status=None))
    assert span.name == "chat"


def test_big_prompt_seen_only_at_its_ends_still_names_the_model():
    prompt = ("lorem ipsum " * 20_000)[: 200 * 1024]
    data = req(
        {
            "messages": [{"role": "user", "content": prompt}],
            "model": "gpt-4.1-mini",
            "stream": False,
        }
    )
    span = enrich(
        exchange(
            "/v1/chat/completions",
            gapped(data, 32 * 1024, 4 * 1024),
            body(req({"id": "x", "model": "gpt-4.1-mini-2025", "choices": []})),
        )
    )
    assert span.name == "chat gpt-4.1-mini"
    assert span.attributes["gen_ai.request.model"] == "gpt-4.1-mini"


@pytest.mark.parametrize(
    ("host", "path", "options", "expected"),
    [
        ("api.openai.com", "/v1/chat/completions", {"provider": "vllm"}, "openai"),
        (
            "myres.openai.azure.com",
            "/openai/deployments/d/chat/completions",
            {"extra_paths": ["/openai/deployments"]},
            "azure.ai.openai",
        ),
        ("API.GROQ.COM:443", "/openai/v1/chat/completions", {"extra_paths": ["/openai"]}, "groq"),
        ("vllm.svc:8000", "/v1/chat/completions", {"provider": "vllm"}, "vllm"),
        ("[::1]:8000", "/v1/chat/completions", None, "openai_compatible"),
        ("", "/v1/messages", None, "anthropic_compatible"),
        ("localhost:11434", "/api/chat", None, "ollama"),
    ],
)
def test_provider(host, path, options, expected):
    span = enrich(exchange(path, body(CHAT_REQUEST), None, status=None, host=host), options)
    assert span.attributes["gen_ai.provider.name"] == expected


# content capture (opt-in) ------------------------------------------------------------------

TOOL_CONVERSATION = {
    "model": "gpt-4o",
    "user": "alice@example.com",
    "api_key": "sk-secret-1",
    "metadata": {"tenant": "acme-secret"},
    "messages": [
        {"role": "system", "content": "You are terse."},
        {
            "role": "user",
            "content": [
                {"type": "text", "text": "Weather in Paris?"},
                {"type": "image_url", "image_url": {"url": "data:image/png;base64,AAAA"}},
            ],
        },
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "id": "call_1",
                    "type": "function",
                    "function": {"name": "get_weather", "arguments": '{"city":"Paris"}'},
                }
            ],
        },
        {"role": "tool", "tool_call_id": "call_1", "content": "rainy, 57F"},
    ],
}
TOOL_ANSWER = {
    "id": "chatcmpl-7",
    "model": "gpt-4o-2024-08-06",
    "choices": [
        {
            "index": 0,
            "finish_reason": "stop",
            "message": {"role": "assistant", "content": "Rainy, 57F."},
        }
    ],
    "usage": {"prompt_tokens": 30, "completion_tokens": 5},
}


def test_content_is_off_by_default():
    span = enrich(
        exchange("/v1/chat/completions", body(req(TOOL_CONVERSATION)), body(req(TOOL_ANSWER)))
    )
    assert not [k for k in span.attributes if k.endswith(("messages", "instructions"))]


def test_content_in_semconv_shape_and_nothing_else_of_the_request():
    span = enrich(
        exchange("/v1/chat/completions", body(req(TOOL_CONVERSATION)), body(req(TOOL_ANSWER))),
        {"capture_content": True},
    )
    assert orjson.loads(span.attributes["gen_ai.input.messages"]) == [
        {"role": "system", "parts": [{"type": "text", "content": "You are terse."}]},
        {
            "role": "user",
            "parts": [{"type": "text", "content": "Weather in Paris?"}, {"type": "image_url"}],
        },
        {
            "role": "assistant",
            "parts": [
                {
                    "type": "tool_call",
                    "name": "get_weather",
                    "id": "call_1",
                    "arguments": {"city": "Paris"},
                }
            ],
        },
        {
            "role": "tool",
            "parts": [{"type": "tool_call_response", "response": "rainy, 57F", "id": "call_1"}],
        },
    ]
    assert orjson.loads(span.attributes["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "Rainy, 57F."}],
            "finish_reason": "stop",
        }
    ]
    everything = orjson.dumps(span.attributes).decode()
    for secret in ("sk-secret-1", "alice@example.com", "acme-secret", "AAAA"):
        assert secret not in everything


def test_streamed_content_is_reassembled():
    span = enrich(
        exchange(
            "/v1/messages",
            body(
                req(
                    {
                        "model": "claude-x",
                        "system": "be nice",
                        "messages": [{"role": "user", "content": "Hello"}],
                    }
                )
            ),
            body(*ANTHROPIC_STREAM),
            response_type="text/event-stream",
        ),
        {"capture_content": True},
    )
    assert orjson.loads(span.attributes["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "be nice"}
    ]
    assert orjson.loads(span.attributes["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "parts": [{"type": "text", "content": "Hello!"}],
            "finish_reason": "end_turn",
        }
    ]


def test_content_is_cut_to_the_budget_keeping_the_newest_turn():
    messages = [{"role": "user", "content": f"old question {i} " + "z" * 300} for i in range(20)]
    messages.append({"role": "user", "content": "the latest question"})
    span = enrich(
        exchange(
            "/v1/chat/completions",
            body(req({"model": "m", "messages": messages})),
            body(req(TOOL_ANSWER)),
        ),
        {"capture_content": True, "max_content_bytes": 512},
    )
    value = span.attributes["gen_ai.input.messages"]
    assert len(value.encode()) <= 512
    kept = orjson.loads(value)
    assert kept[-1] == {
        "role": "user",
        "parts": [{"type": "text", "content": "the latest question"}],
    }
    assert 1 < len(kept) < 21
    assert all(m["role"] == "user" for m in kept)


def test_no_input_messages_from_a_cut_request():
    data = req({"messages": [{"role": "user", "content": "q" * 100_000}], "model": "m"})
    span = enrich(
        exchange("/v1/chat/completions", gapped(data, 1024, 64), body(req(TOOL_ANSWER))),
        {"capture_content": True},
    )
    assert "gen_ai.input.messages" not in span.attributes
    assert "gen_ai.output.messages" in span.attributes


def test_embeddings_record_no_content():
    span = enrich(
        exchange(
            "/v1/embeddings",
            body(req({"model": "e", "input": "secret text"})),
            body(req({"data": [], "model": "e"})),
        ),
        {"capture_content": True},
    )
    assert "secret text" not in orjson.dumps(span.attributes).decode()


def test_non_llm_exchange_is_left_alone():
    ex = exchange("/v1/models", None, None, method="GET")
    span = http_span(ex)
    before = (span.name, dict(span.attributes))
    LLMLayer().enrich(ex, span)
    assert (span.name, span.attributes, span.measurements) == (*before, [])
    assert set(before[1]) <= HTTP_KEYS


def test_error_inside_streams_of_other_dialects():
    openai = sse(chunk({"content": "x"}), '{"error": {"message": "boom", "type": "server_error"}}')
    span = enrich(
        exchange(
            "/v1/chat/completions",
            body(CHAT_REQUEST),
            body(*openai),
            response_type="text/event-stream",
        )
    )
    assert (span.attributes["error.type"], span.status) == ("server_error", StatusCode.ERROR)
    lines = [ollama_line("a"), b'{"error": "an unexpected error occurred"}\n']
    span = enrich(
        exchange(
            "/api/chat",
            body(req({"model": "llama3.2"})),
            body(*lines),
            response_type="application/x-ndjson",
        )
    )
    assert (span.attributes["error.type"], span.status) == ("_OTHER", StatusCode.ERROR)


def test_lost_stream_bytes_are_counted_and_timing_uses_what_arrived():
    events = chat_stream().pieces
    stream = body(
        (events[1].data, 6 * MS), Lost(300), (events[3].data, 7 * MS), (events[5].data, 8 * MS)
    )
    span = enrich(
        exchange(
            "/v1/chat/completions", body(CHAT_REQUEST), stream, response_type="text/event-stream"
        )
    )
    attrs = span.attributes
    # the " world" chunk after the gap is dropped as possibly cut; "Hel" and the usage remain
    assert attrs["otel_ebpf.gen_ai.response.chunks_lost"] == 1
    assert attrs["otel_ebpf.gen_ai.response.chunk_count"] == 1
    assert attrs["gen_ai.response.time_to_first_chunk"] == 0.005
    assert attrs["gen_ai.usage.output_tokens"] == 4


def test_streamed_tool_call_content_is_reassembled():
    deltas = [
        {
            "role": "assistant",
            "content": None,
            "tool_calls": [
                {
                    "index": 0,
                    "id": "call_9",
                    "type": "function",
                    "function": {"name": "lookup", "arguments": ""},
                }
            ],
        },
        {"tool_calls": [{"index": 0, "function": {"arguments": '{"q":'}}]},
        {"tool_calls": [{"index": 0, "function": {"arguments": ' "otel"}'}}]},
    ]
    events = sse(*(chunk(d) for d in deltas), chunk(finish="tool_calls"))
    span = enrich(
        exchange(
            "/v1/chat/completions",
            body(CHAT_REQUEST),
            body(*events),
            response_type="text/event-stream",
        ),
        {"capture_content": True},
    )
    assert orjson.loads(span.attributes["gen_ai.output.messages"]) == [
        {
            "role": "assistant",
            "finish_reason": "tool_calls",
            "parts": [
                {"type": "tool_call", "name": "lookup", "id": "call_9", "arguments": {"q": "otel"}}
            ],
        }
    ]
    assert orjson.loads(span.attributes["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "Say hello"}]}
    ]


def test_metric_attributes_are_one_dict_per_set_of_values():
    """Spans of one operation, model and server share their measurements' attribute dicts
    (span metrics then sort each once per batch); a value of another type (True against
    1), another value, or an unhashable one gets dicts of its own, equal to what the span's
    attributes say."""
    from otel_ebpf.protocols.llm import spans as llm_spans

    attrs = {"gen_ai.operation.name": "chat", "gen_ai.provider.name": "openai",
             "gen_ai.request.model": "m", "server.address": "a", "server.port": 1,
             "http.request.method": "POST"}
    common, tokens = llm_spans._metric_attributes(dict(attrs))
    assert common == {k: v for k, v in attrs.items() if k != "http.request.method"}
    assert tokens == {kind: {**common, "gen_ai.token.type": kind} for kind in ("input", "output")}
    again, again_tokens = llm_spans._metric_attributes(dict(attrs))
    assert again is common and again_tokens is tokens
    as_bool, _ = llm_spans._metric_attributes({**attrs, "server.port": True})
    assert as_bool is not common and as_bool["server.port"] is True
    other, _ = llm_spans._metric_attributes({**attrs, "gen_ai.request.model": "n"})
    assert other is not common and other["gen_ai.request.model"] == "n"
    listed, _ = llm_spans._metric_attributes({**attrs, "server.address": ["a"]})
    assert listed["server.address"] == ["a"]
    assert llm_spans._metric_attributes({**attrs, "server.address": ["a"]})[0] is not listed
