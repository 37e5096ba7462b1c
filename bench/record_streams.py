"""Records real gRPC unary calls and streamed chat completions as the bytes each end wrote,
for bench/stream_pipeline.py and the recorded-traffic span tests: a grpcio client calls
tests/integration/peers/grpc_peer.py's server, and a raw-socket client streams chat
completions from tests/support/openai_server.py (uvicorn), each through a relay on
127.0.0.1 that keeps every read of either side, in order, as one write.

    .venv/bin/python bench/record_streams.py [--calls 200] [--streams 20]

writes bench/data/grpc_unary.json.gz and bench/data/sse_chat.json.gz: {"chunks": [[from
the client (bool), bytes as latin-1], ...]} for one connection each.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
DATA = Path(__file__).resolve().parent / "data"
sys.path.insert(0, str(REPO))

from bench.capacity.sse_client import END, build_request  # noqa: E402

DEADLINE_S = 60.0


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


class Relay:
    """One connection relayed to 127.0.0.1:upstream; every read kept with its side."""

    def __init__(self, upstream: int) -> None:
        self.upstream = upstream
        self.listener = socket.create_server(("127.0.0.1", 0))
        self.port = self.listener.getsockname()[1]
        self.chunks: list[tuple[bool, bytes]] = []
        self.lock = threading.Lock()
        threading.Thread(target=self._accept, daemon=True).start()

    def _accept(self) -> None:
        client, _ = self.listener.accept()
        server = socket.create_connection(("127.0.0.1", self.upstream), timeout=DEADLINE_S)
        for src, dst, from_client in ((client, server, True), (server, client, False)):
            threading.Thread(target=self._pump, args=(src, dst, from_client), daemon=True).start()

    def _pump(self, src: socket.socket, dst: socket.socket, from_client: bool) -> None:
        while True:
            try:
                data = src.recv(65536)
            except OSError:
                data = b""
            if not data:
                try:
                    dst.shutdown(socket.SHUT_WR)
                except OSError:
                    pass
                return
            with self.lock:  # kept in the order the relay passes them on
                self.chunks.append((from_client, data))
                dst.sendall(data)


def wait_port(port: int, proc: subprocess.Popen) -> None:
    deadline = time.monotonic() + DEADLINE_S
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"peer exited with {proc.returncode}")
        try:
            socket.create_connection(("127.0.0.1", port), timeout=1).close()
            return
        except OSError:
            time.sleep(0.1)
    raise SystemExit(f"nothing listens on {port}")


def record_grpc(calls: int) -> list[tuple[bool, bytes]]:
    import grpc

    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.integration.peers.grpc_peer", "server",
                             str(port)], cwd=REPO, stdout=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
        relay = Relay(port)
        channel = grpc.insecure_channel(f"127.0.0.1:{relay.port}",
                                        options=[("grpc.enable_http_proxy", 0)])
        say = channel.unary_unary("/test.Echo/Say")
        for _ in range(calls):
            assert say(b"world", timeout=10) == b"hello world"
        time.sleep(0.2)  # the last acknowledgements
        channel.close()
        time.sleep(0.2)
        return list(relay.chunks)
    finally:
        proc.terminate()
        proc.wait(10)


def record_sse(streams: int, tokens: int = 32) -> list[tuple[bool, bytes]]:
    port = free_port()
    proc = subprocess.Popen([sys.executable, "-m", "tests.support.openai_server",
                             "--first-token-delay", "0", "--token-interval", "0.001",
                             "--tokens", str(tokens), "--port", str(port)], cwd=REPO,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        wait_port(port, proc)
        relay = Relay(port)
        request = build_request(port, tokens, 1.0, 0.0)
        with socket.create_connection(("127.0.0.1", relay.port), timeout=DEADLINE_S) as s:
            for _ in range(streams):
                s.sendall(request)
                answer = b""
                while not answer.endswith(END):
                    data = s.recv(65536)
                    if not data:
                        raise SystemExit("the server closed mid-stream")
                    answer += data
        time.sleep(0.2)
        return list(relay.chunks)
    finally:
        proc.terminate()
        proc.wait(10)


def save(name: str, chunks: list[tuple[bool, bytes]]) -> None:
    doc = {"chunks": [[c, d.decode("latin-1")] for c, d in chunks]}
    (DATA / name).write_bytes(gzip.compress(json.dumps(doc).encode(), mtime=0))
    print(f"{name}: {len(chunks)} writes, {sum(len(d) for _, d in chunks)} bytes")


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--streams", type=int, default=20)
    args = ap.parse_args()
    if not (1 <= args.calls <= 100_000 and 1 <= args.streams <= 10_000):
        ap.error("--calls 1..100000, --streams 1..10000")
    os.chdir(REPO)
    DATA.mkdir(exist_ok=True)
    save("grpc_unary.json.gz", record_grpc(args.calls))
    save("sse_chat.json.gz", record_sse(args.streams))


if __name__ == "__main__":
    main()
