"""Closed-loop HTTP/1.1 load from wrk for bench/agent_capacity.py (its `wrk` part).

    python bench/capacity/wrk_load.py PORT SECONDS [--conns 16] [--path /items/42]

Runs `wrk -t 1 -c CONNS -d SECONDS http://127.0.0.1:PORT/PATH` (one thread, CONNS
keep-alive connections, each with one request in flight) and prints one JSON line:
completed (wrk's request count), rate (its Requests/sec), errors (non-2xx/3xx answers plus
socket errors) and cpu_s (wrk's own CPU time, from the kernel's accounting of this child).
"""

from __future__ import annotations

import argparse
import json
import re
import resource
import shutil
import subprocess
import sys

SOCKET_ERRORS = re.compile(r"Socket errors: connect (\d+), read (\d+), write (\d+), timeout (\d+)")


def report(stdout: str) -> dict:
    """What wrk's report says: completed, rate, non_2xx (its non-2xx/3xx answers) and
    socket_errors (connect, read, write, timeout); ValueError when it is not one."""
    done = re.search(r"(\d+) requests in", stdout)
    rate = re.search(r"Requests/sec:\s*([\d.]+)", stdout)
    if not done or not rate:
        raise ValueError(f"not a wrk report:\n{stdout}")
    bad = re.search(r"Non-2xx or 3xx responses: (\d+)", stdout)
    sockets = SOCKET_ERRORS.search(stdout)
    return {"completed": int(done[1]), "rate": float(rate[1]), "non_2xx": int(bad[1]) if bad else 0,
            "socket_errors": tuple(map(int, sockets.groups())) if sockets else (0, 0, 0, 0)}


def summary(stdout: str) -> dict:
    """completed, rate and errors (non-2xx/3xx answers plus socket errors) of wrk's report."""
    got = report(stdout)
    return {"completed": got["completed"], "rate": got["rate"],
            "errors": got["non_2xx"] + sum(got["socket_errors"])}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__,
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("port", type=int)
    ap.add_argument("seconds", type=float)
    ap.add_argument("--conns", type=int, default=16)
    ap.add_argument("--path", default="/items/42")
    args = ap.parse_args()
    if shutil.which("wrk") is None:
        ap.error("wrk is not installed (make install puts it in: apt package wrk)")
    if not (0 < args.seconds <= 600 and 1 <= args.conns <= 4096):
        ap.error("SECONDS 0..600, --conns 1..4096")
    out = subprocess.run(
        ["wrk", "-t", "1", "-c", str(args.conns), "-d", f"{args.seconds:g}s",
         f"http://127.0.0.1:{args.port}{args.path}"],
        capture_output=True, text=True, timeout=args.seconds + 60)
    if out.returncode != 0:
        print(out.stdout + out.stderr, file=sys.stderr)
        return 1
    usage = resource.getrusage(resource.RUSAGE_CHILDREN)
    print(json.dumps({**summary(out.stdout), "cpu_s": usage.ru_utime + usage.ru_stime}),
          flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
