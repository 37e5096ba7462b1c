"""Runs HTTP/1 exchanges through the real connection tracker whole, byte by byte, and with garbage after."""

from __future__ import annotations

import pytest
from otel_ebpf.protocols.base import Direction, Role
from otel_ebpf.protocols.http1 import HTTP1Parser

REQ, RESP, TICK = "req", "resp", "tick"
# cannot start an HTTP message; ends with a blank line so that no parser waits on it
GARBAGE = b"\x00\x17garbage \xff\xfe not http\r\n\r\n"
MODES = ("whole", "bytes", "garbage")


@pytest.fixture(params=MODES)
def mode(request) -> str:
    return request.param


@pytest.fixture
def run(tracker_cls, make_conn, mode):
    """run(events) -> tracker. Events: (REQ|RESP, captured[, gap]) or (TICK, now_ns)."""

    def run(events, *, role=Role.CLIENT, options=None, close=True, midstream=False, conn=None,
            garbage=True):
        conn = conn or make_conn(role)
        tracker = tracker_cls(HTTP1Parser(options), conn, midstream=midstream)
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
            else:
                tracker.feed(direction, data, gap)
        if mode == "garbage" and garbage:
            for direction in Direction:
                tracker.feed(direction, GARBAGE)
        if close:
            tracker.close()
        return tracker

    return run

