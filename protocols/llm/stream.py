"""Streamed response bodies (SSE, NDJSON) split into timed events.

An event is timed by the body piece holding its last byte (for SSE, the blank line that
ends it): that is when a client could act on it (a read's return) or when a server handed
it over (a write's entry). Bytes the kernel did not capture leave a gap: the event cut by
it is dropped and decoding resumes at the next event boundary, never gluing two halves.
"""

from __future__ import annotations

import re
from collections.abc import Iterator
from dataclasses import dataclass
from typing import NamedTuple

from otel_ebpf import _fast

from ..layers import Body, BodyPiece

# this file's compiled implementation (_stream.c: whole_pieces, and events.py's OpenAI chunk
# reader), None on the pure Python path; looked up when called, so setting it to None turns
# both off
compiled = _fast.accelerator(__name__)

# an SSE event ends at a blank line; lines end with CRLF, LF or CR. A lone CR counts only
# once the next byte shows it is not the first half of a CRLF (it may be in the next piece).
_SSE_END = re.compile(rb"(?:\r\n|\n|\r(?=[^\n]))(?:\r\n|\n|\r(?=[^\n]))")
_LINE = re.compile(rb"\r\n|\n|\r")
_NDJSON_END = re.compile(rb"\n")


class StreamEvent(NamedTuple):  # one per chunk of a stream: a tuple is the cheapest to make
    name: str  # the SSE "event:" field ("" when absent; always "" for NDJSON)
    data: bytes  # the SSE data lines joined by "\n", or one NDJSON line
    ns: int  # kernel time of the piece holding the event's last byte


@dataclass(slots=True)
class Decoded:
    events: list[StreamEvent]
    dropped: int  # events cut by a gap (counted as one per gap)


def _sse_whole_pieces_python(body: Body) -> tuple[list[StreamEvent], int, int]:
    """The events of the body's first pieces that each end where an event ends, LF only
    and without a gap (a server writes an event at a time; a client mostly reads whole
    ones): what _blocks and _sse_event make of them, without the search. Also the index of
    the first piece not read so, and its expected offset, for _blocks to go on from."""
    events: list[StreamEvent] = []
    expect = 0
    pieces = body.pieces
    for i, piece in enumerate(pieces):
        data = piece.data
        if piece.offset != expect or not data.endswith(b"\n\n") or b"\r" in data:
            return events, i, expect
        # LF only: the search's separators are exactly split()'s
        blocks = data.split(b"\n\n")
        if blocks[-1]:  # a third LF: the piece's last separator began one byte earlier
            return events, i, expect
        expect += len(data)
        ns = piece.ns
        for block in blocks[:-1]:
            if block.startswith(b"data: ") and b"\n" not in block:  # one data line
                events.append(StreamEvent("", block[6:], ns))
            else:
                event = _sse_event(block, ns)
                if event is not None:
                    events.append(event)
    return events, len(pieces), expect


def _sse_whole_pieces(body: Body) -> tuple[list[StreamEvent], int, int]:
    """_sse_whole_pieces_python's result, from _stream.c where it is built."""
    fast = compiled
    if fast is not None:
        return fast.whole_pieces(body.pieces)
    return _sse_whole_pieces_python(body)


def _blocks(body: Body, end: re.Pattern[bytes], first: int = 0, expect: int = 0
            ) -> Iterator[tuple[bytes, int] | None]:
    """The body split at `end`, each block with the time of its last piece; None marks a
    gap (the block before it was cut and is not yielded). From piece `first` on, at
    offset `expect`, when the pieces before it ended where blocks end."""
    buf = bytearray()
    synced = True  # False after a gap: the first block then is the tail of a cut event
    in_gap = False
    last_ns = 0
    for piece in body.pieces[first:] if first else body.pieces:
        # a jump in offset is a gap; so is a piece past the keep limit (time, no bytes)
        if piece.offset != expect or not piece.data:
            if not in_gap:
                yield None
            in_gap, synced = True, False
            buf.clear()
            if not piece.data:
                expect = -1
                continue
        in_gap = False
        scan_from = max(len(buf) - 3, 0)  # a separator may straddle two pieces
        buf += piece.data
        expect = piece.offset + len(piece.data)
        last_ns = piece.ns
        start = 0
        for match in end.finditer(buf, scan_from):
            if synced:
                yield bytes(buf[start : match.start()]), piece.ns
            synced = True
            start = match.end()
        del buf[:start]
    if buf and synced and expect == body.size:  # the last event, unterminated at the end
        yield bytes(buf), last_ns


def _sse_event(block: bytes, ns: int) -> StreamEvent | None:
    if block.startswith(b"data: ") and b"\n" not in block and b"\r" not in block:
        return StreamEvent("", block[6:], ns)  # one data line, the usual event
    name = ""
    data: list[bytes] = []
    for line in _LINE.split(block):
        if not line or line.startswith(b":"):  # comments keep connections alive
            continue
        field, _, value = line.partition(b":")
        if value.startswith(b" "):
            value = value[1:]
        if field == b"data":
            data.append(value)
        elif field == b"event":
            name = value.decode("utf-8", "replace")
    if not data:  # the SSE spec dispatches nothing for an event without data
        return None
    return StreamEvent(name, b"\n".join(data), ns)


def decode_sse(body: Body) -> Decoded:
    events, first, expect = _sse_whole_pieces(body)
    if first == len(body.pieces):
        return Decoded(events, 0)
    return decode_sse_rest(body, first, expect, events)


def decode_sse_rest(body: Body, first: int, expect: int,
                    events: list[StreamEvent] | None = None) -> Decoded:
    """The events from piece `first` on (at offset `expect`), after `events`: the body's
    pieces before it were read by piece (_sse_whole_pieces, or events.read_sse's C reader)."""
    events = [] if events is None else events
    dropped = 0
    for block in _blocks(body, _SSE_END, first, expect):
        if block is None:
            dropped += 1
            continue
        event = _sse_event(*block)
        if event is not None:
            events.append(event)
    return Decoded(events, dropped)


def decode_ndjson(body: Body) -> Decoded:
    events: list[StreamEvent] = []
    dropped = 0
    for block in _blocks(body, _NDJSON_END):
        if block is None:
            dropped += 1
            continue
        line = block[0].strip()
        if line:
            events.append(StreamEvent("", line, block[1]))
    return Decoded(events, dropped)


if compiled is not None:
    compiled.setup(StreamEvent, _sse_event, BodyPiece)
