"""A local server speaking the AWS Bedrock Runtime REST wire format, for tests (Starlette
under uvicorn, in its own process, bound to 127.0.0.1 only). boto3's `bedrock-runtime`
client talks to it with ``endpoint_url=srv.root_url`` (any credentials: the SigV4 signature
is not checked).

    python -m tests.support.bedrock_server --port N [--first-token-delay S] [--token-interval S] [--tokens N]

Endpoints (`{modelId}` percent-encoded, as boto3 sends "...-v1%3A0")
    POST /model/{modelId}/converse                     a Converse answer (JSON)
    POST /model/{modelId}/converse-stream              application/vnd.amazon.eventstream:
         messageStart, one contentBlockDelta per token, contentBlockStop, a toolUse block
         per tool (contentBlockStart, one delta with its input, contentBlockStop),
         messageStop, metadata (usage, metrics); each frame its own write
    POST /model/{modelId}/invoke                       Anthropic's messages body in and out
         (a model id containing "anthropic"), or Titan embeddings ("embed" in the id)
    POST /model/{modelId}/invoke-with-response-stream  Anthropic's stream events, each in a
         "chunk" frame as base64 `bytes`, Bedrock's invocation metrics in the last one
    GET  /health

Generation and timing follow tests/support/openai_server.py (tokens "w0", " w1"...;
x-test-first-token-ms / -token-interval-ms / -tokens headers); inferenceConfig.maxTokens
(Anthropic: max_tokens) caps the tokens, stopReason then max_tokens, else end_turn
(tool_use when tools were called). inputTokens: whitespace words of the request's texts.
Prompt caching is simulated as Bedrock does it: the words before the first `cachePoint`
block (system, then messages) are written to the cache the first time such a prefix is
seen (cacheWriteInputTokens) and read from it after (cacheReadInputTokens); inputTokens
then counts only the rest. Tools: each tool of toolConfig.tools (at most 8) is called once
with input {"n": i}. A model id starting with ``missing`` gets 404 and
x-amzn-errortype: ResourceNotFoundException, as Bedrock answers.
"""

from __future__ import annotations

import asyncio
import base64
import contextlib
import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass
from urllib.parse import unquote

from otel_ebpf.protocols.llm.eventstream import encode_frame
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.openai_server import (
    BadRequest,
    RunningServer,
    Settings,
    app_for,
    count_words,
    read_json,
    request_settings,
    serve,
    server_process,
    sleep_until,
    token,
)

MAX_TOOL_CALLS = 8
MAX_CACHED_PREFIXES = 1024
EVENTSTREAM = "application/vnd.amazon.eventstream"


class AwsError(Exception):
    def __init__(self, status: int, kind: str, message: str):
        super().__init__(message)
        self.status, self.kind, self.message = status, kind, message


def error_response(err: AwsError) -> Response:
    return JSONResponse({"message": err.message}, status_code=err.status,
                        headers={"x-amzn-errortype": f"{err.kind}:http://internal.amazon.com/"
                                                     "coral/com.amazon.bedrock/",
                                 "x-amzn-requestid": str(uuid.uuid4())})


@dataclass(frozen=True)
class Plan:
    first: float
    interval: float
    tokens: int
    truncated: bool

    @property
    def text(self) -> str:
        return "".join(token(i) for i in range(self.tokens))

    async def tokens_at_times(self, t0: float) -> AsyncIterator[str]:
        for i in range(self.tokens):  # bounded: tokens <= MAX_TOKENS
            await sleep_until(t0 + self.first + i * self.interval)
            yield token(i)

    async def wait_all(self, t0: float) -> None:
        await sleep_until(t0 + self.first + max(self.tokens - 1, 0) * self.interval)


def plan_for(request: Request, cap) -> Plan:
    try:
        settings = request_settings(request)
    except BadRequest as err:
        raise AwsError(400, "ValidationException", err.message) from None
    n = settings.tokens
    truncated = isinstance(cap, int) and not isinstance(cap, bool) and 0 <= cap < n
    return Plan(settings.first_token_delay, settings.token_interval, cap if truncated else n,
                truncated)


async def read_body(request: Request) -> dict:
    try:
        return await read_json(request)
    except BadRequest as err:
        raise AwsError(400, "ValidationException", err.message) from None


def prompt_blocks(body: dict) -> list:
    """The request's content blocks in prompt order: system, then each message's."""
    blocks = list(body.get("system") or [])
    for message in body.get("messages") or []:
        content = (message or {}).get("content")
        blocks += content if isinstance(content, list) else [{"text": content}]
    return blocks


def cache_usage(request: Request, blocks: list) -> tuple[int, int, int]:
    """(uncached input, cache read, cache write) tokens; the cache lives in this process."""
    total = sum(count_words(b) for b in blocks if isinstance(b, dict))
    point = next((i for i, b in enumerate(blocks) if isinstance(b, dict) and "cachePoint" in b
                  or isinstance(b, dict) and "cache_control" in b), None)
    if point is None:
        return max(total, 1), 0, 0
    prefix = blocks[: point + 1]
    cached = sum(count_words(b) for b in prefix if isinstance(b, dict))
    key = hashlib.sha256(json.dumps(prefix, sort_keys=True).encode()).hexdigest()
    seen: dict = request.app.state.cache
    rest = max(total - cached, 1)
    if key in seen:
        return rest, cached, 0
    if len(seen) < MAX_CACHED_PREFIXES:
        seen[key] = True
    return rest, 0, cached


def tool_names(body: dict) -> list[str]:
    tools = ((body.get("toolConfig") or {}).get("tools") or []) + (body.get("tools") or [])
    names = []
    for tool in tools:
        spec = (tool or {}).get("toolSpec") or tool or {}
        if isinstance(spec.get("name"), str):
            names.append(spec["name"])
    return names[:MAX_TOOL_CALLS]


def frame(event: str, payload: dict) -> bytes:
    return encode_frame({":event-type": event, ":content-type": "application/json",
                         ":message-type": "event"},
                        json.dumps(payload, separators=(",", ":")).encode())


def stop_reason(plan: Plan, tools: list[str]) -> str:
    return "tool_use" if tools else "max_tokens" if plan.truncated else "end_turn"


async def converse(request: Request, model: str, stream: bool, t0: float) -> Response:
    body = await read_body(request)
    if not isinstance(body.get("messages"), list):
        raise AwsError(400, "ValidationException", "messages is required")
    plan = plan_for(request, (body.get("inferenceConfig") or {}).get("maxTokens"))
    uncached, read, write = cache_usage(request, prompt_blocks(body))
    tools = tool_names(body)
    reason = stop_reason(plan, tools)

    def usage() -> dict:
        out = {"inputTokens": uncached, "outputTokens": plan.tokens,
               "totalTokens": uncached + plan.tokens + read + write}
        if read or write:
            out.update(cacheReadInputTokens=read, cacheWriteInputTokens=write)
        return out

    uses = [{"toolUseId": f"tooluse_{i}_{uuid.uuid4().hex[:12]}", "name": name,
             "input": {"n": i}} for i, name in enumerate(tools)]
    if not stream:
        await plan.wait_all(t0)
        content = ([{"text": plan.text}] if plan.tokens else []) + [{"toolUse": u} for u in uses]
        latency = int((asyncio.get_running_loop().time() - t0) * 1000)
        return JSONResponse({"output": {"message": {"role": "assistant", "content": content}},
                             "stopReason": reason, "usage": usage(),
                             "metrics": {"latencyMs": latency}})

    async def frames() -> AsyncIterator[bytes]:
        yield frame("messageStart", {"role": "assistant"})
        async for text in plan.tokens_at_times(t0):
            yield frame("contentBlockDelta", {"contentBlockIndex": 0, "delta": {"text": text}})
        yield frame("contentBlockStop", {"contentBlockIndex": 0})
        for i, use in enumerate(uses, start=1):
            start = {"toolUse": {"toolUseId": use["toolUseId"], "name": use["name"]}}
            yield frame("contentBlockStart", {"contentBlockIndex": i, "start": start})
            delta = {"toolUse": {"input": json.dumps(use["input"])}}
            yield frame("contentBlockDelta", {"contentBlockIndex": i, "delta": delta})
            yield frame("contentBlockStop", {"contentBlockIndex": i})
        yield frame("messageStop", {"stopReason": reason})
        latency = int((asyncio.get_running_loop().time() - t0) * 1000)
        yield frame("metadata", {"usage": usage(), "metrics": {"latencyMs": latency}})

    return StreamingResponse(frames(), media_type=EVENTSTREAM)


def titan_embedding(body: dict) -> Response:
    text = body.get("inputText")
    if not isinstance(text, str):
        raise AwsError(400, "ValidationException", "inputText is required")
    dimensions = body.get("dimensions", 8)
    if not isinstance(dimensions, int) or not 1 <= dimensions <= 1024:
        raise AwsError(400, "ValidationException", "dimensions out of range")
    digest = hashlib.sha256(text.encode()).digest()
    return JSONResponse({"embedding": [digest[i % 32] / 255 for i in range(dimensions)],
                         "inputTextTokenCount": max(count_words(text), 1)})


async def invoke(request: Request, model: str, stream: bool, t0: float) -> Response:
    body = await read_body(request)
    if "embed" in model and not stream:
        return titan_embedding(body)
    if "anthropic" not in model or not isinstance(body.get("messages"), list):
        raise AwsError(400, "ValidationException", "this server answers InvokeModel for "
                                                   "Anthropic messages and Titan embeddings")
    plan = plan_for(request, body.get("max_tokens"))
    uncached, read, write = cache_usage(request, prompt_blocks(body))
    tools = tool_names(body)
    reason = stop_reason(plan, tools)
    mid = f"msg_bdrk_{uuid.uuid4().hex[:24]}"
    usage = {"input_tokens": uncached, "output_tokens": plan.tokens,
             "cache_read_input_tokens": read, "cache_creation_input_tokens": write}
    uses = [{"type": "tool_use", "id": f"toolu_{i}_{uuid.uuid4().hex[:12]}", "name": name,
             "input": {"n": i}} for i, name in enumerate(tools)]
    if not stream:
        await plan.wait_all(t0)
        content = ([{"type": "text", "text": plan.text}] if plan.tokens else []) + uses
        return JSONResponse({"id": mid, "type": "message", "role": "assistant", "model": model,
                             "content": content, "stop_reason": reason, "stop_sequence": None,
                             "usage": usage})

    def chunk(event: dict) -> bytes:
        raw = base64.b64encode(json.dumps(event, separators=(",", ":")).encode()).decode()
        return frame("chunk", {"bytes": raw})

    async def frames() -> AsyncIterator[bytes]:
        start = {"id": mid, "type": "message", "role": "assistant", "model": model,
                 "content": [], "stop_reason": None,
                 "usage": {**usage, "output_tokens": 1}}
        yield chunk({"type": "message_start", "message": start})
        yield chunk({"type": "content_block_start", "index": 0,
                     "content_block": {"type": "text", "text": ""}})
        async for text in plan.tokens_at_times(t0):
            yield chunk({"type": "content_block_delta", "index": 0,
                         "delta": {"type": "text_delta", "text": text}})
        yield chunk({"type": "content_block_stop", "index": 0})
        for i, use in enumerate(uses, start=1):
            yield chunk({"type": "content_block_start", "index": i,
                         "content_block": {**use, "input": {}}})
            yield chunk({"type": "content_block_delta", "index": i,
                         "delta": {"type": "input_json_delta",
                                   "partial_json": json.dumps(use["input"])}})
            yield chunk({"type": "content_block_stop", "index": i})
        yield chunk({"type": "message_delta", "delta": {"stop_reason": reason},
                     "usage": {"output_tokens": plan.tokens}})
        latency = int((asyncio.get_running_loop().time() - t0) * 1000)
        metrics = {"inputTokenCount": uncached, "outputTokenCount": plan.tokens,
                   "invocationLatency": latency, "firstByteLatency": int(plan.first * 1000)}
        yield chunk({"type": "message_stop", "amazon-bedrock-invocationMetrics": metrics})

    return StreamingResponse(frames(), media_type=EVENTSTREAM)


OPERATIONS = {
    "converse": (converse, False),
    "converse-stream": (converse, True),
    "invoke": (invoke, False),
    "invoke-with-response-stream": (invoke, True),
}


async def model_operation(request: Request) -> Response:
    t0 = asyncio.get_running_loop().time()
    model = unquote(request.path_params["model"])
    found = OPERATIONS.get(request.path_params["operation"])
    try:
        if found is None:
            raise AwsError(404, "UnknownOperationException", "unknown operation")
        if model.startswith("missing"):
            raise AwsError(404, "ResourceNotFoundException",
                           f"Could not resolve the foundation model from the model "
                           f"identifier {model}.")
        handler, stream = found
        return await handler(request, model, stream, t0)
    except AwsError as err:
        return error_response(err)


def create_app(settings: Settings) -> Starlette:
    return app_for(settings, [Route("/model/{model}/{operation}", model_operation, methods=["POST"])], cache={})


def bedrock_server(**options) -> contextlib.AbstractContextManager[RunningServer]:
    """This server in its own process (options: openai_server.server_process's)."""
    return server_process("tests.support.bedrock_server", **options)


if __name__ == "__main__":
    serve(create_app, description=__doc__.split("\n\n")[0])
