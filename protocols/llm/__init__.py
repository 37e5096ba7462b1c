"""The LLM layer: OpenAI-compatible, Anthropic, Ollama, Gemini and Bedrock Runtime API calls
inside HTTP, as GenAI spans and metrics (semantic-conventions-genai).

Options (`receivers.ebpf.protocols.llm`):
  extra_paths: more endpoints, each a path prefix ("/openai/deployments") or a mapping
    {prefix: ..., api: openai | anthropic | ollama}: a POST whose path is under the prefix
    and ends with one of that API's endpoint suffixes ("/chat/completions"...) is an LLM
    call (Azure deployments, gateways that serve without "/v1").
  provider: gen_ai.provider.name for hosts that are not a known provider's (spans.py).
  capture_content: record message content (gen_ai.input.messages, gen_ai.output.messages,
    gen_ai.system_instructions); off by default: prompts hold user data.
  max_content_bytes: the most bytes of JSON each of those attributes holds (4096).
  body_limit: body bytes kept per message (1 MiB); a stream longer than that loses its
    later events (and the usage that ends it), so long reasoning streams may want more.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..base import Instrument, NeutralSpan
from ..layers import DEFAULT_BODY_LIMIT, Body, HTTPExchange, HTTPLayer
from ..options import Custom, Flag, Schema, Size, Text
from . import spans
from .endpoints import Endpoints, Route
from .events import read_events, read_eventstream, read_sse
from .eventstream import decode_eventstream
from .request import read_request
from .response import ResponseInfo, error_type, read_json
from .stream import decode_ndjson

DEFAULT_MAX_CONTENT_BYTES = 4096

_SSE_TYPES = ("text/event-stream",)
_NDJSON_TYPES = (
    "application/x-ndjson",
    "application/ndjson",
    "application/jsonl",
    "application/x-jsonlines",
)
_EVENTSTREAM_TYPES = ("application/vnd.amazon.eventstream",)


def _stream_kind(content_type: str, body: Body) -> str:
    """Which decoder fits ("sse", "ndjson", "eventstream", "json"): by content type, else by
    the first bytes when the type says nothing useful (some servers stream SSE untyped)."""
    kind = content_type.partition(";")[0].strip().lower()
    if kind in _SSE_TYPES:
        return "sse"
    if kind in _NDJSON_TYPES:
        return "ndjson"
    if kind in _EVENTSTREAM_TYPES:
        return "eventstream"
    if kind in ("", "text/plain", "application/octet-stream"):
        head = body.pieces[0].data[:16].lstrip() if body.pieces else b""
        if head.startswith((b"data:", b"event:", b":")):
            return "sse"
    return "json"


def read_response(exchange: HTTPExchange, route: Route, capture: bool) -> ResponseInfo:
    info = ResponseInfo(capture=capture)
    body = exchange.response_body
    if exchange.status is None or body is None or not body.pieces:
        return info
    if exchange.status >= 400:
        info.error_type = error_type(body)
        return info
    kind = _stream_kind(exchange.response_content_type, body)
    if kind == "sse":
        read_sse(body, route, info)
    elif kind == "ndjson":
        read_events(decode_ndjson(body), route, info)
    elif kind == "eventstream":
        read_eventstream(decode_eventstream(body), route, info)
    else:
        read_json(body, route, info)
    return info


class LLMLayer(HTTPLayer):
    name: ClassVar[str] = "llm"
    instruments: ClassVar[Mapping[str, Instrument]] = spans.INSTRUMENTS

    default_enabled = True
    default_rank = 10
    option_schema: ClassVar[Schema] = {
        "provider": Text(None, "gen_ai.provider.name for every request (else from the host)"),
        "extra_paths": Custom((), "more request paths and the API each speaks",
                              parse=Endpoints, what="a list of paths or {prefix, api}"),
        "capture_content": Flag(False, "prompts and completions as span events"),
        "max_content_bytes": Size(DEFAULT_MAX_CONTENT_BYTES, "kept of each captured message",
                                  least=2, most=1 << 20),
        "body_limit": Size(DEFAULT_BODY_LIMIT, "body bytes kept per message",
                           least=0, most=1 << 26),
    }

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.endpoints = Endpoints(self.options["extra_paths"])
        self.provider: str | None = self.options["provider"]
        self.capture_content = self.options["capture_content"]
        self.max_content_bytes = self.options["max_content_bytes"]
        self.body_limit = self.options["body_limit"]

    def wants(self, method: str, target: str) -> bool:
        return self.endpoints.route(method, target) is not None

    def capture_prefixes(self) -> tuple[str, ...]:
        return self.endpoints.capture_prefixes()

    def enrich(self, exchange: HTTPExchange, span: NeutralSpan) -> None:
        route = self.endpoints.route(exchange.method, exchange.target)
        if route is None:
            return
        request = read_request(exchange.request_body, route)
        response = read_response(exchange, route, self.capture_content)
        provider = spans.provider(exchange.host, self.provider, route.dialect)
        limit = self.max_content_bytes if self.capture_content else None
        spans.enrich(exchange, span, route, request, response, provider, limit)


__all__ = ["LLMLayer", "read_response"]
