"""A real ASGI app for the integration tests (run by uvicorn in its own process)."""

import asyncio

from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, PlainTextResponse, StreamingResponse
from starlette.routing import Route


async def item(request: Request) -> JSONResponse:
    return JSONResponse({"id": request.path_params["item_id"], "ok": True})


async def echo(request: Request) -> PlainTextResponse:
    body = await request.body()
    return PlainTextResponse(f"got {len(body)} bytes")


async def boom(request: Request) -> PlainTextResponse:
    return PlainTextResponse("internal failure", status_code=500)


async def stream(request: Request) -> StreamingResponse:
    async def chunks():
        for i in range(5):
            yield f"chunk {i}\n".encode()
            await asyncio.sleep(0.01)

    return StreamingResponse(chunks(), media_type="text/plain")


async def big(request: Request) -> PlainTextResponse:
    return PlainTextResponse("x" * int(request.query_params.get("n", "200000")))


app = Starlette(routes=[
    Route("/items/{item_id}", item),
    Route("/echo/{tag}", echo, methods=["POST"]),
    Route("/boom/{tag}", boom),
    Route("/stream/{tag}", stream),
    Route("/big/{tag}", big),
])
