"""Bedrock Runtime through LLMLayer: Converse JSON, ConverseStream's AWS event stream (timed,
whole and byte by byte, cut, with an exception frame), InvokeModel with Anthropic and Titan
bodies and its stream of base64 chunks; cache usage counted apart as Bedrock reports it."""

from __future__ import annotations

import base64

import orjson
import pytest
from otel_ebpf.protocols.base import Role, StatusCode
from otel_ebpf.protocols.llm import LLMLayer
from otel_ebpf.protocols.llm.endpoints import BEDROCK, CHAT, EMBEDDINGS, Endpoints, Route
from otel_ebpf.protocols.llm.eventstream import encode_frame

from .build import REQ_END, REQ_START, Lost, body, exchange, http_span, layer_attributes

MS = 1_000_000
MODEL = "anthropic.claude-3-haiku-20240307-v1:0"
CONVERSE = "/model/anthropic.claude-3-haiku-20240307-v1%3A0/converse"
STREAM = CONVERSE + "-stream"
INVOKE = "/model/anthropic.claude-3-haiku-20240307-v1%3A0/invoke"
EVENTSTREAM = "application/vnd.amazon.eventstream"
REQUEST = orjson.dumps({
    "messages": [{"role": "user", "content": [{"text": "weather?"},
                                              {"cachePoint": {"type": "default"}}]}],
    "system": [{"text": "be brief"}],
    "inferenceConfig": {"maxTokens": 64, "temperature": 0.3, "topP": 0.8},
})
USAGE = {"inputTokens": 5, "outputTokens": 4, "totalTokens": 39, "cacheReadInputTokens": 20,
         "cacheWriteInputTokens": 10}


def enrich(ex, options=None):
    span = http_span(ex)
    LLMLayer(options).enrich(ex, span)
    return span


def event(kind: str, payload: dict) -> bytes:
    return encode_frame({":event-type": kind, ":content-type": "application/json",
                         ":message-type": "event"}, orjson.dumps(payload))


def converse_stream(start_ns: int) -> list[tuple[bytes, int]]:
    frames = [event("messageStart", {"role": "assistant"})]
    frames += [event("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": f"w{i}"}})
               for i in range(4)]
    frames += [event("contentBlockStop", {"contentBlockIndex": 0}),
               event("contentBlockStart", {"contentBlockIndex": 1, "start": {
                   "toolUse": {"toolUseId": "t1", "name": "get_weather"}}}),
               event("contentBlockDelta", {"contentBlockIndex": 1, "delta": {
                   "toolUse": {"input": '{"city":"Paris"}'}}}),
               event("messageStop", {"stopReason": "tool_use"}),
               event("metadata", {"usage": USAGE, "metrics": {"latencyMs": 300}})]
    times = [start_ns - MS] + [start_ns + i * 40 * MS for i in range(4)]
    times += [times[-1] + MS * k for k in range(1, 6)]
    return list(zip(frames, times, strict=True))


@pytest.mark.parametrize(("path", "route"), [
    (CONVERSE, Route(CHAT, BEDROCK, model=MODEL)),
    (STREAM, Route(CHAT, BEDROCK, model=MODEL, stream=True)),
    (INVOKE, Route(CHAT, BEDROCK, model=MODEL, invoke=True)),
    (INVOKE + "-with-response-stream", Route(CHAT, BEDROCK, model=MODEL, stream=True,
                                             invoke=True)),
    ("/model/amazon.titan-embed-text-v2:0/invoke",
     Route(EMBEDDINGS, BEDROCK, model="amazon.titan-embed-text-v2:0", invoke=True)),
])
def test_bedrock_paths(path, route):
    assert Endpoints().route("POST", path) == route


@pytest.mark.parametrize("path", ["/model//converse", "/model/a/b/converse",
                                  "/model/x/apply-guardrail", "/models/x/converse"])
def test_not_bedrock_calls(path):
    assert Endpoints().route("POST", path) is None


def test_converse_json_counts_cache_inside_input_and_summarises_tools():
    doc = {"output": {"message": {"role": "assistant", "content": [
        {"text": "Checking."},
        {"toolUse": {"toolUseId": "t1", "name": "get_weather", "input": {"city": "Paris"}}}]}},
        "stopReason": "tool_use", "usage": USAGE, "metrics": {"latencyMs": 321}}
    span = enrich(exchange(CONVERSE, body(REQUEST), body(orjson.dumps(doc)),
                           host="bedrock-runtime.us-east-1.amazonaws.com"))
    assert span.name == f"chat {MODEL}"
    assert layer_attributes(span) == {
        "gen_ai.operation.name": "chat",
        "gen_ai.provider.name": "aws.bedrock",
        "gen_ai.request.model": MODEL,
        "gen_ai.request.max_tokens": 64,
        "gen_ai.request.temperature": 0.3,
        "gen_ai.request.top_p": 0.8,
        "gen_ai.response.finish_reasons": ["tool_use"],
        "gen_ai.usage.input_tokens": 35,  # 5 uncached + 20 read + 10 written
        "gen_ai.usage.output_tokens": 4,
        "gen_ai.usage.cache_read.input_tokens": 20,
        "gen_ai.usage.cache_creation.input_tokens": 10,
        "otel_ebpf.gen_ai.response.tool_calls.count": 1,
        "otel_ebpf.gen_ai.response.tool_calls.names": ["get_weather"],
    }


def test_converse_content_capture():
    doc = {"output": {"message": {"role": "assistant", "content": [
        {"reasoningContent": {"reasoningText": {"text": "hmm"}}}, {"text": "Sunny."}]}},
        "stopReason": "end_turn", "usage": USAGE}
    a = enrich(exchange(CONVERSE, body(REQUEST), body(orjson.dumps(doc))),
               {"capture_content": True}).attributes
    assert orjson.loads(a["gen_ai.input.messages"]) == [{"role": "user", "parts": [
        {"type": "text", "content": "weather?"}, {"type": "cachePoint"}]}]
    assert orjson.loads(a["gen_ai.system_instructions"]) == [
        {"type": "text", "content": "be brief"}]
    assert orjson.loads(a["gen_ai.output.messages"]) == [{
        "role": "assistant", "finish_reason": "end_turn",
        "parts": [{"type": "reasoning", "content": "hmm"}, {"type": "text", "content": "Sunny."}]}]


@pytest.mark.parametrize("role", [Role.CLIENT, Role.SERVER])
def test_converse_stream_is_timed_from_content_frames(role):
    first = REQ_END + 300 * MS
    span = enrich(exchange(STREAM, body(REQUEST), body(*converse_stream(first)),
                           response_type=EVENTSTREAM, role=role), {"capture_content": True})
    a = span.attributes
    base = REQ_START if role == Role.CLIENT else REQ_END
    assert a["gen_ai.request.stream"] is True
    assert a["gen_ai.response.time_to_first_chunk"] == pytest.approx((first - base) / 1e9)
    assert a["otel_ebpf.gen_ai.response.chunk_count"] == 5  # four texts and the tool input
    assert a["gen_ai.usage.input_tokens"] == 35 and a["gen_ai.usage.output_tokens"] == 4
    assert a["otel_ebpf.gen_ai.output_tokens.source"] == "usage"
    assert a["otel_ebpf.gen_ai.response.tool_calls.names"] == ["get_weather"]
    assert a["gen_ai.response.finish_reasons"] == ["tool_use"]
    out = orjson.loads(a["gen_ai.output.messages"])[0]["parts"]
    assert out == [{"type": "text", "content": "w0w1w2w3"},
                   {"type": "tool_call", "name": "get_weather", "id": "t1",
                    "arguments": {"city": "Paris"}}]


def test_converse_stream_byte_by_byte_gives_the_same_span():
    frames = converse_stream(REQ_END + 300 * MS)
    wire = b"".join(f for f, _ in frames)
    whole = enrich(exchange(STREAM, body(REQUEST), body((wire, REQ_END + 1)),
                            response_type=EVENTSTREAM))
    single = enrich(exchange(STREAM, body(REQUEST), body(
        *[(wire[i : i + 1], REQ_END + 1) for i in range(len(wire))]), response_type=EVENTSTREAM))
    assert single.attributes == whole.attributes


def test_a_gap_in_the_stream_loses_one_frame_and_is_counted():
    frames = converse_stream(REQ_END + 300 * MS)
    cut = frames[:2] + [(frames[2][0][:9], frames[2][1]), Lost(len(frames[2][0]) - 9)]
    span = enrich(exchange(STREAM, body(REQUEST), body(*cut, *frames[3:]),
                           response_type=EVENTSTREAM))
    a = span.attributes
    assert a["otel_ebpf.gen_ai.response.chunks_lost"] == 1
    assert a["otel_ebpf.gen_ai.response.chunk_count"] == 4
    assert a["gen_ai.usage.output_tokens"] == 4  # the metadata frame after the gap is read


def test_an_exception_frame_in_a_200_stream_is_an_error():
    frames = converse_stream(REQ_END)[:3]
    error = encode_frame({":message-type": "exception", ":exception-type":
                          "modelStreamErrorException", ":content-type": "application/json"},
                         b'{"message":"model failed"}')
    span = enrich(exchange(STREAM, body(REQUEST), body(*frames, (error, REQ_END + 9 * MS)),
                           response_type=EVENTSTREAM))
    assert span.attributes["error.type"] == "modelStreamErrorException"
    assert span.status == StatusCode.ERROR


def test_an_http_error_keeps_the_status_or_the_aws_type():
    span = enrich(exchange(CONVERSE, body(REQUEST), body(b'{"message":"no such model"}'),
                           status=404))
    assert span.attributes["error.type"] == "404"
    span = enrich(exchange(CONVERSE, body(REQUEST), body(
        b'{"__type":"com.amazon.coral.validate#ValidationException","message":"bad"}'),
        status=400))
    assert span.attributes["error.type"] == "ValidationException"


def test_invoke_model_with_an_anthropic_body():
    request = orjson.dumps({"anthropic_version": "bedrock-2023-05-31", "max_tokens": 32,
                            "temperature": 0.1, "messages": [{"role": "user",
                                                              "content": "hi"}]})
    answer = {"id": "msg_bdrk_1", "type": "message", "role": "assistant", "model": MODEL,
              "content": [{"type": "text", "text": "Hello"},
                          {"type": "tool_use", "id": "tu", "name": "lookup", "input": {}}],
              "stop_reason": "tool_use", "usage": {"input_tokens": 3, "output_tokens": 2,
                                                   "cache_read_input_tokens": 8}}
    a = enrich(exchange(INVOKE, body(request), body(orjson.dumps(answer))),
               {"capture_content": True}).attributes
    assert a["gen_ai.request.max_tokens"] == 32 and a["gen_ai.request.temperature"] == 0.1
    assert a["gen_ai.response.id"] == "msg_bdrk_1"
    assert a["gen_ai.usage.input_tokens"] == 11 and a["gen_ai.usage.cache_read.input_tokens"] == 8
    assert a["otel_ebpf.gen_ai.response.tool_calls.names"] == ["lookup"]
    assert orjson.loads(a["gen_ai.input.messages"]) == [
        {"role": "user", "parts": [{"type": "text", "content": "hi"}]}]


def test_invoke_model_titan_embeddings():
    path = "/model/amazon.titan-embed-text-v2:0/invoke"
    span = enrich(exchange(path, body(b'{"inputText":"hi","dimensions":4}'),
                           body(b'{"embedding":[0.1,0.2,0.3,0.4],"inputTextTokenCount":2}')))
    assert span.name == "embeddings amazon.titan-embed-text-v2:0"
    assert span.attributes["gen_ai.usage.input_tokens"] == 2
    assert span.attributes["gen_ai.embeddings.dimension.count"] == 4


def test_invoke_with_response_stream_reads_the_vendor_events_inside_chunks():
    def chunk(doc: dict) -> bytes:
        return event("chunk", {"bytes": base64.b64encode(orjson.dumps(doc)).decode()})

    start = {"type": "message_start", "message": {"id": "msg_bdrk_2", "model": MODEL,
                                                  "usage": {"input_tokens": 3}}}
    docs = [start] + [{"type": "content_block_delta", "index": 0,
                       "delta": {"type": "text_delta", "text": f"w{i}"}} for i in range(3)]
    docs += [{"type": "message_delta", "delta": {"stop_reason": "end_turn"},
              "usage": {"output_tokens": 3}},
             {"type": "message_stop", "amazon-bedrock-invocationMetrics": {
                 "inputTokenCount": 3, "outputTokenCount": 3}}]
    pieces = [(chunk(d), REQ_END + (i + 1) * 10 * MS) for i, d in enumerate(docs)]
    pieces.append((event("chunk", {"bytes": "not base64!"}), REQ_END + 99 * MS))
    span = enrich(exchange(INVOKE + "-with-response-stream", body(b"{}"), body(*pieces),
                           response_type=EVENTSTREAM, role=Role.SERVER))
    a = span.attributes
    assert a["gen_ai.response.id"] == "msg_bdrk_2"
    assert a["otel_ebpf.gen_ai.response.chunk_count"] == 3
    assert a["gen_ai.usage.input_tokens"] == 3 and a["gen_ai.usage.output_tokens"] == 3
    assert a["gen_ai.response.time_to_first_chunk"] == pytest.approx(0.020)
    assert a["gen_ai.response.finish_reasons"] == ["end_turn"]
