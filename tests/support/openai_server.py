"""A local OpenAI-compatible LLM server for tests and benchmarks (Starlette under uvicorn,
in its own process, bound to 127.0.0.1 only).

    python -m tests.support.openai_server --port N \
        [--first-token-delay 0.2] [--token-interval 0.05] [--tokens 10] [--access-log]

or, from a test, ``with openai_server(first_token_delay=0.2) as srv: srv.base_url``.

Endpoints
    POST /v1/chat/completions  OpenAI chat, JSON or SSE (``stream: true``)
    POST /v1/completions       OpenAI legacy text_completion, JSON or SSE
    POST /v1/embeddings        OpenAI embeddings (``encoding_format`` float or base64)
    POST /v1/messages          Anthropic messages, JSON or SSE with named events
    POST /api/chat             Ollama chat, JSON or NDJSON (Ollama streams by default)
    GET  /v1/models, GET /health

Timing. A generation has ``tokens`` content tokens. Token i (0-based) is sent at
``t0 + first_token_delay + i * token_interval``, t0 being when the handler got the whole
request body; the sleeps aim at these absolute times, so they do not drift. A
non-streaming answer is sent once, when the last token would have been. A streaming chat
answer first sends the role chunk at once (``delta: {"role": "assistant", "content": ""}``,
exactly as api.openai.com does: no token text, so it is not the first token), then one
content chunk per token, then the finish_reason chunk, then the usage chunk
(``choices: []``) only when ``stream_options.include_usage`` is true, then
``data: [DONE]``. Every SSE event / NDJSON line is its own write to the socket.

Request-level control: HTTP request headers (none of them is required)
    x-test-first-token-ms: 250     first-token delay for this request, in ms
    x-test-token-interval-ms: 20   interval between tokens, in ms
    x-test-tokens: 7               number of content tokens
    x-test-status: 429             answer with this error status and an error body
    x-test-response-model: NAME    the response's ``model`` (default: the request's)
    x-test-role-chunk: omit        chat SSE: role chunk without the ``content`` key
                                   (vLLM/older servers); ``none``: no role chunk at all
With the openai client: ``client.chat.completions.create(..., extra_headers={...})``.
A request's ``max_tokens`` / ``max_completion_tokens`` (Anthropic ``max_tokens``,
Ollama ``options.num_predict``) caps the token count; the finish reason is then
``length`` (Anthropic ``max_tokens``), else ``stop`` (``end_turn``).
A model whose name starts with ``missing`` gets 404 (OpenAI: ``model_not_found``;
Anthropic and Ollama: their own error shapes); a body that is not a JSON object or lacks
``model`` / ``messages`` / ``prompt`` / ``input`` gets 400.

Token counts are exact and deterministic: content token i is ``"w{i}"`` (with a leading
space after the first), so completion_tokens == the number of content chunks and the
whole text is ``"w0 w1 ... w{n-1}"``. prompt_tokens is the number of whitespace-separated
words in every text of the request (message contents, string or text parts; prompt;
embedding inputs; a token-id list counts its length), at least 1. Embeddings are
``dimensions`` (default 8) floats derived from a hash of the input.
Only ``n == 1`` is produced. Every delay is capped at 60 s, the token count at 10000, and
a whole generation at 300 s (longer asks get 400).
"""

from __future__ import annotations

import argparse
import asyncio
import base64
import contextlib
import hashlib
import json
import os
import ssl
import struct
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Iterator
from dataclasses import dataclass, replace
from pathlib import Path

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response, StreamingResponse
from starlette.routing import Route

from tests.support.ports import free_port
from tests.support.processes import stop_process

MAX_TOKENS = 10_000
MAX_DELAY_S = 60.0
MAX_GENERATION_S = 300.0  # first-token delay + all intervals of one answer
DEFAULT_DIMENSIONS = 8
SYSTEM_FINGERPRINT = "fp_otel_ebpf_test"


@dataclass(frozen=True)
class Settings:
    first_token_delay: float = 0.2  # seconds
    token_interval: float = 0.05  # seconds
    tokens: int = 10


@dataclass(frozen=True)
class Plan:
    """One request's generation: how many tokens, when, and how it ends."""

    settings: Settings
    tokens: int
    truncated: bool
    model: str
    response_model: str
    role_chunk: str  # "empty" | "omit" | "none"

    @property
    def text(self) -> str:
        return "".join(token(i) for i in range(self.tokens))

    async def tokens_at_times(self, t0: float) -> AsyncIterator[tuple[int, str]]:
        """Yield (i, token i) at t0 + delay + i * interval (event-loop clock)."""
        for i in range(self.tokens):  # bounded: tokens <= MAX_TOKENS
            await sleep_until(t0 + self.settings.first_token_delay
                              + i * self.settings.token_interval)
            yield i, token(i)

    async def wait_all(self, t0: float) -> None:
        """Wait until the last token would have been produced (non-streaming answers)."""
        if self.tokens:
            await sleep_until(t0 + self.settings.first_token_delay
                              + (self.tokens - 1) * self.settings.token_interval)


def token(i: int) -> str:
    return f"w{i}" if i == 0 else f" w{i}"


async def sleep_until(deadline: float) -> None:
    delay = deadline - asyncio.get_running_loop().time()
    if delay > 0:
        await asyncio.sleep(min(delay, MAX_DELAY_S))


class BadRequest(Exception):
    def __init__(self, status: int, message: str, code: str | None = None,
                 param: str | None = None):
        super().__init__(message)
        self.status, self.message, self.code, self.param = status, message, code, param


def _header_num(request: Request, name: str, cast, lo, hi):
    raw = request.headers.get(name)
    if raw is None:
        return None
    try:
        value = cast(raw)
    except ValueError:
        raise BadRequest(400, f"header {name} must be a number, got {raw!r}") from None
    return min(max(value, lo), hi)


def count_words(value) -> int:
    """Whitespace words in every string inside `value`; a list of ints counts its length."""
    if isinstance(value, str):
        return len(value.split())
    if isinstance(value, list):
        if value and all(isinstance(v, int) for v in value):
            return len(value)
        return sum(count_words(v) for v in value[:100_000])
    if isinstance(value, dict):
        if "text" in value:
            return count_words(value["text"])
        if "content" in value:
            return count_words(value["content"])
    return 0


def prompt_tokens(*values) -> int:
    return max(1, sum(count_words(v) for v in values))


async def read_json(request: Request) -> dict:
    try:
        body = json.loads(await request.body())
    except ValueError:
        raise BadRequest(400, "We could not parse the JSON body of your request.") from None
    if not isinstance(body, dict):
        raise BadRequest(400, "The request body must be a JSON object.")
    return body


def request_settings(request: Request) -> Settings:
    """The server defaults with this request's x-test-* timing headers (every local LLM
    server here takes them); BadRequest for a bad header or too long a generation."""
    defaults: Settings = request.app.state.settings
    first = _header_num(request, "x-test-first-token-ms", float, 0.0, MAX_DELAY_S * 1000)
    interval = _header_num(request, "x-test-token-interval-ms", float, 0.0, MAX_DELAY_S * 1000)
    count = _header_num(request, "x-test-tokens", int, 0, MAX_TOKENS)
    settings = replace(
        defaults,
        first_token_delay=defaults.first_token_delay if first is None else first / 1000,
        token_interval=defaults.token_interval if interval is None else interval / 1000,
        tokens=defaults.tokens if count is None else count,
    )
    n = settings.tokens
    if settings.first_token_delay + max(n - 1, 0) * settings.token_interval > MAX_GENERATION_S:
        raise BadRequest(400, f"a generation may last at most {MAX_GENERATION_S:.0f} s")
    return settings


def plan_for(request: Request, body: dict, required: str, cap: int | None) -> Plan:
    """Check the request, then merge the server defaults with the x-test-* headers."""
    status = _header_num(request, "x-test-status", int, 100, 599)
    if status is not None and status >= 400:
        raise BadRequest(status, f"forced error status {status} (x-test-status)",
                         code="forced_error")
    model = body.get("model")
    if not isinstance(model, str) or not model:
        raise BadRequest(400, "you must provide a model parameter", param="model")
    if required not in body:
        raise BadRequest(400, f"Missing required parameter: '{required}'.", param=required,
                         code="missing_required_parameter")
    if model.startswith("missing"):
        err = BadRequest(404, f"The model `{model}` does not exist or you do not have "
                              "access to it.", code="model_not_found", param="model")
        err.model = model
        raise err
    settings = request_settings(request)
    n = settings.tokens
    truncated = isinstance(cap, int) and not isinstance(cap, bool) and 0 <= cap < n
    if truncated:
        n = cap
    role_chunk = request.headers.get("x-test-role-chunk", "empty")
    if role_chunk not in ("empty", "omit", "none"):
        raise BadRequest(400, "x-test-role-chunk must be empty, omit or none")
    return Plan(settings, n, truncated, model,
                request.headers.get("x-test-response-model", model), role_chunk)


def dumps(obj) -> str:
    return json.dumps(obj, separators=(",", ":"))


def sse(obj, event: str | None = None) -> bytes:
    head = f"event: {event}\n" if event else ""
    data = obj if isinstance(obj, str) else dumps(obj)
    return f"{head}data: {data}\n\n".encode()


SSE_HEADERS = {"cache-control": "no-cache", "x-accel-buffering": "no"}


def sse_response(events: AsyncIterator[bytes], media_type: str = "text/event-stream"
                 ) -> StreamingResponse:
    return StreamingResponse(events, media_type=media_type,
                             headers={**SSE_HEADERS, "x-request-id": uuid.uuid4().hex})


def json_response(obj: dict, status: int = 200) -> Response:
    return Response(dumps(obj), status_code=status, media_type="application/json",
                    headers={"x-request-id": uuid.uuid4().hex})


def openai_error(err: BadRequest) -> Response:
    kind = {401: "authentication_error", 404: "invalid_request_error",
            429: "rate_limit_exceeded"}.get(err.status, "invalid_request_error"
                                             if err.status < 500 else "server_error")
    return json_response({"error": {"message": err.message, "type": kind, "param": err.param,
                                    "code": err.code}}, err.status)


def usage_obj(prompt: int, completion: int) -> dict:
    return {"prompt_tokens": prompt, "completion_tokens": completion,
            "total_tokens": prompt + completion}


# --- OpenAI chat completions -------------------------------------------------------------

async def chat_completions(request: Request) -> Response:
    t0 = asyncio.get_running_loop().time()
    try:
        body = await read_json(request)
        cap = body.get("max_completion_tokens", body.get("max_tokens"))
        plan = plan_for(request, body, "messages", cap)
    except BadRequest as err:
        return openai_error(err)
    prompt = prompt_tokens(body.get("messages"))
    finish = "length" if plan.truncated else "stop"
    cid, created = f"chatcmpl-{uuid.uuid4().hex[:24]}", int(time.time())
    if not body.get("stream"):
        await plan.wait_all(t0)
        return json_response({
            "id": cid, "object": "chat.completion", "created": created,
            "model": plan.response_model, "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [{"index": 0, "message": {"role": "assistant", "content": plan.text,
                                                 "refusal": None, "annotations": []},
                         "logprobs": None, "finish_reason": finish}],
            "usage": usage_obj(prompt, plan.tokens), "service_tier": "default",
        })
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    def chunk(delta: dict, finish_reason: str | None = None) -> bytes:
        obj = {"id": cid, "object": "chat.completion.chunk", "created": created,
               "model": plan.response_model, "service_tier": "default",
               "system_fingerprint": SYSTEM_FINGERPRINT,
               "choices": [{"index": 0, "delta": delta, "logprobs": None,
                            "finish_reason": finish_reason}]}
        if include_usage:
            obj["usage"] = None
        return sse(obj)

    async def events() -> AsyncIterator[bytes]:
        if plan.role_chunk == "empty":
            yield chunk({"role": "assistant", "content": "", "refusal": None})
        elif plan.role_chunk == "omit":
            yield chunk({"role": "assistant"})
        async for _, text in plan.tokens_at_times(t0):
            yield chunk({"content": text})
        yield chunk({}, finish)
        if include_usage:
            await asyncio.sleep(0)
            yield sse({"id": cid, "object": "chat.completion.chunk", "created": created,
                       "model": plan.response_model, "service_tier": "default",
                       "system_fingerprint": SYSTEM_FINGERPRINT, "choices": [],
                       "usage": usage_obj(prompt, plan.tokens)})
        await asyncio.sleep(0)
        yield sse("[DONE]")

    return sse_response(events())


# --- OpenAI legacy completions -----------------------------------------------------------

async def completions(request: Request) -> Response:
    t0 = asyncio.get_running_loop().time()
    try:
        body = await read_json(request)
        plan = plan_for(request, body, "prompt", body.get("max_tokens"))
    except BadRequest as err:
        return openai_error(err)
    prompt = prompt_tokens(body.get("prompt"))
    finish = "length" if plan.truncated else "stop"
    cid, created = f"cmpl-{uuid.uuid4().hex[:24]}", int(time.time())
    if not body.get("stream"):
        await plan.wait_all(t0)
        return json_response({
            "id": cid, "object": "text_completion", "created": created,
            "model": plan.response_model, "system_fingerprint": SYSTEM_FINGERPRINT,
            "choices": [{"text": plan.text, "index": 0, "logprobs": None,
                         "finish_reason": finish}],
            "usage": usage_obj(prompt, plan.tokens),
        })
    include_usage = bool((body.get("stream_options") or {}).get("include_usage"))

    def chunk(text: str, finish_reason: str | None = None) -> bytes:
        obj = {"id": cid, "object": "text_completion", "created": created,
               "choices": [{"text": text, "index": 0, "logprobs": None,
                            "finish_reason": finish_reason}],
               "model": plan.response_model, "system_fingerprint": SYSTEM_FINGERPRINT}
        if include_usage:
            obj["usage"] = None
        return sse(obj)

    async def events() -> AsyncIterator[bytes]:
        async for _, text in plan.tokens_at_times(t0):
            yield chunk(text)
        yield chunk("", finish)
        if include_usage:
            await asyncio.sleep(0)
            yield sse({"id": cid, "object": "text_completion", "created": created,
                       "choices": [], "model": plan.response_model,
                       "system_fingerprint": SYSTEM_FINGERPRINT,
                       "usage": usage_obj(prompt, plan.tokens)})
        await asyncio.sleep(0)
        yield sse("[DONE]")

    return sse_response(events())


# --- OpenAI embeddings -------------------------------------------------------------------

def embedding(text: str, dims: int) -> list[float]:
    out: list[float] = []
    seed = text.encode()
    block = 0
    while len(out) < dims:  # bounded: dims <= 4096, 16 floats per block
        digest = hashlib.sha256(seed + block.to_bytes(4, "little")).digest()
        out.extend(round(v / 65535 * 2 - 1, 6) for v in struct.unpack("<16H", digest))
        block += 1
    return out[:dims]


async def embeddings(request: Request) -> Response:
    try:
        body = await read_json(request)
        plan_for(request, body, "input", None)
        dims = body.get("dimensions") or DEFAULT_DIMENSIONS
        if not isinstance(dims, int) or not 1 <= dims <= 4096:
            raise BadRequest(400, "dimensions must be an integer in [1, 4096]",
                             param="dimensions")
    except BadRequest as err:
        return openai_error(err)
    raw = body["input"]
    inputs = [raw] if isinstance(raw, str) or (
        isinstance(raw, list) and raw and all(isinstance(v, int) for v in raw)) else list(raw)
    data = []
    for i, item in enumerate(inputs[:10_000]):
        vec = embedding(item if isinstance(item, str) else dumps(item), dims)
        if body.get("encoding_format") == "base64":
            value: object = base64.b64encode(struct.pack(f"<{dims}f", *vec)).decode()
        else:
            value = vec
        data.append({"object": "embedding", "index": i, "embedding": value})
    prompt = prompt_tokens(inputs)
    return json_response({"object": "list", "data": data, "model": body["model"],
                          "usage": {"prompt_tokens": prompt, "total_tokens": prompt}})


# --- Anthropic messages ------------------------------------------------------------------

def anthropic_error(err: BadRequest) -> Response:
    kind = {400: "invalid_request_error", 401: "authentication_error",
            404: "not_found_error", 429: "rate_limit_error", 529: "overloaded_error"
            }.get(err.status, "invalid_request_error" if err.status < 500 else "api_error")
    return json_response({"type": "error", "error": {"type": kind, "message": err.message}},
                         err.status)


async def messages(request: Request) -> Response:
    t0 = asyncio.get_running_loop().time()
    try:
        body = await read_json(request)
        plan = plan_for(request, body, "messages", body.get("max_tokens"))
    except BadRequest as err:
        return anthropic_error(err)
    prompt = prompt_tokens(body.get("system"), body.get("messages"))
    stop = "max_tokens" if plan.truncated else "end_turn"
    mid = f"msg_{uuid.uuid4().hex[:24]}"
    if not body.get("stream"):
        await plan.wait_all(t0)
        return json_response({
            "id": mid, "type": "message", "role": "assistant", "model": plan.response_model,
            "content": [{"type": "text", "text": plan.text}], "stop_reason": stop,
            "stop_sequence": None,
            "usage": {"input_tokens": prompt, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": plan.tokens},
        })

    async def events() -> AsyncIterator[bytes]:
        # message_start's output_tokens is 1 on api.anthropic.com too; the final count is
        # the cumulative output_tokens of message_delta
        yield sse({"type": "message_start", "message": {
            "id": mid, "type": "message", "role": "assistant", "model": plan.response_model,
            "content": [], "stop_reason": None, "stop_sequence": None,
            "usage": {"input_tokens": prompt, "cache_creation_input_tokens": 0,
                      "cache_read_input_tokens": 0, "output_tokens": 1}}}, "message_start")
        await asyncio.sleep(0)
        yield sse({"type": "content_block_start", "index": 0,
                   "content_block": {"type": "text", "text": ""}}, "content_block_start")
        await asyncio.sleep(0)
        yield sse({"type": "ping"}, "ping")
        async for _, text in plan.tokens_at_times(t0):
            yield sse({"type": "content_block_delta", "index": 0,
                       "delta": {"type": "text_delta", "text": text}}, "content_block_delta")
        yield sse({"type": "content_block_stop", "index": 0}, "content_block_stop")
        await asyncio.sleep(0)
        yield sse({"type": "message_delta", "delta": {"stop_reason": stop,
                                                      "stop_sequence": None},
                   "usage": {"output_tokens": plan.tokens}}, "message_delta")
        await asyncio.sleep(0)
        yield sse({"type": "message_stop"}, "message_stop")

    return sse_response(events())


# --- Ollama chat -------------------------------------------------------------------------

def ollama_error(err: BadRequest) -> Response:
    message = err.message
    if err.code == "model_not_found":
        message = f'model "{getattr(err, "model", "")}" not found, try pulling it first'
    return json_response({"error": message}, err.status)


def rfc3339_now() -> str:
    t = time.time()
    return time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e9):09d}Z"


async def ollama_chat(request: Request) -> Response:
    t0 = asyncio.get_running_loop().time()
    t0_ns = time.monotonic_ns()
    try:
        body = await read_json(request)
        options = body.get("options") or {}
        plan = plan_for(request, body, "messages", options.get("num_predict"))
    except BadRequest as err:
        return ollama_error(err)
    prompt = prompt_tokens(body.get("messages"))
    done_reason = "length" if plan.truncated else "stop"
    first_ns = int(plan.settings.first_token_delay * 1e9)

    def final(content: str) -> dict:
        total = time.monotonic_ns() - t0_ns
        return {"model": plan.response_model, "created_at": rfc3339_now(),
                "message": {"role": "assistant", "content": content},
                "done_reason": done_reason, "done": True, "total_duration": total,
                "load_duration": 0, "prompt_eval_count": prompt,
                "prompt_eval_duration": first_ns, "eval_count": plan.tokens,
                "eval_duration": max(0, total - first_ns)}

    if body.get("stream") is False:  # Ollama streams unless told not to
        await plan.wait_all(t0)
        return json_response(final(plan.text))

    async def lines() -> AsyncIterator[bytes]:
        async for _, text in plan.tokens_at_times(t0):
            yield (dumps({"model": plan.response_model, "created_at": rfc3339_now(),
                          "message": {"role": "assistant", "content": text},
                          "done": False}) + "\n").encode()
        yield (dumps(final("")) + "\n").encode()

    return StreamingResponse(lines(), media_type="application/x-ndjson")


# --- misc --------------------------------------------------------------------------------

async def models(request: Request) -> Response:
    return json_response({"object": "list", "data": [
        {"id": "test-model", "object": "model", "created": 0, "owned_by": "otel-ebpf"}]})


async def health(request: Request) -> Response:
    return JSONResponse({"status": "ok"})


async def not_found(request: Request, exc) -> Response:
    return openai_error(BadRequest(404, f"Invalid URL ({request.method} {request.url.path})"))


def create_app(settings: Settings | None = None) -> Starlette:
    app = Starlette(
        routes=[
            Route("/v1/chat/completions", chat_completions, methods=["POST"]),
            Route("/v1/completions", completions, methods=["POST"]),
            Route("/v1/embeddings", embeddings, methods=["POST"]),
            Route("/v1/messages", messages, methods=["POST"]),
            Route("/api/chat", ollama_chat, methods=["POST"]),
            Route("/v1/models", models),
            Route("/health", health),
        ],
        exception_handlers={404: not_found},
    )
    app.state.settings = settings or Settings()
    return app


app = create_app()  # `uvicorn tests.support.openai_server:app` with the default settings


# --- running it in its own process -------------------------------------------------------

REPO = Path(__file__).resolve().parents[2]


@dataclass
class RunningServer:
    port: int
    proc: subprocess.Popen
    log: Path

    scheme: str = "http"

    @property
    def base_url(self) -> str:
        """For openai.OpenAI(base_url=...): includes /v1."""
        return f"{self.scheme}://127.0.0.1:{self.port}/v1"

    @property
    def root_url(self) -> str:
        return f"{self.scheme}://127.0.0.1:{self.port}"


@contextlib.contextmanager
def openai_server(first_token_delay: float = 0.2, token_interval: float = 0.05,
                  tokens: int = 10, port: int | None = None, log: Path | None = None,
                  env: dict | None = None, start_timeout_s: float = 20.0,
                  tls: tuple[Path, Path, Path] | None = None) -> Iterator[RunningServer]:
    """Start the server with `python -m tests.support.openai_server` and wait (bounded)
    until /health answers; stop it on exit. `tls`: (certificate, key, CA that signed
    them): serve HTTPS."""
    with server_process("tests.support.openai_server", first_token_delay, token_interval,
                        tokens, port, log, env, start_timeout_s, tls) as server:
        yield server


@contextlib.contextmanager
def server_process(module: str, first_token_delay: float = 0.2, token_interval: float = 0.05,
                   tokens: int = 10, port: int | None = None, log: Path | None = None,
                   env: dict | None = None, start_timeout_s: float = 20.0,
                   tls: tuple[Path, Path, Path] | None = None) -> Iterator[RunningServer]:
    """Run `python -m module --port N` with the timing options (every local LLM server
    here takes them) and wait, bounded, until its /health answers."""
    import urllib.request

    settings = Settings(first_token_delay, token_interval, tokens)
    port = port or free_port()
    name = module.rpartition(".")[2]
    if log is None:
        fd, path = __import__("tempfile").mkstemp(prefix=f"{name}-", suffix=".log")
        os.close(fd)
        log = Path(path)
    with log.open("w") as out:
        proc = subprocess.Popen(
            [sys.executable, "-m", module, "--port", str(port),
             "--first-token-delay", str(settings.first_token_delay),
             "--token-interval", str(settings.token_interval), "--tokens", str(settings.tokens),
             *(["--ssl-certfile", str(tls[0]), "--ssl-keyfile", str(tls[1])] if tls else [])],
            cwd=REPO, stdout=out, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})},
        )
    try:
        deadline = time.monotonic() + start_timeout_s
        while True:
            if proc.poll() is not None:
                raise RuntimeError(f"{name} exited with {proc.returncode}:\n"
                                   f"{log.read_text()[-2000:]}")
            try:
                scheme = "https" if tls else "http"
                context = ssl.create_default_context(cafile=str(tls[2])) if tls else None
                with urllib.request.urlopen(f"{scheme}://127.0.0.1:{port}/health", timeout=1,
                                            context=context):
                    break
            except OSError:
                if time.monotonic() > deadline:
                    raise TimeoutError(f"{name} not up on {port} after "
                                       f"{start_timeout_s}s") from None
                time.sleep(0.05)
        yield RunningServer(port, proc, log, "https" if tls else "http")
    finally:
        stop_process(proc)


def app_for(settings: Settings, routes: list[Route], **state) -> Starlette:
    """A Starlette app with these routes and /health, the settings and `state` on it."""
    app = Starlette(routes=[*routes, Route("/health", health)])
    app.state.settings = settings
    for name, value in state.items():
        setattr(app.state, name, value)
    return app


def serve(app_factory, argv: list[str] | None = None, description: str = "") -> None:
    """The command line every local LLM server here shares: port, timing, TLS."""
    import uvicorn

    parser = argparse.ArgumentParser(description=description)
    parser.add_argument("--port", type=int, required=True)
    parser.add_argument("--first-token-delay", type=float, default=Settings.first_token_delay,
                        help="seconds from request to first content token")
    parser.add_argument("--token-interval", type=float, default=Settings.token_interval,
                        help="seconds between content tokens")
    parser.add_argument("--tokens", type=int, default=Settings.tokens,
                        help="content tokens per answer")
    parser.add_argument("--access-log", action="store_true")
    parser.add_argument("--ssl-certfile", help="serve HTTPS with this certificate (PEM)")
    parser.add_argument("--ssl-keyfile", help="... and this private key (PEM)")
    args = parser.parse_args(argv)
    settings = Settings(min(max(args.first_token_delay, 0.0), MAX_DELAY_S),
                        min(max(args.token_interval, 0.0), MAX_DELAY_S),
                        min(max(args.tokens, 0), MAX_TOKENS))
    uvicorn.run(app_factory(settings), host="127.0.0.1", port=args.port,
                log_level="info" if args.access_log else "warning",
                access_log=args.access_log, ssl_certfile=args.ssl_certfile,
                ssl_keyfile=args.ssl_keyfile)


def main(argv: list[str] | None = None) -> None:
    serve(create_app, argv, __doc__.split("\n\n")[0])


if __name__ == "__main__":
    main()
