"""Stopping a peer process the same way everywhere: SIGTERM, a bounded wait, then SIGKILL."""

from __future__ import annotations

import subprocess


def stop_process(proc: subprocess.Popen, grace_s: float = 10.0) -> None:
    proc.terminate()
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait(5)
