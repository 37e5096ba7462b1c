"""AWS event stream bodies -> timed frames: whole, byte by byte, across gaps, with broken
CRCs and garbage; every header type; bounded resynchronisation."""

from __future__ import annotations

import struct
import zlib

import botocore.eventstream as reference
from hypothesis import given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.llm.eventstream import (
    MAX_RESYNC_BYTES,
    Frame,
    HeaderError,
    decode_eventstream,
    encode_frame,
    parse_headers,
)

from .build import Lost, body

HEADERS = {":event-type": "contentBlockDelta", ":content-type": "application/json",
           ":message-type": "event"}


def frames(n: int) -> list[bytes]:
    return [encode_frame(HEADERS, b'{"contentBlockIndex":0,"delta":{"text":"w%d"}}' % i)
            for i in range(n)]


def test_encoded_frames_are_what_botocore_decodes():
    # the encoder the test servers use against the SDK's own decoder: same bytes, same CRCs
    wire = b"".join(frames(3))
    buffer = reference.EventStreamBuffer()
    buffer.add_data(wire)
    decoded = list(buffer)
    assert [m.headers for m in decoded] == [HEADERS] * 3
    assert decoded[2].payload == b'{"contentBlockIndex":0,"delta":{"text":"w2"}}'


def test_whole_body_gives_every_frame_timed_by_its_last_piece():
    wire = frames(3)
    out = decode_eventstream(body((wire[0] + wire[1][:5], 10), (wire[1][5:], 20),
                                  (wire[2], 30)))
    assert [(f.headers[":event-type"], f.ns) for f in out.frames] == [
        ("contentBlockDelta", 10), ("contentBlockDelta", 20), ("contentBlockDelta", 30)]
    assert out.frames[1].payload.endswith(b'"w1"}}')
    assert (out.dropped, out.corrupt) == (0, 0)


def test_byte_by_byte_is_the_same_as_whole():
    wire = b"".join(frames(4))
    whole = decode_eventstream(body((wire, 1)))
    single = decode_eventstream(body(*[(wire[i : i + 1], i) for i in range(len(wire))]))
    assert [f.payload for f in single.frames] == [f.payload for f in whole.frames]
    assert len(single.frames) == 4 and single.corrupt == 0
    # each frame is timed by the byte that completed it
    ends = [sum(len(x) for x in frames(4)[: i + 1]) - 1 for i in range(4)]
    assert [f.ns for f in single.frames] == ends


def test_a_gap_loses_the_cut_frame_and_decoding_resyncs_on_the_next_prelude():
    wire = frames(4)
    out = decode_eventstream(body((wire[0] + wire[1][:20], 1), Lost(len(wire[1]) - 20 + 7),
                                  (wire[2][7:] + wire[3], 3)))
    # frame 1 was cut by the gap; frame 2 lost its first 7 bytes: the next whole one is 3
    assert [f.payload[-5:] for f in out.frames] == [b'"w0"}}'[-5:], b'"w3"}}'[-5:]]
    assert out.dropped == 1


def test_a_gap_on_a_frame_boundary_loses_nothing_after_it():
    wire = frames(3)
    out = decode_eventstream(body((wire[0], 1), Lost(len(wire[1])), (wire[2], 3)))
    assert len(out.frames) == 2 and out.dropped == 1 and out.corrupt == 0


def test_a_bad_message_crc_skips_that_frame_only():
    wire = frames(3)
    broken = wire[1][:-1] + bytes([wire[1][-1] ^ 0xFF])
    out = decode_eventstream(body((wire[0] + broken + wire[2], 1)))
    assert len(out.frames) == 2 and out.corrupt == 1


def test_a_bad_prelude_in_step_is_counted_and_the_next_frame_found():
    wire = frames(2)
    out = decode_eventstream(body((b"\x00garbage!\x01\x02\x03\x04\x05" + wire[0] + wire[1], 1)))
    assert len(out.frames) == 2 and out.corrupt == 1


def test_resync_is_bounded_after_a_gap():
    junk = bytes(range(256)) * ((MAX_RESYNC_BYTES // 256) + 8)
    out = decode_eventstream(body((b"x", 1), Lost(3), (junk, 2), (b"".join(frames(2)), 3)))
    assert out.frames == [] and out.dropped == 1 and out.corrupt == 1


def test_header_types():
    raw = bytearray()
    for name, kind, value in ((b"t", 0, b""), (b"f", 1, b""), (b"b", 2, b"\xff"),
                              (b"s", 3, b"\x01\x00"), (b"i", 4, struct.pack(">i", -5)),
                              (b"l", 5, struct.pack(">q", 2**40)),
                              (b"y", 6, b"\x00\x02ab"), (b"str", 7, b"\x00\x03xyz"),
                              (b"ts", 8, struct.pack(">q", 1700)), (b"u", 9, b"u" * 16)):
        raw += bytes([len(name)]) + name + bytes([kind]) + value
    assert parse_headers(bytes(raw)) == {"t": True, "f": False, "b": -1, "s": 256, "i": -5,
                                         "l": 2**40, "y": b"ab", "str": "xyz", "ts": 1700,
                                         "u": b"u" * 16}


def test_headers_past_their_length_are_refused():
    for raw in (b"\x05ab", b"\x01a", b"\x01a\x07\x00\x09abc", b"\x01a\x04\x00", b"\x01a\x63"):
        try:
            parse_headers(raw)
        except HeaderError:
            continue
        raise AssertionError(raw)


def test_a_frame_with_bad_headers_is_corrupt_not_raised():
    headers = b"\x01a\x63"  # an unknown type
    prelude = struct.pack(">II", 12 + len(headers) + 4, len(headers))
    head = prelude + struct.pack(">I", zlib.crc32(prelude)) + headers
    wire = head + struct.pack(">I", zlib.crc32(head))
    out = decode_eventstream(body((wire + frames(1)[0], 1)))
    assert len(out.frames) == 1 and out.corrupt == 1


@settings(max_examples=300, deadline=None)
@given(wire=st.binary(max_size=600), cuts=st.lists(st.integers(0, 600), max_size=6))
def test_garbage_never_raises_and_keeps_its_bounds(wire, cuts):
    points = sorted({c for c in cuts if c < len(wire)} | {0})
    pieces = [(wire[a:b], i) for i, (a, b) in enumerate(zip(points, [*points[1:], len(wire)],
                                                            strict=True)) if wire[a:b]]
    out = decode_eventstream(body(*pieces) if pieces else body())
    assert all(isinstance(f, Frame) for f in out.frames)


@settings(max_examples=200, deadline=None)
@given(n=st.integers(1, 5), cuts=st.lists(st.integers(1, 400), max_size=8),
       prefix=st.binary(max_size=20))
def test_splitting_never_changes_the_frames(n, cuts, prefix):
    wire = b"".join(frames(n))
    points = sorted({c for c in cuts if c < len(wire)} | {0})
    pieces = [(wire[a:b], i) for i, (a, b) in enumerate(zip(points, [*points[1:], len(wire)],
                                                            strict=True))]
    split = decode_eventstream(body(*pieces))
    assert [f.payload for f in split.frames] == [f.payload for f in
                                                 decode_eventstream(body((wire, 0))).frames]
    # garbage before the first frame costs at most that frame's place, never a later one
    after = decode_eventstream(body((prefix + wire, 0)))
    assert len(after.frames) >= n - 1
