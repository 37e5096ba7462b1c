"""The response side of an LLM call: what a whole JSON response says, in every dialect.

`ResponseInfo` is filled the same way from a JSON body and from a stream's events
(events.py): id, model, finish reasons, token usage, the tool calls asked for (names
only), errors, and (only when content capture is on) the generated messages.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

import orjson

from ..layers import Body
from . import scan
from .endpoints import ANTHROPIC, BEDROCK, GEMINI, OLLAMA, OPENAI, Route


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


MAX_TOOL_CALLS = 1024  # tool calls counted per response; names are kept for MAX_TOOL_NAMES
MAX_TOOL_NAMES = 32


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
    # a stream event carried reasoning text: the reasoning tokens were streamed as chunks
    # (else they were thought before the first chunk, hidden, and are no part of its pace)
    reasoning_streamed: bool = False
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
    # tool calls in the answer, by a key unique within it (choice and call index, block
    # index...): the tool's name only, never arguments, with or without content capture
    tool_names: dict[Any, str] = field(default_factory=dict)

    def tool_called(self, key: Any, name: Any) -> None:
        """A tool call seen (again: a stream names it in its first delta only)."""
        name = text(name)
        if key in self.tool_names:
            if name and not self.tool_names[key]:
                self.tool_names[key] = name
        elif len(self.tool_names) < MAX_TOOL_CALLS:
            self.tool_names[key] = name or ""

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
    # DeepSeek's OpenAI-compatible API names its cache hits at the top of usage
    info.cache_read_tokens = (
        integer(details.get("cached_tokens"))
        or integer(usage.get("prompt_cache_hit_tokens"))
        or info.cache_read_tokens
    )
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


def gemini_usage(usage: Any, info: ResponseInfo) -> None:
    """usageMetadata: every stream chunk repeats the counts so far, the latest wins.
    semconv counts reasoning inside the output tokens and cached tokens inside the input;
    Gemini reports thoughts apart from candidates, cached ones inside the prompt count, and
    the prompt its tool calls made apart from the prompt."""
    usage = mapping(usage)
    if not usage:
        return
    prompt = integer(usage.get("promptTokenCount"))
    if prompt is not None:
        info.input_tokens = prompt + (integer(usage.get("toolUsePromptTokenCount")) or 0)
    candidates = integer(usage.get("candidatesTokenCount"))
    thoughts = integer(usage.get("thoughtsTokenCount"))
    if candidates is not None or thoughts is not None:
        info.output_tokens = (candidates or 0) + (thoughts or 0)
    info.reasoning_tokens = thoughts if thoughts is not None else info.reasoning_tokens
    cached = integer(usage.get("cachedContentTokenCount"))
    info.cache_read_tokens = cached if cached is not None else info.cache_read_tokens


def bedrock_usage(usage: Any, info: ResponseInfo) -> None:
    """Converse's usage (and InvokeModel's invocation metrics): input tokens count the
    uncached prompt only, cache reads and writes are apart (as Anthropic counts them)."""
    usage = mapping(usage)
    if not usage:
        return
    info.cache_apart = True
    for keys, attr in (
        (("inputTokens", "inputTokenCount"), "input_tokens"),
        (("outputTokens", "outputTokenCount"), "output_tokens"),
        (("cacheReadInputTokens", "cacheReadInputTokenCount"), "cache_read_tokens"),
        (("cacheWriteInputTokens", "cacheWriteInputTokenCount"), "cache_creation_tokens"),
    ):
        value = _first_int(usage, *keys)
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
        message = mapping(choice.get("message"))
        for number, call in enumerate(sequence(message.get("tool_calls"))):
            info.tool_called((index, number), mapping(mapping(call).get("function")).get("name"))
        if info.capture:
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
    for number, item in enumerate(sequence(doc.get("output"))):
        item = mapping(item)
        if item.get("type") == "function_call":
            info.tool_called(number, item.get("name"))
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
    for number, block in enumerate(sequence(doc.get("content"))):
        block = mapping(block)
        if block.get("type") == "tool_use":
            info.tool_called(number, block.get("name"))
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
    info.reasoning_streamed = info.reasoning_streamed or bool(thinking)
    calls = sequence(message.get("tool_calls"))
    done = doc.get("done")
    if done is not False:  # the last line of a stream, or a whole response (embed has no "done")
        ollama_usage(doc, info)
    if done is True:
        info.finish(0, doc.get("done_reason"))
    error = doc.get("error")
    if error is not None:  # Ollama errors are free text: no low-cardinality type to report
        info.error_type = "_OTHER"
    for call in calls:  # Ollama sends each call whole, once
        info.tool_called(len(info.tool_names), mapping(mapping(call).get("function")).get("name"))
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


def gemini_object(doc: dict[str, Any], info: ResponseInfo) -> bool:
    """One GenerateContentResponse (a whole answer or one SSE chunk). True if it carries
    content: text (a thought summary too) or a function call."""
    if info.id is None:
        info.id = text(doc.get("responseId"))
    if info.model is None:
        info.model = text(doc.get("modelVersion"))
    if doc.get("error") is not None:
        info.error_type = api_error(doc.get("error")) or "_OTHER"
    gemini_usage(doc.get("usageMetadata"), info)
    content = False
    for position, candidate in enumerate(sequence(doc.get("candidates"))):
        candidate = mapping(candidate)
        index = integer(candidate.get("index"))
        index = position if index is None else index
        info.finish(index, candidate.get("finishReason"))
        for part in sequence(mapping(candidate.get("content")).get("parts")):
            part = mapping(part)
            call = mapping(part.get("functionCall"))
            words = text(part.get("text"))
            if call:
                # every chunk carries whole calls: each one seen is a new call
                info.tool_called(len(info.tool_names), call.get("name"))
            content = content or bool(call or words)
            if words and part.get("thought") is True:
                info.reasoning_streamed = True
            if info.capture:
                _keep_gemini_part(info.choice(index), part, call, words)
    return content


def _keep_gemini_part(out: Choice, part: dict[str, Any], call: dict[str, Any], words: Any) -> None:
    if call:
        tool = out.tool(len(out.tool_calls))
        tool.id, tool.name, tool.arguments = text(call.get("id")), text(call.get("name")), call.get("args")
    elif part.get("thought") is True:
        _append(out.reasoning, words)
    else:
        _append(out.text, words)


def _gemini_body(doc: Any, info: ResponseInfo) -> None:
    # streamGenerateContent without alt=sse answers a JSON array of the same objects
    for item in doc if isinstance(doc, list) else [doc]:
        if isinstance(item, dict):
            gemini_object(item, info)


def bedrock_converse(doc: dict[str, Any], info: ResponseInfo) -> None:
    """A Converse answer (Amazon Nova's InvokeModel answer has the same shape)."""
    bedrock_usage(doc.get("usage"), info)
    info.finish(0, doc.get("stopReason"))
    message = mapping(mapping(doc.get("output")).get("message"))
    for number, block in enumerate(sequence(message.get("content"))):
        block = mapping(block)
        tool = mapping(block.get("toolUse"))
        if tool:
            info.tool_called(number, tool.get("name"))
        if info.capture:
            out = info.choice(0)
            _append(out.text, block.get("text"))
            reasoning = mapping(mapping(block.get("reasoningContent")).get("reasoningText"))
            _append(out.reasoning, reasoning.get("text"))
            if tool:
                call = out.tool(number)
                call.id, call.name = text(tool.get("toolUseId")), text(tool.get("name"))
                call.arguments = tool.get("input")


# InvokeModel answers of other vendors' models: (input, output, finish reason, text) keys
_INVOKE_KEYS = (
    ("prompt_token_count", "generation_token_count", "stop_reason", "generation"),  # Llama
    ("inputTextTokenCount", "totalOutputTextTokenCount", "completionReason", "outputText"),
)


def invoke_object(doc: dict[str, Any], info: ResponseInfo) -> bool:
    """One InvokeModel answer, or one decoded chunk of its stream. True if it carries
    content. The body is the model vendor's own: Anthropic's messages, Nova's Converse
    shape, Llama's and Titan's; every stream's last chunk has Bedrock's own metrics."""
    if doc.get("type") == "message" or (doc.get("role") and "stop_reason" in doc):
        anthropic_message(doc, info)
        return False
    if "output" in doc and "usage" in doc:
        bedrock_converse(doc, info)
        return False
    content = False
    results = sequence(doc.get("results"))  # Titan text: one result per answer
    first = mapping(results[0]) if results else doc
    for input_key, output_key, reason_key, text_key in _INVOKE_KEYS:
        found = integer(doc.get(input_key))
        info.input_tokens = found if found is not None else info.input_tokens
        found = integer(first.get(output_key)) or integer(first.get("tokenCount"))
        info.output_tokens = found if found is not None else info.output_tokens
        info.finish(0, first.get(reason_key))
        words = text(first.get(text_key))
        if words:
            content = True
            if info.capture:
                info.choice(0).text.append(words)
    bedrock_usage(doc.get("amazon-bedrock-invocationMetrics"), info)
    return content


def _invoke_body(doc: dict[str, Any], info: ResponseInfo) -> None:
    invoke_object(doc, info)


def _append(parts: list[str], value: Any) -> None:
    if isinstance(value, str) and value:
        parts.append(value)


_BODY_READERS: dict[tuple[str, bool], Callable[[Any, ResponseInfo], None]] = {
    (OPENAI, False): _openai_body,
    (OPENAI, True): responses_object,
    (ANTHROPIC, False): anthropic_message,
    (OLLAMA, False): _ollama_body,
    (GEMINI, False): _gemini_body,
    (BEDROCK, False): bedrock_converse,
    (BEDROCK, True): _invoke_body,
}


def read_json(body: Body, route: Route, info: ResponseInfo) -> None:
    """A whole JSON response, or the ends of one the capture cut."""
    if body.complete:
        doc = loads(body.contiguous())
        if isinstance(doc, dict) or (route.dialect == GEMINI and isinstance(doc, list)):
            _BODY_READERS[(route.dialect, route.responses_api or route.invoke)](doc, info)
            return
    _scan(body.contiguous(), body.tail(), route, info)


def _scan(head: bytes, tail: bytes, route: Route, info: ResponseInfo) -> None:
    """Fields from the ends of a response too large to keep whole (many embeddings): its
    id and model open it, its usage closes it."""
    info.id = scan.string("id", head) or scan.string("responseId", head, tail)
    info.model = scan.string("model", head, tail) or scan.string("modelVersion", head, tail)
    for number, reason in enumerate(
        scan.strings("finish_reason", head, tail)
        or scan.strings("stop_reason", head, tail)
        or scan.strings("done_reason", head, tail)
        or scan.strings("finishReason", head, tail)
        or scan.strings("stopReason", head, tail)
    ):
        info.finish(number, reason)
    for keys, attr in _SCAN_USAGE[route.dialect]:
        for key in keys:
            value = scan.number(key, head, tail, last=True)
            if isinstance(value, int):
                setattr(info, attr, value)
                break
    if route.dialect == GEMINI and info.reasoning_tokens:  # thoughts are output tokens
        info.output_tokens = (info.output_tokens or 0) + info.reasoning_tokens
    info.cache_apart = route.dialect in (ANTHROPIC, BEDROCK)


# usage fields read from the ends of a cut response, per dialect: (keys, ResponseInfo field)
_INPUT, _OUTPUT = "input_tokens", "output_tokens"
_CACHE_READ, _CACHE_WRITE, _REASONING = "cache_read_tokens", "cache_creation_tokens", "reasoning_tokens"
_SCAN_USAGE: dict[str, tuple[tuple[tuple[str, ...], str], ...]] = {
    OPENAI: (
        (("prompt_tokens", "input_tokens"), _INPUT),
        (("completion_tokens", "output_tokens"), _OUTPUT),
        (("cached_tokens", "prompt_cache_hit_tokens"), _CACHE_READ),
        (("reasoning_tokens",), _REASONING),
    ),
    ANTHROPIC: (
        (("input_tokens",), _INPUT),
        (("output_tokens",), _OUTPUT),
        (("cache_read_input_tokens",), _CACHE_READ),
        (("cache_creation_input_tokens",), _CACHE_WRITE),
    ),
    OLLAMA: ((("prompt_eval_count",), _INPUT), (("eval_count",), _OUTPUT)),
    GEMINI: (
        (("promptTokenCount",), _INPUT),
        (("candidatesTokenCount",), _OUTPUT),
        (("cachedContentTokenCount",), _CACHE_READ),
        (("thoughtsTokenCount",), _REASONING),
    ),
    BEDROCK: (
        (("inputTokens", "input_tokens", "inputTokenCount", "prompt_token_count"), _INPUT),
        (("outputTokens", "output_tokens", "outputTokenCount", "generation_token_count"), _OUTPUT),
        (("cacheReadInputTokens", "cache_read_input_tokens"), _CACHE_READ),
        (("cacheWriteInputTokens", "cache_creation_input_tokens"), _CACHE_WRITE),
    ),
}


def api_error(error: Any) -> str | None:
    """semconv's error.type is the provider's error code: OpenAI's `code`
    ("context_length_exceeded"), else the `type` both OpenAI and Anthropic give, else
    Gemini's `status` ("NOT_FOUND"; its `code` is the HTTP status, a number)."""
    error = mapping(error)
    return text(error.get("code")) or text(error.get("type")) or text(error.get("status"))


def _aws_type(value: Any) -> str | None:
    """AWS JSON errors' `__type`: "ValidationException", or with a namespace before "#"."""
    name = text(value)
    if name is None:
        return None
    return name.rpartition("#")[2].partition(":")[0] or None


def error_type(body: Body | None) -> str | None:
    """The API's error code from an error body (`{"error": {"code"|"type": ...}}`, the
    OpenAI and Anthropic shape), or None when it names none (Ollama's are free text)."""
    if body is None:
        return None
    doc = loads(body.contiguous()) if body.complete else None
    if isinstance(doc, dict):
        return api_error(doc.get("error")) or _aws_type(doc.get("__type"))
    head = body.contiguous()
    if b'"error"' not in head:
        return None
    return scan.string("code", head) or scan.string("type", head)
