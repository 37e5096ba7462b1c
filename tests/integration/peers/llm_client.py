"""LLM API calls made by real clients, one process per run: the `openai` SDK (sync and
async, streaming or not, with or without include_usage) and plain httpx for bodies shaped
the way other clients shape them (model last, after a long prompt). Prints one JSON line
per call: what was called, and the wall-clock times around it.

    python -m tests.integration.peers.llm_client BASE_URL CALL [CALL...]

A CALL is `kind:model`, kinds below; the model name is unique per test so spans can be
found by it. Timing headers go to tests/support/openai_server.py.
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import httpx
import openai

MESSAGES = [{"role": "user", "content": "Say hello"}]
HEADERS = {"x-test-first-token-ms": "300", "x-test-token-interval-ms": "40", "x-test-tokens": "8"}


def _emit(kind: str, model: str, t0: int, t1: int, **extra) -> None:
    print(json.dumps({"kind": kind, "model": model, "t0": t0, "t1": t1, **extra}), flush=True)


def _stream_options(kind: str) -> dict:
    return {"stream_options": {"include_usage": True}} if kind.endswith("usage") else {}


def sync_call(base_url: str, kind: str, model: str) -> None:
    client = openai.OpenAI(base_url=base_url, api_key="sk-test-SECRET-never-exported",
                           max_retries=0, timeout=30)
    t0 = time.time_ns()
    if kind.startswith("sync-stream"):
        chunks = 0
        for chunk in client.chat.completions.create(
                model=model, messages=MESSAGES, stream=True, extra_headers=HEADERS,
                max_tokens=64, temperature=0.5, **_stream_options(kind)):
            chunks += bool(chunk.choices and chunk.choices[0].delta.content)
        _emit(kind, model, t0, time.time_ns(), chunks=chunks)
    elif kind == "sync-json":
        reply = client.chat.completions.create(model=model, messages=MESSAGES,
                                               extra_headers=HEADERS, max_tokens=64)
        _emit(kind, model, t0, time.time_ns(), id=reply.id,
              output_tokens=reply.usage.completion_tokens)
    elif kind == "embeddings":
        reply = client.embeddings.create(model=model, input=["one two three", "four"])
        _emit(kind, model, t0, time.time_ns(), input_tokens=reply.usage.prompt_tokens)
    elif kind == "error":
        try:
            client.chat.completions.create(model="missing-" + model, messages=MESSAGES)
        except openai.NotFoundError:
            pass
        _emit(kind, model, t0, time.time_ns())
    else:
        raise SystemExit(f"unknown call kind {kind!r}")


async def async_call(base_url: str, kind: str, model: str) -> None:
    client = openai.AsyncOpenAI(base_url=base_url, api_key="sk-test-SECRET-never-exported",
                                max_retries=0, timeout=30)
    t0 = time.time_ns()
    if kind.startswith("async-stream"):
        stream = await client.chat.completions.create(
            model=model, messages=MESSAGES, stream=True, extra_headers=HEADERS,
            **_stream_options(kind))
        chunks = 0
        async for chunk in stream:
            chunks += bool(chunk.choices and chunk.choices[0].delta.content)
        _emit(kind, model, t0, time.time_ns(), chunks=chunks)
    else:
        reply = await client.chat.completions.create(model=model, messages=MESSAGES,
                                                     extra_headers=HEADERS)
        _emit(kind, model, t0, time.time_ns(), id=reply.id)
    await client.close()


def long_prompt_call(base_url: str, kind: str, model: str) -> None:
    """A 200 KiB prompt, the model named only after it (as other SDKs order the keys)."""
    prompt = "word " * (200 * 1024 // 5)
    body = json.dumps({"messages": [{"role": "user", "content": prompt}], "model": model,
                       "stream": True, "stream_options": {"include_usage": True}})
    t0 = time.time_ns()
    with httpx.Client(timeout=30) as client, client.stream(
            "POST", base_url + "/chat/completions", content=body,
            headers={"content-type": "application/json", **HEADERS}) as response:
        for _ in response.iter_bytes():
            pass
    _emit(kind, model, t0, time.time_ns(), body_bytes=len(body))


def main(argv: list[str]) -> None:
    base_url, calls = argv[0], argv[1:]
    for call in calls:
        kind, _, model = call.partition(":")
        if kind.startswith("async"):
            asyncio.run(async_call(base_url, kind, model))
        elif kind == "long-prompt":
            long_prompt_call(base_url, kind, model)
        else:
            sync_call(base_url, kind, model)


if __name__ == "__main__":
    main(sys.argv[1:])
