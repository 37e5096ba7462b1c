"""The one-call step for a whole syscall (protocols/http1/_parse.c whole) against its
reference (protocols/http1/parse.py whole) and against the general path it stands for
(the parser's parse, then the tracker's stamping, as Connection._whole does): on the same
bytes and the same parser state, the same frame, field for field and of the same type,
and the same state after; None only with the state untouched."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from otel_ebpf import _fast
from otel_ebpf.protocols.base import Direction, ParseResult, Role
from otel_ebpf.protocols.http1 import HTTP1Parser
from otel_ebpf.protocols.http1 import parse as http1_parse
from otel_ebpf.protocols.registry import Registry

from tests.protocols.conftest import conn_info
from tests.protocols.http1.test_http1_fastpath import _state_view, heads, mutated

if _fast.PURE_PYTHON:
    pytest.skip("OTEL_EBPF_PURE_PYTHON=1: no compiled path to compare", allow_module_level=True)

fuzz = settings(max_examples=500, deadline=None, suppress_health_check=[HealthCheck.too_slow])
plain = HTTP1Parser({"correlation_headers": ["x-request-id", "x-api-key"]})
# with the LLM and vector-DB layers: a request one of them wants is not the one-call case
layered = next(p for p in Registry.from_config(["http1", "llm", "vectordb"], {}).parsers
               if p.name == "http1")
PRIMES = [b"GET / HTTP/1.1\r\n\r\n", b"HEAD / HTTP/1.1\r\n\r\n", b"CONNECT a:1 HTTP/1.1\r\n\r\n",
          b"GET / HTTP/1.1\r\nUpgrade: websocket\r\nConnection: upgrade\r\n\r\n",
          b"POST /v1/chat/completions HTTP/1.1\r\nHost: api.openai.com\r\n\r\n"]
LAYERED_TARGETS = [b"POST /v1/chat/completions HTTP/1.1\r\nHost: a\r\nContent-Length: 2\r\n\r\n{}",
                   b"POST /collections/c/points/search HTTP/1.1\r\nContent-Length: 2\r\n\r\n{}"]


def _general(parser: HTTP1Parser, direction: Direction, data: bytes, state, stamp: tuple):
    """What the tracker's _whole makes of the same event when its one frame is all of it
    (parsed in steps where a head is followed by a body a layer reads: the parser shown the
    rest after each head, its pieces timed by the syscall's start), or begins with it and
    runs past it (a body skipped by length, still to come)."""
    pos, start_ns, end_ns, seq, tid, task = stamp
    state.time_at = lambda _direction, _offset: start_ns  # one syscall: one time
    offset = 0
    while True:
        result, frame, consumed = parser.parse(direction, memoryview(data)[offset:], state)
        if result is ParseResult.NEED_MORE and 0 < consumed < len(data) - offset:
            offset += consumed
            continue
        break
    if result is not ParseResult.FRAME or frame is None or offset + consumed < len(data):
        return None
    consumed += offset
    frame.direction, frame.stream_pos, frame.start_ns = direction, pos, start_ns
    frame.tid, frame.task = tid, task
    frame.tcp_seq = None if seq is None else seq & 0xFFFFFFFF
    frame.end_ns = max(end_ns, start_ns)
    frame.size = frame.size or consumed
    return frame


def _fields(frame) -> tuple:
    return type(frame), {f.name: (getattr(frame, f.name), type(getattr(frame, f.name)))
                         for f in dataclasses.fields(frame)}


def _compare(parser, role: Role, direction: Direction, data: bytes, primes: list[bytes],
             stamp: tuple) -> bool:
    states = [parser.new_state(conn_info(role)) for _ in range(3)]
    for state in states:
        for prime in primes:  # requests seen before, on the other direction
            parser.parse(direction.opposite, memoryview(prime), state)
    before = _state_view(states[0])
    compiled = http1_parse.compiled_whole(http1_parse.compiled)(direction, data, states[0], *stamp)
    reference = http1_parse.whole(direction, data, states[1], *stamp)
    general = _general(parser, direction, data, states[2], stamp)
    if reference is None:
        assert compiled is None, data
        assert _state_view(states[0]) == _state_view(states[1]) == before, data
        return False
    assert compiled is not None, data
    assert _fields(compiled) == _fields(reference) == _fields(general), data
    assert _state_view(states[0]) == _state_view(states[1]) == _state_view(states[2]), data
    return True


STAMPS = st.tuples(st.integers(0, 2**40), st.integers(0, 2**62), st.integers(0, 2**62),
                   st.one_of(st.none(), st.integers(0, 2**33)), st.integers(0, 2**31),
                   st.integers(0, 2**63))


@fuzz
@given(data=st.one_of(heads(True), mutated(True)), role=st.sampled_from([Role.CLIENT, Role.SERVER]),
       stamp=STAMPS, layers=st.booleans())
def test_requests(data, role, stamp, layers):
    direction = Direction.EGRESS if role == Role.CLIENT else Direction.INGRESS
    _compare(layered if layers else plain, role, direction, data, [], stamp)


@fuzz
@given(data=st.one_of(heads(False), mutated(False)), role=st.sampled_from([Role.CLIENT, Role.SERVER]),
       primes=st.lists(st.sampled_from(PRIMES), max_size=3), stamp=STAMPS,
       layers=st.booleans())
def test_responses(data, role, primes, stamp, layers):
    direction = Direction.INGRESS if role == Role.CLIENT else Direction.EGRESS
    _compare(layered if layers else plain, role, direction, data, primes, stamp)


def test_the_usual_exchange_takes_one_call_and_the_rest_does_not():
    """Not vacuous: a keep-alive API call's request and response are each one call, and
    so is a head whose body comes later, and a request a layer wants with all its body; a
    request a layer wants whose body is still to come, a response to CONNECT, an interim
    head, an answer the close delimits are not."""
    request = (b"GET /items/42?x=1 HTTP/1.1\r\nHost: 127.0.0.1:8000\r\nX-Request-Id: r-1\r\n"
               b"Content-Length: 2\r\n\r\nab")
    response = b"HTTP/1.1 200 OK\r\ncontent-length: 2\r\n\r\n{}"
    stamp = (10, 1000, 1500, 7, 3, 0)
    assert _compare(plain, Role.CLIENT, Direction.EGRESS, request, [], stamp)
    assert _compare(plain, Role.CLIENT, Direction.INGRESS, response, [PRIMES[0]], stamp)
    assert _compare(plain, Role.CLIENT, Direction.INGRESS, b"HTTP/1.1 200 OK\r\n\r\n",
                    [PRIMES[1]], stamp)  # HEAD: no body
    for data in LAYERED_TARGETS:
        assert _compare(plain, Role.CLIENT, Direction.EGRESS, data, [], stamp)
        # a request a layer wants, its body whole in the syscall: one call, the body kept
        assert _compare(layered, Role.CLIENT, Direction.EGRESS, data, [], stamp)
        assert not _compare(layered, Role.CLIENT, Direction.EGRESS, data[:-1], [], stamp)
    assert not _compare(layered, Role.CLIENT, Direction.INGRESS, response, [PRIMES[4]], stamp)
    assert not _compare(plain, Role.CLIENT, Direction.INGRESS, response, [PRIMES[2]], stamp)
    assert not _compare(plain, Role.CLIENT, Direction.INGRESS,
                        b"HTTP/1.1 100 Continue\r\n\r\n", [PRIMES[0]], stamp)
    # a head whose body is cut short, or not there at all: its frame runs past the syscall
    assert _compare(plain, Role.CLIENT, Direction.EGRESS, request[:-1], [], stamp)
    assert _compare(plain, Role.CLIENT, Direction.INGRESS, response[:-2], [PRIMES[0]], stamp)
    assert not _compare(plain, Role.CLIENT, Direction.INGRESS,
                        b"HTTP/1.1 200 OK\r\n\r\nuntil the close", [PRIMES[0]], stamp)
