"""Short-lived clients for the end-of-connection tests: each runs N requests on one
connection, ends, and prints {"pid", "port"} (its own local port on that connection).

    python -m tests.integration.peers.short_client redis PORT N
    python -m tests.integration.peers.short_client redis-first-thread-ends PORT N
    python -m tests.integration.peers.short_client requests BASE_URL N

`redis`: N commands with redis-py (SET and GET, alternating), then the process exits at
once with the connection open (os._exit: the kernel closes it, no close call).
`redis-first-thread-ends`: the main thread opens the connection, runs the first commands
and ends itself alone (the exit syscall); a second thread, waiting for that, runs the rest
and returns, which ends the process: a process whose first thread is gone long before its
connection is done. `requests`: N GETs of /items/<i> on one keep-alive connection."""

from __future__ import annotations

import ctypes
import json
import os
import sys
import threading
import time

SYS_EXIT = 60  # x86-64: end the calling thread only (exit_group ends the process)


def report(port: int) -> None:
    # os.write: a process whose main thread is gone never flushes sys.stdout
    os.write(1, (json.dumps({"pid": os.getpid(), "port": port}) + "\n").encode())


def commands(r, start: int, stop: int) -> None:
    for i in range(start, stop):
        if i % 2 == 0:
            r.set(f"k{i}", i)
        else:
            assert r.get(f"k{i - 1}") == str(i - 1).encode()


def redis_client(port: int, n: int) -> None:
    import redis

    r = redis.Redis(host="127.0.0.1", port=port, single_connection_client=True)
    commands(r, 0, n)
    report(r.connection._sock.getsockname()[1])
    os._exit(0)


def first_thread_ends(port: int, n: int) -> None:
    import redis

    r = redis.Redis(host="127.0.0.1", port=port, single_connection_client=True)
    first = min(3, n)
    commands(r, 0, first)
    local_port = r.connection._sock.getsockname()[1]
    leader = f"/proc/self/task/{os.getpid()}/stat"

    def rest() -> None:
        deadline = time.monotonic() + 60
        while True:  # until the main thread has ended (a zombie until the process ends)
            with open(leader) as f:
                if f.read().rpartition(")")[2].split()[0] in ("Z", "X"):
                    break
            if time.monotonic() > deadline:
                os.write(2, b"the main thread did not end\n")
                os._exit(3)
            time.sleep(0.01)
        commands(r, first, n)
        report(local_port)  # the connection stays open: the process's end closes it

    threading.Thread(target=rest).start()
    ctypes.CDLL(None).syscall(SYS_EXIT, 0)


def requests_client(base: str, n: int) -> None:
    import requests

    with requests.Session() as session:
        port = 0
        for i in range(n):
            resp = session.get(f"{base}/items/{i}", stream=True)
            if not port:
                port = resp.raw.connection.sock.getsockname()[1]
            assert resp.json()["id"] == str(i)
        report(port)


if __name__ == "__main__":
    kind, target, count = sys.argv[1], sys.argv[2], int(sys.argv[3])
    if kind == "redis":
        redis_client(int(target), count)
    elif kind == "redis-first-thread-ends":
        first_thread_ends(int(target), count)
    else:
        requests_client(target, count)
