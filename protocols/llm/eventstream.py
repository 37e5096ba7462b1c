"""AWS event stream framing (`application/vnd.amazon.eventstream`, Bedrock's streams) split
into timed frames, incrementally and with bounded work.

A frame is: total length (4 bytes, big endian), headers length (4), a CRC32 of those 8
bytes, the headers, the payload, a CRC32 of everything before it. Each header is a name
(1-byte length), a type byte and a typed value. A frame is timed by the body piece holding
its last byte, as SSE events are (stream.py).

A frame whose CRCs do not match is counted as corrupt and skipped. Bytes the kernel did not
capture leave a gap: the frame cut by it is lost, and decoding resynchronises on the next
position whose 8 length bytes match the prelude CRC after them (one check per byte, at most
MAX_RESYNC_BYTES after a gap before the rest of the body is given up, counted).
"""

from __future__ import annotations

import struct
import zlib
from dataclasses import dataclass, field

from ..layers import Body

PRELUDE = 12  # total length, headers length, prelude CRC
MIN_FRAME = PRELUDE + 4  # no headers, no payload, the message CRC
MAX_FRAME = 16 * 1024 * 1024 + 128 * 1024  # AWS: payloads up to 16 MiB, headers up to 128 KiB
MAX_RESYNC_BYTES = 64 * 1024
MAX_HEADERS = 64  # per frame; Bedrock sends three or four

_PRELUDE = struct.Struct(">III")
_U16, _U32 = struct.Struct(">H"), struct.Struct(">I")
# header value types with a fixed size: true, false, byte, short, int, long, timestamp, uuid
_FIXED = {0: 0, 1: 0, 2: 1, 3: 2, 4: 4, 5: 8, 8: 8, 9: 16}
_INTS = {2: ">b", 3: ">h", 4: ">i", 5: ">q", 8: ">q"}

HeaderValue = str | int | bool | bytes


@dataclass(frozen=True, slots=True)
class Frame:
    headers: dict[str, HeaderValue]
    payload: bytes
    ns: int  # kernel time of the piece holding the frame's last byte


@dataclass(slots=True)
class Frames:
    frames: list[Frame] = field(default_factory=list)
    dropped: int = 0  # gaps in the capture (each lost at least one frame)
    corrupt: int = 0  # frames whose lengths, CRCs or headers did not hold together


class HeaderError(ValueError):
    """Headers that run past their declared length or have an unknown type."""


def parse_headers(data: bytes) -> dict[str, HeaderValue]:
    headers: dict[str, HeaderValue] = {}
    at = 0
    while at < len(data):
        if len(headers) >= MAX_HEADERS:
            raise HeaderError("too many headers")
        size = data[at]
        name = data[at + 1 : at + 1 + size]
        at += 1 + size
        if len(name) != size or at >= len(data):
            raise HeaderError("header name past the end")
        kind = data[at]
        at += 1
        if kind in _FIXED:
            raw = data[at : at + _FIXED[kind]]
            if len(raw) != _FIXED[kind]:
                raise HeaderError("header value past the end")
            at += len(raw)
            value: HeaderValue
            if kind in (0, 1):
                value = kind == 0
            elif kind in _INTS:
                value = struct.unpack(_INTS[kind], raw)[0]
            else:
                value = raw
        elif kind in (6, 7):  # bytes, string: a 2-byte length first
            if at + 2 > len(data):
                raise HeaderError("header length past the end")
            (length,) = _U16.unpack_from(data, at)
            raw = data[at + 2 : at + 2 + length]
            if len(raw) != length:
                raise HeaderError("header value past the end")
            at += 2 + length
            value = raw.decode("utf-8", "replace") if kind == 7 else raw
        else:
            raise HeaderError(f"header type {kind}")
        headers[name.decode("utf-8", "replace")] = value
    return headers


def _prelude(buf: bytearray | bytes, at: int) -> tuple[int, int] | None:
    """(total, headers length) if the 12 bytes at `at` are a plausible prelude."""
    total, headers, crc = _PRELUDE.unpack_from(buf, at)
    if zlib.crc32(memoryview(buf)[at : at + 8]) != crc:
        return None
    if total < MIN_FRAME or total > MAX_FRAME or headers > total - MIN_FRAME:
        return None
    return total, headers


class _Decoder:
    """Frames out of pieces fed in order; `gap()` between pieces that do not follow."""

    __slots__ = ("buf", "out", "synced", "scanned")

    def __init__(self) -> None:
        self.buf = bytearray()
        self.out = Frames()
        self.synced = True  # False after a gap: look for the next valid prelude
        self.scanned = 0  # bytes searched since the gap

    def gap(self) -> None:
        self.out.dropped += 1
        self.buf.clear()
        self.synced, self.scanned = False, 0

    def feed(self, data: bytes, ns: int) -> None:
        self.buf += data
        while True:
            if not self.synced and not self._resync():
                return
            if len(self.buf) < PRELUDE:
                return
            found = _prelude(self.buf, 0)
            if found is None:  # lengths or CRC broken while in step: the stream is damaged
                self.out.corrupt += 1
                self.synced, self.scanned = False, 0
                del self.buf[:1]
                continue
            total, headers_length = found
            if len(self.buf) < total:
                return
            frame = bytes(self.buf[:total])
            del self.buf[:total]
            self._frame(frame, total, headers_length, ns)

    def _resync(self) -> bool:
        """Drop bytes up to the next plausible prelude; False: more bytes are needed (or
        the search gave up)."""
        if self.scanned > MAX_RESYNC_BYTES:
            self.buf.clear()
            return False
        at = 0
        limit = len(self.buf) - PRELUDE
        while at <= limit:
            if _prelude(self.buf, at) is not None:
                del self.buf[:at]
                self.synced = True
                return True
            at += 1
            self.scanned += 1
            if self.scanned > MAX_RESYNC_BYTES:
                self.out.corrupt += 1  # given up: the rest of this body is not read
                self.buf.clear()
                return False
        del self.buf[: max(at, 0)]
        return False

    def _frame(self, frame: bytes, total: int, headers_length: int, ns: int) -> None:
        (crc,) = _U32.unpack_from(frame, total - 4)
        if zlib.crc32(memoryview(frame)[: total - 4]) != crc:
            self.out.corrupt += 1
            return
        try:
            headers = parse_headers(frame[PRELUDE : PRELUDE + headers_length])
        except HeaderError:
            self.out.corrupt += 1
            return
        self.out.frames.append(Frame(headers, frame[PRELUDE + headers_length : total - 4], ns))


def decode_eventstream(body: Body) -> Frames:
    decoder = _Decoder()
    expect = 0
    in_gap = False  # one gap counted per run of missing pieces
    for piece in body.pieces:
        # a jump in offset is a gap; so is a piece past the keep limit (time, no bytes)
        if piece.offset != expect or not piece.data:
            if not in_gap:
                decoder.gap()
            in_gap = True
            if not piece.data:
                expect = -1
                continue
        in_gap = False
        expect = piece.offset + len(piece.data)
        decoder.feed(piece.data, piece.ns)
    return decoder.out


def encode_frame(headers: dict[str, HeaderValue], payload: bytes) -> bytes:
    """One frame (string, bytes, bool and int32 headers): for local test servers and tests."""
    raw = bytearray()
    for name, value in headers.items():
        key = name.encode()
        raw += bytes([len(key)]) + key
        if isinstance(value, bool):
            raw.append(0 if value else 1)
        elif isinstance(value, int):
            raw += b"\x04" + struct.pack(">i", value)
        else:
            data = value.encode() if isinstance(value, str) else value
            raw += (b"\x07" if isinstance(value, str) else b"\x06") + _U16.pack(len(data)) + data
    total = PRELUDE + len(raw) + len(payload) + 4
    prelude = struct.pack(">II", total, len(raw))
    head = prelude + _U32.pack(zlib.crc32(prelude)) + bytes(raw) + payload
    return head + _U32.pack(zlib.crc32(head))
