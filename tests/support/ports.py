"""Free 127.0.0.1 ports for the peers a test starts."""

import socket


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]
