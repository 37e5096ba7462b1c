"""Streaming chat completions through an LLM gateway, made by the `openai` SDK in its own
process: COUNT streams (with include_usage), at most CONCURRENCY at once on one event
loop. Prints one JSON line per call with what came back (the response id, the model, the
content chunks, the usage, the finish reason) so a test can hold the agent's spans
against it.

    python -m tests.integration.peers.gateway_client BASE_URL API_KEY MODEL COUNT CONCURRENCY
"""

from __future__ import annotations

import asyncio
import json
import sys
import time

import openai

MESSAGES = [{"role": "user", "content": "Say hello through the gateway"}]
MAX_TOKENS = 64
MAX_CALLS, MAX_CONCURRENCY = 256, 32
CALL_TIMEOUT_S = 60.0  # the openai client's own timeout, and the bound on one whole call


async def one(client: openai.AsyncOpenAI, model: str, n: int, gate: asyncio.Semaphore) -> dict:
    async with gate:
        t0 = time.time_ns()
        chunks, finish, ident, served_by, usage = 0, None, None, None, None
        stream = await client.chat.completions.create(
            model=model, messages=MESSAGES, stream=True, max_tokens=MAX_TOKENS,
            stream_options={"include_usage": True})
        async for chunk in stream:
            ident, served_by = chunk.id, chunk.model
            if chunk.usage is not None:
                usage = chunk.usage.model_dump(include={"prompt_tokens", "completion_tokens"})
            for choice in chunk.choices:
                chunks += bool(choice.delta.content)
                finish = choice.finish_reason or finish
        return {"call": n, "t0": t0, "t1": time.time_ns(), "id": ident, "model": served_by,
                "chunks": chunks, "finish_reason": finish, "usage": usage}


async def run(base_url: str, api_key: str, model: str, count: int, concurrency: int) -> None:
    gate = asyncio.Semaphore(concurrency)
    async with openai.AsyncOpenAI(base_url=base_url, api_key=api_key, max_retries=0,
                                  timeout=CALL_TIMEOUT_S) as client:
        calls = [asyncio.wait_for(one(client, model, n, gate), CALL_TIMEOUT_S * count)
                 for n in range(count)]
        for answer in await asyncio.gather(*calls):
            print(json.dumps(answer), flush=True)


def main(argv: list[str]) -> None:
    if len(argv) != 5:
        raise SystemExit(__doc__)
    base_url, api_key, model = argv[:3]
    count, concurrency = int(argv[3]), int(argv[4])
    if not (1 <= count <= MAX_CALLS and 1 <= concurrency <= MAX_CONCURRENCY):
        raise SystemExit(f"COUNT 1..{MAX_CALLS}, CONCURRENCY 1..{MAX_CONCURRENCY}")
    asyncio.run(run(base_url, api_key, model, count, concurrency))


if __name__ == "__main__":
    main(sys.argv[1:])
