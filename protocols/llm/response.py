"""The response side of an LLM call: what a whole JSON response says, in every dialect.

`ResponseInfo` is filled the same way from a JSON body and from a stream's events
(events.py): id, model, finish reasons, token usage, errors, and (only when content
capture is on) the generated messages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..layers import Body
from . import scan
from .endpoints import ANTHROPIC, OLLAMA, OPENAI, Route


@dataclass(slots=True)
class ToolCall:
    id: str | None = None
    name: str | None = None
    fragments: list[str] = field(default_factory=list)  # arguments as streamed
    arguments: Any = None  # arguments as a whole object, when the API gave one


@dataclass(slots=True)
class Choice:
    """One generated message (choice, candidate), for content capture."""

    text: list[str] = field(default_factory=list)
    reasoning: list[str] = field(default_factory=list)
    tool_calls: dict[Any, ToolCall] = field(default_factory=dict)
    finish_reason: str | None = None

    def tool(self, key: Any) -> ToolCall:
        call = self.tool_calls.get(key)
        if call is None:
            call = self.tool_calls[key] = ToolCall()
        return call


@dataclass(slots=True)
class ResponseInfo:
    id: str | None = None
    model: str | None = None
    finish_reasons: dict[int, str] = field(default_factory=dict)  # by choice index
    input_tokens: int | None = None  # as the API reports it (see `total_input_tokens`)
    output_tokens: int | None = None
    cache_read_tokens: int | None = None
    cache_creation_tokens: int | None = None
    reasoning_tokens: int | None = None
    # Anthropic counts cached prompt tokens apart from input_tokens; semconv's input count
    # includes them
    cache_apart: bool = False
    error_type: str | None = None
    service_tier: str | None = None
    system_fingerprint: str | None = None
    streamed: bool = False
    content_ns: list[int] = field(default_factory=list)  # times of chunks carrying content
    dropped: int = 0  # stream events lost in capture gaps
    capture: bool = False  # keep generated content (opt-in)
    choices: dict[int, Choice] = field(default_factory=dict)

    @property
    def total_input_tokens(self) -> int | None:
        if self.input_tokens is None or not self.cache_apart:
            return self.input_tokens
        return self.input_tokens + (self.cache_read_tokens or 0) + (self.cache_creation_tokens or 0)

    def choice(self, index: int) -> Choice:
        found = self.choices.get(index)
        if found is None:
            found = self.choices[index] = Choice()
        return found

    def finish(self, index: int, reason: Any) -> None:
        if isinstance(reason, str) and reason:
            self.finish_reasons[index] = reason
            if self.capture:
                self.choice(index).finish_reason = reason

    def identify(self, doc: dict[str, Any]) -> None:
        """id and model: the first seen wins (every stream chunk repeats them)."""
        if self.id is None:
            self.id = text(doc.get("id"))
        if self.model is None:
            self.model = text(doc.get("model"))


def text(value: Any) -> str | None:
    return value if isinstance(value, str) and value else None


def integer(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def mapping(value: Any) -> dict[str, Any]:
    return value if isinstance(value, dict) else {}


def sequence(value: Any) -> list[Any]:
    return value if isinstance(value, list) else []


def loads(data: bytes) -> Any:
    try:
        return orjson.loads(data)
    except orjson.JSONDecodeError:
        return None


# usage, per dialect --------------------------------------------------------------------


def _first_int(usage: dict[str, Any], *keys: str) -> int | None:
    for key in keys:
        value = integer(usage.get(key))
        if value is not None:
            return value
    return None


def openai_usage(usage: Any, info: ResponseInfo) -> None:
    """Chat/completions/embeddings name them prompt_/completion_tokens, the Responses API
    input_/output_tokens; cached tokens are already inside the prompt count."""
    usage = mapping(usage)
    if not usage:
        return
    found = _first_int(usage, "prompt_tokens", "input_tokens")
    info.input_tokens = found if found is not None else info.input_tokens
    found = _first_int(usage, "completion_tokens", "output_tokens")
    info.output_tokens = found if found is not None else info.output_tokens
    # zero counts of these details are left out (every OpenAI response carries them)
    details = mapping(usage.get("prompt_tokens_details") or usage.get("input_tokens_details"))
    info.cache_read_tokens = integer(details.get("cached_tokens")) or info.cache_read_tokens
    details = mapping(usage.get("completion_tokens_details") or usage.get("output_tokens_details"))
    info.reasoning_tokens = integer(details.get("reasoning_tokens")) or info.reasoning_tokens


def anthropic_usage(usage: Any, info: ResponseInfo) -> None:
    """Counts are cumulative (message_delta repeats them): the latest of each field wins."""
    usage = mapping(usage)
    info.cache_apart = True
    for key, attr in (
        ("input_tokens", "input_tokens"),
        ("output_tokens", "output_tokens"),
        ("cache_read_input_tokens", "cache_read_tokens"),
        ("cache_creation_input_tokens", "cache_creation_tokens"),
    ):
        value = integer(usage.get(key))
        if value is not None:
            setattr(info, attr, value)


def ollama_usage(doc: dict[str, Any], info: ResponseInfo) -> None:
    found = integer(doc.get("prompt_eval_count"))
    info.input_tokens = found if found is not None else info.input_tokens
    found = integer(doc.get("eval_count"))
    info.output_tokens = found if found is not None else info.output_tokens


# whole JSON responses, per dialect -------------------------------------------------------


def _openai_body(doc: dict[str, Any], info: ResponseInfo) -> None:
    info.identify(doc)
    openai_usage(doc.get("usage"), info)
    info.service_tier = text(doc.get("service_tier"))
    info.system_fingerprint = text(doc.get("system_fingerprint"))
    for position, choice in enumerate(sequence(doc.get("choices"))):
        choice = mapping(choice)
        index = integer(choice.get("index"))
        index = position if index is None else index
        info.finish(index, choice.get("finish_reason"))
        if info.capture:
            message = mapping(choice.get("message"))
            out = info.choice(index)
            _append(out.text, message.get("content") if message else choice.get("text"))
            _append(out.reasoning, message.get("reasoning_content") or message.get("reasoning"))
            for number, call in enumerate(sequence(message.get("tool_calls"))):
                call = mapping(call)
                function = mapping(call.get("function"))
                tool = out.tool(number)
                tool.id, tool.name = text(call.get("id")), text(function.get("name"))
                _append(tool.fragments, function.get("arguments"))


def responses_object(doc: dict[str, Any], info: ResponseInfo) -> None:
    """A Responses API response object (the whole body, or response.completed's payload)."""
    info.identify(doc)
    openai_usage(doc.get("usage"), info)
    info.service_tier = text(doc.get("service_tier")) or info.service_tier
    status = text(doc.get("status"))
    # no finish_reason in this API: the reason it stopped early, else its final status
    reason = text(mapping(doc.get("incomplete_details")).get("reason")) or status
    if reason and status != "in_progress":
        info.finish(0, reason)
    if mapping(doc.get("error")):
        info.error_type = api_error(doc.get("error")) or "_OTHER"
    if info.capture and doc.get("output") is not None:
        out = info.choice(0)  # the whole output again: what streamed deltas said is replaced
        out.text.clear()
        out.reasoning.clear()
        out.tool_calls.clear()
        for number, item in enumerate(sequence(doc.get("output"))):
            _responses_item(mapping(item), number, out)


def _responses_item(item: dict[str, Any], number: int, out: Choice) -> None:
    kind = item.get("type")
    if kind == "message":
        for part in sequence(item.get("content")):
            part = mapping(part)
            _append(out.text, part.get("text") if part.get("type") == "output_text" else None)
    elif kind == "function_call":
        tool = out.tool(number)
        tool.id, tool.name = text(item.get("call_id")), text(item.get("name"))
        _append(tool.fragments, item.get("arguments"))
    elif kind == "reasoning":
        for part in sequence(item.get("summary")):
            _append(out.reasoning, mapping(part).get("text"))


def anthropic_message(doc: dict[str, Any], info: ResponseInfo) -> None:
    info.identify(doc)
    anthropic_usage(doc.get("usage"), info)
    info.finish(0, doc.get("stop_reason"))
    if info.capture:
        out = info.choice(0)
        for number, block in enumerate(sequence(doc.get("content"))):
            block = mapping(block)
            kind = block.get("type")
            if kind == "text":
                _append(out.text, block.get("text"))
            elif kind == "thinking":
                _append(out.reasoning, block.get("thinking"))
            elif kind == "tool_use":
                tool = out.tool(number)
                tool.id, tool.name = text(block.get("id")), text(block.get("name"))
                tool.arguments = block.get("input")


def ollama_object(doc: dict[str, Any], info: ResponseInfo) -> bool:
    """One Ollama object (a whole response or one NDJSON line). True if it carries content."""
    if info.model is None:
        info.model = text(doc.get("model"))
    message = mapping(doc.get("message"))
    content = message.get("content") or doc.get("response")
    thinking = message.get("thinking") or doc.get("thinking")
    calls = sequence(message.get("tool_calls"))
    done = doc.get("done")
    if done is not False:  # the last line of a stream, or a whole response (embed has no "done")
        ollama_usage(doc, info)
    if done is True:
        info.finish(0, doc.get("done_reason"))
    error = doc.get("error")
    if error is not None:  # Ollama errors are free text: no low-cardinality type to report
        info.error_type = "_OTHER"
    if info.capture:
        out = info.choice(0)
        _append(out.text, content)
        _append(out.reasoning, thinking)
        for call in calls:
            function = mapping(mapping(call).get("function"))
            tool = out.tool(len(out.tool_calls))
            tool.name, tool.arguments = text(function.get("name")), function.get("arguments")
    return bool(content or thinking or calls)


def _ollama_body(doc: dict[str, Any], info: ResponseInfo) -> None:
    ollama_object(doc, info)


def _append(parts: list[str], value: Any) -> None:
    if isinstance(value, str) and value:
        parts.append(value)


_BODY_READERS: dict[tuple[str, bool], Callable[[dict[str, Any], ResponseInfo], None]] = {
    (OPENAI, False): _openai_body,
    (OPENAI, True): responses_object,
    (ANTHROPIC, False): anthropic_message,
    (OLLAMA, False): _ollama_body,
}


def read_json(body: Body, route: Route, info: ResponseInfo) -> None:
    """A whole JSON response, or the ends of one the capture cut."""
    if body.complete:
        doc = loads(body.contiguous())
        if isinstance(doc, dict):
            _BODY_READERS[(route.dialect, route.responses_api)](doc, info)
            return
    _scan(body.contiguous(), body.tail(), route, info)


def _scan(head: bytes, tail: bytes, route: Route, info: ResponseInfo) -> None:
    """Fields from the ends of a response too large to keep whole (many embeddings): its
    id and model open it, its usage closes it."""
    info.id = scan.string("id", head)
    info.model = scan.string("model", head, tail)
    for number, reason in enumerate(
        scan.strings("finish_reason", head, tail)
        or scan.strings("stop_reason", head, tail)
        or scan.strings("done_reason", head, tail)
    ):
        info.finish(number, reason)
    usage_keys = {
        OPENAI: (("prompt_tokens", "input_tokens"), ("completion_tokens", "output_tokens")),
        ANTHROPIC: (("input_tokens",), ("output_tokens",)),
        OLLAMA: (("prompt_eval_count",), ("eval_count",)),
    }[route.dialect]
    for keys, attr in zip(usage_keys, ("input_tokens", "output_tokens"), strict=True):
        for key in keys:
            value = scan.number(key, head, tail, last=True)
            if isinstance(value, int):
                setattr(info, attr, value)
                break
    if route.dialect == ANTHROPIC:
        info.cache_apart = True
        for key, attr in (
            ("cache_read_input_tokens", "cache_read_tokens"),
            ("cache_creation_input_tokens", "cache_creation_tokens"),
        ):
            value = scan.number(key, head, tail, last=True)
            setattr(info, attr, value if isinstance(value, int) else None)


def api_error(error: Any) -> str | None:
    """semconv's error.type is the provider's error code: OpenAI's `code`
    ("context_length_exceeded"), else the `type` both OpenAI and Anthropic give."""
    error = mapping(error)
    return text(error.get("code")) or text(error.get("type"))


def error_type(body: Body | None) -> str | None:
    """The API's error code from an error body (`{"error": {"code"|"type": ...}}`, the
    OpenAI and Anthropic shape), or None when it names none (Ollama's are free text)."""
    if body is None:
        return None
    doc = loads(body.contiguous()) if body.complete else None
    if isinstance(doc, dict):
        return api_error(doc.get("error"))
    head = body.contiguous()
    if b'"error"' not in head:
        return None
    return scan.string("code", head) or scan.string("type", head)
