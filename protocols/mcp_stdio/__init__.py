"""MCP over stdio: newline-delimited JSON-RPC on the pipes between an MCP client and the
server it runs as a subprocess, as MCP spans (the MCP layer's attributes and names).

Each pipe fd of a selected process is a one-way "connection" (receivers.ebpf.pipes): a
client writes its requests on the server's stdin and reads the answers from its stdout,
the server the other way round. So a request and its answer come on two connections of
one process; they meet here, in the parser (one per agent), by (process, who asked,
request id) and the inode of the pipe the request went on (`local_addr` "pipe:[<ino>]").
Both processes see the same inode, so both spans carry the same message identity: the
asker's span is the answerer's parent.

Options (`receivers.ebpf.protocols.mcp_stdio`):
  capture_content: record tool arguments and results (off: they hold user data).
  max_content_bytes: the most bytes of JSON each of those attributes holds (4096).
  max_message_bytes: bytes of one line kept to read it (1 MiB); the rest is skipped.
  max_pending: requests waiting for their answer (4096); the oldest beyond are exported
    marked otel_ebpf.mcp.unanswered.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

import orjson

from ..base import (
    ConnInfo,
    Direction,
    Frame,
    Instrument,
    NeutralSpan,
    ParseResult,
    ParserState,
    ProtocolParser,
    Record,
    Role,
    SpanKind,
)
from ..common import BoundedTable
from ..mcp import spans
from ..mcp.messages import ERROR, REQUEST, RESPONSE, Message, message
from ..options import Flag, Integer, Schema, Size

STDIO = "stdio"  # otel_ebpf.mcp.transport
UNANSWERED = "otel_ebpf.mcp.unanswered"
DEFAULT_MAX_MESSAGE = 1 << 20
_FRAME, _NEED_MORE = ParseResult.FRAME, ParseResult.NEED_MORE
_EGRESS = Direction.EGRESS
# a line cut by bytes the kernel did not capture: what its head still says (the SDKs write
# "jsonrpc", "id" and "method" or "result" first, tools/call's "name" before its arguments)
_ID = re.compile(rb'"id"\s*:\s*(-?\d+|"(?:[^"\\]|\\.)*")')
_METHOD = re.compile(rb'"method"\s*:\s*"((?:[^"\\]|\\.)*)"')
_NAME = re.compile(rb'"name"\s*:\s*"((?:[^"\\]|\\.)*)"')
_ERROR_CODE = re.compile(rb'"error"\s*:\s*\{\s*"code"\s*:\s*(-?\d+)')


@dataclass(slots=True, kw_only=True)
class Line(Frame):
    """One JSON-RPC message (a line), or None when the line is not one."""

    message: Message | None = None


class StdioState(ParserState):
    """A line's bytes so far, per direction (the tracker hands a line over as it comes)."""

    __slots__ = ("cut", "lost_end", "partial", "unread")

    def __init__(self, conn: ConnInfo) -> None:
        super().__init__(conn)
        self.partial = [bytearray(), bytearray()]
        self.cut = [False, False]
        self.lost_end = [False, False]  # bytes were lost after a line's head: it ended there
        self.unread = 0


@dataclass(slots=True)
class Half:
    message: Message
    start_ns: int
    end_ns: int
    conn: ConnInfo
    inode: str  # the pipe the request went on (its local_addr)


@dataclass(slots=True, kw_only=True)
class Operation(Record):
    """A request and its answer in one process (answer None: it never came)."""

    asked: Half
    answer: Half | None = None
    asker: bool = True  # this process sent the request
    attributes: dict = field(default_factory=dict)


def _read(data: bytes, cut: bool) -> Message | None:
    if not cut:
        try:
            return message(orjson.loads(data), 0)
        except orjson.JSONDecodeError:
            return None
    return _read_head(data)


def _text(raw: bytes) -> str:
    try:
        return orjson.loads(b'"' + raw + b'"')
    except orjson.JSONDecodeError:
        return raw.decode("utf-8", "replace")


def _read_head(data: bytes) -> Message | None:
    """A message whose line was cut: its id, method and tool name from its head."""
    if b'"jsonrpc"' not in data[:64]:
        return None
    found = _ID.search(data)
    ident = None
    if found is not None:
        raw = found.group(1)
        ident = _text(raw[1:-1]) if raw.startswith(b'"') else raw.decode()
    method = _METHOD.search(data)
    if method is not None:
        name = _NAME.search(data, method.end())
        params = {"name": _text(name.group(1))} if name is not None else {}
        return Message(REQUEST if ident is not None else "notification", 0,
                       _text(method.group(1)), ident, params)
    code = _ERROR_CODE.search(data)
    if code is not None:
        return Message(ERROR, 0, "", ident, error_code=int(code.group(1)))
    if b'"result"' in data and ident is not None:
        return Message(RESPONSE, 0, "", ident, result={})
    return None


class MCPStdioParser(ProtocolParser):
    name: ClassVar[str] = "mcp_stdio"
    transport: ClassVar[str] = "stream"
    instruments: ClassVar[Mapping[str, Instrument]] = spans.INSTRUMENTS
    default_enabled = True  # only pipes reach it, and only selected processes' pipes
    default_rank = 80
    option_schema: ClassVar[Schema] = {
        "capture_content": Flag(False, "arguments and results as span attributes"),
        "max_content_bytes": Size(4096, "kept of each captured value", least=2,
                                  most=1 << 20),
        "max_message_bytes": Size(DEFAULT_MAX_MESSAGE, "bytes of a line kept to read it",
                                  least=64, most=64 << 20),
        "max_pending": Integer(4096, "requests awaiting their answer", least=1),
    }

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        o = self.options
        self.content = spans.Content(o["capture_content"], o["max_content_bytes"])
        self.max_message = o["max_message_bytes"]
        self.evicted: list[Operation] = []
        # (pid, asked by this process?, request id, inode of the request's pipe) -> Half
        self.waiting = BoundedTable(o["max_pending"], self._pushed_out)
        # (pid, asked by this process?) -> inodes requests went on (a client with several
        # servers has one per server); (pid, inode answers come on) -> request inode
        self.request_pipes: dict[tuple[int, bool], list[str]] = {}
        self.bound: dict[tuple[int, str], str] = {}
        # (pid, asked by this process?, request id) -> an answer seen before its request
        self.early = BoundedTable(o["max_pending"])
        self.versions = BoundedTable(1024)  # pid -> the MCP version initialize settled on

    def _pushed_out(self, key: tuple, half: Half) -> None:
        self.evicted.append(Operation(asked=half, asker=key[1]))

    # --- framing ------------------------------------------------------------------------

    def infer(self, direction: Direction, head: bytes, conn: ConnInfo) -> Role | None:
        if conn.family != "pipe":
            return None
        text = head.lstrip()
        if not text.startswith(b"{") or b'"jsonrpc"' not in text[:256]:
            return None
        sends_requests = (b'"method"' in text) == (direction == _EGRESS)
        return Role.CLIENT if sends_requests else Role.SERVER

    def new_state(self, conn: ConnInfo) -> StdioState:
        return StdioState(conn)

    def parse(self, direction: Direction, buf: memoryview, state: StdioState
              ) -> tuple[ParseResult, Frame | None, int]:
        end = buf.obj.find(b"\n") if isinstance(buf.obj, (bytes, bytearray)) \
            and len(buf.obj) == len(buf) else bytes(buf).find(b"\n")
        partial = state.partial[direction]
        if state.cut[direction] and state.lost_end[direction]:
            # the bytes lost ended a write: writers put a whole line in one (the SDKs do),
            # so the line ended there; what it said is read from its head
            state.lost_end[direction] = False
            state.cut[direction] = False
            data = bytes(partial)
            partial.clear()
            found = _read_head(data)
            if found is None:
                state.unread += 1
                return _FRAME, Line(), 0
            return _FRAME, Line(message=found), 0
        if end < 0:  # the line goes on: keep what fits, and take the bytes
            room = self.max_message - len(partial)
            if room > 0:
                partial += buf[:room]
            if len(buf) > room:
                state.cut[direction] = True
            return _NEED_MORE, None, len(buf)
        if partial or state.cut[direction]:
            room = max(self.max_message - len(partial), 0)
            partial += buf[:min(end, room)]
            cut = state.cut[direction] or end > room
            data = bytes(partial)
            partial.clear()
            state.cut[direction] = False
        else:
            data, cut = bytes(buf[:end]), False
        if not data.strip():
            return _FRAME, Line(), end + 1
        found = _read(data, cut)
        if found is None:  # not JSON-RPC: counted; the line's end is where resync goes on
            state.unread += 1
            return ParseResult.INVALID, None, end
        return _FRAME, Line(message=found), end + 1

    def resync(self, direction: Direction, buf: memoryview, state: StdioState) -> int | None:
        state.partial[direction].clear()
        state.cut[direction] = state.lost_end[direction] = False
        end = bytes(buf).find(b"\n")
        return None if end < 0 else end + 1

    def skip_lost(self, direction: Direction, lost: int, state: StdioState) -> bool:
        # bytes the kernel did not capture (a line longer than its capture): the line goes
        # on past them, read from its head
        state.cut[direction] = True
        state.lost_end[direction] = bool(state.partial[direction])
        return True

    def counters(self, state: StdioState) -> Mapping[str, int]:
        return {"unread_lines": state.unread}

    # --- pairing across the two pipes ------------------------------------------------------

    def stitch(self, state: StdioState, now_ns: int) -> list[Record]:
        out: list[Record] = []
        conn = state.conn
        for direction in (Direction.EGRESS, Direction.INGRESS):
            frames = state.frames[direction]
            while frames:
                line = frames.popleft()
                msg = line.message
                if msg is None or msg.id is None:
                    continue  # not JSON-RPC, or a notification (no answer, no span)
                half = Half(msg, line.start_ns, line.end_ns, conn, conn.local_addr)
                # the two pipes are stitched in either order: a request read and answered
                # within one batch may reach here after its answer
                if msg.kind == REQUEST:
                    op = self._ask(half, direction == _EGRESS)
                else:
                    op = self._answer(half, direction != _EGRESS)
                if op is not None:
                    out.append(op)
        if self.evicted:
            out += self.evicted
            self.evicted = []
        return out

    def _ask(self, half: Half, mine: bool) -> Operation | None:
        pid = half.conn.pid
        early = self.early.pop((pid, mine, half.message.id), None)
        # an answer seen first is this request's when it came later in time (else it is
        # a stale one, of an earlier session whose ids this one reuses) on a pipe that goes
        # to the same peer, as far as is known
        if early is not None and early.end_ns >= half.start_ns:
            bound = self.bound.get((pid, early.inode))
            if bound is None or bound == half.inode:
                self.bound.setdefault((pid, early.inode), half.inode)
                return self._pair(half, early, mine)
            self.early[(pid, mine, half.message.id)] = early  # another pipe's answer
        pipes = self.request_pipes.setdefault((pid, mine), [])
        if half.inode not in pipes:
            pipes.append(half.inode)
            del pipes[:-16]  # bounded: a process with many servers over time
        key = (pid, mine, half.message.id, half.inode)
        old = self.waiting.pop(key, None)
        if old is not None:  # the same id asked again: the first went unanswered
            self.evicted.append(Operation(asked=old, asker=mine))
        self.waiting[key] = half
        return None

    def _answer(self, half: Half, mine: bool) -> Operation | None:
        """The answer to a request asked by this process (`mine`) or by its peer."""
        pid, ident = half.conn.pid, half.message.id
        bound = self.bound.get((pid, half.inode))
        if bound is not None:
            asked = self.waiting.pop((pid, mine, ident, bound), None)
        else:
            found = [(h.start_ns, inode) for inode in self.request_pipes.get((pid, mine), ())
                     if (h := self.waiting.get((pid, mine, ident, inode))) is not None]
            if not found:  # its request may come next (stitched later): it waits
                self.early[(pid, mine, ident)] = half
                return None
            found.sort()
            inode = found[0][1]
            if len(found) == 1:  # unambiguous: these two pipes go to one peer
                self.bound[(pid, half.inode)] = inode
                if len(self.bound) > 16384:
                    self.bound.pop(next(iter(self.bound)))
            asked = self.waiting.pop((pid, mine, ident, inode))
        if asked is None:
            self.early[(pid, mine, ident)] = half
            return None
        return self._pair(asked, half, mine)

    def _pair(self, asked: Half, half: Half, mine: bool) -> Operation:
        pid = asked.conn.pid
        if asked.message.method == "initialize" and isinstance(half.message.result, dict):
            version = half.message.result.get("protocolVersion")
            if isinstance(version, str):
                self.versions[pid] = version
        return Operation(asked=asked, answer=half, asker=mine)

    # --- spans ----------------------------------------------------------------------------

    def to_spans(self, record: Record, conn: ConnInfo) -> list[NeutralSpan]:
        assert isinstance(record, Operation)
        asked, answer = record.asked, record.answer
        request = asked.message
        reply = answer.message if answer is not None else None
        attrs: spans.Attributes = {"network.transport": "pipe",
                                   spans.TRANSPORT_ATTRIBUTE: STDIO}
        version = spans.protocol_version({}, request, reply) \
            or self.versions.get(asked.conn.pid, "")
        spans.operation_attributes(request, reply, "", version, self.content, attrs)
        if answer is None:
            attrs[UNANSWERED] = True
        # the asker's span starts when it writes the request and ends when it has read the
        # answer; the answerer's from when it read the request to when it wrote the answer
        start = asked.start_ns if record.asker else asked.end_ns
        end = (answer.end_ns if record.asker else answer.start_ns) if answer else asked.end_ns
        kind = SpanKind.CLIENT if record.asker else SpanKind.SERVER
        identity = f"mcp_stdio/{asked.inode}/{request.id}"
        return [spans.new_span(spans.span_name(request), kind, start, end, asked.conn, attrs,
                               reply, identity)]


__all__ = ["MCPStdioParser"]
