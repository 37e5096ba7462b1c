"""LLMLayer.enrich never raises: hostile JSON in every dialect's shapes, whole, streamed as SSE,
NDJSON or AWS event stream frames, cut by gaps; and plain garbage under any content type
and status."""

from __future__ import annotations

import orjson
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.base import Role
from otel_ebpf.protocols.llm import LLMLayer
from otel_ebpf.protocols.llm.endpoints import BUILTIN, Endpoints
from otel_ebpf.protocols.llm.eventstream import encode_frame

from .build import Lost, body, exchange, http_span, json_values

# the keys the layer looks at anywhere, so generated documents hit its code paths
VOCABULARY = [
    "id",
    "model",
    "choices",
    "index",
    "delta",
    "content",
    "text",
    "reasoning_content",
    "reasoning",
    "refusal",
    "tool_calls",
    "function",
    "name",
    "arguments",
    "finish_reason",
    "usage",
    "prompt_tokens",
    "completion_tokens",
    "input_tokens",
    "output_tokens",
    "prompt_tokens_details",
    "cached_tokens",
    "completion_tokens_details",
    "reasoning_tokens",
    "cache_read_input_tokens",
    "cache_creation_input_tokens",
    "type",
    "message",
    "content_block",
    "partial_json",
    "thinking",
    "stop_reason",
    "error",
    "code",
    "response",
    "status",
    "output",
    "incomplete_details",
    "summary",
    "call_id",
    "done",
    "done_reason",
    "prompt_eval_count",
    "eval_count",
    "messages",
    "role",
    "tool_call_id",
    "system",
    "input",
    "instructions",
    "prompt",
    "images",
    "tool_use_id",
    "service_tier",
    "system_fingerprint",
    "stream",
    "options",
    "data",
    # Gemini
    "candidates",
    "parts",
    "thought",
    "functionCall",
    "args",
    "finishReason",
    "usageMetadata",
    "promptTokenCount",
    "candidatesTokenCount",
    "thoughtsTokenCount",
    "cachedContentTokenCount",
    "toolUsePromptTokenCount",
    "modelVersion",
    "responseId",
    "contents",
    "systemInstruction",
    "generationConfig",
    "maxOutputTokens",
    "embedding",
    # Bedrock
    "stopReason",
    "inputTokens",
    "outputTokens",
    "cacheReadInputTokens",
    "cacheWriteInputTokens",
    "contentBlockIndex",
    "start",
    "toolUse",
    "toolUseId",
    "reasoningContent",
    "reasoningText",
    "inferenceConfig",
    "maxTokens",
    "bytes",
    "amazon-bedrock-invocationMetrics",
    "inputTokenCount",
    "outputTokenCount",
    "generation",
    "outputText",
    "results",
    "__type",
]
# the frame event types of Bedrock's streams
FRAME_EVENTS = ["messageStart", "contentBlockStart", "contentBlockDelta", "contentBlockStop",
                "messageStop", "metadata", "chunk"]
EVENT_TYPES = [
    "message_start",
    "content_block_start",
    "content_block_delta",
    "message_delta",
    "error",
    "response.created",
    "response.completed",
    "response.failed",
    "response.output_text.delta",
    "text_delta",
    "input_json_delta",
    "thinking_delta",
    "tool_use",
    "text",
    "function_call",
    "message",
    "output_text",
    "tool_result",
    "image_url",
]
documents = st.recursive(
    json_values | st.sampled_from(EVENT_TYPES),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.dictionaries(st.sampled_from(VOCABULARY), inner, max_size=5)
    ),
    max_leaves=25,
)
shapes = st.dictionaries(st.sampled_from(VOCABULARY), documents, max_size=6)
# path-shaped dialects: the model in the path
PATH_ROUTES = [
    "/v1beta/models/gemini-2.5-flash:generateContent",
    "/v1beta/models/gemini-2.5-flash:streamGenerateContent?alt=sse",
    "/v1beta/models/text-embedding-004:embedContent",
    "/model/anthropic.claude-v2%3A1/converse",
    "/model/anthropic.claude-v2%3A1/converse-stream",
    "/model/anthropic.claude-v2%3A1/invoke",
    "/model/meta.llama3/invoke-with-response-stream",
    "/model/amazon.titan-embed-text-v2:0/invoke",
]
ROUTES = sorted(BUILTIN) + PATH_ROUTES
OPTIONS = [None, {"capture_content": True, "max_content_bytes": 64}, {"capture_content": True}]


def run(path, request, response, content_type, status, role, options):
    ex = exchange(path, request, response, status=status, response_type=content_type, role=role)
    span = http_span(ex)
    LLMLayer(options).enrich(ex, span)
    operation = Endpoints().route("POST", path).operation
    assert span.name.split(" ")[0] == operation
    assert span.attributes["gen_ai.operation.name"] == operation
    for value in span.attributes.values():  # only OTLP attribute value types
        assert isinstance(value, str | bool | int | float | list)
    for key in ("gen_ai.input.messages", "gen_ai.output.messages", "gen_ai.system_instructions"):
        if key in span.attributes and options and "max_content_bytes" in options:
            assert len(span.attributes[key].encode()) <= options["max_content_bytes"]


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(
    path=st.sampled_from(ROUTES),
    request=shapes,
    events=st.lists(shapes, max_size=6),
    framing=st.sampled_from(["json", "sse", "ndjson", "eventstream"]),
    frame_event=st.sampled_from(FRAME_EVENTS),
    cut=st.integers(0, 3),
    role=st.sampled_from([Role.CLIENT, Role.SERVER]),
    options=st.sampled_from(OPTIONS),
    status=st.sampled_from([200, 200, 400, 500]),
)
def test_hostile_json_never_raises(
    path, request, events, framing, frame_event, cut, role, options, status
):
    blobs = [orjson.dumps(doc) for doc in events] or [b"{}"]
    if framing == "eventstream":
        headers = {":event-type": frame_event, ":message-type": "event"}
        pieces = [encode_frame(headers, b) for b in blobs]
        content_type = "application/vnd.amazon.eventstream"
    elif framing == "json":
        pieces, content_type = [blobs[0]], "application/json"
    elif framing == "sse":
        pieces, content_type = [b"data: " + b + b"\n\n" for b in blobs], "text/event-stream"
    else:
        pieces, content_type = [b + b"\n" for b in blobs], "application/x-ndjson"
    if cut and len(pieces) > 1:  # a capture gap inside the stream
        pieces.insert(cut % len(pieces), Lost(17))
    run(path, body(orjson.dumps(request)), body(*pieces), content_type, status, role, options)


@settings(max_examples=300, deadline=None)
@given(
    path=st.sampled_from(ROUTES),
    request=st.binary(max_size=300),
    response=st.lists(st.binary(min_size=1, max_size=80), max_size=5),
    content_type=st.sampled_from(
        ["", "application/json", "text/event-stream", "application/x-ndjson", "text/plain",
         "application/vnd.amazon.eventstream"]
    ),
    status=st.sampled_from([None, 200, 201, 404, 503]),
    role=st.sampled_from([Role.CLIENT, Role.SERVER]),
    options=st.sampled_from(OPTIONS),
)
def test_garbage_never_raises(path, request, response, content_type, status, role, options):
    run(
        path,
        body(request) if request else None,
        body(*response) if response else None,
        content_type,
        status,
        role,
        options,
    )
