"""Plain HTTP/2 peers, each its own process, over h2c with prior knowledge (no TLS, no
Upgrade): hypercorn serving the test ASGI app (peers/http_app.py), and an httpx client.

  python -m tests.integration.peers.h2_app server PORT
  python -m tests.integration.peers.h2_app client http://127.0.0.1:PORT PATH...

The server prints "serving" once it listens. The client prints one JSON line per request,
{"path", "status", "http_version", "t0", "t1"}, wall-clock ns around it; paths starting
with /echo are POSTed a 100-byte body.
"""

from __future__ import annotations

import asyncio
import json
import signal
import sys
import time


def server(port: int) -> None:
    from hypercorn.asyncio import serve
    from hypercorn.config import Config

    from tests.integration.peers.http_app import app

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


def client(base: str, paths: list[str]) -> None:
    import httpx

    # http1=False: HTTP/2 with prior knowledge over plain text (h2c)
    with httpx.Client(http1=False, http2=True, timeout=10) as session:
        for path in paths:
            post = path.startswith("/echo")
            t0 = time.time_ns()
            resp = session.request("POST" if post else "GET", base + path,
                                   content=b"p" * 100 if post else None)
            resp.read()
            t1 = time.time_ns()
            print(json.dumps({"path": path, "status": resp.status_code,
                              "http_version": resp.http_version, "t0": t0, "t1": t1}),
                  flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "server":
        server(int(sys.argv[2]))
    else:
        client(sys.argv[2], sys.argv[3:])
