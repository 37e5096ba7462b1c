"""The demo's inference path, two ASGI apps run by uvicorn, each in its own process:

    gateway  GET /ask?q=...  -> POST rag /answer
    rag      POST /answer    -> Chroma query (the question's embedding) -> a streaming chat
                                completion from the LLM server, the passages as context

`uvicorn demo.services:gateway` / `demo.services:rag`; the addresses of the next hop come
from RAG_URL, CHROMA_URL and LLM_URL. The embedding is a hash of the words (no model to
download): close enough for the demo's few passages, and it keeps the path real (the
vector DB is queried over its HTTP API, the LLM over the OpenAI API)."""

from __future__ import annotations

import hashlib
import math
import os

import httpx
from fastapi import FastAPI
from openai import AsyncOpenAI
from pydantic import BaseModel

DIM = 16
PASSAGES = {
    "ebpf": "eBPF programs run in the kernel and see every socket call of every process.",
    "otlp": "OTLP is OpenTelemetry's protocol for traces, metrics and profiles.",
    "ros2": "ROS 2 nodes talk over DDS, whose RTPS messages carry each sample's identity.",
    "phoenix": "Phoenix shows LLM calls with their prompts, tokens and latencies.",
}
CHROMA = "/api/v2/tenants/default_tenant/databases/default_database/collections"


def embed(text: str) -> list[float]:
    vec = [0.0] * DIM
    for word in text.lower().split():
        h = hashlib.sha256(word.strip(".,?!").encode()).digest()
        vec[h[0] % DIM] += 1.0
    norm = math.sqrt(sum(v * v for v in vec)) or 1.0
    return [v / norm for v in vec]


class Question(BaseModel):
    q: str


gateway = FastAPI(title="demo gateway")
rag = FastAPI(title="demo rag")
_collection: dict[str, str] = {}


@gateway.get("/ask")
async def ask(q: str) -> dict:
    async with httpx.AsyncClient(base_url=os.environ["RAG_URL"], timeout=60) as client:
        resp = await client.post("/answer", json={"q": q})
        resp.raise_for_status()
        return resp.json()


async def _docs(client: httpx.AsyncClient) -> str:
    """The collection's id, made and filled on first use."""
    if "id" not in _collection:
        made = await client.post(CHROMA, json={"name": "docs", "get_or_create": True})
        made.raise_for_status()
        cid = made.json()["id"]
        ids = list(PASSAGES)
        added = await client.post(f"{CHROMA}/{cid}/add", json={
            "ids": ids, "embeddings": [embed(PASSAGES[i]) for i in ids],
            "documents": [PASSAGES[i] for i in ids], "metadatas": None, "uris": None})
        added.raise_for_status()
        _collection["id"] = cid
    return _collection["id"]


@rag.post("/answer")
async def answer(question: Question) -> dict:
    async with httpx.AsyncClient(base_url=os.environ["CHROMA_URL"], timeout=30) as chroma:
        cid = await _docs(chroma)
        found = await chroma.post(f"{CHROMA}/{cid}/query", json={
            "query_embeddings": [embed(question.q)], "n_results": 2,
            "include": ["documents", "distances"]})
        found.raise_for_status()
    context = " ".join(found.json()["documents"][0])
    llm = AsyncOpenAI(base_url=os.environ["LLM_URL"] + "/v1", api_key="demo-key")
    stream = await llm.chat.completions.create(
        model="demo-7b", stream=True, stream_options={"include_usage": True},
        messages=[{"role": "system", "content": "Answer from the context: " + context},
                  {"role": "user", "content": question.q}])
    text = ""
    async for chunk in stream:
        if chunk.choices and chunk.choices[0].delta.content:
            text += chunk.choices[0].delta.content
    await llm.close()
    return {"question": question.q, "context": context, "answer": text}
