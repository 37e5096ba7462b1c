"""Free 127.0.0.1 ports for the peers a test starts, from outside the kernel's ephemeral range."""

import random
import socket

# A port is picked here and bound later by the peer a test starts. Picked by binding port 0,
# it would come from the kernel's ephemeral range (32768-60999 by default), the range every
# outgoing connection of the suite also takes its local port from: in between, one of them
# can take it (EADDRINUSE in the peer). Below the range no connection is given a port. The
# DDS peers use 7400 and up (RTPS domains); OTLP's 4317/4318 and the peers' own defaults
# (LiteLLM's 4000, PostgreSQL's 5432, Redis's 6379, vLLM's 8000) lie outside this range too.
PICK_RANGE = range(1100, 3990)
_handed: list[int] = []  # the last ports handed out: not bound yet, so not seen as taken


def free_port() -> int:
    """A 127.0.0.1 TCP port nobody holds now, below the ephemeral range and not handed out
    in the last 256 picks of this process."""
    for _ in range(1000):
        port = random.choice(PICK_RANGE)
        if port in _handed:
            continue
        with socket.socket() as s:
            try:
                s.bind(("127.0.0.1", port))
            except OSError:
                continue
        _handed.append(port)
        del _handed[:-256]
        return port
    raise RuntimeError(f"no free port in {PICK_RANGE.start}..{PICK_RANGE.stop - 1} after 1000 tries")
