"""Usage details and the tool-call summary on the OpenAI-compatible, Responses, Anthropic and
Ollama dialects: whole answers, streams (a call's name only in its first delta), and the
ends of a body the capture cut; never a tool's arguments without content capture."""

from __future__ import annotations

import orjson
from otel_ebpf.protocols.llm import LLMLayer

from .build import REQ_END, Lost, body, exchange, http_span, sse

COUNT = "otel_ebpf.gen_ai.response.tool_calls.count"
NAMES = "otel_ebpf.gen_ai.response.tool_calls.names"
REQUEST = b'{"model":"m","messages":[{"role":"user","content":"hi"}]}'


def attrs(path, response, response_type="application/json", options=None, request=REQUEST):
    ex = exchange(path, body(request), response, response_type=response_type)
    span = http_span(ex)
    LLMLayer(options).enrich(ex, span)
    return span.attributes


def test_openai_chat_usage_details_and_tool_calls():
    doc = {"id": "c1", "model": "m", "choices": [{"index": 0, "finish_reason": "tool_calls",
           "message": {"role": "assistant", "tool_calls": [
               {"id": "a", "type": "function",
                "function": {"name": "get_weather", "arguments": '{"city":"SECRET"}'}},
               {"id": "b", "type": "function", "function": {"name": "get_time",
                                                             "arguments": "{}"}}]}}],
           "usage": {"prompt_tokens": 50, "completion_tokens": 20,
                     "prompt_tokens_details": {"cached_tokens": 32},
                     "completion_tokens_details": {"reasoning_tokens": 12}}}
    a = attrs("/v1/chat/completions", body(orjson.dumps(doc)))
    assert a["gen_ai.usage.input_tokens"] == 50 and a["gen_ai.usage.output_tokens"] == 20
    assert a["gen_ai.usage.cache_read.input_tokens"] == 32
    assert a["gen_ai.usage.reasoning.output_tokens"] == 12
    assert a[COUNT] == 2 and a[NAMES] == ["get_weather", "get_time"]
    assert "SECRET" not in str(a)


def test_openai_stream_names_each_call_once():
    def chunk(calls=None, finish=None, usage=None):
        delta = {"tool_calls": calls} if calls else {}
        doc = {"id": "c", "model": "m",
               "choices": [{"index": 0, "delta": delta, "finish_reason": finish}]}
        if usage:
            doc = {"id": "c", "model": "m", "choices": [], "usage": usage}
        return orjson.dumps(doc).decode()

    events = sse(
        chunk([{"index": 0, "id": "a", "function": {"name": "search", "arguments": ""}}]),
        chunk([{"index": 0, "function": {"arguments": '{"q":'}}]),
        chunk([{"index": 1, "id": "b", "function": {"name": "fetch", "arguments": ""}}]),
        chunk([{"index": 1, "function": {"arguments": "1}"}}]),
        chunk(finish="tool_calls"),
        chunk(usage={"prompt_tokens": 9, "completion_tokens": 4,
                     "prompt_tokens_details": {"cached_tokens": 0},
                     "completion_tokens_details": {"reasoning_tokens": 2}}),
        "[DONE]")
    a = attrs("/v1/chat/completions", body(*events), "text/event-stream")
    assert a[COUNT] == 2 and a[NAMES] == ["search", "fetch"]
    assert a["gen_ai.usage.reasoning.output_tokens"] == 2
    assert "gen_ai.usage.cache_read.input_tokens" not in a  # zero: left out


def test_deepseek_cache_hits():
    doc = {"id": "c", "model": "deepseek-chat", "choices": [],
           "usage": {"prompt_tokens": 70, "completion_tokens": 3, "prompt_cache_hit_tokens": 64,
                     "prompt_cache_miss_tokens": 6}}
    a = attrs("/v1/chat/completions", body(orjson.dumps(doc)))
    assert a["gen_ai.usage.cache_read.input_tokens"] == 64
    assert a["gen_ai.usage.input_tokens"] == 70


def test_responses_api_function_calls():
    doc = {"id": "resp_1", "model": "m", "status": "completed", "output": [
        {"type": "reasoning", "summary": []},
        {"type": "function_call", "call_id": "c1", "name": "lookup", "arguments": "{}"}],
        "usage": {"input_tokens": 10, "output_tokens": 30,
                  "input_tokens_details": {"cached_tokens": 8},
                  "output_tokens_details": {"reasoning_tokens": 25}}}
    a = attrs("/v1/responses", body(orjson.dumps(doc)),
              request=b'{"model":"m","input":"hi"}')
    assert a[NAMES] == ["lookup"] and a[COUNT] == 1
    assert a["gen_ai.usage.cache_read.input_tokens"] == 8
    assert a["gen_ai.usage.reasoning.output_tokens"] == 25


def test_anthropic_stream_cache_usage_and_tool_use():
    events = [
        {"type": "message_start", "message": {"id": "msg", "model": "claude", "content": [],
                                              "usage": {"input_tokens": 5,
                                                        "cache_read_input_tokens": 100,
                                                        "cache_creation_input_tokens": 20}}},
        {"type": "content_block_start", "index": 0,
         "content_block": {"type": "tool_use", "id": "tu", "name": "get_weather", "input": {}}},
        {"type": "content_block_delta", "index": 0,
         "delta": {"type": "input_json_delta", "partial_json": '{"city": "SECRET"}'}},
        {"type": "message_delta", "delta": {"stop_reason": "tool_use"},
         "usage": {"output_tokens": 7}},
    ]
    wire = [f"event: {e['type']}\ndata: {orjson.dumps(e).decode()}\n\n".encode() for e in events]
    a = attrs("/v1/messages", body(*wire), "text/event-stream")
    assert a["gen_ai.usage.input_tokens"] == 125  # semconv: cached tokens inside the input
    assert a["gen_ai.usage.cache_read.input_tokens"] == 100
    assert a["gen_ai.usage.cache_creation.input_tokens"] == 20
    assert a[NAMES] == ["get_weather"] and a[COUNT] == 1
    assert "SECRET" not in str(a)


def test_ollama_tool_calls():
    lines = [orjson.dumps(d) + b"\n" for d in (
        {"model": "llama3", "message": {"role": "assistant", "content": "", "tool_calls": [
            {"function": {"name": "get_weather", "arguments": {"city": "x"}}}]}, "done": False},
        {"model": "llama3", "message": {"role": "assistant", "content": ""}, "done": True,
         "done_reason": "stop", "prompt_eval_count": 12, "eval_count": 3})]
    a = attrs("/api/chat", body(*lines), "application/x-ndjson")
    assert a[NAMES] == ["get_weather"] and a["gen_ai.usage.output_tokens"] == 3


def test_unnamed_calls_are_counted_without_names():
    doc = {"id": "c", "model": "m", "choices": [{"index": 0, "message": {"tool_calls": [{}]}}]}
    a = attrs("/v1/chat/completions", body(orjson.dumps(doc)))
    assert a[COUNT] == 1 and NAMES not in a


def test_a_cut_openai_body_still_gives_cache_and_reasoning_from_its_tail():
    doc = orjson.dumps({"id": "c", "model": "m", "choices": [{"index": 0, "message": {
        "content": "x" * 9000}, "finish_reason": "stop"}], "usage": {
        "prompt_tokens": 50, "completion_tokens": 20, "prompt_tokens_details": {
            "cached_tokens": 32}, "completion_tokens_details": {"reasoning_tokens": 12}}})
    cut = body((doc[:200], REQ_END + 1), Lost(len(doc) - 400), (doc[-200:], REQ_END + 2))
    a = attrs("/v1/chat/completions", cut)
    assert a["gen_ai.usage.cache_read.input_tokens"] == 32
    assert a["gen_ai.usage.reasoning.output_tokens"] == 12
