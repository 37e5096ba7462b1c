"""HTTP/2 framing: wire frames in, one contract frame per request and one per response out.

How HTTP/2 maps onto the tracker's frames (docs/decisions.md, "HTTP/2: our own HPACK table
walk, frames per message"). The tracker times a
frame from the first byte consumed after the previous frame of that direction to the last
byte of the FRAME result, and correlate/ takes every frame of the request direction for a
request and every frame of the other for a response. So:

- The request direction yields exactly one frame per request, returned as soon as its
  HEADERS block is complete (a server request is known while it is handled), with the
  complete frames that follow it in the buffer (its DATA, WINDOW_UPDATE, PING...) taken
  into it, so that the next request's timing starts at its own HEADERS.
- The response direction yields exactly one frame per response, returned with the frame
  that ends it (END_STREAM, or RST_STREAM from the server), so the span ends on its last
  byte. What the stream carried before (headers, DATA, trailers) is kept per stream.
- Frames of no message (SETTINGS, PING, WINDOW_UPDATE, PRIORITY, a DATA frame that
  arrives alone) are consumed with NEED_MORE, which the tracker counts into the *next*
  frame of that direction: its `lead`. The contract has no way to consume bytes that
  belong to no frame, so stitch settles the lead: stream_pos and tcp_seq move to the
  HEADERS' first byte (exact: the parser counts every byte), and unless the lead came in
  the same syscall as the HEADERS, start_ns becomes the time of the HEADERS' last byte
  and the thread and task are cleared (unknown, never another write's).
- DATA is never waited for: what the buffer holds is read (gRPC message prefixes, and the
  body pieces of a stream a layer wants, timed by their first byte), the rest is skipped by
  length, so payload beyond the capture costs nothing and never loses the framing. Header blocks (HEADERS/PUSH_PROMISE + CONTINUATION) are decoded whole, all
  of them, pushed streams included, to keep each direction's HPACK table in step.
"""

from __future__ import annotations

import struct
from collections import OrderedDict
from dataclasses import dataclass, field

from hyperframe.exceptions import HyperframeError
from hyperframe.frame import Frame as WireFrame

from otel_ebpf import _fast

from ..base import ConnInfo, Direction, Frame, ParseResult, ParserState, Role, positional_maker
from ..common import is_secret
from ..http1.parse import CONTEXT_HEADERS
from ..layers import Body, HTTPLayer, first_wanting
from . import frames as f
from .grpc import PREFIX_LEN, Messages
from .headers import Block, HeaderDecoder, Malformed

NEED, FRAME, INVALID = ParseResult.NEED_MORE, ParseResult.FRAME, ParseResult.INVALID
_head, _new_head = f._HEAD, tuple.__new__
_prefix = struct.Struct(">BL").unpack_from  # a gRPC message's flag and length
Step = tuple[ParseResult, Frame | None, int]
MAX_STREAMS = 1024  # open streams tracked per connection; the oldest beyond are dropped
MAX_BLOCK = 256 * 1024  # a header block larger than this is given up (and HPACK with it)
_PLAIN_MASK = f.END_HEADERS | f.PADDED | f.HAS_PRIORITY  # a HEADERS frame that is all block
_REQUEST_PSEUDO = frozenset({":method", ":path", ":scheme", ":authority", ":protocol"})
# the frame loop in C where it is built (_parse.c parse, this file's `parse` its
# reference); False: this file's `parse` (tests compare the two)
COMPILED = True
# this file's compiled implementation (_parse.c), None on the pure Python path; looked up
# when a parser is made (HTTP2Parser), so setting it to None turns the compiled frame loop off
compiled = _fast.accelerator(__name__)


# --- frames and state --------------------------------------------------------------------


@dataclass(slots=True, kw_only=True)
class H2Message(Frame):
    """One side of a stream. Fields are None when absent or unknown (HPACK we never saw)."""

    stream_id: int = 0
    content_type: str | None = None
    user_agent: str | None = None
    headers: dict[str, list[str]] = field(default_factory=dict)  # capture_headers only
    unknown_fields: int = 0  # header fields we could not resolve (capture began later)

    def __post_init__(self) -> None:
        self.exchange = self.stream_id  # correlate/ pairs a stream's response with its request
    data_size: int = 0  # DATA payload bytes, padding excluded, captured or not
    messages: Messages = field(default_factory=Messages)  # gRPC length-prefixed messages
    # the layer that wants this stream, and the body read for it (else DATA is only counted)
    layer: HTTPLayer | None = None
    body: Body | None = None
    ended: bool = False  # END_STREAM seen
    # byte counts of the direction (see `lead`): where the tracker began timing this frame,
    # where the message's first HEADERS began, and whether both came in one syscall
    mark: int = 0
    head: int = 0
    epoch: int = 0
    head_epoch: int = 0
    head_arrival: int | None = None
    exact: bool = True

    @property
    def lead(self) -> int:
        """Bytes of other frames the tracker counted into this frame before its message."""
        return self.head - self.mark if self.epoch == self.head_epoch else 0


@dataclass(slots=True, kw_only=True)
class H2Request(H2Message):
    method: str | None = None
    path: str | None = None
    scheme: str | None = None
    authority: str | None = None
    reset: int | None = None  # RST_STREAM error code, when the requester ended the stream
    refused: bool = False  # beyond the last stream a GOAWAY said would be processed
    response_started: bool = False
    stale: bool = False  # bytes of its stream were lost, or it was dropped from the table


@dataclass(slots=True, kw_only=True)
class H2Response(H2Message):
    status: int | None = None  # the final :status
    interim: tuple[int, ...] = ()  # 1xx before it
    trailers: bool = False  # a header block came after the headers (gRPC's status)
    grpc_status: int | None = None
    grpc_message: str | None = None
    reset: int | None = None  # RST_STREAM error code, when the responder ended the stream
    final: bool = False  # the non-1xx header block was seen


class _Stream:
    __slots__ = ("request", "response")

    def __init__(self, request: H2Request) -> None:
        self.request = request
        self.response: H2Response | None = None


class _Side:
    """One direction: its HPACK decoder, the header block being assembled, byte counts."""

    __slots__ = (
        "decoder", "block", "block_stream", "block_flags", "block_type", "block_head",
        "block_arrival", "block_wire", "offset", "epoch", "mark", "mark_arrival", "aligned",
        "max_frame", "expect", "old", "arrival", "preface", "trust",
    )

    def __init__(self, preface: bool) -> None:
        self.decoder = HeaderDecoder()
        self.block: bytearray | None = None
        self.block_stream = self.block_flags = self.block_type = self.block_head = 0
        self.block_wire = 0
        self.block_arrival: int | None = None
        self.offset = 0  # bytes consumed since the last resync (the epoch)
        self.epoch = 0
        self.mark: int | None = None  # offset of the first byte consumed since a FRAME
        self.mark_arrival: int | None = None
        self.aligned = False  # the next byte is known to start a frame
        self.max_frame = f.MAX_FRAME_ALLOWED  # until the peer's SETTINGS are seen
        # which bytes of buf came with the latest syscall(s): see arrived()
        self.expect = 0
        self.old = 0
        self.arrival = 0
        self.preface = preface  # the client preface may come first
        # a resync now would see bytes that begin where a write began (after a loss), not
        # one byte after an INVALID or at the tail the tracker kept from a failed resync
        self.trust = True

    def arrived(self, n: int) -> None:
        """Note bytes appended since the last call: buf[old:] are the newest."""
        if n != self.expect:
            self.arrival += 1
            self.old = self.expect if 0 <= self.expect <= n else n

    def arrival_at(self, pos: int) -> int | None:
        return self.arrival if pos >= self.old else None


class HTTP2State(ParserState):
    """Per connection: each direction's side, the open streams, what stitch waits on."""

    __slots__ = (
        "carrier_names", "capture_headers", "max_streams", "sides", "streams",
        "last_request_id", "goaway", "waiting", "last_ns", "orphan_responses",
        "streams_dropped", "malformed_blocks", "layers",
    )

    def __init__(self, conn: ConnInfo, carrier_names: frozenset[str] = CONTEXT_HEADERS,
                 capture_headers: bool = False, max_streams: int = MAX_STREAMS,
                 layers: tuple[HTTPLayer, ...] = ()) -> None:
        super().__init__(conn)
        self.layers = layers
        self.carrier_names = carrier_names
        self.capture_headers = capture_headers
        self.max_streams = max_streams
        # requests (a client writes them, a server reads them) and closed: ParserState's
        sides = [_Side(False), _Side(False)]
        sides[self.requests].preface = True
        self.sides = tuple(sides)
        self.streams: OrderedDict[int, _Stream] = OrderedDict()
        self.last_request_id = 0
        self.goaway: int | None = None  # last stream id the responder's GOAWAY will process
        self.waiting: OrderedDict[int, H2Request] = OrderedDict()  # stitch's, by stream id
        self.last_ns = 0  # latest frame end seen by stitch
        self.orphan_responses = 0  # responses whose request we never saw
        self.streams_dropped = 0  # beyond max_streams
        self.malformed_blocks = 0  # header blocks that were not HPACK (bytes lost or garbage)

    @property
    def unknown_headers(self) -> int:
        """Header fields that referred to HPACK entries we never saw, both directions."""
        return sum(s.decoder.unknown_fields for s in self.sides)


# --- inference ---------------------------------------------------------------------------

_SENDER_ROLE = {  # (the bytes' sender is the client, direction) -> the traced process's role
    (True, Direction.EGRESS): Role.CLIENT, (True, Direction.INGRESS): Role.SERVER,
    (False, Direction.EGRESS): Role.SERVER, (False, Direction.INGRESS): Role.CLIENT,
}


def infer(direction: Direction, head: bytes, conn: ConnInfo) -> Role | None:
    """Mine when the bytes begin with the client preface; or with strictly valid frames
    holding a header block whose pseudo-headers say who sent it (a request's :method or
    :path, a response's :status: capture began mid-connection); or, on a socket whose side
    the kernel saw (connect/accept), with a SETTINGS frame (the server's preface)."""
    if head.startswith(f.PREFACE) or 4 <= len(head) < len(f.PREFACE) and f.PREFACE.startswith(head):
        return _SENDER_ROLE[True, direction]
    frames = f.chain(head)
    if frames is None:
        return None
    sender = _sender(head, frames)
    if sender is not None:
        return _SENDER_ROLE[sender, direction]
    first = frames[0][1]
    if conn.role != Role.UNKNOWN and first.type == f.SETTINGS and not first.flags:
        return conn.role
    return None


def _sender(head: bytes, frames: list[tuple[int, f.Head]]) -> bool | None:
    """True when a header block in head is a request's, False when a response's."""
    for i, (pos, h) in enumerate(frames):
        if h.type != f.HEADERS or pos + f.HEADER_LEN + h.length > len(head):
            continue
        try:
            wire, _ = WireFrame.parse_frame_header(memoryview(head)[pos : pos + f.HEADER_LEN])
            wire.parse_body(memoryview(head)[pos + f.HEADER_LEN : pos + f.HEADER_LEN + h.length])
            block = bytearray(wire.data)
            if not h.flags & f.END_HEADERS:  # gather its CONTINUATIONs, when all are here
                for cpos, c in frames[i + 1 :]:
                    if c.type != f.CONTINUATION or cpos + f.HEADER_LEN + c.length > len(head):
                        break
                    block += head[cpos + f.HEADER_LEN : cpos + f.HEADER_LEN + c.length]
                    if c.flags & f.END_HEADERS:
                        break
                else:
                    continue
            fields = HeaderDecoder().decode(bytes(block))
        except (HyperframeError, Malformed):
            return None
        names = {fl.name for fl in fields if fl.name is not None and fl.value is not None}
        if ":status" in names:
            return False
        if names & _REQUEST_PSEUDO and h.stream % 2:
            return True
    return None


# --- parsing -----------------------------------------------------------------------------


def parse(direction: Direction, buf, state: HTTP2State) -> Step:
    side = state.sides[direction]
    n = len(buf)
    side.arrived(n)
    pos = 0
    if side.preface:
        if n < len(f.PREFACE) and f.PREFACE.startswith(buf):
            return NEED, None, 0
        side.preface = False
        if buf[: len(f.PREFACE)] == f.PREFACE:
            pos = len(f.PREFACE)
            side.aligned = True
            # a connection seen from its start: frame sizes are the defaults until SETTINGS
            for s in state.sides:
                s.max_frame = f.DEFAULT_MAX_FRAME
    if not side.aligned:
        if pos + f.HEADER_LEN > n or not f.strict(f.head_at(buf, pos), side.max_frame):
            if pos + f.HEADER_LEN > n:
                return _done(side, n, NEED, None, pos)  # too few bytes to judge yet
            return _done(side, n, INVALID, None, 0) if not pos else _done(side, n, NEED, None, pos)
        side.aligned = True
    return _frames(direction, buf, pos, state, side)


def _done(side: _Side, n: int, result: ParseResult, frame: H2Message | None, consumed: int
          ) -> Step:
    if result is INVALID:
        side.trust = False  # the tracker steps one byte and resyncs
        return result, None, consumed
    side.trust = True
    if consumed:  # what the call consumed: the marks and counts of the direction
        if side.mark is None:
            side.mark, side.mark_arrival = side.offset, side.arrival_at(0)
        side.offset += consumed
        side.old = max(side.old - consumed, 0)
    side.expect = n - consumed if consumed <= n else 0
    if frame is not None:
        frame.mark, frame.epoch = side.mark if side.mark is not None else side.offset, side.epoch
        frame.exact = frame.head == frame.mark or (
            side.mark_arrival is not None and side.mark_arrival == frame.head_arrival)
        side.mark = None
    return result, frame, consumed


def _frames(direction: Direction, buf, pos: int, state: HTTP2State, side: _Side) -> Step:
    requests = direction == state.requests
    n = len(buf)
    max_frame = side.max_frame
    emitted: H2Message | None = None
    while pos + f.HEADER_LEN <= n:
        hi, lo, kind, flags, stream = _head(buf, pos)  # f.head_at, inlined: every frame
        length = (hi << 16) | lo
        reserved = stream > 0x7FFFFFFF
        if reserved:
            stream &= 0x7FFFFFFF
        h = None
        if kind <= f.HEADERS:  # DATA, HEADERS: f.sane's checks for them
            bad = length > max_frame or not stream or side.block is not None
        elif kind == f.WINDOW_UPDATE:  # two of each call, one each way: f.sane's checks
            bad = length != 4 or length > max_frame or side.block is not None
        else:
            h = _new_head(f.Head, (length, kind, flags, stream, reserved))
            bad = not f.sane(h, max_frame) or (side.block is not None) != (
                kind == f.CONTINUATION) or (kind == f.CONTINUATION and stream != side.block_stream)
        if bad:
            if emitted is None and not pos:
                return _done(side, n, INVALID, None, 0)
            break  # judged again at the front of the next call
        end = pos + f.HEADER_LEN + length
        if emitted is not None and (kind == f.HEADERS or kind == f.PUSH_PROMISE or end > n):
            break  # a request frame takes what follows it only up to the next message
        if kind == f.DATA:
            if flags & f.PADDED and length and pos + f.HEADER_LEN >= n:
                break  # its pad length (the first payload byte) tells the data's size
            message = _data(direction, buf, pos, length, flags, stream, state, requests)
            pos = end
            if message is not None:
                emitted = message
                break
            if end > n:
                break  # skipped by length: nothing after it is in buf
            continue
        if end > n:
            break  # wait for the whole frame (a header block must be read in full)
        if kind == f.WINDOW_UPDATE:  # flow control: nothing to read (f.sane checked it)
            pos = end
            continue
        if kind == f.HEADERS and flags & _PLAIN_MASK == f.END_HEADERS:
            # _headers' common case, inlined (a whole block, no field to strip): every call
            # has three of these per direction
            side.block_stream, side.block_flags, side.block_type = stream, flags, kind
            side.block_head = side.offset + pos
            side.block_arrival = side.arrival if pos >= side.old else None
            side.block_wire = f.HEADER_LEN + length
            message = _block(state, side, requests, bytes(buf[pos + f.HEADER_LEN : end]))
            pos = end
            if message is None:
                continue
            emitted = message
            if not requests:
                break
            continue
        if h is None:
            h = _new_head(f.Head, (length, kind, flags, stream, reserved))
        try:
            message = _HANDLERS.get(kind, _ignore)(buf, pos, h, state, side, requests)
        except HyperframeError:
            if emitted is None and not pos:
                return _done(side, n, INVALID, None, 0)
            break
        pos = end
        if message is None:
            continue
        emitted = message
        if not requests:
            break  # a response ends with this frame
    if emitted is not None:
        return _done(side, n, FRAME, emitted, pos)
    return _done(side, n, NEED, None, pos)


# --- frame types -------------------------------------------------------------------------


def _data(direction: Direction, buf, pos: int, length: int, flags: int, stream_id: int,
          state: HTTP2State, requests: bool) -> H2Message | None:
    """A DATA frame, read as far as buf holds it; returns the response it ends."""
    stream = state.streams.get(stream_id)
    if stream is None:
        return None
    message: H2Message | None = stream.request if requests else stream.response
    if message is None or (requests and message.ended):
        return None
    body = pos + f.HEADER_LEN
    size = length
    if flags & f.PADDED and length:
        size = max(length - 1 - buf[body], 0)
        body += 1
    message.size += f.HEADER_LEN + length
    message.data_size += size
    messages = message.messages
    if size >= PREFIX_LEN and body + size <= len(buf) and messages.at_message():
        # the usual gRPC DATA frame, whole: one message, its prefix first (Messages.feed's
        # reading of it, without slicing)
        flag, prefixed = _prefix(buf, body)
        if flag <= 1 and prefixed == size - PREFIX_LEN:
            messages.count += 1
            messages.size += prefixed
            if message.body is None:
                return _end(state, stream_id, message, requests) if flags & f.END_STREAM \
                    else None
            captured = buf[body : body + size]
        else:
            captured = buf[body : body + size]
            messages.feed(captured, size)
    else:
        captured = buf[body : min(body + size, len(buf))]
        messages.feed(captured, size)
    if message.body is not None:
        message.body.add(bytes(captured), state.time_at(direction, body))
        if len(captured) < size:
            message.body.skip(size - len(captured))
    if flags & f.END_STREAM:
        return _end(state, stream_id, message, requests)
    return None


def _end(state: HTTP2State, stream_id: int, message: H2Message, requests: bool
         ) -> H2Message | None:
    message.ended = True
    if requests:
        return None
    state.streams.pop(stream_id, None)
    return message


def _headers(buf, pos: int, h: f.Head, state: HTTP2State, side: _Side, requests: bool
             ) -> H2Message | None:
    body = pos + f.HEADER_LEN
    if h.type == f.HEADERS and not h.flags & (f.PADDED | f.HAS_PRIORITY):
        block = bytes(buf[body : body + h.length])  # all block: no field to strip
    else:  # padding, a priority or a promised stream id to strip (and check)
        wire, _ = WireFrame.parse_frame_header(buf[pos:body])
        wire.parse_body(buf[body : body + h.length])
        block = wire.data
    side.block_stream, side.block_flags, side.block_type = h.stream, h.flags, h.type
    side.block_head, side.block_arrival = side.offset + pos, side.arrival_at(pos)
    side.block_wire = f.HEADER_LEN + h.length
    if h.flags & f.END_HEADERS:
        return _block(state, side, requests, block)
    side.block = bytearray(block)  # its CONTINUATIONs follow
    return None


def _continuation(buf, pos: int, h: f.Head, state: HTTP2State, side: _Side, requests: bool
                  ) -> H2Message | None:
    side.block += buf[pos + f.HEADER_LEN : pos + f.HEADER_LEN + h.length]  # type: ignore[operator]
    side.block_wire += f.HEADER_LEN + h.length
    if len(side.block) > MAX_BLOCK:  # type: ignore[arg-type]
        side.block = None
        side.decoder.forget()  # its insertions are lost with it
        return None
    if h.flags & f.END_HEADERS:
        block, side.block = bytes(side.block), None  # type: ignore[arg-type]
        return _block(state, side, requests, block)
    return None


def _rst_stream(buf, pos: int, h: f.Head, state: HTTP2State, side: _Side, requests: bool
                ) -> H2Message | None:
    code = int.from_bytes(buf[pos + f.HEADER_LEN : pos + f.HEADER_LEN + 4], "big")
    if requests:  # the client gave up: stitch ends the call with what came of the answer
        stream = state.streams.get(h.stream)
        if stream is not None and stream.request.reset is None:
            stream.request.reset = code
            stream.request.ended = True
        return None
    stream = state.streams.pop(h.stream, None)
    if stream is None:
        return None
    response = stream.response or H2Response(stream_id=h.stream, head=side.offset + pos,
                                             head_epoch=side.epoch)
    response.reset = code
    response.ended = True
    return response


def _settings(buf, pos: int, h: f.Head, state: HTTP2State, side: _Side, requests: bool) -> None:
    body = buf[pos + f.HEADER_LEN : pos + f.HEADER_LEN + h.length]
    for i in range(0, len(body) - 5, 6):
        if int.from_bytes(body[i : i + 2], "big") == f.SETTINGS_MAX_FRAME_SIZE:
            # frames *to* the sender may grow to this (never below what we allow already)
            other = state.sides[1] if side is state.sides[0] else state.sides[0]
            size = int.from_bytes(body[i + 2 : i + 6], "big")
            other.max_frame = max(other.max_frame, min(size, f.MAX_FRAME_ALLOWED))


def _goaway(buf, pos: int, h: f.Head, state: HTTP2State, side: _Side, requests: bool) -> None:
    if requests:
        return  # the client's GOAWAY concerns pushed streams only
    last = int.from_bytes(buf[pos + f.HEADER_LEN : pos + f.HEADER_LEN + 4], "big") & 0x7FFFFFFF
    state.goaway = last if state.goaway is None else min(state.goaway, last)
    for stream_id in [i for i in state.streams if i > last]:
        state.streams.pop(stream_id).request.refused = True


def _ignore(*_) -> None:  # PRIORITY, PING, WINDOW_UPDATE, extension frames
    return None


_HANDLERS = {
    f.HEADERS: _headers, f.PUSH_PROMISE: _headers, f.CONTINUATION: _continuation,
    f.RST_STREAM: _rst_stream, f.SETTINGS: _settings, f.GOAWAY: _goaway,
}


# --- header blocks -----------------------------------------------------------------------


def _block(state: HTTP2State, side: _Side, requests: bool, block: bytes) -> H2Message | None:
    """A whole header block: decoded always (HPACK must stay in step), then used."""
    side.block = None
    try:
        decoded = side.decoder.decode_block(block)
    except Malformed:  # not HPACK: bytes were lost or are not HTTP/2 (the table is forgotten)
        state.malformed_blocks += 1
        return None
    if side.block_type == f.PUSH_PROMISE:
        return None
    if requests:
        return _request_block(state, side, decoded)
    return _response_block(state, side, decoded)


def _request_block(state: HTTP2State, side: _Side, decoded: Block) -> H2Message | None:
    stream_id, flags = side.block_stream, side.block_flags
    stream = state.streams.get(stream_id)
    if stream is not None:  # request trailers
        stream.request.size += side.block_wire
        if flags & f.END_STREAM:
            stream.request.ended = True
        return None
    known = decoded.known
    if ":status" in known or not stream_id % 2 or stream_id <= state.last_request_id:
        return None  # not a request we can follow (a pushed or a forgotten stream)
    if flags & f.END_STREAM and not known.keys() & _REQUEST_PSEUDO:
        return None  # trailers of a request sent before capture began
    # what the fields make of a request, once per reused block (a channel's calls repeat it)
    derived = decoded.derived
    if derived is None:
        method, path = known.get(":method"), known.get(":path")
        layer = first_wanting(state.layers, method, path) if state.layers and method and path \
            else None
        carrier = {k: v for k, v in known.items()
                   if k in state.carrier_names and not is_secret(k)}
        derived = decoded.derived = (method, path, known.get(":scheme"),
                                     known.get(":authority"), layer, carrier)
    method, path, scheme, authority, layer, carrier = derived  # type: ignore[misc]
    # H2Request(...), then _message_fields and head_arrival, in one maker call
    request = _new_request(
        stream_id, stream_id, layer, None if layer is None else Body(limit=layer.body_limit),
        method, path, scheme, authority, bool(flags & f.END_STREAM), side.block_wire,
        side.block_head, side.epoch, dict(carrier) if carrier else {},
        known.get("content-type"), known.get("user-agent"), decoded.unknown,
        side.block_arrival, Messages())
    if state.capture_headers:
        _captured(request, decoded)
    state.last_request_id = stream_id
    state.streams[stream_id] = _Stream(request)
    if len(state.streams) > state.max_streams:
        _, old = state.streams.popitem(last=False)
        old.request.stale = True
        state.streams_dropped += 1
    return request


def _response_block(state: HTTP2State, side: _Side, decoded: Block) -> H2Message | None:
    stream_id, flags = side.block_stream, side.block_flags
    stream = state.streams.get(stream_id)
    if stream is None:
        if flags & f.END_STREAM and stream_id % 2:
            state.orphan_responses += 1  # its request came before capture (or was lost)
        return None
    response = stream.response
    if response is None:
        layer = stream.request.layer
        response = stream.response = _new_response(
            stream_id, stream_id, side.block_head, side.epoch, layer,
            None if layer is None else Body(limit=layer.body_limit), Messages())
        stream.request.response_started = True
    response.size += side.block_wire
    known = decoded.known
    if response.layer is not None:  # the headers a layer reads (a session id)
        response.carrier.update(
            (k, v) for k, v in known.items() if k in state.carrier_names and not is_secret(k))
    derived = decoded.derived  # what the fields say, once per reused block
    if derived is None:
        derived = decoded.derived = (_int(known.get(":status")), "grpc-status" in known,
                                     _int(known.get("grpc-status")), known.get("grpc-message"))
    status, has_grpc_status, grpc_status, grpc_message = derived  # type: ignore[misc]
    if not response.final and status is not None and 100 <= status < 200:
        response.interim += (status,)  # 1xx: the answer follows
    elif not response.final:
        response.final = True
        response.status = status
        _message_fields(response, decoded, state.capture_headers)
    else:
        response.trailers = True
        response.unknown_fields += decoded.unknown
    if has_grpc_status:
        response.grpc_status, response.grpc_message = grpc_status, grpc_message
    if flags & f.END_STREAM:
        return _end(state, stream_id, response, False)
    return None


def _message_fields(message: H2Message, decoded: Block, capture_headers: bool) -> None:
    known = decoded.known
    message.content_type = known.get("content-type")
    message.user_agent = known.get("user-agent")
    message.unknown_fields += decoded.unknown
    if capture_headers:
        _captured(message, decoded)


def _captured(message: H2Message, decoded: Block) -> None:
    """The header fields kept on the message (capture_headers)."""
    for fl in decoded.fields:
        if fl.name is not None and fl.value is not None and not fl.name.startswith(":") \
                and not is_secret(fl.name):
            message.headers.setdefault(fl.name, []).append(fl.value)


# a request or response as its reader makes it, in one call (the class's keywords and
# __post_init__, exchange being the stream id, cost ~4x as much: four of them a gRPC call);
# its Messages given (the compiled readers make theirs without a Python __init__)
_new_request = positional_maker(H2Request, (
    "stream_id", "exchange", "layer", "body", "method", "path", "scheme", "authority", "ended",
    "size", "head", "head_epoch", "carrier", "content_type", "user_agent", "unknown_fields",
    "head_arrival", "messages"), post_init_sets=("exchange",))
_new_response = positional_maker(H2Response, (
    "stream_id", "exchange", "head", "head_epoch", "layer", "body", "messages"),
    post_init_sets=("exchange",))


def _int(value: str | None) -> int | None:
    return int(value) if value is not None and value.isascii() and value.isdigit() else None


# --- after lost bytes, and at close ------------------------------------------------------


def resync(direction: Direction, buf, state: HTTP2State) -> int | None:
    """Bytes of this direction were lost (or not HTTP/2): header blocks may have gone
    with them, so the HPACK table is forgotten, gRPC message counts of the open streams
    become inexact, and parsing restarts where frames plausibly begin."""
    side = state.sides[direction]
    side.block = None
    side.decoder.forget()
    side.epoch += 1
    side.mark = None
    side.preface = False
    side.aligned = False
    # a SETTINGS frame may have been lost with them: frame sizes are unknown again
    state.sides[1 - direction].max_frame = f.MAX_FRAME_ALLOWED
    for stream in state.streams.values():
        if direction == state.requests:
            stream.request.messages.lose()
        else:
            stream.request.stale = True  # its response's end may be among the lost bytes
            if stream.response is not None:
                stream.response.messages.lose()
    offset = f.boundary(bytes(buf), trust_start=side.trust)
    side.aligned = offset is not None
    side.trust = False  # if nothing was found, what comes next is the tail kept
    side.expect = -1
    return offset


_compiled_ready = None  # the compiled module given what it reads and calls


def compiled_parse():  # noqa: ANN201 (_parse.c parse, or None)
    """`parse` with its frame loop in C (_parse.c): the preface, unaligned
    bytes, header blocks (but the usual reused ones, read in C as _request_block and
    _response_block read them), DATA frames other than a whole one-message gRPC frame, and every other frame with
    a handler are this file's; None on the pure Python path."""
    global _compiled_ready
    fast = compiled
    if fast is None or not COMPILED:
        return None
    if _compiled_ready is not fast:
        fast.setup(HTTP2State, _Side, _Stream, H2Request, H2Response, Messages, f.Head,
                   HyperframeError, parse, _data, _block, _HANDLERS, _ignore, NEED, FRAME,
                   INVALID)
        fast.setup_blocks(HeaderDecoder, Block, _request_block, _response_block)
        # _response_block's and _request_block's usual cases in C
        fast.setup_answers(_new_response, _new_request)
        _compiled_ready = fast
    return fast.parse


def finish(direction: Direction, state: HTTP2State) -> None:
    state.closed = True  # nothing in HTTP/2 is delimited by the close
    return None
