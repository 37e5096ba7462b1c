"""A node's parent process (tests/support/nodes.py): started inside the node's network
namespace, it starts the node's programs as its own children, so that an agent selecting
this process's pid (`targets.pids`: a process and its descendants) selects exactly the
node's programs.

One JSON request per line on stdin, one JSON answer per line on stdout:

    {"op": "spawn", "argv": [...], "env": {...}, "cwd": "...", "log": "path"} -> {"pid": N}
    {"op": "signal", "pid": N, "signal": 15, "group": true}                   -> {}
    {"op": "poll", "pid": N}                                 -> {"returncode": rc or null}
    {"op": "wait", "pid": N, "timeout": seconds}             -> {"returncode": rc or null}

A failed request answers {"error": "..."}. At the end of stdin (the test ended, or died)
every child still running is stopped: SIGTERM to its process group, then SIGKILL.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import subprocess
import sys
import time

STOP_GRACE_S = 5.0


def _stop_all(children: dict[int, subprocess.Popen]) -> None:
    for sig in (signal.SIGTERM, signal.SIGKILL):
        alive = [p for p in children.values() if p.poll() is None]
        for proc in alive:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
        deadline = time.monotonic() + STOP_GRACE_S
        for proc in alive:
            with contextlib.suppress(subprocess.TimeoutExpired):
                proc.wait(max(0.0, deadline - time.monotonic()))


def _answer(request: dict, children: dict[int, subprocess.Popen]) -> dict:
    op = request.get("op")
    if op == "spawn":
        log = open(request["log"], "ab") if request.get("log") else subprocess.DEVNULL  # noqa: SIM115
        try:
            proc = subprocess.Popen(
                request["argv"], env=request.get("env"), cwd=request.get("cwd"),
                stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                start_new_session=True)  # its own group: a stop reaches its workers too
        finally:
            if log is not subprocess.DEVNULL:
                log.close()
        children[proc.pid] = proc
        return {"pid": proc.pid}
    proc = children.get(int(request.get("pid", -1)))
    if proc is None:
        return {"error": f"no child {request.get('pid')}"}
    if op == "signal":
        with contextlib.suppress(ProcessLookupError):
            if request.get("group"):
                os.killpg(proc.pid, int(request["signal"]))
            else:
                proc.send_signal(int(request["signal"]))
        return {}
    if op == "poll":
        return {"returncode": proc.poll()}
    if op == "wait":
        try:
            return {"returncode": proc.wait(float(request["timeout"]))}
        except subprocess.TimeoutExpired:
            return {"returncode": None}
    return {"error": f"unknown op {op!r}"}


def main() -> None:
    children: dict[int, subprocess.Popen] = {}
    print(json.dumps({"ready": os.getpid()}), flush=True)
    try:
        for line in sys.stdin:
            try:
                answer = _answer(json.loads(line), children)
            except Exception as e:  # told to the test, which fails with it
                answer = {"error": repr(e)}
            print(json.dumps(answer), flush=True)
    finally:
        _stop_all(children)


if __name__ == "__main__":
    main()
