"""An HTTP server with a planted inefficiency in its request path: every POST is
checksummed by `checksum()`, a Python loop over each character of the body, before it is
answered. Its process name is set first (argv[2]) so an agent can select it.

    python charloop_server.py PORT NAME
"""

from __future__ import annotations

import ctypes
import sys
from http.server import BaseHTTPRequestHandler, HTTPServer

ctypes.CDLL(None).prctl(15, sys.argv[2].encode()[:15], 0, 0, 0)  # PR_SET_NAME


def checksum(text: str) -> int:
    total = 0
    for ch in text:  # the planted inefficiency: the interpreter runs once per character
        total = (total * 31 + ord(ch)) & 0xFFFFFFFF
    return total


def parse_request(body: bytes) -> str:
    return body.decode("utf-8", errors="replace")


class Handler(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_POST(self) -> None:  # noqa: N802 (http.server's name)
        body = self.rfile.read(int(self.headers.get("Content-Length", "0")))
        answer = str(checksum(parse_request(body))).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(answer)))
        self.end_headers()
        self.wfile.write(answer)

    def log_message(self, *args) -> None:  # quiet
        pass


if __name__ == "__main__":
    server = HTTPServer(("127.0.0.1", int(sys.argv[1])), Handler)
    print("READY", flush=True)
    server.serve_forever()
