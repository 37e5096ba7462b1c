"""The correlation benchmark's services and load generator, one per process, picked by argv:

    python -m bench.correlation.services gateway|rag|embedder|vectordb|llm
    python -m gunicorn -w 2 -k sync 'bench.correlation.services:make_legacy()'
    python -m bench.correlation.services loadgen --requests N --concurrency C --deadline S

Ports come from BENCH_PORTS (JSON: service -> port), the ground-truth folder from
BENCH_TRUTH_DIR. Every request carries a fresh rid as `X-Bench-Rid` and as `?rid=`; the
caller writes one ground-truth line per request it makes (see `Truth.child`).
"""

from __future__ import annotations

import argparse
import asyncio
import hashlib
import json
import os
import sys
import threading
import time
import uuid
from pathlib import Path

PORTS: dict[str, int] = json.loads(os.environ.get("BENCH_PORTS", "{}"))
TIMEOUT_S = 30.0  # per request, everywhere
SSE_CHUNKS = 6
SSE_GAP_S = 0.003


class Truth:
    """Ground-truth lines of one service: one JSON line per request it makes, in its own
    file per process (gunicorn forks workers) so lines never interleave between processes."""

    def __init__(self, service: str) -> None:
        self.service = service
        self.lock = threading.Lock()
        self.pid = 0
        self.file = None

    def child(self, parent_rid: str | None, shape: str, target: str) -> str:
        rid = uuid.uuid4().hex
        line = json.dumps({"rid": rid, "parent_rid": parent_rid, "service": self.service,
                           "shape": shape, "target": target}) + "\n"
        with self.lock:
            if self.pid != os.getpid():  # opened lazily, after any fork
                self.pid = os.getpid()
                path = Path(os.environ["BENCH_TRUTH_DIR"]) / f"{self.service}-{self.pid}.jsonl"
                self.file = path.open("a", buffering=1)
            self.file.write(line)
        return rid


def url(service: str, path: str, rid: str, **query: object) -> str:
    extra = "".join(f"&{k}={v}" for k, v in query.items())
    return f"http://127.0.0.1:{PORTS[service]}{path}?rid={rid}{extra}"


def headers(rid: str) -> dict[str, str]:
    return {"X-Bench-Rid": rid}


def fake_embedding(text: str) -> list[float]:
    return [round(b / 255, 4) for b in hashlib.sha256(text.encode()).digest()[:16]]


# ---- gateway: async def endpoint, one shared httpx.AsyncClient (asyncio shape) ----------

def _fastapi():
    """FastAPI, or None where it cannot be imported (its pydantic_core has no wheel for the
    interpreter): the gateway and rag then run on Starlette, which FastAPI is built on. The
    shapes are the same: an `async def` endpoint runs in the request's task, a `def` one in
    the threadpool through `run_in_threadpool` (anyio's `to_thread`, a copied Context)."""
    try:
        from fastapi import FastAPI
    except ImportError:
        return None
    return FastAPI


def _starlette(routes: list):
    from starlette.applications import Starlette

    return Starlette(routes=routes)


# the event loop of each uvicorn service (BENCH_LOOP): asyncio's, uvloop (what
# `uvicorn[standard]`, LiteLLM and vLLM run), or mixed: the gateway and llm on uvloop, rag,
# embedder and vectordb on asyncio
LOOPS = ("asyncio", "uvloop", "mixed")
MIXED_UVLOOP = {"gateway", "llm"}
# the gateway's HTTP client (BENCH_GATEWAY_CLIENT): httpx or aiohttp, one shared each
CLIENTS = ("httpx", "aiohttp")


def loop_of(service: str, loops: str) -> str:
    """The event loop `service` runs under the topology's choice `loops`."""
    if loops == "mixed":
        return "uvloop" if service in MIXED_UVLOOP else "asyncio"
    return loops


def _httpx_get_post():
    """(get, post) coroutines over one shared httpx.AsyncClient: each returns the JSON."""
    import httpx

    client: dict[str, httpx.AsyncClient] = {}

    def http() -> httpx.AsyncClient:
        if "c" not in client:
            client["c"] = httpx.AsyncClient(
                timeout=TIMEOUT_S, limits=httpx.Limits(max_connections=200))
        return client["c"]

    async def get(target: str, hdrs: dict) -> dict:
        r = await http().get(target, headers=hdrs)
        r.raise_for_status()
        return r.json()

    async def post(target: str, body: dict, hdrs: dict) -> dict:
        r = await http().post(target, json=body, headers=hdrs)
        r.raise_for_status()
        return r.json()

    return get, post


def _aiohttp_get_post():
    """(get, post) coroutines over one shared aiohttp.ClientSession (made in the loop)."""
    import aiohttp

    session: dict[str, aiohttp.ClientSession] = {}

    def http() -> aiohttp.ClientSession:
        if "s" not in session:
            session["s"] = aiohttp.ClientSession(
                timeout=aiohttp.ClientTimeout(total=TIMEOUT_S),
                connector=aiohttp.TCPConnector(limit=200))
        return session["s"]

    async def get(target: str, hdrs: dict) -> dict:
        async with http().get(target, headers=hdrs) as r:
            r.raise_for_status()
            return await r.json()

    async def post(target: str, body: dict, hdrs: dict) -> dict:
        async with http().post(target, json=body, headers=hdrs) as r:
            r.raise_for_status()
            return await r.json()

    return get, post


def make_gateway():
    FastAPI = _fastapi()  # noqa: N806

    truth = Truth("gateway")
    client = os.environ.get("BENCH_GATEWAY_CLIENT", "httpx")
    get, post = _aiohttp_get_post() if client == "aiohttp" else _httpx_get_post()

    async def ask(rid: str, q: str = "hello", legacy: int = 0) -> dict:
        child = truth.child(rid, "asyncio", "rag")
        out = {"answer": (await post(url("rag", "/rag", child), {"q": q},
                                     headers(child)))["answer"]}
        if legacy:
            child = truth.child(rid, "asyncio", "legacy")
            out["legacy"] = await get(url("legacy", "/legacy", child), headers(child))
        return out

    if FastAPI is None:  # Starlette alone: the request's task runs the endpoint all the same
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        async def endpoint(request):
            q = request.query_params
            return JSONResponse(await ask(q["rid"], q.get("q", "hello"),
                                          int(q.get("legacy", 0))))

        return _starlette([Route("/ask", endpoint)])
    app = FastAPI()
    app.get("/ask")(ask)
    return app


# ---- rag: sync def endpoint (FastAPI's threadpool), requests per thread (threadpool shape) --

def make_rag():
    import requests

    FastAPI = _fastapi()  # noqa: N806
    truth = Truth("rag")
    local = threading.local()

    def session() -> requests.Session:
        if not hasattr(local, "s"):  # requests.Session is not thread-safe: one per thread
            local.s = requests.Session()
        return local.s

    def rag(rid: str, body: dict) -> dict:
        s = session()
        child = truth.child(rid, "threadpool", "embedder")
        r = s.post(url("embedder", "/embed", child), json={"text": body.get("q", "")},
                   headers=headers(child), timeout=TIMEOUT_S)
        r.raise_for_status()
        vector = r.json()["embedding"]
        child = truth.child(rid, "threadpool", "vectordb")
        r = s.post(url("vectordb", "/query", child), json={"vector": vector, "top_k": 3},
                   headers=headers(child), timeout=TIMEOUT_S)
        r.raise_for_status()
        docs = r.json()["documents"]
        child = truth.child(rid, "threadpool", "llm")
        prompt = {"model": "bench-llm", "stream": True, "messages": [
            {"role": "system", "content": " ".join(d["text"] for d in docs)},
            {"role": "user", "content": body.get("q", "")}]}
        words = []
        with s.post(url("llm", "/v1/chat/completions", child), json=prompt,
                    headers=headers(child), timeout=TIMEOUT_S, stream=True) as r:
            r.raise_for_status()
            for line in r.iter_lines():
                if line.startswith(b"data: ") and line != b"data: [DONE]":
                    delta = json.loads(line[6:])["choices"][0]["delta"]
                    words.append(delta.get("content", ""))
        return {"answer": "".join(words)}

    if FastAPI is None:  # Starlette alone: a `def` endpoint runs in its threadpool too
        from starlette.concurrency import run_in_threadpool
        from starlette.responses import JSONResponse
        from starlette.routing import Route

        async def endpoint(request):
            body = await request.json()
            return JSONResponse(await run_in_threadpool(rag, request.query_params["rid"],
                                                        body))

        return _starlette([Route("/rag", endpoint, methods=["POST"])])
    from fastapi import Body

    app = FastAPI()

    @app.post("/rag")
    def rag_endpoint(rid: str, body: dict = Body(...)) -> dict:  # noqa: B008
        return rag(rid, body)

    return app


# ---- leaves: embedder, vectordb, llm (no downstream calls) ---------------------------------

def make_embedder():
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def embed(request):
        body = await request.json()
        return JSONResponse({"embedding": fake_embedding(str(body.get("text", "")))})

    return Starlette(routes=[Route("/embed", embed, methods=["POST"])])


def make_vectordb():
    from starlette.applications import Starlette
    from starlette.responses import JSONResponse
    from starlette.routing import Route

    async def query(request):
        body = await request.json()
        seed = int(sum(body.get("vector", [])) * 1000)
        docs = [{"id": f"doc-{(seed + i) % 997}", "score": 1 - i / 10,
                 "text": f"document {(seed + i) % 997}"} for i in range(int(body.get("top_k", 3)))]
        return JSONResponse({"documents": docs})

    return Starlette(routes=[Route("/query", query, methods=["POST"])])


def make_llm():
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    async def completions(request):
        body = await request.json()
        model = body.get("model", "bench-llm")

        async def events():
            for i in range(SSE_CHUNKS):
                chunk = {"id": "chatcmpl-bench", "object": "chat.completion.chunk",
                         "model": model, "choices": [{"index": 0, "delta": {"content": f"w{i} "},
                                                      "finish_reason": None}]}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
                await asyncio.sleep(SSE_GAP_S)
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route("/v1/chat/completions", completions, methods=["POST"])])


# ---- legacy: Flask under gunicorn sync workers (reading-thread shape) ----------------------

def make_legacy():
    import requests
    from flask import Flask, request

    truth = Truth("legacy")
    session = requests.Session()  # a sync worker handles one request at a time
    app = Flask("legacy")

    @app.get("/legacy")
    def legacy() -> dict:
        child = truth.child(request.args["rid"], "thread", "embedder")
        r = session.post(url("embedder", "/embed", child), json={"text": "legacy"},
                         headers=headers(child), timeout=TIMEOUT_S)
        r.raise_for_status()
        return {"dims": len(r.json()["embedding"])}

    return app


# ---- load generator: roots, from its own process -------------------------------------------

def loadgen(requests_n: int, concurrency: int, deadline_s: float, legacy_every: int) -> dict:
    """Sends `requests_n` requests to the gateway from `concurrency` threads, stopping early
    at the deadline; each request is a root (parent_rid null) with a fresh rid."""
    import requests

    truth = Truth("loadgen")
    lock = threading.Lock()
    state = {"next": 0, "ok": 0, "errors": 0, "first_error": ""}
    stop_at = time.monotonic() + deadline_s

    def worker() -> None:
        s = requests.Session()
        while time.monotonic() < stop_at:
            with lock:
                i = state["next"]
                if i >= requests_n:
                    return
                state["next"] += 1
            rid = truth.child(None, "root", "gateway")
            legacy = int(legacy_every > 0 and i % legacy_every == 0)
            try:
                r = s.get(url("gateway", "/ask", rid, q=f"question-{i}", legacy=legacy),
                          headers=headers(rid), timeout=TIMEOUT_S)
                r.raise_for_status()
                with lock:
                    state["ok"] += 1
            except Exception as e:  # counted and reported: the load must go on
                with lock:
                    state["errors"] += 1
                    state["first_error"] = state["first_error"] or repr(e)[:300]

    t0 = time.monotonic()
    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    join_until = stop_at + TIMEOUT_S + 5  # no request starts after stop_at; each has a timeout
    for t in threads:
        t.join(max(0.0, join_until - time.monotonic()))
    elapsed = time.monotonic() - t0
    return {"sent": state["next"], "ok": state["ok"], "errors": state["errors"],
            "first_error": state["first_error"], "elapsed_s": round(elapsed, 3),
            "timed_out": time.monotonic() >= stop_at and state["next"] < requests_n}


APPS = {"gateway": make_gateway, "rag": make_rag, "embedder": make_embedder,
        "vectordb": make_vectordb, "llm": make_llm}


def main(argv: list[str] | None = None) -> None:
    p = argparse.ArgumentParser(prog="python -m bench.correlation.services")
    p.add_argument("service", choices=[*APPS, "loadgen"])
    p.add_argument("--requests", type=int, default=200)
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--deadline", type=float, default=120.0)
    p.add_argument("--legacy-every", type=int, default=3)
    a = p.parse_args(argv)
    if a.service == "loadgen":
        print(json.dumps(loadgen(a.requests, a.concurrency, a.deadline, a.legacy_every)))
        sys.stdout.flush()
        return
    import uvicorn

    loop = loop_of(a.service, os.environ.get("BENCH_LOOP", "asyncio"))
    uvicorn.run(APPS[a.service](), host="127.0.0.1", port=PORTS[a.service], loop=loop,
                log_level="warning", access_log=False)


if __name__ == "__main__":
    main()
