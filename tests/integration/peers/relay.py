"""A thread-per-request HTTP server (the standard library's) that relays each request
downstream on the thread that read it: `python -m ... PORT DOWNSTREAM_BASE_URL`.

GET /hop/<tag> calls GET <downstream>/items/<tag>-down with `requests` and answers 200."""

import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import requests

session = requests.Session()


class Relay(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        tag = self.path.rsplit("/", 1)[-1]
        down = requests.get(f"{DOWNSTREAM}/items/{tag}-down", timeout=10)
        body = f"relayed {down.status_code}".encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args) -> None:
        pass


if __name__ == "__main__":
    port, DOWNSTREAM = int(sys.argv[1]), sys.argv[2]
    server = ThreadingHTTPServer(("127.0.0.1", port), Relay)
    print("listening", flush=True)
    server.serve_forever()
