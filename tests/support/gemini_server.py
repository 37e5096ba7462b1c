"""A local server speaking the Gemini API's REST wire format, for tests (Starlette under
uvicorn, in its own process, bound to 127.0.0.1 only).

    python -m tests.support.gemini_server --port N [--first-token-delay S] [--token-interval S] [--tokens N]

or ``with gemini_server() as srv: genai.Client(http_options={"base_url": srv.root_url})``.

Endpoints (`{model}` is any model name; the API key header is accepted and ignored)
    POST /v1beta/models/{model}:generateContent        a GenerateContentResponse
    POST /v1beta/models/{model}:streamGenerateContent  with ?alt=sse: one SSE event per
         chunk (``data: {...}`` and a blank line, CRLF as Google's servers end them);
         without it: a JSON array of the same chunks, sent at the end
    POST /v1beta/models/{model}:embedContent           {"embedding": {"values": [...]}}
    POST /v1beta/models/{model}:batchEmbedContents     {"embeddings": [...]}
    GET  /health

Generation follows tests/support/openai_server.py: content token i is ``"w{i}"`` (a space
before each after the first), sent at t0 + first-token delay + i * interval, each chunk its
own write; the x-test-first-token-ms / -token-interval-ms / -tokens headers set them per
request. ``generationConfig.maxOutputTokens`` caps the tokens (finishReason MAX_TOKENS, else
STOP). promptTokenCount is the number of whitespace words in the request's texts.
Usage details, by header: x-test-cached-tokens (cachedContentTokenCount, inside the
prompt count), x-test-thoughts-tokens (thoughtsTokenCount, apart from candidates, as
Gemini counts them). Tools: when the request declares functions (tools[].functionDeclarations)
the answer calls each of them once (at most 8), after the text, with args {"n": i}, in
the last chunk of a stream. A model whose name starts with ``missing`` gets 404 with
Google's error shape ({"error": {"code": 404, "message", "status": "NOT_FOUND"}}).
"""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import json
import uuid
from collections.abc import AsyncIterator
from dataclasses import dataclass

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.openai_server import (
    BadRequest,
    RunningServer,
    Settings,
    _header_num,
    app_for,
    prompt_tokens,
    read_json,
    request_settings,
    serve,
    server_process,
    sleep_until,
    token,
)

MAX_TOOL_CALLS = 8


class ApiError(Exception):
    def __init__(self, code: int, status: str, message: str):
        super().__init__(message)
        self.code, self.status, self.message = code, status, message


@dataclass(frozen=True)
class Plan:
    first: float
    interval: float
    tokens: int
    truncated: bool
    cached: int
    thoughts: int


def plan_for(request: Request, body: dict) -> Plan:
    """The request's generation: server defaults, x-test-* headers, maxOutputTokens."""
    try:
        settings = request_settings(request)
        cached = _header_num(request, "x-test-cached-tokens", int, 0, 1_000_000) or 0
        thoughts = _header_num(request, "x-test-thoughts-tokens", int, 0, 1_000_000) or 0
    except BadRequest as err:
        raise ApiError(400, "INVALID_ARGUMENT", err.message) from None
    n = settings.tokens
    cap = (body.get("generationConfig") or {}).get("maxOutputTokens")
    truncated = isinstance(cap, int) and not isinstance(cap, bool) and 0 <= cap < n
    return Plan(settings.first_token_delay, settings.token_interval, cap if truncated else n,
                truncated, cached, thoughts)


def error_response(err: ApiError) -> Response:
    return JSONResponse({"error": {"code": err.code, "message": err.message,
                                   "status": err.status}}, status_code=err.code)


async def read_body(request: Request) -> dict:
    try:
        return await read_json(request)
    except BadRequest as err:
        raise ApiError(400, "INVALID_ARGUMENT", err.message) from None


def function_names(body: dict) -> list[str]:
    names = []
    for tool in body.get("tools") or []:
        for declaration in (tool or {}).get("functionDeclarations") or []:
            if isinstance(declaration, dict) and isinstance(declaration.get("name"), str):
                names.append(declaration["name"])
    return names[:MAX_TOOL_CALLS]


def part_texts(contents) -> list[str]:
    """The texts of a Content or a list of them (the parts' "text" fields)."""
    items = contents if isinstance(contents, list) else [contents]
    return [part["text"] for item in items if isinstance(item, dict)
            for part in item.get("parts") or [] if isinstance(part, dict)
            and isinstance(part.get("text"), str)]


def usage(prompt: int, plan: Plan, candidates: int) -> dict:
    out = {"promptTokenCount": prompt, "candidatesTokenCount": candidates,
           "totalTokenCount": prompt + candidates + plan.thoughts}
    if plan.cached:
        out["cachedContentTokenCount"] = min(plan.cached, prompt)
    if plan.thoughts:
        out["thoughtsTokenCount"] = plan.thoughts
    return out


def chunk(model: str, rid: str, parts: list[dict], use: dict,
          finish: str | None = None) -> dict:
    candidate: dict = {"content": {"parts": parts, "role": "model"}, "index": 0}
    if finish:
        candidate["finishReason"] = finish
    return {"candidates": [candidate], "usageMetadata": use, "modelVersion": model,
            "responseId": rid}


async def models(request: Request) -> Response:
    t0 = asyncio.get_running_loop().time()
    model, _, method = request.path_params["rest"].rpartition(":")
    try:
        if not model or method not in ("generateContent", "streamGenerateContent",
                                       "embedContent", "batchEmbedContents"):
            raise ApiError(404, "NOT_FOUND", f"unknown method {method!r}")
        if model.startswith("missing"):
            raise ApiError(404, "NOT_FOUND", f"models/{model} is not found for API version "
                                             "v1beta, or is not supported.")
        body = await read_body(request)
        if method in ("embedContent", "batchEmbedContents"):
            return embed(body, method)
        if "contents" not in body:
            raise ApiError(400, "INVALID_ARGUMENT", "* GenerateContentRequest.contents: "
                                                    "contents is not specified")
        plan = plan_for(request, body)
    except ApiError as err:
        return error_response(err)
    prompt = prompt_tokens(part_texts(body.get("contents")),
                           part_texts(body.get("systemInstruction")))
    calls = [{"functionCall": {"name": name, "args": {"n": i}}}
             for i, name in enumerate(function_names(body))]
    finish = "MAX_TOKENS" if plan.truncated else "STOP"
    rid = uuid.uuid4().hex[:22]
    if method == "generateContent":
        await sleep_until(t0 + plan.first + max(plan.tokens - 1, 0) * plan.interval)
        text = "".join(token(i) for i in range(plan.tokens))
        parts = ([{"text": text}] if text else []) + calls
        return JSONResponse(chunk(model, rid, parts, usage(prompt, plan, plan.tokens), finish))

    async def chunks() -> AsyncIterator[dict]:
        for i in range(plan.tokens):  # bounded: tokens <= MAX_TOKENS
            await sleep_until(t0 + plan.first + i * plan.interval)
            last = i == plan.tokens - 1
            parts = [{"text": token(i)}] + (calls if last else [])
            yield chunk(model, rid, parts, usage(prompt, plan, i + 1), finish if last else None)
        if not plan.tokens:
            yield chunk(model, rid, calls, usage(prompt, plan, 0), finish)

    if request.query_params.get("alt") == "sse":
        async def events() -> AsyncIterator[bytes]:
            async for obj in chunks():
                yield b"data: " + json.dumps(obj, separators=(",", ":")).encode() + b"\r\n\r\n"
        return StreamingResponse(events(), media_type="text/event-stream")
    whole = [obj async for obj in chunks()]  # the JSON array form: all at the end
    return JSONResponse(whole)


def vector(text: str, dimensions: int) -> list[float]:
    digest = hashlib.sha256(text.encode()).digest()
    return [round(digest[i % len(digest)] / 255, 6) for i in range(dimensions)]


def embed(body: dict, method: str) -> Response:
    requests = body.get("requests") if method == "batchEmbedContents" else [body]
    if not isinstance(requests, list) or not requests:
        raise ApiError(400, "INVALID_ARGUMENT", "requests must be a non-empty list")
    out = []
    for item in requests[:1000]:
        item = item if isinstance(item, dict) else {}
        parts = (item.get("content") or {}).get("parts") or []
        text = " ".join(p.get("text", "") for p in parts if isinstance(p, dict))
        dimensions = item.get("outputDimensionality") or 8
        if not isinstance(dimensions, int) or not 1 <= dimensions <= 3072:
            raise ApiError(400, "INVALID_ARGUMENT", "outputDimensionality out of range")
        out.append({"values": vector(text, dimensions)})
    if method == "embedContent":
        return JSONResponse({"embedding": out[0]})
    return JSONResponse({"embeddings": out})


def create_app(settings: Settings) -> Starlette:
    return app_for(settings, [
        Route("/v1beta/models/{rest:path}", models, methods=["POST"]),
        Route("/v1/models/{rest:path}", models, methods=["POST"]),
    ])


def gemini_server(**options) -> contextlib.AbstractContextManager[RunningServer]:
    """This server in its own process (options: openai_server.server_process's)."""
    return server_process("tests.support.gemini_server", **options)


if __name__ == "__main__":
    serve(create_app, description=__doc__.split("\n\n")[0])
