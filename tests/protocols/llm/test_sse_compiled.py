"""The compiled SSE splitter (protocols/llm/_stream.c) against the Python reference
(stream._sse_whole_pieces_python): the same events, first piece not read and offset, for
the recorded chat stream and for random bodies cut into random pieces."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.layers import Body, BodyPiece
from otel_ebpf.protocols.llm import stream

RECORDING = Path(__file__).parents[3] / "bench/data/sse_chat.json.gz"
pytestmark = pytest.mark.skipif(stream.compiled is None, reason="built without the C extensions "
                                "(or OTEL_EBPF_PURE_PYTHON=1): only the reference runs")


def body_of(pieces: list[bytes], gap_at: int | None = None) -> Body:
    body, offset = Body(), 0
    for i, data in enumerate(pieces):
        if i == gap_at:
            offset += 7  # bytes the kernel did not capture
        body.pieces.append(BodyPiece(offset, 1000 + i, data))
        offset += len(data)
    body.size = offset
    return body


def same(body: Body) -> None:
    want = stream._sse_whole_pieces_python(body)
    got = stream.compiled.whole_pieces(body.pieces)
    assert got == want
    assert [type(e) for e in got[0]] == [type(e) for e in want[0]]
    assert stream.decode_sse(body) == stream.Decoded(*_decode_python(body))


def _decode_python(body: Body) -> tuple[list, int]:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(stream, "compiled", None)
        decoded = stream.decode_sse(body)
    return decoded.events, decoded.dropped


def test_the_agent_uses_it(monkeypatch) -> None:
    calls = []
    real = stream.compiled

    class Spy:
        def __getattr__(self, name: str):  # noqa: ANN204
            calls.append(name)
            return getattr(real, name)

    monkeypatch.setattr(stream, "compiled", Spy())
    stream.decode_sse(body_of([b"data: a\n\n"]))
    assert calls == ["whole_pieces"]


def test_recorded_stream() -> None:
    doc = json.loads(gzip.decompress(RECORDING.read_bytes()))
    answers = [d.encode("latin-1") for c, d in doc["chunks"] if not c]
    body = b"".join(answers)
    start = body.find(b"\r\n\r\n") + 4  # past the head: the pieces of the body
    pieces = [body[start:]]
    same(body_of(pieces))
    events = [e + b"\n\n" for e in body[start:].split(b"\n\n") if e]
    same(body_of(events))
    for gap in range(len(events)):
        same(body_of(events, gap))


line = st.sampled_from([b"data: {\"a\":1}", b"data: [DONE]", b"event: x", b": ping", b"data:x",
                        b"", b"id: 3", b"data: a\rb", b"retry: 1"])
event = st.lists(line, min_size=1, max_size=3).map(lambda ls: b"\n".join(ls))
sep = st.sampled_from([b"\n\n", b"\n\n", b"\n\n\n", b"\r\n\r\n", b"\n", b""])


@settings(max_examples=1500, deadline=None)
@given(st.lists(st.tuples(event, sep), max_size=8), st.lists(st.integers(0, 400), max_size=4),
       st.one_of(st.none(), st.integers(0, 5)))
def test_random_bodies(parts, cuts, gap_at) -> None:
    data = b"".join(e + s for e, s in parts)
    at = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    pieces = [data[a:b] for a, b in zip(at, at[1:])] or [b""]
    same(body_of(pieces, gap_at))
    whole = [e + s for e, s in parts]  # a piece per event, as a server writes them
    if whole:
        same(body_of(whole, gap_at))
