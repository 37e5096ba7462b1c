"""An HTTP client whose command line carries whatever the test puts there (secrets, say):
GET URL on one keep-alive connection, a request every 0.1 s, until stdin closes.

  python -m tests.integration.peers.argv_client URL [ANY ARGS...]

The extra arguments are not used: they are there to be read from /proc/PID/cmdline. It
prints one JSON line per request; it gives up after 120 s so it can never outlive a test.
"""

from __future__ import annotations

import json
import sys
import threading
import time

import requests

LIMIT_S = 120.0


def main() -> None:
    url = sys.argv[1]
    closed = threading.Event()
    threading.Thread(target=lambda: (sys.stdin.read(), closed.set()), daemon=True).start()
    deadline = time.monotonic() + LIMIT_S
    with requests.Session() as s:
        while not closed.is_set() and time.monotonic() < deadline:
            r = s.get(url, timeout=10)
            print(json.dumps({"status": r.status_code}), flush=True)
            closed.wait(0.1)


if __name__ == "__main__":
    main()
