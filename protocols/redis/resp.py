"""RESP2/RESP3 framing: one frame per command or reply, parsed incrementally, values skipped.

A frame is one top-level RESP value (a command is an array of bulk strings, or an inline
line). The decoder keeps, per direction, only a stack of element counts and the few small
parts a span needs (the command and its first argument, the reply's type, error prefix and
the first element of a push): a bulk string that is not needed, or longer than NEED_MAX,
is stepped over by its length, which may run past the bytes at hand (the tracker skips it
by position), so memory stays bounded whatever the values' size.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from ..base import Direction, Frame, ParseResult, ParserState, positional_maker

NEED_MAX = 128  # longest argument kept (a command, a key, a database index)
WINDOW = 4096  # bytes copied out of the tracker's buffer per step
LINE_PEEK = 512  # a one-line value longer than this is read for its start, then skipped
MAX_HEADER = 24  # a type byte, a length of at most 20 digits, CRLF
MAX_DEPTH = 32  # nested aggregates; deeper is not RESP a server sends
MAX_COUNT = 1 << 31  # elements of one aggregate (the server's own limit is lower)

# commands whose first argument names a subcommand (CLIENT SETNAME, CONFIG GET)
CONTAINERS = frozenset({
    "ACL", "CLIENT", "CLUSTER", "COMMAND", "CONFIG", "FUNCTION", "LATENCY", "MEMORY",
    "MODULE", "OBJECT", "PUBSUB", "SCRIPT", "SLOWLOG", "XGROUP", "XINFO"})

_ARRAY, _ATTRIBUTE, _NULL = 42, 124, 95  # * | _
_SIMPLE, _ERROR, _INTEGER, _BLOB_ERROR = 43, 45, 58, 33  # + - : !
_INLINE = 1  # skip_line's mark for an inline command's line
# aggregate types: how many values each element counts for (maps and attributes: pairs)
_AGGREGATES = {42: 1, 126: 1, 62: 1, 37: 2, 124: 2}  # * ~ > % |
_BLOBS = frozenset(b"$!=")  # bulk string, blob error, verbatim string
_LINES = frozenset(b"+-:_,#(")  # simple string, error, integer, null, double, bool, big number
_NULLABLE = frozenset(b"$*")
_ONE_LINE = frozenset(b"+-:")  # RESP2's -1 lengths
_STARTS = _LINES | _BLOBS | frozenset(_AGGREGATES)
_INLINE_START = frozenset(b"abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ\r")
_CRLF = b"\r\n"
_FRAME, _NEED_MORE, _INVALID = ParseResult.FRAME, ParseResult.NEED_MORE, ParseResult.INVALID


@dataclass(slots=True, kw_only=True)
class RedisFrame(Frame):
    """A command (`args`: its first parts, decoded; `argc`: how many it had) or a reply
    (`kind`: its RESP type byte, `error`: the error's first word, `head`: a push's or
    array's first element when short, `count`: a top-level aggregate's length, `last_int`:
    its third element when an integer, what (un)subscribe confirmations end with)."""

    args: list[str] | None = None
    argc: int = 0
    inline: bool = False
    kind: int = 0
    error: str | None = None
    text: str = ""  # a short simple-string reply (OK, QUEUED, RESET)
    head: str = ""
    count: int = -1
    last_int: int | None = None
    after_gap: bool = False  # the first frame after bytes of this direction were lost
    confirmed: int = 0  # a (un)subscribe command: confirmations come so far


_new_frame = positional_maker(RedisFrame, ())


def _simple(data: bytes, requests: bool) -> tuple[ParseResult, RedisFrame, int] | None:
    """The usual frames whole in `data`, in fewer steps than the general loop: a command
    of short bulk strings, a reply that is one line or one bulk string. None: any other
    shape, or one cut short (the general loop then reads it)."""
    kind = data[0]
    if requests:
        if kind != _ARRAY:
            return None
        cr = data.find(_CRLF, 1, MAX_HEADER)
        count = data[1:cr]
        if cr < 0 or not count.isdigit():
            return None
        argc = int(count)
        if not 0 < argc <= 8:
            return None
        pos, end, args = cr + 2, len(data), []
        for i in range(argc):
            if pos >= end or data[pos] != 36:  # $
                return None
            cr = data.find(_CRLF, pos + 1, pos + MAX_HEADER)
            size = data[pos + 1:cr]
            if cr < 0 or not size.isdigit():
                return None
            start = cr + 2
            pos = start + int(size) + 2
            if pos > end or data[pos - 2:pos] != _CRLF:
                return None
            if i < 2 or (i == 2 and args[0].upper() in CONTAINERS):
                if pos - start > NEED_MAX + 2:
                    if i < 2:
                        args.append("")  # an argument too long to keep
                else:
                    args.append(data[start:pos - 2].decode("utf-8", "replace"))
        frame = _new_frame()
        frame.args, frame.argc, frame.kind, frame.count = args, argc, kind, argc
        return _FRAME, frame, pos
    if kind == 36:  # $: a bulk string, a value stepped over
        cr = data.find(_CRLF, 1, MAX_HEADER)
        size = data[1:cr]
        if cr < 0 or not size.isdigit():
            return None
        pos = cr + 4 + int(size)
        if pos <= len(data) and data[pos - 2:pos] != _CRLF:
            return None
        frame = _new_frame()
        frame.kind = kind
        return _FRAME, frame, pos
    if kind in _ONE_LINE:  # + - :
        cr = data.find(_CRLF, 1, LINE_PEEK)
        if cr < 0:
            return None
        frame = _new_frame()
        frame.kind = kind
        if kind == _ERROR:
            frame.error = _prefix(data[1:min(cr, 65)].decode("ascii", "replace"))
        elif kind == _SIMPLE and cr <= 17:
            frame.text = data[1:cr].decode("ascii", "replace")
        return _FRAME, frame, cr + 2
    return None


def whole(direction: Direction, data: bytes, state: RESPState, pos: int, start_ns: int,
          end_ns: int, seq: int | None, tid: int, task: int) -> RedisFrame | None:
    """The tracker's one step for the usual event: `data`, a syscall's every byte at an
    empty stream's head, is one frame `_simple` reads. Returns it finished and timed, as
    parse and the tracker's stamping make it; None, nothing changed, for anything else."""
    d = state.decoders[direction]
    if d.frame is not None or d.after_gap or not data:
        return None
    step = _simple(data, d.requests)
    if step is None:
        return None
    if step[2] != len(data):
        # more than one frame (a pipeline): parse, shown these very bytes next, takes this
        # first one as read instead of reading it again
        d.read_ahead = (data, step)
        return None
    frame = step[1]
    frame.direction, frame.stream_pos, frame.start_ns = direction, pos, start_ns
    frame.end_ns = end_ns if end_ns > start_ns else start_ns
    frame.tcp_seq = None if seq is None else seq & 0xFFFFFFFF
    frame.tid, frame.task, frame.size = tid, task, len(data)
    return frame


class Decoder:
    """One direction's place inside the frame being parsed."""

    __slots__ = ("after_gap", "frame", "index", "read_ahead", "requests", "skip_line", "stack",
                 "want", "want_kind")

    def __init__(self, requests: bool) -> None:
        self.requests = requests
        self.after_gap = False
        self.read_ahead: tuple[bytes, tuple] | None = None  # see whole()
        self.reset()

    def reset(self) -> None:
        self.frame: RedisFrame | None = None
        self.stack: list[list[int]] = []  # [elements left, is an attribute]
        self.index = 0  # which top-level element is being read
        self.want = -1  # a kept bulk string of this length is waiting for its bytes
        self.want_kind = 0
        self.skip_line = 0  # inside an over-long line: 0, or the line's type byte


class RESPState(ParserState):
    """Per connection: both directions' decoders and what pairing tracks (the database
    index, pub/sub mode, a transaction)."""

    __slots__ = ("db", "decoders", "evicted", "multi", "orphans", "pushes", "skip_replies",
                 "subscribed")

    def __init__(self, conn) -> None:
        super().__init__(conn)
        self.decoders = (Decoder(self.requests == Direction.EGRESS),
                         Decoder(self.requests == Direction.INGRESS))
        self.db: str | None = "0"  # None: capture began inside the connection, until SELECT
        self.subscribed = False  # a subscription is open: RESP2 arrays may be pushes
        self.multi = False
        self.orphans = 0  # replies whose command was not seen
        self.pushes = 0  # out-of-band messages (pub/sub, invalidations): no span
        self.evicted = 0  # commands ended unanswered past pair.MAX_WAITING
        self.skip_replies = 0  # replies still to come for those


def parse(direction: Direction, buf: memoryview, state: RESPState,
          ) -> tuple[ParseResult, RedisFrame | None, int]:
    """The next frame of `direction` from `buf`, resuming where the last call stopped."""
    d = state.decoders[direction]
    frame = d.frame
    if frame is None:
        ahead = d.read_ahead
        if ahead is not None:
            d.read_ahead = None
            if buf.obj is ahead[0]:  # the bytes `whole` just read
                return ahead[1]
        if not len(buf):
            return _NEED_MORE, None, 0
        data = bytes(buf[:WINDOW])  # a bounded copy: a pipeline's buffer may be long
        if not d.after_gap:
            done = _simple(data, d.requests)
            if done is not None:
                return done
        frame = d.frame = _new_frame()
        frame.after_gap, d.after_gap = d.after_gap, False
    else:
        data = bytes(buf[:WINDOW])
    end = len(data)
    stack = d.stack
    requests = d.requests
    pos = 0
    while True:
        if d.skip_line:  # inside a line too long to keep: look for its end
            cr = data.find(_CRLF, pos)
            if cr < 0:
                keep = 1 if data.endswith(b"\r") else 0  # its LF may be the next byte
                return _NEED_MORE, None, max(end - keep, pos)
            kind, d.skip_line = d.skip_line, 0
            pos = cr + 2
            if kind == _INLINE:
                d.reset()
                return _FRAME, frame, pos
        elif d.want >= 0:  # a kept bulk string: its bytes and CRLF, whole
            want = d.want
            if end - pos < want + 2:
                return _NEED_MORE, None, pos
            if data[pos + want:pos + want + 2] != _CRLF:
                return _INVALID, None, pos
            text = data[pos:pos + want].decode("utf-8", "replace")
            if d.want_kind == _BLOB_ERROR:
                frame.error = _prefix(text)
            elif requests:
                args = frame.args
                if args is None:
                    frame.args = [text]
                else:
                    args.append(text)
            else:
                frame.head = text.lower()
            pos += want + 2
            d.want = -1
        else:
            if pos >= end:
                return _NEED_MORE, None, pos
            kind = data[pos]
            if requests and not stack and kind != _ARRAY:
                # an inline command (a line of words), only where commands go
                if kind not in _INLINE_START:
                    return _INVALID, None, pos
                cr = data.find(_CRLF, pos, pos + LINE_PEEK)
                if cr < 0:
                    if end - pos < LINE_PEEK:
                        return _NEED_MORE, None, pos
                    _inline(frame, data[pos:pos + LINE_PEEK], partial=True)
                    d.skip_line = _INLINE
                    pos += LINE_PEEK
                    continue
                _inline(frame, data[pos:cr])
                d.reset()
                return _FRAME, frame, cr + 2
            if kind in _LINES:
                cr = data.find(_CRLF, pos + 1, pos + LINE_PEEK)
                if cr < 0:
                    if end - pos < LINE_PEEK:
                        return _NEED_MORE, None, pos
                    if requests:
                        return _INVALID, None, pos
                    _line(frame, d, kind, data[pos + 1:pos + LINE_PEEK])
                    d.skip_line = kind
                    pos += LINE_PEEK
                    continue
                if requests:  # a command's parts are bulk strings
                    return _INVALID, None, pos
                _line(frame, d, kind, data[pos + 1:cr])
                pos = cr + 2
            elif kind in _BLOBS or kind in _AGGREGATES:
                cr = data.find(_CRLF, pos + 1, pos + MAX_HEADER)
                if cr < 0:
                    if end - pos < MAX_HEADER:
                        return _NEED_MORE, None, pos
                    return _INVALID, None, pos
                digits = data[pos + 1:cr]
                pos = cr + 2
                top = len(stack) == 1 and not stack[0][1]  # a top-level value's element
                if not digits.isdigit():
                    if digits != b"-1" or kind not in _NULLABLE or (requests and stack):
                        return _INVALID, None, pos
                    if not stack:  # RESP2's null bulk string or array
                        frame.kind = _NULL
                elif kind in _BLOBS:
                    length = int(digits)
                    if requests:
                        if not top:
                            return _INVALID, None, pos  # a command is an array of strings
                        if _wanted_arg(frame, d.index, length):
                            d.want, d.want_kind = length, kind
                            continue
                        if d.index < 2:
                            _arg(frame, "")  # an argument too long to keep
                    elif not stack:
                        frame.kind = kind
                        if kind == _BLOB_ERROR:
                            if length <= NEED_MAX:
                                d.want, d.want_kind = length, kind
                                continue
                            frame.error = "ERR"
                    elif top and d.index == 0 and length <= 16 and kind != _BLOB_ERROR:
                        d.want, d.want_kind = length, kind
                        continue
                    pos += length + 2  # a value, stepped over by its length
                    if pos <= end and data[pos - 2:pos] != _CRLF:
                        return _INVALID, None, pos
                else:  # an aggregate
                    length = int(digits)
                    if length > MAX_COUNT or len(stack) >= MAX_DEPTH or (requests and stack):
                        return _INVALID, None, pos
                    if not stack and kind != _ATTRIBUTE:
                        frame.kind = kind
                        frame.count = length
                        if requests:
                            frame.argc = length
                    if length:
                        stack.append([length * _AGGREGATES[kind], kind == _ATTRIBUTE])
                        continue
                    if kind == _ATTRIBUTE:
                        continue  # an empty attribute annotates nothing
            else:
                return _INVALID, None, pos
        # one value ended: count it against the aggregates it closes
        while stack:
            top_entry = stack[-1]
            top_entry[0] -= 1
            if len(stack) == 1 and not top_entry[1]:
                d.index += 1
            if top_entry[0] > 0:
                break
            stack.pop()
            if top_entry[1]:  # an attribute annotates the next value, and counts for nothing
                break
        else:
            if frame.kind:
                d.reset()
                return _FRAME, frame, pos
        if pos > end:  # stepped past the bytes copied: the tracker skips them
            return _NEED_MORE, None, pos


def _wanted_arg(frame: RedisFrame, index: int, length: int) -> bool:
    """A command's parts kept: its name and first argument (a key, a subcommand, a database
    index); the second only after a command that takes a subcommand (its key, if any)."""
    if length > NEED_MAX:
        return False
    if index < 2:
        return True
    args = frame.args
    return index == 2 and args is not None and args[0].upper() in CONTAINERS


def _arg(frame: RedisFrame, text: str) -> None:
    if frame.args is None:
        frame.args = [text]
    else:
        frame.args.append(text)


def _line(frame: RedisFrame, d: Decoder, kind: int, line: bytes) -> None:
    """A one-line reply value: what is kept of it (a top-level error's prefix, a short
    status; a push's kind and its count, which (un)subscribe confirmations end with)."""
    stack = d.stack
    if not stack:
        frame.kind = kind
        if kind == _ERROR:
            frame.error = _prefix(line[:64].decode("ascii", "replace"))
        elif kind == _SIMPLE and len(line) <= 16:
            frame.text = line.decode("ascii", "replace")
    elif len(stack) == 1 and not stack[0][1]:
        if d.index == 0 and kind == _SIMPLE and len(line) <= 16:
            frame.head = line.decode("ascii", "replace").lower()
        elif d.index == 2 and kind == _INTEGER and len(line) < 20:
            try:
                frame.last_int = int(line)
            except ValueError:
                pass


_ERROR_CODE = re.compile(r"[A-Z][A-Z0-9_]{0,31}")


def _prefix(text: str) -> str:
    """The error's code: its first word when it is one (WRONGTYPE, ERR, MOVED), else ERR."""
    word = text.split(" ", 1)[0]
    return word if _ERROR_CODE.fullmatch(word) else "ERR"


def _inline(frame: RedisFrame, line: bytes, partial: bool = False) -> None:
    """A command typed as a line (`PING`, `SET k v`): split at spaces, as the server does
    (its quoting aside). A `partial` line is only its first bytes, its last word maybe cut.
    An empty line is a frame of no command (the server ignores it: pairing drops it)."""
    parts = line.split()
    frame.inline = True
    frame.kind = _ARRAY
    frame.argc = len(parts)
    if partial and len(parts) > 1:
        parts = parts[:-1]
    if parts:
        frame.args = [p[:NEED_MAX].decode("utf-8", "replace") for p in parts[:3]]


_COMMAND_AT = re.compile(rb"(?:^|(?<=\r\n))\*[0-9]{1,10}\r\n\$")
_REPLY_AT = re.compile(rb"\r\n[-+:_,#($!=*~>%|]")


def resync(direction: Direction, buf: memoryview, state: RESPState) -> int | None:
    """Where a frame may start after lost bytes: a command's `*<n>` line then `$` (requests), a
    line that starts with a reply's type byte (replies)."""
    d = state.decoders[direction]
    d.reset()
    d.after_gap = True
    data = bytes(buf[:WINDOW])
    if d.requests:
        m = _COMMAND_AT.search(data)
        return m.start() if m else None
    if data[:1] and data[0] in _STARTS:
        return 0
    m = _REPLY_AT.search(data)
    return m.start() + 2 if m else None
