"""An HTTP span made a GenAI span: semconv attributes, timing of streamed output, and the
GenAI histograms' measurements (client ones on CLIENT spans, server ones on SERVER spans).

Time to first chunk is measured to the first *content* event (see events.py) from:
- the request's first byte on a CLIENT span: semconv's "from when the client issues the
  generation request", and the client's write of that byte is when it issued it;
- the request's last byte on a SERVER span: semconv's server time to first token starts
  when the server has the request. Counting from its first byte would charge the server
  for the time a large prompt (or a slow client) took to upload.

Our attributes, not semconv (none exists for these; all times in seconds):
- otel_ebpf.gen_ai.time_per_output_token: (last content chunk - first content chunk) /
  (output tokens - 1), the span-level value of gen_ai.server.time_per_output_token;
  reasoning tokens the stream did not show (no reasoning text in it) are left out of the
  count: they were generated before the first chunk;
- otel_ebpf.gen_ai.output_tokens.source: where gen_ai.usage.output_tokens (and the
  division above) came from on a streamed response: "usage" (the count the API reported)
  or "chunks" (content chunks counted, when the stream reported no usage: one chunk is
  often one token, but not always);
- otel_ebpf.gen_ai.response.chunk_count: content chunks in the stream;
- otel_ebpf.gen_ai.response.chunk_gap.max / .mean: gaps between consecutive content
  chunks (stalls show in max; no per-chunk span events, spans stay small);
- otel_ebpf.gen_ai.response.chunks_lost: capture gaps in the stream (each lost at least
  one event), set only when there were some;
- otel_ebpf.gen_ai.response.tool_calls.count / .names: the tool calls the model asked for
  in its answer, and the tools' names in order (the first 32), never their arguments: a
  summary that needs no content capture (semconv has only the full output messages).

Usage details follow semconv: gen_ai.usage.cache_read.input_tokens,
gen_ai.usage.cache_creation.input_tokens (both also counted in gen_ai.usage.input_tokens,
as semconv asks, even where the API counts them apart: Anthropic, Bedrock) and
gen_ai.usage.reasoning.output_tokens (counted in gen_ai.usage.output_tokens: Gemini's
thoughts are added to its candidates' count).

error.type: the API's error code from an error body (OpenAI's `code`, else the `type`
OpenAI and Anthropic give), or from an error event inside a 200 stream (the span status
then becomes ERROR); else the HTTP status code; "_OTHER" for an error event that names no
type (Ollama's errors are free text). With no response the HTTP parser's value stays.

gen_ai.provider.name: the well-known value when the host is a known provider's API host;
else the `provider` option; else by API dialect, honestly unspecific: "ollama" for
Ollama's own API, "openai_compatible" / "anthropic_compatible" / "gemini_compatible" /
"bedrock_compatible" for a self-hosted server (vLLM, llama.cpp, a LiteLLM gateway...)
speaking another vendor's API. "openai" there
would attribute a local model's calls (and their cost) to OpenAI.
"""

from __future__ import annotations

import functools
from collections.abc import Mapping
from itertools import repeat
from operator import sub, truediv

from ..base import (
    AttributeValue,
    Instrument,
    Measurement,
    Measurements,
    NeutralSpan,
    SpanKind,
    StatusCode,
    positional_maker,
)
from ..layers import HTTPExchange
from . import content
from .endpoints import ANTHROPIC, BEDROCK, EMBEDDINGS, GEMINI, OLLAMA, OPENAI, Route
from .request import RequestInfo
from .response import MAX_TOOL_NAMES, ResponseInfo

# semconv-advised bucket boundaries (semantic-conventions-genai, gen-ai-metrics.md)
# fmt: off
TOKEN_BUCKETS = (1, 4, 16, 64, 256, 1024, 4096, 16384, 65536, 262144, 1048576, 4194304,
                 16777216, 67108864)
DURATION_BUCKETS = (0.01, 0.02, 0.04, 0.08, 0.16, 0.32, 0.64, 1.28, 2.56, 5.12, 10.24, 20.48,
                    40.96, 81.92)
TTFT_BUCKETS = (0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5,
                5.0, 7.5, 10.0)
# fmt: on
TPOT_BUCKETS = (0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0, 2.5)

CLIENT_TOKEN_USAGE = "gen_ai.client.token.usage"
CLIENT_DURATION = "gen_ai.client.operation.duration"
CLIENT_TTFC = "gen_ai.client.operation.time_to_first_chunk"
CLIENT_TPOC = "gen_ai.client.operation.time_per_output_chunk"
SERVER_DURATION = "gen_ai.server.request.duration"
SERVER_TTFT = "gen_ai.server.time_to_first_token"
SERVER_TPOT = "gen_ai.server.time_per_output_token"

INSTRUMENTS: Mapping[str, Instrument] = {
    CLIENT_TOKEN_USAGE: Instrument(
        "{token}", "Number of input and output tokens used.", TOKEN_BUCKETS
    ),
    CLIENT_DURATION: Instrument("s", "GenAI operation duration.", DURATION_BUCKETS),
    CLIENT_TTFC: Instrument(
        "s", "Time to receive the first chunk of a streamed response.", DURATION_BUCKETS
    ),
    CLIENT_TPOC: Instrument(
        "s", "Time between consecutive chunks of a streamed response.", DURATION_BUCKETS
    ),
    SERVER_DURATION: Instrument("s", "Generative AI server request duration.", DURATION_BUCKETS),
    SERVER_TTFT: Instrument(
        "s", "Time to generate first token for successful responses.", TTFT_BUCKETS
    ),
    SERVER_TPOT: Instrument(
        "s",
        "Time per output token generated after the first token for successful responses.",
        TPOT_BUCKETS,
    ),
}

TIME_PER_OUTPUT_TOKEN = "otel_ebpf.gen_ai.time_per_output_token"
OUTPUT_TOKENS_SOURCE = "otel_ebpf.gen_ai.output_tokens.source"
CHUNK_COUNT = "otel_ebpf.gen_ai.response.chunk_count"
CHUNK_GAP_MAX = "otel_ebpf.gen_ai.response.chunk_gap.max"
CHUNK_GAP_MEAN = "otel_ebpf.gen_ai.response.chunk_gap.mean"
CHUNKS_LOST = "otel_ebpf.gen_ai.response.chunks_lost"
TOOL_CALL_COUNT = "otel_ebpf.gen_ai.response.tool_calls.count"
TOOL_CALL_NAMES = "otel_ebpf.gen_ai.response.tool_calls.names"

# API hosts of providers semconv names
PROVIDER_HOSTS: Mapping[str, str] = {
    "api.openai.com": "openai",
    "api.anthropic.com": "anthropic",
    "api.groq.com": "groq",
    "api.deepseek.com": "deepseek",
    "api.mistral.ai": "mistral_ai",
    "api.x.ai": "x_ai",
    "api.perplexity.ai": "perplexity",
    "api.moonshot.ai": "moonshot_ai",
    "api.moonshot.cn": "moonshot_ai",
    "api.cohere.com": "cohere",
    "generativelanguage.googleapis.com": "gcp.gemini",
}
PROVIDER_HOST_SUFFIXES = (
    (".openai.azure.com", "azure.ai.openai"),
    ("-aiplatform.googleapis.com", "gcp.vertex_ai"),  # {region}-aiplatform...
    ("aiplatform.googleapis.com", "gcp.vertex_ai"),  # the global endpoint
)
BEDROCK_HOST = ("bedrock-runtime.", ".amazonaws.com")  # bedrock-runtime.{region}.amazonaws.com
DIALECT_PROVIDERS = {
    OPENAI: "openai_compatible",
    ANTHROPIC: "anthropic_compatible",
    OLLAMA: "ollama",
    GEMINI: "gemini_compatible",
    BEDROCK: "bedrock_compatible",
}
MAX_CHUNK_MEASUREMENTS = 4096  # per span: one per chunk gap, as semconv asks, but bounded
NS = 1e9

Attributes = dict[str, AttributeValue]
# a span's Measurements made without the frozen dataclass's __init__ (its __setattr__ per
# field): every LLM span makes three or four
_measurement = positional_maker(Measurement, ("instrument", "value", "attributes"))


@functools.lru_cache(maxsize=1024)  # a host's answer, once: it is asked for every call
def provider(host: str, configured: str | None, dialect: str) -> str:
    name = host.rpartition("@")[2].lower()
    name = name[1:].partition("]")[0] if name.startswith("[") else name.partition(":")[0]
    known = PROVIDER_HOSTS.get(name)
    if known is None:
        known = next((p for suffix, p in PROVIDER_HOST_SUFFIXES if name.endswith(suffix)), None)
    if known is None and name.startswith(BEDROCK_HOST[0]) and name.endswith(BEDROCK_HOST[1]):
        known = "aws.bedrock"
    return known or configured or DIALECT_PROVIDERS[dialect]


def _request_attributes(
    route: Route, request: RequestInfo, streamed: bool, attrs: Attributes
) -> None:
    # each set only when known, in this order (the order they are exported in)
    if request.model is not None:
        attrs["gen_ai.request.model"] = request.model
    if request.max_tokens is not None:
        attrs["gen_ai.request.max_tokens"] = request.max_tokens
    if request.temperature is not None:
        attrs["gen_ai.request.temperature"] = request.temperature
    if request.top_p is not None:
        attrs["gen_ai.request.top_p"] = request.top_p
    if request.choice_count is not None and request.choice_count != 1:  # semconv: only if != 1
        attrs["gen_ai.request.choice.count"] = request.choice_count
    if request.stream or streamed:  # semconv: set if and only if the request streams
        attrs["gen_ai.request.stream"] = True
    if route.operation == EMBEDDINGS:
        if request.encoding_formats is not None:
            attrs["gen_ai.request.encoding_formats"] = request.encoding_formats
        if request.dimensions is not None:
            attrs["gen_ai.embeddings.dimension.count"] = request.dimensions


def _response_attributes(response: ResponseInfo, provider_name: str, attrs: Attributes) -> None:
    # each set only when known, in this order (the order they are exported in)
    if response.id is not None:
        attrs["gen_ai.response.id"] = response.id
    if response.model is not None:
        attrs["gen_ai.response.model"] = response.model
    if (count := response.total_input_tokens) is not None:
        attrs["gen_ai.usage.input_tokens"] = count
    if response.output_tokens is not None:
        attrs["gen_ai.usage.output_tokens"] = response.output_tokens
    # detail counts only when non-zero: most responses carry zeros for all of them
    if response.cache_read_tokens:
        attrs["gen_ai.usage.cache_read.input_tokens"] = response.cache_read_tokens
    if response.cache_creation_tokens:
        attrs["gen_ai.usage.cache_creation.input_tokens"] = response.cache_creation_tokens
    if response.reasoning_tokens:
        attrs["gen_ai.usage.reasoning.output_tokens"] = response.reasoning_tokens
    if response.finish_reasons:
        reasons = response.finish_reasons
        attrs["gen_ai.response.finish_reasons"] = [reasons[i] for i in sorted(reasons)]
    if provider_name == "openai":  # openai.* attributes go with that provider only
        if response.service_tier is not None:
            attrs["openai.response.service_tier"] = response.service_tier
        if response.system_fingerprint is not None:
            attrs["openai.response.system_fingerprint"] = response.system_fingerprint
    if response.dropped:
        attrs[CHUNKS_LOST] = response.dropped
    if response.tool_names:
        attrs[TOOL_CALL_COUNT] = len(response.tool_names)
        names = [name for name in response.tool_names.values() if name][:MAX_TOOL_NAMES]
        if names:
            attrs[TOOL_CALL_NAMES] = names


class Timing:
    """Streamed-output timing, in seconds, from the content chunks' kernel times."""

    __slots__ = ("first", "gaps", "per_token", "source")

    def __init__(self, exchange: HTTPExchange, kind: SpanKind, response: ResponseInfo) -> None:
        times = response.content_ns
        base = exchange.start_ns if kind == SpanKind.CLIENT else exchange.request_end_ns
        self.first: float | None = None
        self.gaps: list[float] = []
        self.per_token: float | None = None
        self.source = ""
        if not (response.streamed and times):
            return
        self.first = max(times[0] - base, 0) / NS
        self.gaps = list(map(truediv, map(sub, times[1:], times), repeat(NS)))  # later - earlier
        tokens, self.source = (
            (response.output_tokens, "usage") if response.output_tokens else (len(times), "chunks")
        )
        if self.source == "usage" and response.reasoning_tokens and not response.reasoning_streamed:
            # hidden reasoning (o-series, Gemini's thoughts without includeThoughts) was
            # generated before the first chunk: it is in the output count, not in the pace
            tokens -= min(response.reasoning_tokens, tokens)
        if len(times) >= 2 and tokens >= 2:
            self.per_token = (times[-1] - times[0]) / NS / (tokens - 1)

    def attributes(self, response: ResponseInfo, attrs: Attributes) -> None:
        if self.first is None:
            return
        attrs["gen_ai.response.time_to_first_chunk"] = self.first
        attrs[CHUNK_COUNT] = len(response.content_ns)
        if self.gaps:
            attrs[CHUNK_GAP_MAX] = max(self.gaps)
            attrs[CHUNK_GAP_MEAN] = sum(self.gaps) / len(self.gaps)
        attrs[OUTPUT_TOKENS_SOURCE] = self.source
        if self.source == "chunks":
            # the stream reported no usage (no include_usage): the chunks counted stand in,
            # and the source attribute says so; the token histogram takes only reported counts
            attrs["gen_ai.usage.output_tokens"] = len(response.content_ns)
        if self.per_token is not None:
            attrs[TIME_PER_OUTPUT_TOKEN] = self.per_token


_METRIC_KEYS = (
    "gen_ai.operation.name",
    "gen_ai.provider.name",
    "gen_ai.request.model",
    "gen_ai.response.model",
    "server.address",
    "server.port",
)
_ABSENT = object()
# Metric attributes by their values: the same (never mutated) dicts for every span of one
# operation, model and server, so span metrics find their series key once per batch rather
# than sort each span's dicts (docs/decisions.md, "Span measurements as OTLP histograms,
# per process resource"). Bounded: cleared when full.
MAX_METRIC_ATTRIBUTES = 1024
_metric_dicts: dict[tuple, tuple[Attributes, dict[str, Attributes]]] = {}


def _metric_attributes(attrs: Attributes) -> tuple[Attributes, dict[str, Attributes]]:
    """The measurements' common attributes, and those with each gen_ai.token.type."""
    # the value's type is part of the key: True, 1 and 1.0 are equal, not the same attribute
    values = tuple((v, type(v)) for v in (attrs.get(key, _ABSENT) for key in _METRIC_KEYS))
    try:
        found = _metric_dicts.get(values)
    except TypeError:  # an unhashable value (a list): made for this span alone
        found, values = None, None
    if found is None:
        common = {key: attrs[key] for key in _METRIC_KEYS if key in attrs}
        found = (common, {kind: {**common, "gen_ai.token.type": kind}
                          for kind in ("input", "output")})
        if values is not None:
            if len(_metric_dicts) >= MAX_METRIC_ATTRIBUTES:
                _metric_dicts.clear()
            _metric_dicts[values] = found
    return found


def _client_measurements(
    span: NeutralSpan,
    response: ResponseInfo,
    timing: Timing,
    common: Attributes,
    with_error: Attributes,
    tokens: dict[str, Attributes],
) -> list[Measurement | Measurements]:
    out = [_measurement(CLIENT_DURATION, (span.end_ns - span.start_ns) / NS, with_error)]
    for kind, count in (("input", response.total_input_tokens), ("output", response.output_tokens)):
        if count is not None:
            out.append(_measurement(CLIENT_TOKEN_USAGE, count, tokens[kind]))
    if timing.first is not None:
        out.append(_measurement(CLIENT_TTFC, timing.first, common))
        if timing.gaps:  # one value per chunk gap, as semconv asks: one object for them all
            out.append(Measurements(CLIENT_TPOC, timing.gaps[:MAX_CHUNK_MEASUREMENTS], common))
    return out


def _server_measurements(
    span: NeutralSpan,
    response: ResponseInfo,
    timing: Timing,
    common: Attributes,
    with_error: Attributes,
    tokens: dict[str, Attributes],
) -> list[Measurement | Measurements]:
    out = [_measurement(SERVER_DURATION, (span.end_ns - span.start_ns) / NS, with_error)]
    if "error.type" in with_error:  # time to first token and per token: successful ones only
        return out
    if timing.first is not None:
        out.append(_measurement(SERVER_TTFT, timing.first, common))
    if timing.per_token is not None:
        out.append(_measurement(SERVER_TPOT, timing.per_token, common))
    return out


_MEASUREMENTS = {SpanKind.CLIENT: _client_measurements, SpanKind.SERVER: _server_measurements}


def _error(
    exchange: HTTPExchange, response: ResponseInfo, attrs: Attributes, span: NeutralSpan
) -> None:
    """The API's error type (HTTP error body, or an error event inside a 200 stream), else
    the status code; with no response the HTTP parser's error.type stands."""
    if exchange.status is not None and exchange.status >= 400:
        attrs["error.type"] = response.error_type or str(exchange.status)
    elif response.error_type is not None:
        attrs["error.type"] = response.error_type
        span.status = StatusCode.ERROR


def _content(
    route: Route, request: RequestInfo, response: ResponseInfo, limit: int, attrs: Attributes
) -> None:
    """Opt-in message content (never for embeddings: their input is not a conversation)."""
    if route.operation == EMBEDDINGS:
        return
    if request.document is not None:
        messages, instructions = content.input_messages(request.document, route)
        for key, items in (
            ("gen_ai.input.messages", messages),
            ("gen_ai.system_instructions", instructions),
        ):
            fitted = content.fit(items, limit)
            if fitted is not None:
                attrs[key] = fitted
    fitted = content.fit(content.output_messages(response), limit)
    if fitted is not None:
        attrs["gen_ai.output.messages"] = fitted


def enrich(
    exchange: HTTPExchange,
    span: NeutralSpan,
    route: Route,
    request: RequestInfo,
    response: ResponseInfo,
    provider_name: str,
    content_limit: int | None,
) -> None:
    attrs = span.attributes
    attrs["gen_ai.operation.name"] = route.operation
    attrs["gen_ai.provider.name"] = provider_name
    _request_attributes(route, request, response.streamed, attrs)
    _response_attributes(response, provider_name, attrs)
    timing = Timing(exchange, span.kind, response)
    timing.attributes(response, attrs)
    _error(exchange, response, attrs, span)
    if content_limit is not None:
        _content(route, request, response, content_limit, attrs)
    if "server.address" not in attrs and exchange.server_address:
        attrs["server.address"] = exchange.server_address
    if "server.port" not in attrs and exchange.server_port:
        attrs["server.port"] = exchange.server_port
    # semconv: "{operation} {request model}"; when the request's model was not captured
    # (a body cut before it) the response's model names the same call better than nothing
    model = request.model or response.model
    span.name = f"{route.operation} {model}" if model else route.operation
    common, tokens = _metric_attributes(attrs)
    with_error = {**common, "error.type": attrs["error.type"]} if "error.type" in attrs else common
    measure = _MEASUREMENTS.get(span.kind)
    if measure is not None:
        span.measurements.extend(measure(span, response, timing, common, with_error, tokens))
