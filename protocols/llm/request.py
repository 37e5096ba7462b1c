"""The request side of an LLM call: model and sampling settings from the request JSON.

A whole body is parsed with orjson. A body with a gap (a long prompt the kernel did not
capture in full) is scanned at both ends: the openai client writes "messages" first and
"model" after them, so for a large prompt the model is only in the tail.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import orjson

from ..base import positional_maker
from ..layers import Body
from . import scan
from .endpoints import ANTHROPIC, BEDROCK, GEMINI, OLLAMA, OPENAI, Route

# the request key holding the output-token cap, by dialect (Responses API apart)
_MAX_TOKEN_KEYS = {
    OPENAI: ("max_completion_tokens", "max_tokens"),
    ANTHROPIC: ("max_tokens",),
    OLLAMA: ("num_predict",),
}
_RESPONSES_MAX_TOKEN_KEYS = ("max_output_tokens",)


@dataclass(frozen=True, slots=True)
class Settings:
    """Where a dialect keeps its sampling settings: the object, then each setting's keys."""

    container: str | None  # None: the top level
    max_tokens: tuple[str, ...]
    temperature: tuple[str, ...] = ("temperature",)
    top_p: tuple[str, ...] = ("top_p",)
    choice_count: tuple[str, ...] = ()


_GEMINI = Settings("generationConfig", ("maxOutputTokens",), top_p=("topP",),
                   choice_count=("candidateCount",))
_CONVERSE = Settings("inferenceConfig", ("maxTokens",), top_p=("topP",))
# InvokeModel bodies are the model vendor's: Anthropic and Llama at the top level, Amazon
# Titan under textGenerationConfig, Amazon Nova under inferenceConfig
_INVOKE = (
    Settings(None, ("max_tokens", "max_gen_len")),
    Settings("textGenerationConfig", ("maxTokenCount",), top_p=("topP",)),
    Settings("inferenceConfig", ("max_new_tokens",)),
)


@dataclass(slots=True)
class RequestInfo:
    model: str | None = None
    stream: bool | None = None  # None: the body did not say (or was not seen)
    max_tokens: int | None = None
    temperature: float | None = None
    top_p: float | None = None
    choice_count: int | None = None
    include_usage: bool | None = None
    encoding_formats: list[str] | None = None
    dimensions: int | None = None
    document: dict[str, Any] | None = None  # the parsed body, when whole (content capture)


_new_info = positional_maker(RequestInfo, (
    "model", "stream", "max_tokens", "temperature", "top_p", "choice_count", "include_usage",
    "encoding_formats", "dimensions", "document"))


def read_request(body: Body | None, route: Route) -> RequestInfo:
    """Never raises: a body that is not what we expect gives an empty RequestInfo."""
    if body is None or not body.pieces:
        return RequestInfo()
    try:
        if body.complete:
            doc = _loads(body.contiguous())
            if doc is not None:
                return _from_document(doc, route)
        return _from_scan(body.contiguous(), body.tail(), route)
    except (ValueError, TypeError, AttributeError, KeyError):  # hostile shapes
        return RequestInfo()


def _loads(data: bytes) -> dict[str, Any] | None:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


def _int(value: Any) -> int | None:
    return value if isinstance(value, int) and not isinstance(value, bool) else None


def _float(value: Any) -> float | None:
    if isinstance(value, int | float) and not isinstance(value, bool):
        return float(value)
    return None


def _max_token_keys(route: Route) -> tuple[str, ...]:
    if route.responses_api:
        return _RESPONSES_MAX_TOKEN_KEYS
    if route.dialect == GEMINI:
        return _GEMINI.max_tokens
    if route.dialect == BEDROCK:
        return _INVOKE[0].max_tokens if route.invoke else _CONVERSE.max_tokens
    return _MAX_TOKEN_KEYS[route.dialect]


def _first(settings: dict[str, Any], keys: tuple[str, ...], convert: Any) -> Any:
    for key in keys:
        value = convert(settings.get(key))
        if value is not None:
            return value
    return None


def _path_dialect(doc: dict[str, Any], route: Route) -> RequestInfo:
    """Gemini and Bedrock: the model and the streaming are in the path, the settings in a
    dialect-specific object."""
    info = RequestInfo(document=doc, model=route.model, stream=True if route.stream else None)
    if route.dialect == GEMINI:
        candidates = (_GEMINI,)
    else:
        candidates = _INVOKE if route.invoke else (_CONVERSE,)
    for shape in candidates:
        settings = doc if shape.container is None else doc.get(shape.container)
        if not isinstance(settings, dict):
            continue
        info.max_tokens = info.max_tokens or _first(settings, shape.max_tokens, _int)
        if info.temperature is None:
            info.temperature = _first(settings, shape.temperature, _float)
        if info.top_p is None:
            info.top_p = _first(settings, shape.top_p, _float)
        info.choice_count = info.choice_count or _first(settings, shape.choice_count, _int)
    # embedContent's outputDimensionality; batchEmbedContents repeats it per request; Titan
    # embeddings' dimensions
    first = mapping_first(doc.get("requests"))
    info.dimensions = (
        _int(doc.get("outputDimensionality"))
        or _int(first.get("outputDimensionality"))
        or _int(doc.get("dimensions"))
    )
    return info


def mapping_first(value: Any) -> dict[str, Any]:
    first = value[0] if isinstance(value, list) and value else None
    return first if isinstance(first, dict) else {}


def _from_document(doc: dict[str, Any], route: Route) -> RequestInfo:
    if route.dialect in (GEMINI, BEDROCK):
        return _path_dialect(doc, route)
    # Ollama keeps its sampling settings in "options"; the others at the top level
    settings = doc.get("options") if route.dialect == OLLAMA else doc
    if not isinstance(settings, dict):
        settings = {}
    model = doc.get("model")
    stream = doc.get("stream")
    max_tokens = None
    for key in _max_token_keys(route):
        max_tokens = _int(settings.get(key))
        if max_tokens is not None:
            break
    options = doc.get("stream_options")
    include_usage = options["include_usage"] if isinstance(options, dict) \
        and isinstance(options.get("include_usage"), bool) else None
    encoding = doc.get("encoding_format")
    # every LLM span reads its request: made in one call, not field by field
    return _new_info(
        model if isinstance(model, str) and model else None,
        stream if isinstance(stream, bool) else None,
        max_tokens,
        _float(settings.get("temperature")),
        _float(settings.get("top_p")),
        _int(doc.get("n")),
        include_usage,
        [encoding] if isinstance(encoding, str) else None,
        _int(doc.get("dimensions")),
        doc,
    )


def _from_scan(head: bytes, tail: bytes, route: Route) -> RequestInfo:
    # a top-level key is either before the prompt (in head) or after it (in tail); keys of
    # the same name nested in messages are rare, and escaped ones inside text never match
    info = RequestInfo()
    info.model = route.model or scan.string("model", head, tail) or None
    info.stream = True if route.stream else scan.boolean("stream", head, tail)
    for key in _max_token_keys(route):
        info.max_tokens = _as_int(scan.number(key, head, tail))
        if info.max_tokens is not None:
            break
    info.temperature = _float(scan.number("temperature", head, tail))
    info.top_p = _float(scan.number("top_p", head, tail) or scan.number("topP", head, tail))
    info.choice_count = _as_int(scan.number("n", head, tail))
    info.include_usage = scan.boolean("include_usage", head, tail)
    encoding = scan.string("encoding_format", head, tail)
    info.encoding_formats = [encoding] if encoding else None
    info.dimensions = _as_int(scan.number("dimensions", head, tail))
    return info


def _as_int(value: int | float | None) -> int | None:
    return value if isinstance(value, int) else None
