"""The step that takes every whole chunk at the buffer's head at once (parse._chunks)
against its reference, the steps that take a chunk's size line, data and CRLF one by one
(parse._ONE_CHUNK_STEPS), and the tracker's step for a body piece (Connection._whole
inside a message, PIECE_STEP) against its general path (Stream.add, _parse,
_finish_pending), and the compiled body-piece step (otel_ebpf/_fast/conn.c piece with
http1.c chunks, HTTP1Parser.piece) against both: the same spans over the recorded
chat-completions stream, whole and cut into random syscalls, and over random chunked
bodies (kept by the LLM layer or skipped) cut at random points, with bytes lost and size
lines broken; and the compiled chunk walk against _chunks on the same parser state."""

from __future__ import annotations

import json
import random

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.http1 import HTTP1Parser
from otel_ebpf.protocols.http1 import parse as http1_parse

from bench import stream_pipeline as sp
from otel_ebpf import _fast
from otel_ebpf.conntrack import connection
from tests.unit.span_traffic import plain

fuzz = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])


# the steps each run takes: the compiled piece step (where built), the Python piece step
# with _chunks, and the reference (a chunk's part at a time, through the stream's buffer)
COMPILED, PYTHON, ONE_BY_ONE = "compiled", "python", "one by one"


def _spans(chunks, repeat: int, seed: int | None, mode: str) -> list:
    saved, pieces, compiled = (http1_parse._BODY_STEPS, connection.PIECE_STEP,
                               HTTP1Parser.piece)
    if mode != COMPILED:
        HTTP1Parser.piece = None
    if mode == ONE_BY_ONE:
        http1_parse._BODY_STEPS = http1_parse._ONE_CHUNK_STEPS
        connection.PIECE_STEP = False
    try:
        if seed is None:
            spans = sp.spans_of(sp.events(chunks, repeat))
        else:
            rng = random.Random(seed)
            spans = sp.spans_of(sp.events(chunks, repeat, rng), rng)
    finally:
        http1_parse._BODY_STEPS, connection.PIECE_STEP = saved, pieces
        HTTP1Parser.piece = compiled
    return json.loads(json.dumps(plain(spans)))


def _same(chunks, repeat: int, seed: int | None) -> list:
    want = _spans(chunks, repeat, seed, ONE_BY_ONE)
    assert _spans(chunks, repeat, seed, PYTHON) == want
    if _fast.http1 is not None:
        assert _spans(chunks, repeat, seed, COMPILED) == want
    return want


def test_the_parser_uses_it():
    assert http1_parse._BODY_STEPS[http1_parse.Body.CHUNKED] is http1_parse._chunks
    assert http1_parse._ONE_CHUNK_STEPS[http1_parse.Body.CHUNKED] is http1_parse._chunk
    assert connection.PIECE_STEP
    if _fast.http1 is not None:
        assert HTTP1Parser.piece is _fast.http1.chunks


@pytest.mark.parametrize("seed", [None, 1, 2, 3, 4, 5, 6, 7, 8])
def test_recorded_stream(seed):
    spans = _same(sp.recording("sse"), 2, seed)
    assert len(spans) == 80 if seed is None else spans  # 40 a replay (a cut may drop one)


def _answer(draw_sizes: list[int], broken: int | None, ext: bool, trailer: bool) -> bytes:
    body = b""
    for i, n in enumerate(draw_sizes):
        data = b'data: {"choices":[{"delta":{"content":"%s"}}]}\n\n' % (b"x" * n)
        line = b"%x" % len(data) + (b";a=b" if ext and i % 2 else b"")
        if i == broken:
            line = b"zz" + line
        body += line + b"\r\n" + data + b"\r\n"
    body += b"0\r\n" + (b"X-T: 1\r\n" if trailer else b"") + b"\r\n"
    return body


@fuzz
@given(sizes=st.lists(st.integers(0, 300), min_size=1, max_size=12),
       broken=st.one_of(st.none(), st.integers(0, 11)), ext=st.booleans(),
       trailer=st.booleans(), sse=st.booleans(), seed=st.integers(0, 2**32 - 1))
def test_random_chunked_bodies(sizes, broken, ext, trailer, sse, seed):
    """The recorded exchange with its answer's body replaced: the LLM layer keeps the body
    of a chat completion; the request sent elsewhere, no layer wants it and the chunks
    are skipped by length."""
    chunks = sp.recording("sse")
    request = next(d for c, d in chunks if c)
    if not sse:
        request = request.replace(b"POST /v1/chat/completions", b"POST /v1/not/an/llm/api", 1)
    body = _answer(sizes, broken, ext, trailer)
    head = b"HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"
    _same([(True, request), (False, head + body)], 1, seed)
