"""Runs HTTP/1 exchanges through the real connection tracker whole, byte by byte, and with garbage after."""

from __future__ import annotations

import pytest
from otel_ebpf.protocols.base import Role
from otel_ebpf.protocols.http1 import HTTP1Parser
from otel_ebpf.protocols.testing import REQ, RESP, TICK, run_exchange  # noqa: F401 (used by tests)

# cannot start an HTTP message; ends with a blank line so that no parser waits on it
GARBAGE = b"\x00\x17garbage \xff\xfe not http\r\n\r\n"
MODES = ("whole", "bytes", "garbage")


@pytest.fixture(params=MODES)
def mode(request) -> str:
    return request.param


@pytest.fixture
def run(make_conn, mode):
    """run(events) -> tracker. Events: (REQ|RESP, captured[, gap]) or (TICK, now_ns)."""

    def run(events, *, role=Role.CLIENT, options=None, close=True, midstream=False, conn=None,
            garbage=True):
        return run_exchange(HTTP1Parser(options), conn or make_conn(role), events, mode,
                            GARBAGE if garbage else b"", close=close, midstream=midstream)

    return run

