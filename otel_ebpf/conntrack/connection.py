"""One tracked connection: picks its parser, feeds both directions through it, times the
frames it returns, and hands finished records to the parser's span builder."""

from __future__ import annotations

import dataclasses
from typing import TYPE_CHECKING, NamedTuple

from otel_ebpf import _fast
from otel_ebpf.protocols.base import (
    ConnInfo,
    Direction,
    Frame,
    NeutralSpan,
    ParseResult,
    ParserState,
    ProtocolParser,
    Record,
    Role,
    SmallDeque,
)
from otel_ebpf.protocols.registry import Registry
from otel_ebpf.telemetry import Stats

from .stream import Chunk, Stream

if TYPE_CHECKING:
    from .nat import NatLookup

_tuple_new = tuple.__new__
INFER_ATTEMPTS = 16  # data events per connection offered to inference before giving up
FOREVER_NS = 2**63 - 1
MAX_PARSE_STEPS = 10_000  # per feed: a parser that never advances cannot hang the agent
RESYNC_TAIL = 16  # bytes kept when resync finds nothing: a message start may be cut there
# a syscall's bytes, all captured, right at the head of a stream inside a message (a body
# piece), or a head whose body comes later: parsed from the payload itself, without the
# stream's buffer (Connection._whole); False: the general path, its reference (tests
# compare the two)
PIECE_STEP = True
# enum members as module constants: looking a member up on its class costs ~0.2 µs
_INGRESS, _FRAME, _NEED_MORE = Direction.INGRESS, ParseResult.FRAME, ParseResult.NEED_MORE


_compiled_ready = None  # the compiled module given the Chunk type


def compiled_data():  # noqa: ANN201 (otel_ebpf/_fast/conn.c data, or None)
    """The compiled step for a connection's usual data event (otel_ebpf/_fast/conn.c data:
    on_data's whole-syscall case, this file the reference), or None on the pure Python path."""
    global _compiled_ready
    fast = _fast.conn
    if fast is None:
        return None
    if _compiled_ready is not fast:
        fast.setup(Connection, Stream, ConnInfo, ParserState, Chunk)
        _compiled_ready = fast
    return fast.data


class FrameStart(NamedTuple):
    """Where and when the frame being parsed began (looked up when its first byte is)."""

    pos: int
    ns: int
    tcp_seq: int | None
    tid: int
    task: int


class Connection:
    __slots__ = (
        "info", "parser", "state", "streams", "frame_start", "resync", "pending",
        "infer_attempts", "unparsed", "last_ns", "tcp", "frames_out", "muted", "whole",
        "pairs", "nat_lookup", "offered_end",
    )
    # (streams, frame_start, resync, pending, infer_attempts, unparsed: see _start_parsing)

    def __init__(self, info: ConnInfo, tcp: bool,
                 frames_out: list[tuple[ConnInfo, Frame]] | None = None,
                 nat_lookup: NatLookup | None = None) -> None:
        self.info = info
        self.tcp = tcp
        # asked once, when a parser finds the traced process to be this connection's client:
        # the connection as its server sees it, where NAT changed it (info.nat)
        self.nat_lookup = nat_lookup
        # finished frames go here as they complete, before any span: correlate/ decides a
        # request's trace and parent from what was open when it was made
        self.frames_out = frames_out
        self.last_ns = info.generation  # kernel time the socket was first seen
        self.muted = False  # the kernel was asked to stop sending its bytes
        self._start_parsing()

    def _start_parsing(self) -> None:
        """No parser yet, nothing seen: a new connection, or one whose TLS plaintext
        starts (what came before was the handshake's ciphertext)."""
        self.parser: ProtocolParser | None = None
        self.state: ParserState | None = None
        self.whole = None  # the parser's one step for a whole syscall, when it has one
        self.streams = (Stream(), Stream())
        self.frame_start: list[FrameStart | None] = [None, None]
        self.resync = [False, False]  # bytes were lost: find a frame boundary first
        # frames parsed whose last byte has not arrived yet (skipped bodies), with their end
        self.pending: tuple[SmallDeque, SmallDeque] = (SmallDeque(), SmallDeque())
        self.infer_attempts = 0
        self.unparsed = False
        # per direction, the end of the bytes offered to inference and not parsed (a
        # connection's first messages, before a parser knows it), or None
        self.offered_end: list[int] | None = None

    def adopt(self, parser: ProtocolParser, role: Role) -> None:
        """Parse this connection with `parser`, the traced process having `role`."""
        nat = None
        if role == Role.CLIENT and self.nat_lookup is not None:
            nat, self.nat_lookup = self.nat_lookup.server_view(self.info), None
        if role != self.info.role or nat is not None:
            self.info = dataclasses.replace(self.info, role=role, nat=nat or self.info.nat)
        self.parser = parser
        self.state = parser.new_state(self.info)
        self.state.time_at = self._time_at
        # optional (HTTP/1 has it): a syscall that is one whole plain message, framed and
        # timed in one call; None from it means the general path
        self.whole = getattr(parser, "whole", None)
        # a v2 parser pairs the queues it is handed; a v1 parser stitches its state itself
        self.pairs = type(parser).stitch is ProtocolParser.stitch

    def received(self, sent: int, recv: int) -> bool:
        """Whether every byte up to `sent` written and `recv` read (the kernel's counts at
        the connection's close) has come as a record, or nothing more can make a span: a
        connection no parser knows, TLS (the kernel counts its ciphertext, the records
        carry the plaintext) or datagrams (each one whole, none cut by a close)."""
        streams = self.streams
        if streams[0].known_end >= sent and streams[1].known_end >= recv:
            return True  # the usual close: after every record of its connection
        info = self.info
        if self.unparsed or info.tls or info.transport == "datagram":
            return True
        ends = self.offered_end
        return ends is not None and (max(streams[0].known_end, ends[0]) >= sent
                                     and max(streams[1].known_end, ends[1]) >= recv)

    def _time_at(self, direction: Direction, offset: int) -> int:
        """Kernel time of the byte `offset` bytes into what `parse` is being shown."""
        stream = self.streams[direction]
        return stream.time_of_first(stream.head + offset)[0]

    # ---- input -------------------------------------------------------------------

    def on_data(
        self, direction: Direction, pos: int, msg_len: int, payload: bytes,
        start_ns: int, end_ns: int, tcp_seq: int, registry: Registry, stats: Stats,
        tid: int = 0, task: int = 0, tail: bytes = b"", tls: bool = False,
        peer: tuple[str, int] | None = None,
    ) -> None:
        """`payload` is the message's captured prefix; `tail`, when the kernel sent one, its
        last bytes (the bytes between were not captured: a long prompt's middle). `tls`:
        plaintext from the TLS library; once it comes, the socket's own bytes (ciphertext)
        are ignored and parsing starts over on the plaintext."""
        self.last_ns = end_ns
        if tls != self.info.tls:
            if not tls:
                return  # ciphertext the kernel sent before it knew the session
            self.info = dataclasses.replace(self.info, tls=True)
            self._start_parsing()
        if self.unparsed:
            return
        if self.parser is None and not self._infer(direction, payload, registry, stats):
            ends = self.offered_end
            if ends is None:
                ends = self.offered_end = [0, 0]
            ends[direction] = max(ends[direction], pos + msg_len)
            return
        # A read's bytes are there when it returns (it may have blocked long before they
        # came); a write's bytes leave when it is called.
        if direction is _INGRESS:
            start_ns = end_ns
        if self.parser.transport == "datagram":  # type: ignore[union-attr]
            self._datagram(direction, pos, msg_len, payload, start_ns, end_ns, tid, task,
                           peer, stats)
            return
        stream = self.streams[direction]
        if stream.started and pos > stream.known_end:
            stats.add("gaps")  # events lost between the last one and this
        seq = tcp_seq if self.tcp else None  # None from the kernel: unknown
        end = pos + msg_len
        if tail and len(payload) + len(tail) < msg_len:
            # two chunks: the prefix (its uncaptured rest is a hole) and the last bytes
            end -= len(tail)
            stream.add(Chunk(pos, end, payload, start_ns, end_ns, seq, tid, task))
            seq = None if seq is None else (seq + end - pos) & 0xFFFFFFFF
            pos, payload = end, tail
            end = pos + len(tail)
        elif (pos == stream.head and msg_len and len(payload) == msg_len and stream.started
              and not stream.buf and not stream.queue and not self.resync[direction]
              and not self.pending[direction]
              and (PIECE_STEP or (not stream.times and self.frame_start[direction] is None))):
            inside = bool(stream.times) or self.frame_start[direction] is not None
            whole = None if inside else self.whole
            if whole is not None:
                frame = whole(direction, payload, self.state, pos, start_ns, end_ns, seq, tid,
                              task)
                if frame is not None:  # what _whole leaves for such a frame
                    if end > stream.known_end:
                        stream.known_end = end
                    stream.last_end_ns = end_ns
                    if frame.size > msg_len:
                        # its body skipped by length runs past the syscall: _frame_done's
                        # head and pending entry; _finish_pending ends it at its last byte
                        last = pos + frame.size
                        stream.head = last
                        self.pending[direction].append((frame, last))
                        return
                    stream.head = end
                    self.state.frames[direction].append(frame)  # type: ignore[union-attr]
                    if self.frames_out is not None:
                        self.frames_out.append((self.info, frame))
                    return
            # a Chunk of every field, without its __new__'s Python frame
            self._whole(direction, _tuple_new(Chunk, (pos, end, payload, start_ns, end_ns, seq,
                                                      tid, task)), stats, inside)
            return
        stream.add(_tuple_new(Chunk, (pos, end, payload, start_ns, end_ns, seq, tid, task)))
        self._parse(direction, stats)
        self._finish_pending(direction)

    def _whole(self, direction: Direction, chunk: Chunk, stats: Stats,
               inside: bool = False) -> None:
        """A syscall's bytes, all captured, right at the head of a stream that holds nothing
        buffered, queued, pending or being resynced: the usual event. The same steps as
        Stream.add, _parse and _finish_pending, parsed from the payload itself: when the
        parser makes one frame of exactly these bytes (a whole message, or the end of one
        `inside` it), or takes them all and ends no frame (a body piece, or a head whose
        body follows), in one step or in several (a head, then its body), they never reach
        the stream's buffer; else the general loop goes on from the parser's answer."""
        stream = self.streams[direction]
        if chunk.end > stream.known_end:
            stream.known_end = chunk.end
        stream.last_end_ns = chunk.end_ns
        stream.times.append(chunk)  # for time_at while the parser reads
        parse, state, data = self.parser.parse, self.state, chunk.data  # type: ignore[union-attr]
        view = memoryview(data)
        step = parse(direction, view, state)
        view.release()
        offset = 0  # bytes of the syscall the steps so far took
        while True:
            result, frame, consumed = step
            rest = chunk.end - chunk.pos - offset
            if consumed == rest:
                if result is _NEED_MORE and PIECE_STEP:
                    # a body piece, or a head whose body comes later (a streamed answer's):
                    # the message goes on from the syscall's end, as _parse and
                    # _finish_pending leave it (without PIECE_STEP, the reference, they do it)
                    if self.frame_start[direction] is None:
                        self.frame_start[direction] = self._start_at(stream, stream.head)
                    stream.head = chunk.end
                    stream.prune(chunk.end)  # _finish_pending's, with nothing pending
                    return
                if (inside or offset) and result is _FRAME and frame is not None and PIECE_STEP:
                    # a body piece that ends its message (a request's body after its head)
                    self._piece_done(direction, frame, chunk.end, chunk.end_ns)
                    stream.prune(chunk.end)  # _finish_pending's, with nothing pending
                    return
                if not inside and not offset and result is _FRAME and frame is not None:
                    # stamped as _stamp_start and _finish_pending do: its first and last
                    # byte the syscall's
                    frame.direction, frame.stream_pos = direction, chunk.pos
                    frame.start_ns, frame.tid, frame.task = chunk.start_ns, chunk.tid, chunk.task
                    frame.tcp_seq = (None if chunk.tcp_seq is None
                                     else chunk.tcp_seq & 0xFFFFFFFF)
                    stream.head = chunk.end
                    stream.times.clear()  # prune(head): the chunk ends there
                    frame.end_ns = max(chunk.end_ns, frame.start_ns)
                    frame.size = frame.size or consumed
                    self.state.frames[direction].append(frame)  # type: ignore[union-attr]
                    if self.frames_out is not None:
                        self.frames_out.append((self.info, frame))
                    return
            elif result is _NEED_MORE and 0 < consumed < rest and PIECE_STEP:
                # a head with (part of) its body in the same syscall: _parse's first step,
                # then the parser shown the rest, as _parse shows it the buffer's rest
                if self.frame_start[direction] is None:
                    self.frame_start[direction] = self._start_at(stream, stream.head)
                stream.head += consumed
                offset += consumed
                view = memoryview(data)[offset:]
                step = parse(direction, view, state)
                view.release()
                continue
            break
        # what Stream._fill puts there, less what the steps above took
        stream.buf += data[offset:] if offset else data
        self._parse(direction, stats, step)
        self._finish_pending(direction)

    def _piece_done(self, direction: Direction, frame: Frame, end: int, end_ns: int) -> None:
        """A body piece that ended its message (the syscall's every byte taken, nothing
        held in the stream; the compiled piece step's frame, or _whole's): what _frame_done
        and _finish_pending leave, the message's last byte being the syscall's, whose time
        time_of_last gives (the caller prunes the timing chunks up to `end`)."""
        self._stamp_start(direction, frame)
        self.streams[direction].head = end
        frame.end_ns = max(end_ns, frame.start_ns)
        frame.size = frame.size or end - frame.stream_pos
        self.state.frames[direction].append(frame)  # type: ignore[union-attr]
        if self.frames_out is not None:
            self.frames_out.append((self.info, frame))

    def _datagram(self, direction: Direction, pos: int, msg_len: int, payload: bytes,
                  start_ns: int, end_ns: int, tid: int, task: int,
                  peer: tuple[str, int] | None, stats: Stats) -> None:
        """One datagram, whole: one parse, one frame (datagrams have their own bounds)."""
        parser, state = self.parser, self.state
        assert parser is not None and state is not None
        view = memoryview(payload)
        result, frame, _ = parser.parse(direction, view, state)
        view.release()
        if result is not ParseResult.FRAME or frame is None:
            stats.add("parse.errors", protocol=parser.name)
            return
        frame.direction, frame.stream_pos, frame.tcp_seq = direction, pos, None
        frame.start_ns, frame.end_ns, frame.tid, frame.task = start_ns, end_ns, tid, task
        frame.size, frame.peer = msg_len, peer
        state.frames[direction].append(frame)
        if self.frames_out is not None:
            self.frames_out.append((self.info, frame))

    def _infer(self, direction: Direction, head: bytes, registry: Registry, stats: Stats) -> bool:
        self.infer_attempts += 1
        found = registry.infer(direction, head, self.info) if head else None
        if found is None:
            if self.infer_attempts >= INFER_ATTEMPTS:
                self.unparsed = True
                stats.add("connections.unparsed")
            return False
        self.adopt(*found)
        # Bytes the other direction carried before now were dropped: start it at a boundary.
        if self.infer_attempts > 1:
            self.resync[direction.opposite] = True
        return True

    # ---- parsing -----------------------------------------------------------------

    def _parse(self, direction: Direction, stats: Stats,
               first: tuple[ParseResult, Frame | None, int] | None = None) -> None:
        """Parse what the stream holds; `first`: the parser's answer to the buffer as it
        stands, already asked (by _whole)."""
        parser, state, stream = self.parser, self.state, self.streams[direction]
        assert parser is not None and state is not None
        poke = False  # the parser stepped over lost bytes: let it end its frame there
        for _ in range(MAX_PARSE_STEPS):
            if first is not None:
                result, frame, consumed = first
                first = None
            else:
                if not stream.buf and not poke:
                    if not stream.hole_ahead():
                        return
                    poke = self._lose_bytes(direction, stats)
                    continue
                poke = False
                view = memoryview(stream.buf)
                if self.resync[direction]:
                    offset = parser.resync(direction, view, state)
                    view.release()
                    if offset is None:
                        drop = len(stream.buf) - RESYNC_TAIL
                        if drop > 0:
                            stream.consume(drop)
                        elif stream.hole_ahead():
                            self._lose_bytes(direction, stats)
                        else:
                            return
                        continue
                    stream.consume(offset)
                    self.resync[direction] = False
                    continue
                result, frame, consumed = parser.parse(direction, view, state)
                view.release()
            if result is _FRAME and frame is not None:
                self._frame_done(direction, frame, consumed)
            elif result is _NEED_MORE:
                if consumed <= 0:
                    if stream.hole_ahead():  # the bytes the parser waits for are lost
                        poke = self._lose_bytes(direction, stats)
                        continue
                    return
                if self.frame_start[direction] is None:
                    self.frame_start[direction] = self._start_at(stream, stream.head)
                stream.consume(consumed)
            else:  # INVALID, or a FRAME without a frame
                stats.add("parse.errors", protocol=parser.name)
                self.resync[direction] = True
                self.frame_start[direction] = None
                stream.consume(max(consumed, 1))  # never resync where it just failed

    @staticmethod
    def _start_at(stream: Stream, pos: int) -> FrameStart:
        return FrameStart(pos, *stream.time_of_first(pos))

    def _lose_bytes(self, direction: Direction, stats: Stats) -> bool:
        """Step over the missing bytes. True when the parser took them as part of the
        message it is reading (a body of known length); else it resyncs after them."""
        lost = self.streams[direction].jump_hole()
        stats.add("gaps")
        if not self.resync[direction] and self.parser.skip_lost(  # type: ignore[union-attr]
                direction, lost, self.state):
            return True
        self.resync[direction] = True
        self.frame_start[direction] = None
        return False

    def _stamp_start(self, direction: Direction, frame: Frame) -> None:
        start = self.frame_start[direction] or self._start_at(self.streams[direction],
                                                               self.streams[direction].head)
        self.frame_start[direction] = None
        frame.direction = direction
        frame.stream_pos, frame.start_ns, frame.tcp_seq, frame.tid, frame.task = start

    def _frame_done(self, direction: Direction, frame: Frame, consumed: int) -> None:
        stream = self.streams[direction]
        self._stamp_start(direction, frame)
        end = stream.head + consumed
        stream.consume(consumed)
        self.pending[direction].append((frame, end))

    def _finish_pending(self, direction: Direction) -> None:
        """Frames are done once their last byte has arrived (it may be skipped, not read)."""
        stream, pending = self.streams[direction], self.pending[direction]
        frames = self.state.frames[direction]  # type: ignore[union-attr]
        out = self.frames_out
        while pending:
            frame, end = pending[0]
            end_ns = stream.time_of_last(end)
            if end_ns is None:
                break
            frame.end_ns = max(end_ns, frame.start_ns)
            frame.size = frame.size or end - frame.stream_pos
            frames.append(frame)
            del pending[0]
            if out is not None:
                out.append((self.info, frame))
        stream.prune(min(stream.head, pending[0][1] - 1) if pending else stream.head)

    # ---- output ------------------------------------------------------------------

    def stitch(self, now_ns: int) -> list[Record]:
        state = self.state
        if self.parser is None or state is None:
            return []
        if self.pairs:  # the call ProtocolParser.stitch makes, without its frame
            frames = state.frames
            return self.parser.pair(frames[state.requests], frames[state.responses],
                                    state.closed, now_ns, state)
        return self.parser.stitch(state, now_ns)

    def collect(self, now_ns: int) -> list[NeutralSpan]:
        """Spans of the records the parser could complete by now_ns. The exchange's span
        (the first) gets the correlation evidence of the record's `request` and
        `response` frames where to_spans left it out: correlate/ joins by it."""
        spans: list[NeutralSpan] = []
        for record in self.stitch(now_ns):
            made = self.parser.to_spans(record, self.info)  # type: ignore[union-attr]
            if made and made[0].request_pos is None and self.tcp:
                fill_correlation(made[0], record)
            spans.extend(made)
        return spans

    def finish(self) -> None:
        """The connection ended: frames whose last bytes never came end at the last byte
        seen; then the frames only the close delimits."""
        if self.parser is None or self.state is None:
            return
        self.state.closed = True  # before the parser's finish and the last stitch
        for direction in Direction:
            stream, frames = self.streams[direction], self.state.frames[direction]
            for frame, _ in self.pending[direction]:
                frame.end_ns = max(stream.last_end_ns, frame.start_ns)
                frames.append(frame)
            self.pending[direction].clear()
            frame = self.parser.finish(direction, self.state)
            if frame is not None:
                self._stamp_start(direction, frame)
                frame.end_ns = max(stream.last_end_ns, frame.start_ns)
                frame.size = stream.known_end - frame.stream_pos
                frames.append(frame)

    def close(self) -> list[NeutralSpan]:
        self.finish()
        spans = self.collect(FOREVER_NS)
        if self.state is not None:
            # the state's time_at is this connection's bound method: a reference cycle
            # that only the cyclic collector would free, and the agent runs its oldest
            # generation rarely (agent._tune_gc): every closed connection's objects
            # would stay until then (~45 MiB per 10,000 connections)
            self.state.time_at = None
        return spans


def fill_correlation(span: NeutralSpan, record: Record) -> None:
    """request_seq, request_pos and response_seq from the frames a record names `request`
    and `response` (a parser's spans need not copy them, and a span without them is
    joined to no trace)."""
    request = getattr(record, "request", None)
    if not isinstance(request, Frame):
        return
    span.request_pos = request.stream_pos
    if span.request_seq is None:
        span.request_seq = request.tcp_seq
    response = getattr(record, "response", None)
    if span.response_seq is None and isinstance(response, Frame):
        span.response_seq = response.tcp_seq
