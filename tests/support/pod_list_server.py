"""A kubelet's and an API server's pod list endpoints over HTTPS, for the pod metadata
tests: `python -m tests.support.pod_list_server PORT CERT KEY TOKEN PODLIST_JSON`.

Answers GET /pods (the kubelet) and GET /api/v1/pods?fieldSelector=spec.nodeName=N (the
API server: only that node's pods) with the PodList file as it is at each request, 401
without `Authorization: Bearer TOKEN`, 403 with the token when the file `<json>.forbid`
exists. Each request is appended to `<json>.log` (the tests count lists)."""

import json
import ssl
import sys
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from urllib.parse import parse_qs, urlsplit


def main() -> None:
    port, cert, key, token, pods = int(sys.argv[1]), sys.argv[2], sys.argv[3], sys.argv[4], \
        Path(sys.argv[5])
    requests_log = pods.with_suffix(".log")

    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
            with requests_log.open("a") as f:
                f.write(self.path + "\n")
            if self.headers.get("Authorization") != f"Bearer {token}":
                return self._send(401, {"kind": "Status", "code": 401})
            if pods.with_suffix(".forbid").exists():
                return self._send(403, {"kind": "Status", "code": 403})
            url = urlsplit(self.path)
            doc = json.loads(pods.read_text())
            if url.path == "/api/v1/pods":
                selector = parse_qs(url.query).get("fieldSelector", [""])[0]
                node = selector.removeprefix("spec.nodeName=")
                doc["items"] = [p for p in doc["items"] if p["spec"].get("nodeName") == node]
            elif url.path != "/pods":
                return self._send(404, {"kind": "Status", "code": 404})
            self._send(200, doc)

        def _send(self, code: int, doc: dict) -> None:
            body = json.dumps(doc).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args) -> None:
            pass

    server = ThreadingHTTPServer(("127.0.0.1", port), Handler)
    context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
    context.load_cert_chain(cert, key)
    server.socket = context.wrap_socket(server.socket, server_side=True)
    print("listening", flush=True)
    server.serve_forever()


if __name__ == "__main__":
    main()
