"""One HTTP/1.1 keep-alive connection, kept across the agent's restarts:

  python -m tests.integration.peers.keepalive_client PORT

Connects, prints {"local_port": P}, then for each PATH line on stdin sends GET PATH on the
same connection and prints {"path", "status"}. Exits at EOF (or after a bounded wait).
"""

from __future__ import annotations

import http.client
import json
import signal
import sys

LIMIT_S = 300


def main(port: int) -> None:
    signal.alarm(LIMIT_S)  # never outlive a test that forgot it
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=10)
    conn.connect()
    print(json.dumps({"local_port": conn.sock.getsockname()[1]}), flush=True)
    for line in sys.stdin:
        path = line.strip()
        conn.request("GET", path)
        resp = conn.getresponse()
        resp.read()
        print(json.dumps({"path": path, "status": resp.status,
                          "local_port": conn.sock.getsockname()[1]}), flush=True)


if __name__ == "__main__":
    main(int(sys.argv[1]))
