"""Stream events of each dialect -> ResponseInfo, noting which events carried content.

A content event is one that carries generated output: text, reasoning or refusal deltas,
tool-call deltas; for Anthropic every content_block_delta; for Gemini a chunk with text or a
function call; for Bedrock's ConverseStream every contentBlockDelta. Role-only openers,
usage-only chunks, pings and stop events are not content: they do not mark when output
arrived.
"""

from __future__ import annotations

import base64
import binascii
from collections.abc import Callable
from typing import Any

import orjson

from ..layers import Body
from .endpoints import ANTHROPIC, GEMINI, OLLAMA, OPENAI, Route
from .eventstream import Frames
from . import stream as _stream
from .response import (
    ResponseInfo,
    anthropic_message,
    anthropic_usage,
    api_error,
    bedrock_usage,
    gemini_object,
    integer,
    invoke_object,
    loads,
    mapping,
    ollama_object,
    openai_usage,
    responses_object,
    sequence,
    text,
)
from .stream import Decoded, decode_sse, decode_sse_rest

# a handler reads one event's JSON and says whether it carried content
Handler = Callable[[dict[str, Any], ResponseInfo], bool]
MAX_CONTENT_TIMES = 65_536  # one per chunk; the Body keeps no more pieces than this anyway


def _openai_chunk(doc: dict[str, Any], info: ResponseInfo) -> bool:
    """A chat.completion.chunk (delta) or a legacy text_completion chunk (text). Called per
    chunk: the helpers (identify, integer, mapping...) are inlined where a stream's later
    chunks would only call them to learn nothing new."""
    if info.id is None or info.model is None:
        info.identify(doc)
    error = doc.get("error")
    if error is not None:  # an error in the middle of a 200 stream
        info.error_type = api_error(error) or "_OTHER"
    usage = doc.get("usage")
    if usage:  # the include_usage chunk: choices empty
        openai_usage(usage, info)
    if not info.system_fingerprint:
        info.system_fingerprint = text(doc.get("system_fingerprint"))
    if not info.service_tier:
        info.service_tier = text(doc.get("service_tier"))
    choices = doc.get("choices")
    if not isinstance(choices, list):
        return False
    content = False
    for position, choice in enumerate(choices):
        if not isinstance(choice, dict):
            choice = {}
        index = choice.get("index")
        if not isinstance(index, int) or isinstance(index, bool):
            index = position
        delta = mapping(choice.get("delta"))
        words = delta.get("content") if delta else choice.get("text")
        thought = delta.get("reasoning_content") or delta.get("reasoning")
        calls = sequence(delta.get("tool_calls"))
        if words or thought or calls or delta.get("refusal"):
            content = True
        info.reasoning_streamed = info.reasoning_streamed or bool(thought)
        for position, call in enumerate(calls):  # the name comes in a call's first delta
            call = mapping(call)
            key = integer(call.get("index"))
            name = mapping(call.get("function")).get("name")
            info.tool_called((index, position if key is None else key), name)
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
    if kind.startswith("response.reasoning"):  # reasoning text or its summary, streamed
        info.reasoning_streamed = True
    return kind.endswith(".delta")


def _anthropic_start(doc: dict[str, Any], info: ResponseInfo) -> bool:
    anthropic_message(mapping(doc.get("message")), info)
    return False


def _anthropic_block_start(doc: dict[str, Any], info: ResponseInfo) -> bool:
    block = mapping(doc.get("content_block"))
    if block.get("type") == "tool_use":
        info.tool_called(integer(doc.get("index")), block.get("name"))
    if info.capture:
        if block.get("type") == "tool_use":
            tool = info.choice(0).tool(integer(doc.get("index")))
            tool.id, tool.name = text(block.get("id")), text(block.get("name"))
    return False


_ANTHROPIC_DELTA_FIELDS = {
    "text_delta": ("text", "text"),
    "thinking_delta": ("thinking", "reasoning"),
}


def _anthropic_delta(doc: dict[str, Any], info: ResponseInfo) -> bool:
    delta = mapping(doc.get("delta"))
    if delta.get("type") == "thinking_delta":
        info.reasoning_streamed = True
    if info.capture:
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


def _foreign(doc: dict[str, Any], info: ResponseInfo) -> bool:
    return False


_HANDLERS: dict[tuple[str, bool], Handler] = {
    (OPENAI, False): _openai_chunk,
    (OPENAI, True): _responses_event,
    (ANTHROPIC, False): _anthropic_event,
    (OLLAMA, False): ollama_object,
    (GEMINI, False): gemini_object,
}


def read_events(decoded: Decoded, route: Route, info: ResponseInfo) -> None:
    info.streamed = True
    info.dropped += decoded.dropped
    # Bedrock streams are AWS event streams (read_eventstream): SSE there is not its API
    handler = _HANDLERS.get((route.dialect, route.responses_api), _foreign)
    for event in decoded.events:
        data = event.data
        if data == b"[DONE]":  # OpenAI's end marker, not JSON
            continue
        try:  # response.loads, inline: once per chunk
            doc = orjson.loads(data)
        except orjson.JSONDecodeError:
            continue
        if not isinstance(doc, dict):
            continue
        if handler(doc, info) and len(info.content_ns) < MAX_CONTENT_TIMES:
            info.content_ns.append(event.ns)


def _openai_event(data: bytes, ns: int, info: ResponseInfo) -> None:
    """One turn of read_events' loop for an OpenAI chunk: what the compiled reader hands
    back for an event whose JSON it does not read itself."""
    if data == b"[DONE]":
        return
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return
    if not isinstance(doc, dict):
        return
    if _openai_chunk(doc, info) and len(info.content_ns) < MAX_CONTENT_TIMES:
        info.content_ns.append(ns)


def read_sse(body: Body, route: Route, info: ResponseInfo) -> None:
    """`read_events(decode_sse(body), route, info)`, the reference. An OpenAI chat or
    completions stream read without content capture goes to _stream.c (stream.compiled)
    where it is built: the events of the pieces that end where events end are read there
    straight into `info` (no event objects, no dicts), then the rest as here."""
    handler = _HANDLERS.get((route.dialect, route.responses_api), _foreign)
    fast = _stream.compiled
    if fast is None or handler is not _openai_chunk or info.capture \
            or type(info) is not ResponseInfo:
        read_events(decode_sse(body), route, info)
        return
    first, expect = fast.openai_events(body.pieces, info)
    if first == len(body.pieces):
        info.streamed = True
        return
    read_events(decode_sse_rest(body, first, expect), route, info)


if _stream.compiled is not None:
    _stream.compiled.openai_setup(ResponseInfo, _openai_event, MAX_CONTENT_TIMES)


# Bedrock event streams ------------------------------------------------------------------


def _converse_block_start(doc: dict[str, Any], info: ResponseInfo) -> bool:
    tool = mapping(mapping(doc.get("start")).get("toolUse"))
    if tool:
        index = integer(doc.get("contentBlockIndex"))
        info.tool_called(index, tool.get("name"))
        if info.capture:
            call = info.choice(0).tool(index)
            call.id, call.name = text(tool.get("toolUseId")), text(tool.get("name"))
    return False


def _converse_delta(doc: dict[str, Any], info: ResponseInfo) -> bool:
    delta = mapping(doc.get("delta"))
    if delta.get("reasoningContent"):
        info.reasoning_streamed = True
    if info.capture:
        out = info.choice(0)
        words = text(delta.get("text"))
        reasoning = text(mapping(delta.get("reasoningContent")).get("text"))
        arguments = text(mapping(delta.get("toolUse")).get("input"))
        if words:
            out.text.append(words)
        if reasoning:
            out.reasoning.append(reasoning)
        if arguments:
            out.tool(integer(doc.get("contentBlockIndex"))).fragments.append(arguments)
    return True


def _converse_stop(doc: dict[str, Any], info: ResponseInfo) -> bool:
    info.finish(0, doc.get("stopReason"))
    return False


def _converse_metadata(doc: dict[str, Any], info: ResponseInfo) -> bool:
    bedrock_usage(doc.get("usage"), info)
    return False


_CONVERSE: dict[str, Handler] = {
    "contentBlockStart": _converse_block_start,
    "contentBlockDelta": _converse_delta,
    "messageStop": _converse_stop,
    "metadata": _converse_metadata,
}


def _invoke_chunk(doc: dict[str, Any], info: ResponseInfo) -> bool:
    """InvokeModelWithResponseStream: each chunk's `bytes` is base64 of one event of the
    model vendor's own stream (Anthropic's typed events, Llama's and Titan's objects)."""
    try:
        inner = loads(base64.b64decode(text(doc.get("bytes")) or "", validate=True))
    except (binascii.Error, ValueError):
        return False
    if not isinstance(inner, dict):
        return False
    if isinstance(inner.get("type"), str):  # Anthropic's typed event: the only other field
        content = _anthropic_event(inner, info)  # read is Bedrock's metrics, on the last one
        bedrock_usage(inner.get("amazon-bedrock-invocationMetrics"), info)
        return content
    return invoke_object(inner, info)


def read_eventstream(frames: Frames, route: Route, info: ResponseInfo) -> None:
    info.streamed = True
    info.dropped += frames.dropped + frames.corrupt
    for frame in frames.frames:
        headers = frame.headers
        if headers.get(":message-type") in ("exception", "error"):
            # a modelStreamErrorException, throttlingException... inside a 200 stream
            kind = headers.get(":exception-type") or headers.get(":error-code")
            info.error_type = kind if isinstance(kind, str) and kind else "_OTHER"
            continue
        event = headers.get(":event-type")
        doc = loads(frame.payload)
        if not isinstance(doc, dict) or not isinstance(event, str):
            continue
        if route.invoke:
            content = event == "chunk" and _invoke_chunk(doc, info)
        else:
            handler = _CONVERSE.get(event)
            content = handler(doc, info) if handler is not None else False
        if content and len(info.content_ns) < MAX_CONTENT_TIMES:
            info.content_ns.append(frame.ns)
