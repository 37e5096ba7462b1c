"""A one-thread HTTP server whose every GET burns CPU in `burn_for_request` before it
answers: the thread that reads a request also does its work, as in a sync worker. Every
POST is checksummed by `checksum()`, a Python loop over each character of the body: the
inefficiency planted in its request path for `otel-ebpf advise`.

    python cpu_http_server.py PORT [BURN_S]
"""

from __future__ import annotations

import sys
import time
from http.server import BaseHTTPRequestHandler, HTTPServer

BURN_S = float(sys.argv[2]) if len(sys.argv) > 2 else 0.3


def burn_for_request(seconds: float) -> int:
    """Pure Python work for `seconds` of wall time (the profile's known function)."""
    end, n = time.perf_counter() + seconds, 0
    while time.perf_counter() < end:
        n += sum(i * i for i in range(200))
    return n


def checksum(text: str) -> int:
    total = 0
    for ch in text:  # the planted inefficiency: the interpreter runs once per character
        total = (total * 31 + ord(ch)) & 0xFFFFFFFF
    return total


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        self.reply(str(burn_for_request(BURN_S)).encode())

    def do_POST(self) -> None:  # noqa: N802
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        self.reply(str(checksum(body.decode("utf-8", errors="replace"))).encode())

    def reply(self, body: bytes) -> None:
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:  # quiet
        pass


if __name__ == "__main__":
    server = HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print("READY", flush=True)
    server.serve_forever()
