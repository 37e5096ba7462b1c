"""Runs HTTP/2 connections through the real connection tracker whole, byte by byte, one wire
frame per syscall, and with garbage after."""

from __future__ import annotations

import pytest
from otel_ebpf.protocols.base import Direction, Role
from otel_ebpf.protocols.http2 import HTTP2Parser

from .wire import split_frames

REQ, RESP, TICK = "req", "resp", "tick"
# a WINDOW_UPDATE header with a length no WINDOW_UPDATE has: never HTTP/2 from its first byte
GARBAGE = b"\x00\x00\x05\x08\x00\x00\x00\x00\x00\xff\xfe not http/2 at all\r\n\r\n"
MODES = ("whole", "bytes", "frames", "garbage")


@pytest.fixture(params=MODES)
def mode(request) -> str:
    return request.param


@pytest.fixture
def run(tracker_cls, make_conn, mode):
    """run(events) -> tracker. Events: (REQ|RESP, captured[, gap]) or (TICK, now_ns)."""

    def run(events, *, role=Role.CLIENT, options=None, close=True, midstream=False, conn=None,
            garbage=True):
        conn = conn or make_conn(role)
        tracker = tracker_cls(HTTP2Parser(options), conn, midstream=midstream)
        requests = Direction.EGRESS if role == Role.CLIENT else Direction.INGRESS
        sides = {REQ: requests, RESP: requests.opposite}
        for side, data, *gap in events:
            if side == TICK:
                tracker.tick(data)
                continue
            direction, gap = sides[side], (gap[0] if gap else 0)
            if mode == "bytes":
                for i in range(len(data)):
                    tracker.feed(direction, data[i : i + 1])
                if gap:
                    tracker.feed(direction, b"", gap)
            elif mode == "frames" and not gap:
                for piece in split_frames(data):
                    tracker.feed(direction, piece)
            else:
                tracker.feed(direction, data, gap)
        if mode == "garbage" and garbage:
            for direction in Direction:
                tracker.feed(direction, GARBAGE)
        if close:
            tracker.close()
        return tracker

    return run


@pytest.fixture
def driver(tracker_cls, make_conn):
    """driver(role=..., options=..., midstream=...) -> a bare tracker to feed by hand."""

    def make(role=Role.CLIENT, options=None, midstream=False, **conn):
        return tracker_cls(HTTP2Parser(options), make_conn(role, **conn), midstream=midstream)

    return make
