"""Stream events of each dialect -> ResponseInfo, noting which events carried content.

A content event is one that carries generated output: text, reasoning or refusal deltas,
tool-call deltas; for Anthropic every content_block_delta. Role-only openers, usage-only
chunks, pings and stop events are not content: they do not mark when output arrived.
"""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

from .endpoints import ANTHROPIC, OLLAMA, OPENAI, Route
from .response import (
    ResponseInfo,
    anthropic_message,
    anthropic_usage,
    api_error,
    integer,
    loads,
    mapping,
    ollama_object,
    openai_usage,
    responses_object,
    sequence,
    text,
)
from .stream import Decoded

# a handler reads one event's JSON and says whether it carried content
Handler = Callable[[dict[str, Any], ResponseInfo], bool]
MAX_CONTENT_TIMES = 65_536  # one per chunk; the Body keeps no more pieces than this anyway


def _openai_chunk(doc: dict[str, Any], info: ResponseInfo) -> bool:
    """A chat.completion.chunk (delta) or a legacy text_completion chunk (text)."""
    info.identify(doc)
    if doc.get("error") is not None:  # an error in the middle of a 200 stream
        info.error_type = api_error(doc.get("error")) or "_OTHER"
    openai_usage(doc.get("usage"), info)  # the include_usage chunk: choices empty
    info.system_fingerprint = info.system_fingerprint or text(doc.get("system_fingerprint"))
    info.service_tier = info.service_tier or text(doc.get("service_tier"))
    content = False
    for position, choice in enumerate(sequence(doc.get("choices"))):
        choice = mapping(choice)
        index = integer(choice.get("index"))
        index = position if index is None else index
        delta = mapping(choice.get("delta"))
        words = delta.get("content") if delta else choice.get("text")
        thought = delta.get("reasoning_content") or delta.get("reasoning")
        calls = sequence(delta.get("tool_calls"))
        if words or thought or calls or delta.get("refusal"):
            content = True
        info.finish(index, choice.get("finish_reason"))
        if info.capture:
            _keep_openai_delta(info, index, words, thought, calls)
    return content


def _keep_openai_delta(
    info: ResponseInfo, index: int, words: Any, thought: Any, calls: list[Any]
) -> None:
    out = info.choice(index)
    if isinstance(words, str) and words:
        out.text.append(words)
    if isinstance(thought, str) and thought:
        out.reasoning.append(thought)
    for position, call in enumerate(calls):
        call = mapping(call)
        key = integer(call.get("index"))
        tool = out.tool(position if key is None else key)
        function = mapping(call.get("function"))
        tool.id = tool.id or text(call.get("id"))
        tool.name = tool.name or text(function.get("name"))
        fragment = function.get("arguments")
        if isinstance(fragment, str) and fragment:
            tool.fragments.append(fragment)


def _responses_whole(doc: dict[str, Any], info: ResponseInfo) -> bool:
    # response.completed repeats the whole output: content capture takes it from there
    responses_object(mapping(doc.get("response")), info)
    return False


def _responses_error(doc: dict[str, Any], info: ResponseInfo) -> bool:
    info.error_type = text(doc.get("code")) or "_OTHER"
    return False


_RESPONSES: dict[str, Handler] = {
    "response.created": _responses_whole,
    "response.in_progress": _responses_whole,
    "response.completed": _responses_whole,
    "response.incomplete": _responses_whole,
    "response.failed": _responses_whole,
    "error": _responses_error,
}


def _responses_event(doc: dict[str, Any], info: ResponseInfo) -> bool:
    """Responses API events are typed; every "*.delta" event streams generated output
    (text, refusal, reasoning, function-call arguments, audio)."""
    kind = doc.get("type")
    if not isinstance(kind, str):
        return False
    handler = _RESPONSES.get(kind)
    if handler is not None:
        return handler(doc, info)
    return kind.endswith(".delta")


def _anthropic_start(doc: dict[str, Any], info: ResponseInfo) -> bool:
    anthropic_message(mapping(doc.get("message")), info)
    return False


def _anthropic_block_start(doc: dict[str, Any], info: ResponseInfo) -> bool:
    if info.capture:
        block = mapping(doc.get("content_block"))
        if block.get("type") == "tool_use":
            tool = info.choice(0).tool(integer(doc.get("index")))
            tool.id, tool.name = text(block.get("id")), text(block.get("name"))
    return False


_ANTHROPIC_DELTA_FIELDS = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "reasoning"),
}


def _anthropic_delta(doc: dict[str, Any], info: ResponseInfo) -> bool:
    if info.capture:
        delta = mapping(doc.get("delta"))
        out = info.choice(0)
        kind = delta.get("type")
        if kind == "input_json_delta":
            fragment = delta.get("partial_json")
            if isinstance(fragment, str) and fragment:
                out.tool(integer(doc.get("index"))).fragments.append(fragment)
        elif kind in _ANTHROPIC_DELTA_FIELDS:
            key, into = _ANTHROPIC_DELTA_FIELDS[kind]
            value = delta.get(key)
            if isinstance(value, str) and value:
                getattr(out, into).append(value)
    return True


def _anthropic_message_delta(doc: dict[str, Any], info: ResponseInfo) -> bool:
    info.finish(0, mapping(doc.get("delta")).get("stop_reason"))
    anthropic_usage(doc.get("usage"), info)
    return False


def _anthropic_error(doc: dict[str, Any], info: ResponseInfo) -> bool:
    info.error_type = api_error(doc.get("error")) or "_OTHER"
    return False


_ANTHROPIC: dict[str, Handler] = {
    "message_start": _anthropic_start,
    "content_block_start": _anthropic_block_start,
    "content_block_delta": _anthropic_delta,
    "message_delta": _anthropic_message_delta,
    "error": _anthropic_error,
}


def _anthropic_event(doc: dict[str, Any], info: ResponseInfo) -> bool:
    kind = doc.get("type")
    handler = _ANTHROPIC.get(kind) if isinstance(kind, str) else None
    return handler(doc, info) if handler is not None else False


_HANDLERS: dict[tuple[str, bool], Handler] = {
    (OPENAI, False): _openai_chunk,
    (OPENAI, True): _responses_event,
    (ANTHROPIC, False): _anthropic_event,
    (OLLAMA, False): ollama_object,
}


def read_events(decoded: Decoded, route: Route, info: ResponseInfo) -> None:
    info.streamed = True
    info.dropped += decoded.dropped
    handler = _HANDLERS[(route.dialect, route.responses_api)]
    for event in decoded.events:
        if event.data == b"[DONE]":  # OpenAI's end marker, not JSON
            continue
        doc = loads(event.data)
        if not isinstance(doc, dict):
            continue
        if handler(doc, info) and len(info.content_ns) < MAX_CONTENT_TIMES:
            info.content_ns.append(event.ns)
