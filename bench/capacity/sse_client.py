"""Open-loop load of streaming chat completions for bench/agent_capacity.py.

    python bench/capacity/sse_client.py PORT RATE SECONDS [--conns 128] [--tokens 32]
        [--interval-ms 1] [--first-token-ms 0]

Stream n (0-based) is due at t0 + n/RATE; it goes out on an idle keep-alive connection
from a pool of --conns (raw asyncio sockets, one stream at a time per connection, so
--conns caps the concurrency; the most recently used connection first, and one the server
closed meanwhile (uvicorn's keep-alive timeout is 5 s) is replaced before use; a stream
that finds no idle connection waits, and the achieved rate drops below the offered one).
Each stream is a POST /v1/chat/completions with `"stream": true` and the
tests/support/openai_server.py timing headers (x-test-first-token-ms,
x-test-token-interval-ms, x-test-tokens); its answer is read to the chunked terminator
and its SSE events (`data: ` lines: the role, content and finish chunks and [DONE]) are
counted. No stream starts after SECONDS; those in flight get 30 s.
Prints one JSON line.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import time

STREAM_TIMEOUT_S = 30.0
END = b"\r\n0\r\n\r\n"


class Stream(asyncio.Protocol):
    """One keep-alive connection; `exchange()` sends a request and waits for the whole
    chunked answer."""

    def __init__(self) -> None:
        self.transport: asyncio.Transport | None = None
        self.buf = bytearray()
        self.waiter: asyncio.Future | None = None
        self.closed = False

    def connection_made(self, transport) -> None:
        self.transport = transport

    def data_received(self, data: bytes) -> None:
        self.buf += data
        if self.waiter is not None and not self.waiter.done() and self.buf.endswith(END):
            self.waiter.set_result(bytes(self.buf))

    def connection_lost(self, exc) -> None:
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_exception(ConnectionError("closed"))

    async def exchange(self, request: bytes) -> bytes:
        self.buf.clear()
        self.waiter = asyncio.get_running_loop().create_future()
        self.transport.write(request)
        return await asyncio.wait_for(self.waiter, STREAM_TIMEOUT_S)


def build_request(port: int, tokens: int, interval_ms: float, first_ms: float) -> bytes:
    body = json.dumps({"model": "capacity-bench", "stream": True,
                       "messages": [{"role": "user", "content": "count, please"}]}).encode()
    head = (f"POST /v1/chat/completions HTTP/1.1\r\nHost: 127.0.0.1:{port}\r\n"
            "Content-Type: application/json\r\nAccept: text/event-stream\r\n"
            f"x-test-first-token-ms: {first_ms:g}\r\nx-test-token-interval-ms: {interval_ms:g}\r\n"
            f"x-test-tokens: {tokens}\r\nContent-Length: {len(body)}\r\n\r\n")
    return head.encode() + body


async def run(args) -> dict:
    loop = asyncio.get_running_loop()
    request = build_request(args.port, args.tokens, args.interval_ms, args.first_token_ms)
    pool: asyncio.LifoQueue[Stream] = asyncio.LifoQueue()
    for _ in range(args.conns):
        _, proto = await loop.create_connection(Stream, "127.0.0.1", args.port)
        pool.put_nowait(proto)
    stats = {"started": 0, "completed": 0, "errors": 0, "events": 0, "late": 0,
             "reconnects": 0}
    last_done = [0.0]

    async def one(proto: Stream) -> None:
        try:
            answer = await proto.exchange(request)
        except (ConnectionError, TimeoutError):
            stats["errors"] += 1
            if proto.transport is not None:
                proto.transport.close()
            _, proto = await loop.create_connection(Stream, "127.0.0.1", args.port)
        else:
            if answer.startswith(b"HTTP/1.1 200"):
                stats["completed"] += 1
                stats["events"] += answer.count(b"\ndata: ")
                last_done[0] = loop.time()
            else:
                stats["errors"] += 1
        pool.put_nowait(proto)

    total = int(args.rate * args.seconds)
    tasks = set()
    c0 = time.process_time()
    t0 = loop.time()
    t_end = t0 + args.seconds
    for n in range(total):
        delay = t0 + n / args.rate - loop.time()
        if delay > 0:
            await asyncio.sleep(delay)
        if pool.empty():
            stats["late"] += 1
        try:
            proto = await asyncio.wait_for(pool.get(), max(0.0, t_end - loop.time()))
        except TimeoutError:
            break
        if loop.time() >= t_end:
            pool.put_nowait(proto)
            break
        if proto.closed:
            _, proto = await loop.create_connection(Stream, "127.0.0.1", args.port)
            stats["reconnects"] += 1
        stats["started"] += 1
        task = asyncio.create_task(one(proto))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
    if tasks:
        await asyncio.wait(set(tasks), timeout=STREAM_TIMEOUT_S)
    window = (last_done[0] or loop.time()) - t0
    while not pool.empty():
        p = pool.get_nowait()
        if p.transport is not None:
            p.transport.close()
    return {"event": "done", "offered_rate": args.rate, "planned": total, **stats,
            "window_s": round(window, 3),
            "streams_per_s": round(stats["completed"] / window, 1) if window > 0 else 0.0,
            "events_per_s": round(stats["events"] / window, 1) if window > 0 else 0.0,
            "cpu_s": round(time.process_time() - c0, 3)}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("port", type=int)
    ap.add_argument("rate", type=float, help="streams started per second")
    ap.add_argument("seconds", type=float)
    ap.add_argument("--conns", type=int, default=128)
    ap.add_argument("--tokens", type=int, default=32)
    ap.add_argument("--interval-ms", type=float, default=1.0)
    ap.add_argument("--first-token-ms", type=float, default=0.0)
    args = ap.parse_args()
    if not (0 < args.rate <= 100_000 and 0 < args.seconds <= 600 and 1 <= args.conns <= 4096):
        ap.error("rate 0..100000, seconds 0..600, conns 1..4096")
    print(json.dumps(asyncio.run(run(args))), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
