"""The service bench/app_overhead.py measures: FastAPI, three endpoints, a little real work.

GET /items/{item_id} (`async def`) looks the item up in an in-memory catalogue (a dict of
1,000) and returns it as JSON (about 200 bytes); an unknown id is a 404. GET
/sync/items/{item_id} does the same in a `def` endpoint (FastAPI runs it on anyio's thread
pool). GET /hop/items/{item_id} is a middle hop: it fetches the item from an upstream
(OTEL_BENCH_UPSTREAM, another instance of this app) with a shared httpx.AsyncClient and
returns it. Run by uvicorn:

    .venv/bin/uvicorn bench.apps.fastapi_app:app --host 127.0.0.1 --port 8000

With OTEL_BENCH_SDK_TRACES=PATH in its environment the app instruments itself with the
OpenTelemetry Python SDK, the way a service owner would: FastAPIInstrumentor.instrument_app
with a TracerProvider whose BatchSpanProcessor (1 s schedule delay, the agent's batch
timeout; the SDK's default queue of 2,048 and batches of 512, the agent's defaults too)
exports to the repository's OTLP/JSON file exporter at PATH, the sink otel-ebpf writes to
in the traced mode. The instrumentation's defaults are kept: a SERVER span per request and
two INTERNAL spans for the ASGI `http send` messages (response start and body).
"""

from __future__ import annotations

import os

import httpx
from fastapi import FastAPI, HTTPException

CURRENCIES = ("EUR", "USD", "GBP", "JPY")
CATALOGUE: dict[int, dict] = {
    i: {
        "id": i,
        "sku": f"SKU-{i:06d}",
        "name": f"Widget {i}",
        "price": round(3.5 + (i * 37 % 1000) / 10, 2),
        "currency": CURRENCIES[i % len(CURRENCIES)],
        "stock": i * 13 % 250,
        "tags": ["hardware", "blue" if i % 2 else "red", f"batch-{i % 17}"],
        "description": "A small widget for benchmarks, shipped in a cardboard box.",
    }
    for i in range(1, 1001)
}

app = FastAPI(title="otel-ebpf bench app", docs_url=None, redoc_url=None, openapi_url=None)


@app.get("/items/{item_id}")
async def get_item(item_id: int) -> dict:
    item = CATALOGUE.get(item_id)
    if item is None:
        raise HTTPException(status_code=404, detail="no such item")
    return item


@app.get("/sync/items/{item_id}")
def get_item_sync(item_id: int) -> dict:
    item = CATALOGUE.get(item_id)
    if item is None:
        raise HTTPException(status_code=404, detail="no such item")
    return item


_upstream: httpx.AsyncClient | None = None


@app.get("/hop/items/{item_id}")
async def get_item_hop(item_id: int) -> dict:
    global _upstream
    if _upstream is None:  # created on the loop that serves (one keep-alive pool)
        _upstream = httpx.AsyncClient(base_url=os.environ["OTEL_BENCH_UPSTREAM"])
    r = await _upstream.get(f"/items/{item_id}")
    if r.status_code != 200:
        raise HTTPException(status_code=r.status_code, detail="upstream")
    return r.json()


if _sdk_traces := os.environ.get("OTEL_BENCH_SDK_TRACES"):
    from opentelemetry.instrumentation.fastapi import FastAPIInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    from otel_ebpf.export.file import FileSpanExporter

    # shutdown_on_exit (the default) flushes the queue when uvicorn exits on SIGTERM
    provider = TracerProvider(resource=Resource.create({"service.name": "bench-fastapi-app"}))
    provider.add_span_processor(BatchSpanProcessor(FileSpanExporter(_sdk_traces),
                                                   schedule_delay_millis=1000))
    FastAPIInstrumentor.instrument_app(app, tracer_provider=provider)
