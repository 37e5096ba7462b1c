"""Runs HTTP/2 connections through the real connection tracker whole, byte by byte, one wire
frame per syscall, and with garbage after."""

from __future__ import annotations

import pytest
from otel_ebpf.protocols.base import Role
from otel_ebpf.protocols.http2 import HTTP2Parser
from otel_ebpf.protocols.testing import REQ, RESP, TICK, run_exchange  # noqa: F401 (used by tests)

from .wire import split_frames

# a WINDOW_UPDATE header with a length no WINDOW_UPDATE has: never HTTP/2 from its first byte
GARBAGE = b"\x00\x00\x05\x08\x00\x00\x00\x00\x00\xff\xfe not http/2 at all\r\n\r\n"
MODES = ("whole", "bytes", "frames", "garbage")


@pytest.fixture(params=MODES)
def mode(request) -> str:
    return request.param


@pytest.fixture
def run(make_conn, mode):
    """run(events) -> tracker. Events: (REQ|RESP, captured[, gap]) or (TICK, now_ns)."""

    def run(events, *, role=Role.CLIENT, options=None, close=True, midstream=False, conn=None,
            garbage=True):
        return run_exchange(HTTP2Parser(options), conn or make_conn(role), events, mode,
                            GARBAGE if garbage else b"", close=close, midstream=midstream, splitter=split_frames)

    return run


@pytest.fixture
def driver(tracker_cls, make_conn):
    """driver(role=..., options=..., midstream=...) -> a bare tracker to feed by hand."""

    def make(role=Role.CLIENT, options=None, midstream=False, **conn):
        return tracker_cls(HTTP2Parser(options), make_conn(role, **conn), midstream=midstream)

    return make
