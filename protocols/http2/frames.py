"""HTTP/2 wire frames (RFC 9113, sections 4 and 6): the frame header through hyperframe, and
the strict shape checks that decide whether bytes can be HTTP/2 at all (inference and
resync)."""

from __future__ import annotations

import struct
from typing import NamedTuple

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"  # the client's connection preface (section 3.4)
HEADER_LEN = 9
DEFAULT_MAX_FRAME = 1 << 14  # SETTINGS_MAX_FRAME_SIZE's initial value
MAX_FRAME_ALLOWED = (1 << 24) - 1  # the largest a peer may allow

DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY, WINDOW_UPDATE, \
    CONTINUATION = range(10)
END_STREAM, END_HEADERS, PADDED, HAS_PRIORITY = 0x01, 0x04, 0x08, 0x20
SETTINGS_MAX_FRAME_SIZE = 0x05

# flags each type defines (section 6); the strict check rejects any other
_DEFINED_FLAGS = {
    DATA: END_STREAM | PADDED, HEADERS: END_STREAM | END_HEADERS | PADDED | HAS_PRIORITY,
    PRIORITY: 0, RST_STREAM: 0, SETTINGS: 0x01, PUSH_PROMISE: END_HEADERS | PADDED,
    PING: 0x01, GOAWAY: 0, WINDOW_UPDATE: 0, CONTINUATION: END_HEADERS,
}
ON_STREAM = frozenset({DATA, HEADERS, PRIORITY, RST_STREAM, PUSH_PROMISE, CONTINUATION})
ON_CONNECTION = frozenset({SETTINGS, PING, GOAWAY})
_FIXED_LENGTH = {PRIORITY: 5, RST_STREAM: 4, PING: 8, WINDOW_UPDATE: 4}


class Head(NamedTuple):
    """A frame header, raw."""

    length: int
    type: int
    flags: int
    stream: int
    reserved: bool  # the R bit, never set by a conforming sender


_HEAD = struct.Struct(">BHBBL").unpack_from  # length in 8 + 16 bits, type, flags, R + stream
_new_head = tuple.__new__


def head_at(buf, pos: int) -> Head:
    hi, lo, kind, flags, stream = _HEAD(buf, pos)
    return _new_head(Head, ((hi << 16) | lo, kind, flags, stream & 0x7FFFFFFF,
                            stream > 0x7FFFFFFF))


def sane(h: Head, max_len: int) -> bool:
    """What every frame must satisfy whatever we know: size, stream, fixed lengths."""
    if h.type <= HEADERS:  # DATA, HEADERS: the most of any connection
        return h.length <= max_len and h.stream != 0
    if h.length > max_len:
        return False
    if h.type in ON_STREAM and not h.stream or h.type in ON_CONNECTION and h.stream:
        return False
    fixed = _FIXED_LENGTH.get(h.type)
    if fixed is not None and h.length != fixed:
        return False
    if h.type == SETTINGS:
        return h.length % 6 == 0 and not (h.flags & 0x01 and h.length)
    return h.type != GOAWAY or h.length >= 8


def strict(h: Head, max_len: int = DEFAULT_MAX_FRAME) -> bool:
    """A frame a conforming peer may have sent, judged with little else known: a defined
    type, only its defined flags, no R bit, at most `max_len` long (by default the initial
    maximum: a frame size no peer may exceed before its SETTINGS allow it)."""
    defined = _DEFINED_FLAGS.get(h.type)
    return (defined is not None and not h.flags & ~defined and not h.reserved
            and sane(h, max_len))


def chain(buf, pos: int = 0) -> list[tuple[int, Head]] | None:
    """The frames from pos to the end of buf, each header strictly valid (the last one may
    run past the end); None when some header is not, or no header fits."""
    frames: list[tuple[int, Head]] = []
    n = len(buf)
    while pos + HEADER_LEN <= n:
        h = head_at(buf, pos)
        if not strict(h):
            return None
        frames.append((pos, h))
        pos += HEADER_LEN + h.length
    return frames or None


def boundary(buf: bytes, trust_start: bool = False) -> int | None:
    """The first offset where HTTP/2 frames plausibly begin: two valid headers in a row, or
    one frame that ends exactly where buf does (random bytes are tried at every offset);
    with `trust_start`, one valid header at offset 0 is enough (bytes after a loss begin
    where a write began, which is almost always where a frame began)."""
    n = len(buf)
    pos = 0
    while pos + HEADER_LEN <= n:
        if pos:
            # a strict header begins with a zero byte (length <= 16384): let find() skip
            pos = buf.find(b"\x00", pos, n - HEADER_LEN + 1)
            if pos < 0:
                return None
        if buf[pos + 1] <= 0x40 and buf[pos + 3] <= CONTINUATION:
            frames = chain(buf, pos)
            if frames is not None:
                last, h = frames[-1]
                if len(frames) >= 2 or last + HEADER_LEN + h.length == n or (
                        trust_start and not pos):
                    return pos
        pos += 1
    return None

# RFC 9113, section 7: error codes of RST_STREAM and GOAWAY, by name (error.type of reset streams)
ERROR_NAMES = (
    "NO_ERROR", "PROTOCOL_ERROR", "INTERNAL_ERROR", "FLOW_CONTROL_ERROR", "SETTINGS_TIMEOUT",
    "STREAM_CLOSED", "FRAME_SIZE_ERROR", "REFUSED_STREAM", "CANCEL", "COMPRESSION_ERROR",
    "CONNECT_ERROR", "ENHANCE_YOUR_CALM", "INADEQUATE_SECURITY", "HTTP_1_1_REQUIRED",
)


def error_name(code: int) -> str:
    return ERROR_NAMES[code] if 0 <= code < len(ERROR_NAMES) else f"0x{code:x}"
