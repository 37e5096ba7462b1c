"""One tracked connection: picks its parser, feeds both directions through it, times the
frames it returns, and hands finished records to the parser's span builder."""

from __future__ import annotations

import dataclasses
from collections import deque

from otel_ebpf.protocols.base import (
    ConnInfo,
    Direction,
    Frame,
    NeutralSpan,
    ParseResult,
    ParserState,
    ProtocolParser,
    Role,
)
from otel_ebpf.protocols.registry import Registry
from otel_ebpf.telemetry import Stats

from .stream import Chunk, Stream

INFER_ATTEMPTS = 16  # data events per connection offered to inference before giving up
FOREVER_NS = 2**63 - 1
MAX_PARSE_STEPS = 10_000  # per feed: a parser that never advances cannot hang the agent


class Connection:
    __slots__ = (
        "info", "parser", "state", "streams", "frame_start", "resync", "pending",
        "infer_attempts", "unparsed", "last_ns", "tcp",
    )

    def __init__(self, info: ConnInfo, tcp: bool) -> None:
        self.info = info
        self.tcp = tcp
        self.parser: ProtocolParser | None = None
        self.state: ParserState | None = None
        self.streams = (Stream(), Stream())
        self.frame_start: list[int | None] = [None, None]  # position where a partial frame began
        self.resync = [False, False]
        self.pending: tuple[deque[tuple[Frame, int]], deque[tuple[Frame, int]]] = (deque(), deque())
        self.infer_attempts = 0
        self.unparsed = False
        self.last_ns = info.generation  # kernel time the socket was first seen

    # ---- input -------------------------------------------------------------------

    def on_data(
        self, direction: Direction, pos: int, msg_len: int, payload: bytes,
        start_ns: int, end_ns: int, tcp_seq: int, registry: Registry, stats: Stats,
    ) -> None:
        self.last_ns = end_ns
        if self.unparsed:
            return
        if self.parser is None and not self._infer(direction, payload, registry, stats):
            return
        # A read's bytes are there when it returns (it may have blocked long before they
        # came); a write's bytes leave when it is called.
        if direction is Direction.INGRESS:
            start_ns = end_ns
        chunk = Chunk(pos, pos + msg_len, payload, start_ns, end_ns, tcp_seq if self.tcp else None)
        stream = self.streams[direction]
        if stream.started and pos > stream.known_end:
            stats.add("gaps")
        stream.add(chunk)
        self._parse(direction, stats)
        self._finish_pending(direction)

    def _infer(self, direction: Direction, head: bytes, registry: Registry, stats: Stats) -> bool:
        self.infer_attempts += 1
        found = registry.infer(direction, head, self.info) if head else None
        if found is None:
            if self.infer_attempts >= INFER_ATTEMPTS:
                self.unparsed = True
                stats.add("connections.unparsed")
            return False
        parser, role = found
        if role != self.info.role:
            self.info = dataclasses.replace(self.info, role=role)
        self.parser = parser
        self.state = parser.new_state(self.info)
        # Bytes the other direction carried before now were dropped: start it at a boundary.
        if self.infer_attempts > 1:
            self.resync[direction.opposite] = True
        return True

    # ---- parsing -----------------------------------------------------------------

    def _parse(self, direction: Direction, stats: Stats) -> None:
        parser, state, stream = self.parser, self.state, self.streams[direction]
        assert parser is not None and state is not None
        for _ in range(MAX_PARSE_STEPS):
            if not stream.buf:
                if not stream.hole_ahead():
                    return
                self._lose_bytes(direction, stats)
                continue
            view = memoryview(stream.buf)
            if self.resync[direction]:
                offset = parser.resync(direction, view, state)
                view.release()
                if offset is None:
                    stream.consume(len(stream.buf))
                    continue
                stream.consume(offset)
                self.resync[direction] = False
                continue
            result, frame, consumed = parser.parse(direction, view, state)
            view.release()
            if result is ParseResult.FRAME and frame is not None:
                self._frame_done(direction, frame, consumed)
            elif result is ParseResult.NEED_MORE:
                if consumed <= 0:
                    if stream.hole_ahead():  # the bytes the parser waits for are lost
                        self._lose_bytes(direction, stats)
                        continue
                    return
                if self.frame_start[direction] is None:
                    self.frame_start[direction] = stream.head
                stream.consume(consumed)
            else:  # INVALID, or a FRAME without a frame
                stats.add("parse.errors", protocol=parser.name)
                self.resync[direction] = True
                self.frame_start[direction] = None
                stream.consume(max(consumed, 1))

    def _lose_bytes(self, direction: Direction, stats: Stats) -> None:
        self.streams[direction].jump_hole()
        stats.add("gaps")
        self.resync[direction] = True
        self.frame_start[direction] = None

    def _frame_done(self, direction: Direction, frame: Frame, consumed: int) -> None:
        stream = self.streams[direction]
        start = self.frame_start[direction]
        if start is None:
            start = stream.head
        self.frame_start[direction] = None
        end = stream.head + consumed
        frame.direction = direction
        frame.stream_pos = start
        frame.start_ns, frame.tcp_seq = stream.time_of_first(start)
        stream.consume(consumed)
        self.pending[direction].append((frame, end))

    def _finish_pending(self, direction: Direction) -> None:
        """Frames are done once their last byte has arrived (it may be skipped, not read)."""
        stream, pending = self.streams[direction], self.pending[direction]
        frames = self.state.frames[direction]  # type: ignore[union-attr]
        while pending:
            frame, end = pending[0]
            end_ns = stream.time_of_last(end)
            if end_ns is None:
                break
            frame.end_ns = max(end_ns, frame.start_ns)
            frame.size = frame.size or end - frame.stream_pos
            frames.append(frame)
            pending.popleft()
        keep = min(
            [stream.head]
            + [f.stream_pos for f, _ in pending]
            + [e - 1 for _, e in pending]
            + ([self.frame_start[direction]] if self.frame_start[direction] is not None else [])
        )
        stream.prune(keep)

    # ---- output ------------------------------------------------------------------

    def collect(self, now_ns: int) -> list[NeutralSpan]:
        if self.parser is None or self.state is None:
            return []
        spans: list[NeutralSpan] = []
        for record in self.parser.stitch(self.state, now_ns):
            spans.extend(self.parser.to_spans(record, self.info))
        return spans

    def close(self) -> list[NeutralSpan]:
        """The connection ended: frames delimited by the close, then everything pending."""
        if self.parser is None or self.state is None:
            return []
        for direction in Direction:
            stream, frames = self.streams[direction], self.state.frames[direction]
            last_ns = stream.times[-1].end_ns if stream.times else 0
            # frames whose last bytes never came: they end at the last byte seen
            for frame, _ in self.pending[direction]:
                frame.end_ns = max(last_ns, frame.start_ns)
                frames.append(frame)
            self.pending[direction].clear()
            frame = self.parser.finish(direction, self.state)
            if frame is not None:
                start = self.frame_start[direction]
                start = stream.head if start is None else start
                frame.direction = direction
                frame.stream_pos = start
                frame.start_ns, frame.tcp_seq = stream.time_of_first(start)
                frame.end_ns = max(last_ns, frame.start_ns)
                frame.size = frame.size or stream.known_end - start
                frames.append(frame)
        return self.collect(FOREVER_NS)

