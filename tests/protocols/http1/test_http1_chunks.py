"""The step that takes every whole chunk at the buffer's head at once (parse._chunks)
against its reference, the steps that take a chunk's size line, data and CRLF one by one
(parse._ONE_CHUNK_STEPS), and the tracker's step for a body piece (Connection._whole
inside a message, PIECE_STEP) against its general path (Stream.add, _parse,
_finish_pending), and the compiled body-piece step (otel_ebpf/_fast/conn.c piece with
protocols/http1/_parse.c chunks, HTTP1Parser.piece) against both: the same spans over the recorded
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
    if http1_parse.compiled is not None:
        assert _spans(chunks, repeat, seed, COMPILED) == want
    return want


def test_the_parser_uses_it():
    assert http1_parse._BODY_STEPS[http1_parse.Body.CHUNKED] is http1_parse._chunks
    assert http1_parse._ONE_CHUNK_STEPS[http1_parse.Body.CHUNKED] is http1_parse._chunk
    assert connection.PIECE_STEP
    if http1_parse.compiled is not None:
        assert HTTP1Parser.piece is http1_parse.compiled.chunks


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


# --- the compiled chunk walk against _chunks, on the same parser state -------------------

compiled_only = pytest.mark.skipif(http1_parse.compiled is None, reason="the compiled extensions")
NS = 1_234_567


def _chunked_state(kept: bool, request: bool, limit: int, pieces: int = 0):
    """A state inside a chunked body (after its head and `pieces` earlier chunks), and the
    direction its message goes."""
    from otel_ebpf.protocols.base import ConnInfo, Role
    from otel_ebpf.protocols.layers import Body, BodyPiece

    state = http1_parse.HTTP1State(ConnInfo(1, 2, 3, Role.CLIENT, "stream", "ipv4"))
    direction = state.requests if request else state.responses
    make = http1_parse.HTTPRequest if request else http1_parse.HTTPResponse
    frame = make(direction=direction, body=Body(limit=limit) if kept else None,
                 body_size=0)
    if kept and pieces:
        frame.body.pieces = [BodyPiece(0, 1, b"")] * pieces
    s = state.streams[direction]
    s.frame, s.body, s.size = frame, http1_parse.Body.CHUNKED, 57
    state.time_at = lambda d, offset: NS  # the tracker's answer for a syscall's every byte
    return state, direction


def _fields(state, direction, frame) -> tuple:
    s, body = state.streams[direction], frame.body
    return (s.body, s.frame is frame, s.size, s.remaining, s.interim, frame.chunks,
            frame.body_size, frame.size,
            None if body is None else (body.pieces, body.size, body.lost, body.kept))


def _walks_agree(data: bytes, kept: bool, request: bool, limit: int, pieces: int = 0):
    """True: a piece taken; the frame: a piece that ended the message; False: declined."""
    ours, direction = _chunked_state(kept, request, limit, pieces)
    ref, _ = _chunked_state(kept, request, limit, pieces)
    frame, ref_frame = ours.streams[direction].frame, ref.streams[direction].frame
    before = _fields(ours, direction, frame)
    took = http1_parse.compiled.chunks(direction, data, ours, NS)
    step = http1_parse._chunks(memoryview(data), ref.streams[direction], ref, direction)
    whole = bool(data) and step == (http1_parse.NEED, None, len(data)) and (
        ref.streams[direction].body is http1_parse.Body.CHUNKED)
    ended = step == (http1_parse.FRAME, ref_frame, len(data))
    if ended:
        assert took is frame
    else:
        assert took is whole
    want = _fields(ref, direction, ref_frame) if (whole or ended) else before
    assert _fields(ours, direction, frame) == want
    return took


def _chunk_bytes(size: int, ext: bytes, digits: int) -> bytes:
    return b"%0*x" % (digits, size) + ext + b"\r\n" + bytes(range(97, 97 + 26)) * (size // 26) + \
        b"z" * (size % 26) + b"\r\n"


_EXTS = [b"", b";a=b", b" ", b"\t;x", b";", b" ;q=\"v\"", b";\n", b" x", b";" + b"e" * 1030]


@compiled_only
@fuzz
@given(sizes=st.lists(st.integers(1, 70), min_size=1, max_size=6),
       exts=st.lists(st.sampled_from(_EXTS), min_size=6, max_size=6),
       digits=st.integers(1, 17), last=st.booleans(),
       cut=st.one_of(st.just(0), st.integers(1, 400)),
       flip=st.one_of(st.none(), st.tuples(st.integers(0, 400), st.integers(0, 255))),
       kept=st.booleans(), request=st.booleans(), limit=st.integers(0, 200))
def test_compiled_walk(sizes, exts, digits, last, cut, flip, kept, request, limit):
    """Whole chunks, with extensions, padded sizes (17 digits: not a size line), the last
    chunk, a cut anywhere and a byte changed: the compiled walk takes exactly what _chunks
    takes whole (and leaves the rest to it with nothing changed), with the same counts and
    pieces, and ends the message where _chunks ends it; a small keep limit cuts the
    pieces' bytes as Body.add does."""
    data = b"".join(_chunk_bytes(n, exts[i], digits) for i, n in enumerate(sizes))
    if last:
        data += b"0\r\n\r\n"
    if last and not sizes[0] % 3:
        data = b"0\r\n\r\n"  # a server's last write
    if cut:
        data = data[:max(len(data) - cut, 0)]
    if flip is not None and data:
        at = flip[0] % len(data)
        data = data[:at] + bytes([flip[1]]) + data[at + 1:]
    _walks_agree(data, kept, request, limit)


@compiled_only
def test_compiled_walk_cases():
    assert _walks_agree(_chunk_bytes(40, b"", 2), True, False, 1 << 20)
    assert _walks_agree(_chunk_bytes(40, b"", 16) * 3, True, True, 50)
    assert not _walks_agree(_chunk_bytes(40, b"", 17), True, False, 1 << 20)
    assert not _walks_agree(b"", True, False, 1 << 20)
    # the last chunk ends the message: alone (a server's last write) or after others
    assert _walks_agree(b"0\r\n\r\n", True, False, 1 << 20) not in (True, False)
    assert _walks_agree(_chunk_bytes(40, b"", 2) * 2 + b"0\r\n\r\n", True, True, 50) not in (
        True, False)
    assert _walks_agree(_chunk_bytes(40, b"", 2) + b"0\r\n\r\n", False, False, 0) not in (
        True, False)
    # data that ends in the last chunk's bytes, inside a chunk: a piece
    assert _walks_agree(b"5\r\nab0\r\n\r\n", True, False, 1 << 20) is True
    # another last chunk (padded, with an extension or a trailer), or bytes after it
    assert not _walks_agree(b"00\r\n\r\n", True, False, 1 << 20)
    assert not _walks_agree(b"0;x\r\n\r\n", True, False, 1 << 20)
    assert not _walks_agree(b"0\r\nx: y\r\n\r\n", True, False, 1 << 20)
    assert not _walks_agree(b"0\r\n\r\nGET", True, False, 1 << 20)
    assert not _walks_agree(_chunk_bytes(40, b"", 2) + b"0\r\n", True, False, 1 << 20)
    assert not _walks_agree(b"ffffffffffffffff\r\n" + b"x" * 100, False, False, 0)
    assert _walks_agree(b"1" + b" " * 1018 + b"\r\nx\r\n", False, False, 0)  # the line's 1024
    assert not _walks_agree(b"1" + b" " * 1022 + b"\r\nx\r\n", False, False, 0)
    # the body's piece list full: counted, not kept (Body.add past MAX_PIECES)
    from otel_ebpf.protocols.layers import MAX_PIECES
    assert _walks_agree(_chunk_bytes(9, b"", 1) * 2, True, False, 1 << 20, MAX_PIECES - 1)


@compiled_only
def test_compiled_walk_declines_other_states():
    data = _chunk_bytes(10, b"", 1)
    state, direction = _chunked_state(True, False, 100)
    s = state.streams[direction]
    for body in (http1_parse.Body.READ_CHUNK, http1_parse.Body.TRAILERS, None):
        s.body = body
        assert http1_parse.compiled.chunks(direction, data, state, NS) is False
    s.body = http1_parse.Body.CHUNKED
    state.tunnel = True
    assert http1_parse.compiled.chunks(direction, data, state, NS) is False
    state.tunnel = False
    assert http1_parse.compiled.chunks(direction, bytearray(data), state, NS) is False
    assert http1_parse.compiled.chunks(direction, data, object(), NS) is False
    assert s.frame.chunks == 0 and s.frame.body.pieces == []
    assert http1_parse.compiled.chunks(direction, data, state, NS) is True
    assert s.frame.chunks == 1 and s.frame.body.pieces[0].data == data[3:13]
