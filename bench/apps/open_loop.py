"""An open-loop HTTP/1.1 load generator: RATE requests/s at scheduled times, per-request
latency measured from the scheduled time (so a stalled server is not hidden by a client
that waits for it: no coordinated omission).

    python bench/apps/open_loop.py --port 8000 --rate 1000 --seconds 10 [--warmup 1]
        [--connections 32] [--grace 5]

Request i is due at t0 + i/RATE. It is sent on the next idle keep-alive connection (a
FIFO over --connections connections opened before t0; when none is idle it waits in a
queue, and that wait is part of its latency). Latency = response fully read - due time;
lag = sent - due time (the generator's own lateness, waiting for a connection included).
One thread, blocking sockets read only when select() says so (select's timeout is in
microseconds, unlike epoll's milliseconds). The first --warmup seconds of requests are
sent but not recorded. Bounded: RATE * (WARMUP + SECONDS) requests, and everything stops
--grace seconds after the last is due; what is unanswered then counts as unfinished.

Prints one JSON line: counts, latency and lag percentiles in microseconds, CPU seconds.
"""

from __future__ import annotations

import argparse
import ctypes
import json
import math
import os
import random
import select
import socket
import sys
import time
from collections import deque

MAX_CONNECTIONS = 256
MAX_REQUESTS = 1_000_000
PR_SET_TIMERSLACK = 29  # prctl(2)


def percentile(sorted_values: list[float], q: float) -> float | None:
    """Nearest-rank percentile of an ascending list (None when empty)."""
    if not sorted_values:
        return None
    return sorted_values[max(0, math.ceil(q / 100 * len(sorted_values)) - 1)]


def connect(port: int) -> socket.socket:
    s = socket.create_connection(("127.0.0.1", port), timeout=5)
    s.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
    s.settimeout(5)  # only read when select() says readable, write small requests
    return s


class Conn:
    __slots__ = ("sock", "index", "due", "sent", "buf", "need")

    def __init__(self, sock: socket.socket) -> None:
        self.sock = sock
        self.index = -1
        self.due = self.sent = 0.0
        self.buf = bytearray()
        self.need = -1  # bytes of the whole response once its headers are in

    def response_done(self) -> bool | None:
        """True when a whole response is buffered; None when it is malformed."""
        if self.need < 0:
            end = self.buf.find(b"\r\n\r\n")
            if end < 0:
                return False
            head = bytes(self.buf[:end]).lower()
            at = head.find(b"\r\ncontent-length:")
            if at < 0 or not head.startswith(b"http/1.1 "):
                return None
            length = int(head[at + 17:].split(b"\r\n", 1)[0])
            self.need = end + 4 + length
        return len(self.buf) >= self.need


def run(port: int, rate: float, seconds: float, warmup: float, connections: int,
        grace: float, path: str, keys: int, seed: int) -> dict:
    rng = random.Random(seed)
    n_warm, n_measured = int(rate * warmup), int(rate * seconds)
    total = n_warm + n_measured
    host = f"127.0.0.1:{port}".encode()
    requests = [b"GET " + path.format(rng.randint(1, keys)).encode() + b" HTTP/1.1\r\nHost: "
                + host + b"\r\nUser-Agent: otel-ebpf-open-loop\r\n\r\n" for _ in range(256)]
    conns = [Conn(connect(port)) for _ in range(connections)]
    by_fd = {c.sock.fileno(): c for c in conns}
    idle: deque[Conn] = deque(conns)
    busy: dict[int, Conn] = {}
    waiting: deque[int] = deque()  # due request indexes with no idle connection yet
    latencies: list[float] = []
    lags: list[float] = []
    statuses: dict[str, int] = {}
    errors = 0
    cpu0 = time.process_time()
    t0 = time.perf_counter() + 0.05
    interval = 1.0 / rate
    last_due = t0 + (total - 1) * interval
    hard_stop = last_due + grace
    next_i = 0

    def fail(c: Conn) -> None:
        nonlocal errors
        errors += 1
        busy.pop(c.sock.fileno(), None)
        by_fd.pop(c.sock.fileno(), None)
        c.sock.close()
        fresh = Conn(connect(port))
        by_fd[fresh.sock.fileno()] = fresh
        idle.append(fresh)

    while True:
        now = time.perf_counter()
        while next_i < total and t0 + next_i * interval <= now:
            waiting.append(next_i)
            next_i += 1
        while waiting and idle:
            i = waiting.popleft()
            c = idle.popleft()
            c.index, c.due, c.buf, c.need = i, t0 + i * interval, bytearray(), -1
            c.sent = time.perf_counter()
            try:
                c.sock.sendall(requests[i % len(requests)])
            except OSError:
                fail(c)
                continue
            busy[c.sock.fileno()] = c
        if next_i >= total and not waiting and not busy:
            break
        if now > hard_stop:
            break
        timeout = max(0.0, min(0.05, t0 + next_i * interval - time.perf_counter())) \
            if next_i < total else 0.05
        ready, _, _ = select.select(list(busy), [], [], timeout)
        for fd in ready:
            c = busy[fd]
            try:
                chunk = c.sock.recv(65536)
            except OSError:
                chunk = b""
            if not chunk:
                fail(c)
                continue
            c.buf += chunk
            done = c.response_done()
            if done is None:
                fail(c)
            elif done:
                end = time.perf_counter()
                status = bytes(c.buf[9:12]).decode("ascii", "replace")
                statuses[status] = statuses.get(status, 0) + 1
                if c.index >= n_warm:
                    latencies.append(end - c.due)
                    lags.append(c.sent - c.due)
                del busy[fd]
                idle.append(c)
    elapsed = time.perf_counter() - t0
    answered = sum(statuses.values())
    for c in [*idle, *busy.values()]:
        c.sock.close()
    latencies.sort()
    lags.sort()
    us = 1e6

    def pct(values: list[float], q: float) -> float | None:
        v = percentile(values, q)
        return None if v is None else round(v * us, 1)

    return {
        "rate": rate, "sent": next_i - len(waiting), "due": total, "answered": answered,
        "errors": errors, "unfinished": total - answered - errors, "statuses": statuses,
        "measured": len(latencies),
        "p50_us": pct(latencies, 50), "p90_us": pct(latencies, 90),
        "p99_us": pct(latencies, 99), "p999_us": pct(latencies, 99.9),
        "max_us": round(latencies[-1] * us, 1) if latencies else None,
        "lag_p50_us": pct(lags, 50), "lag_p99_us": pct(lags, 99),
        "elapsed_s": round(elapsed, 3), "cpu_s": round(time.process_time() - cpu0, 3),
        "pid": os.getpid(),
    }


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--port", type=int, required=True)
    ap.add_argument("--rate", type=float, required=True, help="requests per second")
    ap.add_argument("--seconds", type=float, default=10.0, help="measured seconds")
    ap.add_argument("--warmup", type=float, default=1.0, help="unrecorded seconds first")
    ap.add_argument("--connections", type=int, default=32)
    ap.add_argument("--grace", type=float, default=5.0,
                    help="seconds to wait for answers after the last request is due")
    ap.add_argument("--path", default="/items/{}", help="{} is replaced by a key")
    ap.add_argument("--keys", type=int, default=1000, help="keys drawn from 1..KEYS")
    ap.add_argument("--seed", type=int, default=1)
    args = ap.parse_args()
    try:  # wake up when due, not up to 50 µs later (the default timer slack)
        ctypes.CDLL(None, use_errno=True).prctl(PR_SET_TIMERSLACK, 1, 0, 0, 0)
    except (OSError, AttributeError):
        pass
    if not 0 < args.rate * (args.seconds + args.warmup) <= MAX_REQUESTS:
        ap.error(f"rate * (seconds + warmup) must be 1..{MAX_REQUESTS}")
    if not 1 <= args.connections <= MAX_CONNECTIONS or not 0 < args.grace <= 60:
        ap.error(f"--connections must be 1..{MAX_CONNECTIONS} and --grace 0..60")
    print(json.dumps(run(args.port, args.rate, args.seconds, args.warmup, args.connections,
                         args.grace, args.path, args.keys, args.seed)))
    return 0


if __name__ == "__main__":
    sys.exit(main())
