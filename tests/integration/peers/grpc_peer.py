"""A real gRPC server and client (grpcio, generic handlers on raw bytes: no generated code),
each run as its own process:

  python -m tests.integration.peers.grpc_peer server PORT
  python -m tests.integration.peers.grpc_peer client 127.0.0.1:PORT CALL... [--wait FILE CALL...]

The server prints "serving" once it listens. A CALL is KIND:METHOD[:N]: unary:Say, unary:Fail
(NOT_FOUND with a message), stream:Count:N (N responses), bidi:Chat:N (N each way),
client:Sum:N (N requests). The client prints one JSON line per call, {"call", "method",
"code", "responses", "t0", "t1"}, wall-clock ns around it; `--wait FILE` prints "waiting",
then waits (bounded) for FILE to exist before the calls after it, on the same channel.
"""

from __future__ import annotations

import json
import os
import signal
import sys
import threading
import time
from concurrent import futures

import grpc

SERVICE = "test.Echo"
NOT_FOUND_MESSAGE = "no such key: k1"
WAIT_LIMIT_S = 60.0


def _say(request: bytes, context) -> bytes:
    return b"hello " + request


def _fail(request: bytes, context) -> bytes:
    context.abort(grpc.StatusCode.NOT_FOUND, NOT_FOUND_MESSAGE)


def _count(request: bytes, context):
    for i in range(int(request or b"1")):
        yield b"item %d" % i


def _chat(requests, context):
    for message in requests:
        yield b"re: " + message


def _sum(requests, context) -> bytes:
    return b"%d" % sum(len(m) for m in requests)


def serve(port: int) -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    server.add_generic_rpc_handlers((grpc.method_handlers_generic_handler(SERVICE, {
        "Say": grpc.unary_unary_rpc_method_handler(_say),
        "Fail": grpc.unary_unary_rpc_method_handler(_fail),
        "Count": grpc.unary_stream_rpc_method_handler(_count),
        "Chat": grpc.stream_stream_rpc_method_handler(_chat),
        "Sum": grpc.stream_unary_rpc_method_handler(_sum),
    }),))
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("serving", flush=True)
    stop.wait()
    server.stop(grace=1).wait(5)


def _call(channel: grpc.Channel, spec: str) -> dict:
    kind, name, *rest = spec.split(":")
    n = int(rest[0]) if rest else 1
    method = f"/{SERVICE}/{name}"
    code, responses = "OK", 0
    t0 = time.time_ns()
    try:
        if kind == "unary":
            channel.unary_unary(method)(b"world", timeout=10)
            responses = 1
        elif kind == "stream":
            responses = sum(1 for _ in channel.unary_stream(method)(b"%d" % n, timeout=10))
        elif kind == "bidi":
            messages = (b"m%d" % i for i in range(n))
            responses = sum(1 for _ in channel.stream_stream(method)(messages, timeout=10))
        elif kind == "client":
            channel.stream_unary(method)((b"x" * i for i in range(n)), timeout=10)
            responses = 1
        else:
            raise SystemExit(f"unknown call kind {kind!r}")
    except grpc.RpcError as exc:
        code = exc.code().name
    t1 = time.time_ns()
    return {"call": spec, "method": method, "code": code, "responses": responses, "t0": t0,
            "t1": t1}


def client(target: str, specs: list[str]) -> None:
    options = [("grpc.enable_http_proxy", 0)]
    with grpc.insecure_channel(target, options=options) as channel:
        grpc.channel_ready_future(channel).result(timeout=10)
        i = 0
        while i < len(specs):
            if specs[i] == "--wait":
                print("waiting", flush=True)
                deadline = time.monotonic() + WAIT_LIMIT_S
                while not os.path.exists(specs[i + 1]):
                    if time.monotonic() > deadline:
                        raise SystemExit("nobody said go")
                    time.sleep(0.05)
                i += 2
                continue
            print(json.dumps(_call(channel, specs[i])), flush=True)
            time.sleep(0.05)  # calls apart in time: tests tell spans apart by their windows
            i += 1


if __name__ == "__main__":
    if sys.argv[1] == "server":
        serve(int(sys.argv[2]))
    else:
        client(sys.argv[2], sys.argv[3:])
