"""Which request paths are LLM API calls: the operation and the API dialect a path names
(and, for Gemini and Bedrock, the model and whether the answer streams)."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any
from urllib.parse import unquote

OPENAI, ANTHROPIC, OLLAMA = "openai", "anthropic", "ollama"  # API dialects (wire formats)
GEMINI, BEDROCK = "gemini", "bedrock"  # dialects whose paths name the model
DIALECTS = (OPENAI, ANTHROPIC, OLLAMA)  # those `extra_paths` can name (fixed suffixes)

CHAT, TEXT_COMPLETION, EMBEDDINGS = "chat", "text_completion", "embeddings"


@dataclass(frozen=True, slots=True)
class Route:
    """What a recognised path means: the semconv operation and the dialect to decode."""

    operation: str
    dialect: str
    # the OpenAI Responses API: its own request and event shapes inside the OpenAI dialect
    responses_api: bool = False
    # Gemini and Bedrock name the model in the path, and whether the answer streams
    model: str | None = None
    stream: bool = False
    invoke: bool = False  # Bedrock InvokeModel: the body is the model vendor's own shape


# API-relative endpoint paths of each dialect. The built-in routes are these under "/v1"
# (OpenAI, Anthropic) or "" (Ollama); configured prefixes reuse them as path suffixes.
SUFFIXES: Mapping[str, Mapping[str, Route]] = {
    OPENAI: {
        "/chat/completions": Route(CHAT, OPENAI),
        "/completions": Route(TEXT_COMPLETION, OPENAI),
        "/embeddings": Route(EMBEDDINGS, OPENAI),
        # semconv has no operation of its own for the Responses API; it is a chat turn
        "/responses": Route(CHAT, OPENAI, responses_api=True),
    },
    ANTHROPIC: {"/messages": Route(CHAT, ANTHROPIC)},
    OLLAMA: {
        "/api/chat": Route(CHAT, OLLAMA),
        "/api/generate": Route(TEXT_COMPLETION, OLLAMA),
        "/api/embed": Route(EMBEDDINGS, OLLAMA),
        "/api/embeddings": Route(EMBEDDINGS, OLLAMA),
    },
}
_BASES = {OPENAI: "/v1", ANTHROPIC: "/v1", OLLAMA: ""}
BUILTIN: Mapping[str, Route] = {
    _BASES[dialect] + suffix: route
    for dialect, table in SUFFIXES.items()
    for suffix, route in table.items()
}
# Gemini: ".../models/{model}:{method}" (the Gemini API under /v1beta or /v1, Vertex AI under
# /v1/projects/.../publishers/google); `alt=sse` in the query makes streamGenerateContent SSE
_GEMINI_METHODS: Mapping[str, tuple[str, bool]] = {
    "generateContent": (CHAT, False),
    "streamGenerateContent": (CHAT, True),
    "embedContent": (EMBEDDINGS, False),
    "batchEmbedContents": (EMBEDDINGS, False),
}
# Bedrock Runtime: "/model/{modelId}/{operation}", the id percent-encoded ("...-v1%3A0")
_BEDROCK_OPERATIONS: Mapping[str, tuple[bool, bool]] = {  # operation -> (stream, invoke)
    "converse": (False, False),
    "converse-stream": (True, False),
    "invoke": (False, True),
    "invoke-with-response-stream": (True, True),
}
MAX_MODEL_CHARS = 256  # a model named in a path longer than this is not a model id


def _named(path: str, separator: str, marker: str, table: Mapping[str, Any]) -> tuple[Any, str] | None:
    """(the table's entry for the path's last part, the model named after `marker` just
    before it): ".../models/{model}:{method}", "/model/{id}/{operation}"."""
    head, found_separator, last = path.rpartition(separator)
    entry = table.get(last) if found_separator else None
    if entry is None:
        return None
    _, found_marker, model = head.rpartition(marker)
    if not found_marker or not model or "/" in model or len(model) > MAX_MODEL_CHARS:
        return None
    return entry, unquote(model)


def gemini_route(path: str) -> Route | None:
    found = _named(path, ":", "/models/", _GEMINI_METHODS)
    if found is None:
        return None
    (operation, stream), model = found
    return Route(operation, GEMINI, model=model, stream=stream)


def bedrock_route(path: str) -> Route | None:
    found = _named(path, "/", "/model/", _BEDROCK_OPERATIONS)
    if found is None:
        return None
    (stream, invoke), model = found
    # InvokeModel serves every kind of model: an embedding model's id says it
    operation = EMBEDDINGS if invoke and "embed" in model else CHAT
    return Route(operation, BEDROCK, model=model, stream=stream, invoke=invoke)


# what the kernel should capture more of: the built-in paths themselves (the kernel matches
# a path by its first 8 bytes, so "/v1/" alone would be too short to be a key, and would
# widen every /v1/ call besides). Gemini's "/v1beta/models/" is one key; Bedrock's
# "/model/{id}" has no fixed 8-byte head (its calls keep the normal capture size)
BUILTIN_CAPTURE = (*BUILTIN, "/v1beta/models/")
MAX_CAPTURE_PREFIXES = 16
MAX_CAPTURE_PREFIX_BYTES = 31


@dataclass(frozen=True, slots=True)
class ExtraPath:
    """A configured prefix: any path under it that ends with a known endpoint suffix."""

    prefix: str  # without a trailing "/"
    suffixes: tuple[tuple[str, Route], ...]  # longest first, so "/chat/completions" wins

    def match(self, path: str) -> Route | None:
        if not path.startswith(self.prefix):
            return None
        rest = path[len(self.prefix) :]
        if rest and not rest.startswith("/"):  # "/openaix/..." is not under "/openai"
            return None
        for suffix, route in self.suffixes:
            if rest.endswith(suffix):
                return route
        return None


def _suffixes(dialect: str | None) -> tuple[tuple[str, Route], ...]:
    tables = [SUFFIXES[dialect]] if dialect else list(SUFFIXES.values())
    pairs = [pair for table in tables for pair in table.items()]
    return tuple(sorted(pairs, key=lambda pair: len(pair[0]), reverse=True))


def parse_extra_paths(entries: Iterable[Any] | None) -> tuple[ExtraPath, ...]:
    """`extra_paths` entries: a prefix string, or a mapping {prefix: ..., api: dialect}."""
    out: list[ExtraPath] = []
    for entry in entries or ():
        if isinstance(entry, str):
            prefix, dialect = entry, None
        elif isinstance(entry, Mapping) and isinstance(entry.get("prefix"), str):
            prefix, dialect = entry["prefix"], entry.get("api")
        else:
            raise ValueError(
                f"llm.extra_paths: expected a prefix or {{prefix, api}}, got {entry!r}"
            )
        if dialect is not None and dialect not in SUFFIXES:
            raise ValueError(
                f"llm.extra_paths: api must be one of {list(DIALECTS)}, got {dialect!r}"
            )
        out.append(ExtraPath(prefix.rstrip("/"), _suffixes(dialect)))
    return tuple(out)


MAX_KEPT_ROUTES = 1024  # targets whose route is kept (a flood of distinct ones clears it)


class Endpoints:
    """Path recognition for one layer instance (built-in routes plus configured prefixes)."""

    def __init__(self, extra: Iterable[Any] | None = None) -> None:
        self.extra = parse_extra_paths(extra)
        # routes by path, recent ones: every request of every HTTP connection asks
        # (a gRPC channel or a keep-alive client repeats the same few targets)
        self.routes: dict[str, Route | None] = {}

    def route(self, method: str, target: str) -> Route | None:
        if method != "POST":
            return None
        path = target.partition("?")[0]  # kept by path: a query never changes the route
        try:
            return self.routes[path]
        except KeyError:
            pass
        if len(self.routes) >= MAX_KEPT_ROUTES:
            self.routes.clear()
        route = self.routes[path] = self._route(path)
        return route

    def _route(self, path: str) -> Route | None:
        if "://" in path and not path.startswith("/"):  # absolute form, sent to a proxy
            path = "/" + path.split("://", 1)[1].partition("/")[2]
        route = BUILTIN.get(path)
        if route is not None:
            return route
        route = gemini_route(path) or bedrock_route(path)
        if route is not None:
            return route
        for extra in self.extra:
            route = extra.match(path)
            if route is not None:
                return route
        return None

    def capture_prefixes(self) -> tuple[str, ...]:
        prefixes = list(BUILTIN_CAPTURE)
        for extra in self.extra:
            prefix = (extra.prefix or "/").encode()[:MAX_CAPTURE_PREFIX_BYTES]
            text = prefix.decode("utf-8", "ignore")
            if text and not any(text.startswith(known) for known in prefixes):
                prefixes.append(text)
        return tuple(prefixes[:MAX_CAPTURE_PREFIXES])
