"""Open-loop load of gRPC unary calls for bench/agent_capacity.py.

    python bench/capacity/grpc_load.py PORT RATE SECONDS [--conns 16]

Call n (0-based) is due at t0 + n/RATE and goes out on channel n % --conns (grpcio, one
channel and one thread per connection, one call in flight on each: a call that finds its
channel busy goes out late and the achieved rate drops below the offered one). Each call
is `test.Echo/Say` of tests/integration/peers/grpc_peer.py (a unary call on raw bytes,
answered "hello world"). No call starts after SECONDS; each has a 10 s deadline.
Prints one JSON line: completed, rate (completed per second of the window), errors,
p99_ms, cpu_s (this process's user+system time).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import threading
import time

import grpc

METHOD = "/test.Echo/Say"
CALL_TIMEOUT_S = 10.0


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("port", type=int)
    ap.add_argument("rate", type=float)
    ap.add_argument("seconds", type=float)
    ap.add_argument("--conns", type=int, default=16)
    args = ap.parse_args()
    if args.rate <= 0 or args.seconds <= 0 or args.conns < 1:
        raise SystemExit("rate and seconds must be > 0, conns >= 1")
    options = [("grpc.enable_http_proxy", 0)]
    channels = [grpc.insecure_channel(f"127.0.0.1:{args.port}", options=options)
                for _ in range(args.conns)]
    for channel in channels:
        grpc.channel_ready_future(channel).result(timeout=10)
    calls = [channel.unary_unary(METHOD) for channel in channels]
    total = int(args.rate * args.seconds)
    latencies: list[list[float]] = [[] for _ in channels]
    errors = [0] * len(channels)
    c0 = os.times()
    t0 = time.monotonic() + 0.05

    def run(k: int) -> None:
        call = calls[k]
        for n in range(k, total, len(calls)):
            due = t0 + n / args.rate
            delay = due - time.monotonic()
            if delay > 0:
                time.sleep(delay)
            start = time.monotonic()
            try:
                call(b"world", timeout=CALL_TIMEOUT_S)
            except grpc.RpcError:
                errors[k] += 1
                continue
            latencies[k].append(time.monotonic() - start)

    threads = [threading.Thread(target=run, args=(k,)) for k in range(len(calls))]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    window = time.monotonic() - t0
    c1 = os.times()
    done = sorted(x for per in latencies for x in per)
    for channel in channels:
        channel.close()
    print(json.dumps({
        "completed": len(done), "rate": len(done) / window if window > 0 else 0.0,
        "errors": sum(errors),
        "p99_ms": 1000 * done[min(len(done) - 1, int(0.99 * len(done)))] if done else None,
        "p50_ms": 1000 * statistics.median(done) if done else None,
        "cpu_s": (c1.user - c0.user) + (c1.system - c0.system)}))


if __name__ == "__main__":
    main()
