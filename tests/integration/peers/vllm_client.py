"""Calls to a real vLLM server made by the `openai` SDK, one process per run: chat
completions as JSON, streamed with and without include_usage, and several streams at once.
Prints one JSON line per call with what vLLM answered (its id, usage, finish reason, the
content chunks the client saw), so a test can hold the agent's spans against it.

    python -m tests.integration.peers.vllm_client BASE_URL MODEL CALL [CALL...]

A CALL is `json`, `stream`, `stream-usage` or `concurrent-N` (N streams with usage, all
started together on one event loop, so vLLM batches them), all chat completions, or
`text-stream` (a legacy text completion, streamed with usage).
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import openai

MESSAGES = [{"role": "user", "content": "Say hello from the kernel"}]
PROMPT = "The agent reads every socket"
# min_tokens keeps the random weights from ending on the stop token at once (a stream of
# one chunk has no time per token); the stop token may still end it before max_tokens
SAMPLING = {"max_tokens": 16, "temperature": 0.8, "extra_body": {"min_tokens": 4}}
API_KEY = "sk-test-SECRET-never-exported"
MAX_CONCURRENT = 16


def _emit(kind: str, t0: int, **extra) -> None:
    print(json.dumps({"kind": kind, "t0": t0, "t1": time.time_ns(), **extra}), flush=True)


async def _consume(kind: str, t0: int, stream, text) -> None:
    """Read a stream to its end; `text(choice)` is a choice's new text (chat or legacy)."""
    chunks, finish, ident, reported = 0, None, None, None
    async for chunk in stream:
        ident = chunk.id
        if chunk.usage is not None:
            reported = chunk.usage.model_dump(include={"prompt_tokens", "completion_tokens"})
        for choice in chunk.choices:
            chunks += bool(text(choice))
            finish = choice.finish_reason or finish
    _emit(kind, t0, id=ident, chunks=chunks, finish_reason=finish, usage=reported)


async def _stream(client: openai.AsyncOpenAI, model: str, kind: str, usage: bool) -> None:
    t0 = time.time_ns()
    options = {"stream_options": {"include_usage": True}} if usage else {}
    stream = await client.chat.completions.create(model=model, messages=MESSAGES,
                                                  stream=True, **SAMPLING, **options)
    await _consume(kind, t0, stream, lambda choice: choice.delta.content)


async def _text_stream(client: openai.AsyncOpenAI, model: str) -> None:
    t0 = time.time_ns()
    stream = await client.completions.create(model=model, prompt=PROMPT, stream=True,
                                             stream_options={"include_usage": True},
                                             **SAMPLING)
    await _consume("text-stream", t0, stream, lambda choice: choice.text)


async def _json(client: openai.AsyncOpenAI, model: str) -> None:
    t0 = time.time_ns()
    reply = await client.chat.completions.create(model=model, messages=MESSAGES, **SAMPLING)
    _emit("json", t0, id=reply.id, finish_reason=reply.choices[0].finish_reason,
          usage=reply.usage.model_dump(include={"prompt_tokens", "completion_tokens"}))


async def run(base_url: str, model: str, calls: list[str]) -> None:
    async with openai.AsyncOpenAI(base_url=base_url, api_key=API_KEY, max_retries=0,
                                  timeout=120) as client:
        for call in calls:
            if call == "json":
                await _json(client, model)
            elif call in ("stream", "stream-usage"):
                await _stream(client, model, call, usage=call == "stream-usage")
            elif call == "text-stream":
                await _text_stream(client, model)
            elif call.startswith("concurrent-"):
                n = int(call.partition("-")[2])
                if not 1 <= n <= MAX_CONCURRENT:
                    raise SystemExit(f"concurrent-N: N from 1 to {MAX_CONCURRENT}, not {n}")
                await asyncio.gather(*(_stream(client, model, call, usage=True)
                                       for _ in range(n)))
            else:
                raise SystemExit(f"unknown call {call!r}")


if __name__ == "__main__":
    if len(sys.argv) < 4:
        raise SystemExit(__doc__)
    asyncio.run(run(sys.argv[1], sys.argv[2], sys.argv[3:]))
