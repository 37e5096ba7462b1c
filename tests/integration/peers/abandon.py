"""Connections opened and abandoned, each side its own process:

  python -m tests.integration.peers.abandon server PORT W   # W processes (SO_REUSEPORT) accept, read, never answer
  python -m tests.integration.peers.abandon client PORT N   # N connections, a request on each
  python -m tests.integration.peers.abandon flood PORT W SIZE   # one connection, W writes of SIZE bytes

A process may hold fewer than 20,000 files here (RLIMIT_NOFILE, and no CAP_SYS_RESOURCE to
raise it), so tests spread many connections over several clients and server processes.
The server prints "serving" once it listens. The client prints {"opened": N, "open_s": S}
once every connection is open and its request written, then waits (bounded) for a line on
stdin and exits without closing anything: the kernel closes them, as for a crashed client.
"""

from __future__ import annotations

import json
import os
import selectors
import signal
import socket
import sys
import time

HOLD_LIMIT_S = 300.0


def server(port: int, workers: int) -> None:
    for _ in range(workers - 1):  # the kernel spreads connections over the listeners
        if os.fork() == 0:
            break
    listener = socket.socket()
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    listener.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEPORT, 1)
    listener.bind(("127.0.0.1", port))
    listener.listen(4096)
    listener.setblocking(False)
    sel = selectors.DefaultSelector()
    sel.register(listener, selectors.EVENT_READ)
    held: list[socket.socket] = []
    signal.signal(signal.SIGTERM, lambda *_: os._exit(0))
    print("serving", flush=True)
    deadline = time.monotonic() + HOLD_LIMIT_S
    while time.monotonic() < deadline:
        for key, _ in sel.select(1.0):
            if key.fileobj is listener:
                while True:
                    try:
                        conn, _ = listener.accept()
                    except BlockingIOError:
                        break
                    conn.setblocking(False)
                    held.append(conn)
                    sel.register(conn, selectors.EVENT_READ)
            else:
                try:
                    if not key.fileobj.recv(65536):  # type: ignore[union-attr]
                        sel.unregister(key.fileobj)
                        key.fileobj.close()  # type: ignore[union-attr]
                except OSError:
                    sel.unregister(key.fileobj)


def client(port: int, n: int) -> None:
    start = time.monotonic()
    conns = []
    for i in range(n):
        s = socket.create_connection(("127.0.0.1", port), timeout=10)
        s.sendall(b"GET /abandoned/%d HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n" % i)
        conns.append(s)
    print(json.dumps({"opened": len(conns), "open_s": round(time.monotonic() - start, 2)}),
          flush=True)
    signal.signal(signal.SIGALRM, lambda *_: os._exit(0))
    signal.alarm(int(HOLD_LIMIT_S))
    sys.stdin.readline()
    os._exit(0)  # nothing closed by hand: abandoned


def flood(port: int, writes: int, size: int) -> None:
    """One connection, `writes` writes of `size` bytes as fast as the socket takes them."""
    chunk = b"x" * size
    start = time.monotonic()
    with socket.create_connection(("127.0.0.1", port), timeout=10) as s:
        s.sendall(b"POST /flood HTTP/1.1\r\nHost: h\r\nContent-Length: %d\r\n\r\n"
                  % (writes * size))
        for _ in range(writes):
            s.sendall(chunk)
    print(json.dumps({"writes": writes, "seconds": round(time.monotonic() - start, 3)}),
          flush=True)


if __name__ == "__main__":
    if sys.argv[1] == "flood":
        flood(int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]))
        sys.exit(0)
    if sys.argv[1] == "server":
        server(int(sys.argv[2]), int(sys.argv[3]))
    else:
        client(int(sys.argv[2]), int(sys.argv[3]))
