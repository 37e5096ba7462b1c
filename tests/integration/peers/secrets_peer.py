"""Peers that carry planted secrets in every place a header can be: HTTP/1 (uvicorn +
requests), HTTP/2 h2c (hypercorn + httpx), gRPC metadata (grpcio), each its own process.

  python -m tests.integration.peers.secrets_peer http-server PORT | h2-server PORT | grpc-server PORT
  python -m tests.integration.peers.secrets_peer http-client URL | h2-client URL | grpc-client HOST:PORT

Servers print "serving" once they listen. Clients print one JSON line per call with its
status. Every value holding MARKER must never reach an exporter; VISIBLE values must (they
prove that headers and queries were captured at all).
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import threading
from concurrent import futures

# request side: header -> value (every one of them is a secret by name)
REQUEST_SECRETS = {
    "authorization": "Bearer sk-PLANTED-auth-7f3a",
    "proxy-authorization": "Basic PLANTED-proxy-91c2",
    "cookie": "sid=PLANTED-cookie-55de",
    "x-api-key": "PLANTED-apikey-0b8e",
    "x-goog-api-key": "PLANTED-googkey-4c1d",
    "x-auth-token": "PLANTED-token-a9f0",
    "x-csrf-token": "PLANTED-csrf-13e7",
}
# response side: Set-Cookie and a token header the server sends back
RESPONSE_SECRETS = {
    "set-cookie": "session=PLANTED-setcookie-ee21; HttpOnly",
    "x-refresh-token": "PLANTED-refresh-6d4b",
}
QUERY = ("q=VISIBLE-query-value&api_key=PLANTED-qkey-c3a8&session=PLANTED-qsession-77b0"
         "&password=PLANTED-qpassword-19ab&key=PLANTED-qkey2-5e11")
REQUEST_BODY = b'{"password": "PLANTED-reqbody-2f6c"}'
RESPONSE_BODY = b'{"access_token": "PLANTED-respbody-d85a"}'
MARKER = "PLANTED"  # inside every secret value above: no exported byte may contain it
VISIBLE = {"x-visible": "VISIBLE-header-value"}  # a plain header, captured with capture_headers
PATH = "/login"
GRPC_METHOD = "/test.Secrets/Login"


async def app(scope, receive, send) -> None:
    """A bare ASGI app: reads the body, answers with secret headers and a secret body."""
    if scope["type"] != "http":
        return
    more = True
    while more:
        message = await receive()
        more = message.get("more_body", False)
    headers = [(k.encode(), v.encode()) for k, v in {**RESPONSE_SECRETS, **VISIBLE}.items()]
    headers += [(b"content-type", b"application/json"),
                (b"content-length", str(len(RESPONSE_BODY)).encode())]
    await send({"type": "http.response.start", "status": 200, "headers": headers})
    await send({"type": "http.response.body", "body": RESPONSE_BODY})


def http_server(port: int) -> None:
    import uvicorn

    print("serving", flush=True)  # uvicorn binds at once; the test waits for the port
    uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning", access_log=False)


def h2_server(port: int) -> None:
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    config = Config()
    config.bind = [f"127.0.0.1:{port}"]
    config.accesslog = None

    async def main() -> None:
        stop = asyncio.Event()
        asyncio.get_running_loop().add_signal_handler(signal.SIGTERM, stop.set)
        task = asyncio.create_task(serve(app, config, shutdown_trigger=stop.wait))
        await asyncio.sleep(0.2)
        print("serving", flush=True)
        await task

    asyncio.run(main())


def _login(request: bytes, context) -> bytes:
    context.send_initial_metadata(tuple(RESPONSE_SECRETS.items()) + tuple(VISIBLE.items()))
    context.set_trailing_metadata((("x-session-token", "PLANTED-grpctrailer-90aa"),))
    return RESPONSE_BODY


def grpc_server(port: int) -> None:
    import grpc

    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler("test.Secrets", {
        "Login": grpc.unary_unary_rpc_method_handler(_login)}),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("serving", flush=True)
    stop.wait()
    server.stop(grace=1).wait(5)


def _headers() -> dict[str, str]:
    return {**REQUEST_SECRETS, **VISIBLE}


def http_client(base: str) -> None:
    import requests

    with requests.Session() as s:
        for _ in range(2):  # two exchanges on one keep-alive connection
            r = s.post(f"{base}{PATH}?{QUERY}", data=REQUEST_BODY, headers=_headers(), timeout=10)
            print(json.dumps({"status": r.status_code}), flush=True)


def h2_client(base: str) -> None:
    import httpx

    with httpx.Client(http1=False, http2=True, timeout=10) as c:
        for _ in range(2):
            r = c.post(f"{base}{PATH}?{QUERY}", content=REQUEST_BODY, headers=_headers())
            print(json.dumps({"status": r.status_code, "http_version": r.http_version}), flush=True)


def grpc_client(target: str) -> None:
    import grpc

    with grpc.insecure_channel(target, options=[("grpc.enable_http_proxy", 0)]) as channel:
        grpc.channel_ready_future(channel).result(timeout=10)
        call = channel.unary_unary(GRPC_METHOD)
        for _ in range(2):
            # gRPC metadata keys are lower case; "authorization" is what call credentials send
            _, info = call.with_call(REQUEST_BODY, metadata=tuple(_headers().items()), timeout=10)
            print(json.dumps({"status": info.code().name}), flush=True)


if __name__ == "__main__":
    role, arg = sys.argv[1], sys.argv[2]
    {"http-server": lambda: http_server(int(arg)), "h2-server": lambda: h2_server(int(arg)),
     "grpc-server": lambda: grpc_server(int(arg)), "http-client": lambda: http_client(arg),
     "h2-client": lambda: h2_client(arg), "grpc-client": lambda: grpc_client(arg)}[role]()
