"""A prefork server's shape: this process imports the hop service and waits; on a line
"fork" on its stdin it forks, prints the child's pid, and the child serves
bench/apps/fastapi_app.py (its /hop/items/{id} calls OTEL_BENCH_UPSTREAM) under uvicorn on
127.0.0.1:PORT. The parent waits for the child and exits with it.

    python -m tests.integration.peers.forking_hop PORT
"""

from __future__ import annotations

import os
import sys

import uvicorn

from bench.apps.fastapi_app import app


def main() -> int:
    port = int(sys.argv[1])
    if sys.stdin.readline().strip() != "fork":
        return 2
    child = os.fork()
    if child == 0:
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning",
                    timeout_keep_alive=3600)
        os._exit(0)
    print(child, flush=True)
    _, status = os.waitpid(child, 0)
    return os.waitstatus_to_exitcode(status)


if __name__ == "__main__":
    sys.exit(main())
