"""A one-thread HTTP server whose every request burns CPU in `burn_for_request` before it
answers: the thread that reads a request also does its work, as in a sync worker."""

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


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (http.server's name)
        body = str(burn_for_request(BURN_S)).encode()
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
