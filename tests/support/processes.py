"""Stopping a peer process the same way everywhere: SIGTERM, a bounded wait, then SIGKILL."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess


def stop_process(proc: subprocess.Popen, grace_s: float = 10.0, group: bool = False) -> None:
    """`group`: signal the process's whole group (a server started with its own session,
    whose children would outlive a signal to the parent alone)."""
    def send(sig: int) -> None:
        if group:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(proc.pid, sig)
        else:
            proc.send_signal(sig)

    send(signal.SIGTERM)
    try:
        proc.wait(grace_s)
    except subprocess.TimeoutExpired:
        send(signal.SIGKILL)
        proc.wait(10 if group else 5)
