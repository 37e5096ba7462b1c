"""The Gemini API through LLMLayer: paths naming the model, generateContent JSON,
streamGenerateContent as SSE (timed, whole and byte by byte) and as a JSON array,
embedContent, usageMetadata with cached and thoughts tokens, tool calls, errors."""

from __future__ import annotations

import orjson
import pytest
from otel_ebpf.protocols.base import Role, SpanKind, StatusCode
from otel_ebpf.protocols.llm import LLMLayer
from otel_ebpf.protocols.llm.endpoints import CHAT, EMBEDDINGS, GEMINI, Endpoints, Route

from .build import REQ_END, REQ_START, Lost, body, exchange, http_span, layer_attributes

MS = 1_000_000
GENERATE = "/v1beta/models/gemini-2.5-flash:generateContent"
STREAM = "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse"
REQUEST = orjson.dumps({
    "contents": [{"role": "user", "parts": [{"text": "weather in Paris?"}]}],
    "systemInstruction": {"parts": [{"text": "be brief"}]},
    "generationConfig": {"maxOutputTokens": 64, "temperature": 0.2, "topP": 0.9,
                         "candidateCount": 2},
    "tools": [{"functionDeclarations": [{"name": "get_weather"}]}],
})
USAGE = {"promptTokenCount": 40, "candidatesTokenCount": 5, "thoughtsTokenCount": 7,
         "cachedContentTokenCount": 32, "totalTokenCount": 52}


def enrich(ex, options=None):
    span = http_span(ex)
    LLMLayer(options).enrich(ex, span)
    return span


def answer(parts, finish=None, usage=None, index=0):
    candidate = {"content": {"role": "model", "parts": parts}, "index": index}
    if finish:
        candidate["finishReason"] = finish
    doc = {"candidates": [candidate], "modelVersion": "gemini-2.5-flash-001",
           "responseId": "resp-1"}
    if usage:
        doc["usageMetadata"] = usage
    return doc


@pytest.mark.parametrize(("path", "route"), [
    (GENERATE, Route(CHAT, GEMINI, model="gemini-2.5-flash")),
    (STREAM, Route(CHAT, GEMINI, model="gemini-2.5-flash", stream=True)),
    ("/v1/models/text-embedding-004:embedContent",
     Route(EMBEDDINGS, GEMINI, model="text-embedding-004")),
    ("/v1beta/models/gemini-embedding-001:batchEmbedContents",
     Route(EMBEDDINGS, GEMINI, model="gemini-embedding-001")),
    ("/v1/projects/p/locations/us-central1/publishers/google/models/gemini-2.0-flash"
     ":generateContent", Route(CHAT, GEMINI, model="gemini-2.0-flash")),
    ("/v1beta/models/gemini%2Dx:generateContent", Route(CHAT, GEMINI, model="gemini-x")),
])
def test_gemini_paths(path, route):
    assert Endpoints().route("POST", path) == route


@pytest.mark.parametrize("path", [
    "/v1beta/models/gemini:countTokens", "/v1beta/models/:generateContent",
    "/v1beta/models/a/b:generateContent", "/v1beta/gemini:generateContent",
    "/v1beta/models/" + "m" * 300 + ":generateContent",
])
def test_not_gemini_calls(path):
    assert Endpoints().route("POST", path) is None
    assert Endpoints().route("GET", GENERATE) is None


def test_generate_content_json_gives_usage_details_and_a_tool_summary():
    doc = answer([{"text": "thinking...", "thought": True}, {"text": "Let me check."},
                  {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}},
                  {"functionCall": {"name": "get_time", "args": {}}}], "STOP", USAGE)
    span = enrich(exchange(GENERATE, body(REQUEST), body(orjson.dumps(doc)),
                           host="generativelanguage.googleapis.com"))
    assert span.name == "chat gemini-2.5-flash"
    assert layer_attributes(span) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "gcp.gemini",
        "gen_ai.request.model": "gemini-2.5-flash",
        "gen_ai.request.max_tokens": 64,
        "gen_ai.request.temperature": 0.2,
        "gen_ai.request.top_p": 0.9,
        "gen_ai.request.choice.count": 2,
        "gen_ai.response.id": "resp-1",
        "gen_ai.response.model": "gemini-2.5-flash-001",
        "gen_ai.response.finish_reasons": ["STOP"],
        # semconv: cached tokens inside input, reasoning inside output
        "gen_ai.usage.input_tokens": 40,
        "gen_ai.usage.output_tokens": 12,
        "gen_ai.usage.cache_read.input_tokens": 32,
        "gen_ai.usage.reasoning.output_tokens": 7,
        "otel_ebpf.gen_ai.response.tool_calls.count": 2,
        "otel_ebpf.gen_ai.response.tool_calls.names": ["get_weather", "get_time"],
    }
    assert "Paris" not in str(span.attributes)  # no arguments without content capture


def test_content_capture_maps_roles_thoughts_and_calls():
    doc = answer([{"text": "hmm", "thought": True}, {"text": "Sunny."},
                  {"functionCall": {"name": "get_weather", "args": {"city": "Paris"}}}],
                 "STOP", USAGE)
    span = enrich(exchange(GENERATE, body(REQUEST), body(orjson.dumps(doc))),
                  {"capture_content": True})
    a = span.attributes
    assert orjson.loads(a["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "weather in Paris?"}]}]
    assert orjson.loads(a["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "be brief"}]
    assert orjson.loads(a["gen_ai.output.messages"]) == [{
        "role": "assistant", "finish_reason": "STOP", "parts": [
            {"type": "reasoning", "content": "hmm"}, {"type": "text", "content": "Sunny."},
            {"type": "tool_call", "name": "get_weather", "arguments": {"city": "Paris"}}]}]


def sse_chunks(role: Role) -> list[tuple[bytes, int]]:
    usage = dict(USAGE, candidatesTokenCount=None)
    docs = [answer([{"text": f"w{i}"}], usage={**usage, "candidatesTokenCount": i + 1})
            for i in range(4)]
    docs[-1] = answer([{"text": "w3"}, {"functionCall": {"name": "get_weather"}}], "STOP",
                      {**USAGE, "candidatesTokenCount": 4, "thoughtsTokenCount": 0})
    start = REQ_END + 300 * MS
    return [(b"data: " + orjson.dumps(d) + b"\r\n\r\n", start + i * 40 * MS)
            for i, d in enumerate(docs)]


@pytest.mark.parametrize("role", [Role.CLIENT, Role.SERVER])
def test_stream_generate_content_sse_is_timed_like_openai_streams(role):
    span = enrich(exchange(STREAM, body(REQUEST), body(*sse_chunks(role)),
                           response_type="text/event-stream", role=role))
    a = span.attributes
    assert span.kind == (SpanKind.SERVER if role == Role.SERVER else SpanKind.CLIENT)
    assert a["gen_ai.request.stream"] is True
    assert a["gen_ai.usage.output_tokens"] == 4  # the last chunk's counts win
    assert a["gen_ai.usage.input_tokens"] == 40
    assert a["otel_ebpf.gen_ai.response.chunk_count"] == 4
    base = REQ_START if role == Role.CLIENT else REQ_END
    assert a["gen_ai.response.time_to_first_chunk"] == pytest.approx(
        (REQ_END + 300 * MS - base) / 1e9)
    assert a["otel_ebpf.gen_ai.time_per_output_token"] == pytest.approx(0.040)
    assert a["otel_ebpf.gen_ai.response.tool_calls.names"] == ["get_weather"]
    names = {m.instrument for m in span.measurements}
    if role == Role.SERVER:
        assert {"gen_ai.server.time_to_first_token", "gen_ai.server.time_per_output_token"} <= names


def test_stream_byte_by_byte_gives_the_same_span():
    chunks = sse_chunks(Role.CLIENT)
    wire = b"".join(c for c, _ in chunks)
    whole = enrich(exchange(STREAM, body(REQUEST), body((wire, chunks[-1][1])),
                            response_type="text/event-stream"))
    single = enrich(exchange(STREAM, body(REQUEST),
                             body(*[(wire[i : i + 1], chunks[-1][1]) for i in range(len(wire))]),
                             response_type="text/event-stream"))
    keep = ("gen_ai.usage.input_tokens", "gen_ai.usage.output_tokens",
            "gen_ai.response.finish_reasons", "otel_ebpf.gen_ai.response.tool_calls.names",
            "otel_ebpf.gen_ai.response.chunk_count")
    assert {k: single.attributes[k] for k in keep} == {k: whole.attributes[k] for k in keep}


def test_a_gap_in_the_stream_is_counted():
    chunks = sse_chunks(Role.CLIENT)
    span = enrich(exchange(STREAM, body(REQUEST), body(chunks[0], Lost(50), *chunks[2:]),
                           response_type="text/event-stream"))
    assert span.attributes["otel_ebpf.gen_ai.response.chunks_lost"] == 1
    assert span.attributes["gen_ai.usage.output_tokens"] == 4


def test_stream_without_alt_sse_is_a_json_array():
    docs = [answer([{"text": "a"}]), answer([{"text": "b"}], "STOP", USAGE)]
    span = enrich(exchange(STREAM.partition("?")[0], body(REQUEST), body(orjson.dumps(docs))))
    assert span.attributes["gen_ai.usage.output_tokens"] == 12
    assert span.attributes["gen_ai.response.finish_reasons"] == ["STOP"]


def test_embed_content():
    request = orjson.dumps({"content": {"parts": [{"text": "hi"}]}, "outputDimensionality": 4})
    span = enrich(exchange("/v1beta/models/text-embedding-004:embedContent", body(request),
                           body(b'{"embedding":{"values":[0.1,0.2,0.3,0.4]}}'), host="gw:80"))
    assert span.name == "embeddings text-embedding-004"
    assert layer_attributes(span) == {
        "gen_ai.operation.name": "embeddings", "gen_ai.provider.name": "gemini_compatible",
        "gen_ai.request.model": "text-embedding-004", "gen_ai.embeddings.dimension.count": 4}


def test_an_error_names_googles_status():
    error = b'{"error":{"code":404,"message":"models/x is not found","status":"NOT_FOUND"}}'
    span = enrich(exchange(GENERATE, body(REQUEST), body(error), status=404))
    assert span.attributes["error.type"] == "NOT_FOUND"
    chunk = b'data: {"error":{"code":500,"status":"INTERNAL"}}\r\n\r\n'
    span = enrich(exchange(STREAM, body(REQUEST), body(chunk), response_type="text/event-stream"))
    assert span.attributes["error.type"] == "INTERNAL" and span.status == StatusCode.ERROR


def test_a_cut_response_is_scanned_for_usage():
    doc = orjson.dumps(answer([{"text": "x" * 9000}], "MAX_TOKENS", USAGE))
    cut = body((doc[:300], REQ_END + 1), Lost(len(doc) - 600), (doc[-300:], REQ_END + 2))
    span = enrich(exchange(GENERATE, body(REQUEST), cut))
    a = span.attributes
    assert a["gen_ai.usage.output_tokens"] == 12 and a["gen_ai.usage.reasoning.output_tokens"] == 7
    assert a["gen_ai.usage.cache_read.input_tokens"] == 32
    assert a["gen_ai.response.finish_reasons"] == ["MAX_TOKENS"]


def test_hidden_thoughts_are_not_part_of_the_pace():
    # 7 thought tokens generated before the first chunk, never shown: time per output token
    # is over the 4 visible ones (but the usage counts all 11)
    chunks = sse_chunks(Role.SERVER)
    last = answer([{"text": "w3"}], "STOP", {**USAGE, "candidatesTokenCount": 4})
    chunks[-1] = (b"data: " + orjson.dumps(last) + b"\r\n\r\n", chunks[-1][1])
    a = enrich(exchange(STREAM, body(REQUEST), body(*chunks), response_type="text/event-stream",
                        role=Role.SERVER)).attributes
    assert a["gen_ai.usage.output_tokens"] == 11
    assert a["otel_ebpf.gen_ai.time_per_output_token"] == pytest.approx(0.040)
    # shown thoughts are chunks of the stream: then they count
    shown = [(b"data: " + orjson.dumps(answer([{"text": "hm", "thought": True}])) + b"\r\n\r\n",
              chunks[0][1] - 40 * MS), *chunks]
    a = enrich(exchange(STREAM, body(REQUEST), body(*shown), response_type="text/event-stream",
                        role=Role.SERVER)).attributes
    assert a["otel_ebpf.gen_ai.time_per_output_token"] == pytest.approx(0.160 / 10)


@pytest.mark.parametrize(("host", "provider"), [
    ("us-central1-aiplatform.googleapis.com", "gcp.vertex_ai"),
    ("aiplatform.googleapis.com:443", "gcp.vertex_ai"),
    ("generativelanguage.googleapis.com", "gcp.gemini"),
    ("127.0.0.1:9000", "gemini_compatible"),
])
def test_provider_by_host(host, provider):
    doc = answer([{"text": "x"}], "STOP", USAGE)
    span = enrich(exchange(GENERATE, body(REQUEST), body(orjson.dumps(doc)), host=host))
    assert span.attributes["gen_ai.provider.name"] == provider
