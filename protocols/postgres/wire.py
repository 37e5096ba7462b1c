"""PostgreSQL frontend/backend protocol 3.0: the bytes of one direction into the few
frames pairing needs (a query, an execute, a sync; a command's completion, an error, a
ReadyForQuery). Everything else is stepped over by its length without being kept: rows,
COPY data, passwords, notices; prepared statements and portals are remembered here, as the
requests go by, so that an Execute knows the text it runs."""

from __future__ import annotations

from dataclasses import dataclass
from struct import Struct

from ..base import (
    UNTIL_CLOSE,
    ConnInfo,
    Direction,
    Frame,
    ParseResult,
    ParserState,
    Role,
    positional_maker,
)
from ..common import BoundedTable
from .sql import Statement, analyze

_I32 = Struct("!i")
_I16 = Struct("!h")
_HEAD = Struct("!ci")  # type byte, length (counting itself, not the type byte)

PROTOCOL_3 = 196608  # 3.0; a 3.x minor is answered by NegotiateProtocolVersion
SSL_REQUEST, GSSENC_REQUEST, CANCEL_REQUEST = 80877103, 80877104, 80877102
MAX_STARTUP = 10_000  # the server refuses longer startup packets
MAX_TEXT = 4096  # bytes of query text kept (and waited for) per statement
MAX_NAME = 64  # NAMEDATALEN: statement and portal names are shorter
MAX_LENGTH = 1 << 30  # the protocol's own bound on a message
MAX_SMALL = 1024  # an Execute, Close or Sync longer than this is not one

FRONTEND = frozenset(b"BCcDdEFfHPpQSX")
BACKEND = frozenset(b"RKSZTDCIENA123ntsGHWdcVv")
# after a typed message, what a resync takes as a message start without seeing the next
STRONG = {Direction.EGRESS: frozenset(b"QPBS"), Direction.INGRESS: frozenset(b"TDCZE")}


@dataclass(slots=True, kw_only=True)
class PgRequest(Frame):
    """A request pairing waits on: 'Q' (simple query), 'E' (Execute), 'S' (Sync), 'F'
    (function call), '0' (startup: answered by ReadyForQuery, no span), 'c' (cancel)."""

    kind: str = ""
    statement: Statement | None = None  # what runs; None: unknown (prepared unseen)
    statement_name: str = ""
    top_k: int | None = None
    # what came back so far for a simple query (pairing fills them in)
    tags: list[str] | None = None
    rows: int = 0
    code: str = ""
    sync: bool = False  # an Execute the Sync right after it was read with: it owns the Z


@dataclass(slots=True, kw_only=True)
class PgResponse(Frame):
    """'C' CommandComplete (tag, rows counted from DataRow), 's' PortalSuspended,
    'I' EmptyQueryResponse, 'E' ErrorResponse (SQLSTATE), 'Z' ReadyForQuery."""

    kind: str = ""
    tag: str = ""
    rows: int = 0
    code: str = ""
    ready: bool = False  # the ReadyForQuery right after it was read with it


_make_request = positional_maker(PgRequest, ("kind", "statement", "statement_name", "top_k"))


class Portal:
    __slots__ = ("statement", "top_k", "name")

    def __init__(self, statement: Statement | None, name: str, top_k: int | None) -> None:
        self.statement, self.name, self.top_k = statement, name, top_k


class PgState(ParserState):
    __slots__ = ("answer_pending", "copying", "database", "encrypted", "portals", "rows",
                 "statements", "unnamed", "unnamed_portal", "orphans", "unknown",
                 "not_executed", "cancels", "user", "last_parsed", "owed", "skipping")

    def __init__(self, conn: ConnInfo, max_statements: int) -> None:
        super().__init__(conn)
        self.database = ""
        self.user = ""
        # an SSLRequest or GSSENCRequest went out: its answer is one byte, not a message
        self.answer_pending = False
        self.encrypted = False  # the server said yes to TLS or GSS: nothing more is parsed
        self.copying = False  # COPY FROM STDIN: the client streams, no answer is late
        # named prepared statements and portals; the unnamed ones apart (never evicted)
        self.statements: BoundedTable = BoundedTable(max_statements)
        self.portals: BoundedTable = BoundedTable(max_statements)
        self.unnamed: Statement | None = None
        self.unnamed_portal: Portal | None = None
        self.rows = 0  # DataRows since the last completion
        self.orphans = 0  # answers with no request
        self.unknown = 0  # executes of a statement prepared before we saw it
        self.not_executed = 0  # executes the server skipped after an error, until Sync
        self.cancels = 0
        # the statement of the last Parse not followed by an Execute: a Sync that meets an
        # error (a prepare that failed) reports it
        self.last_parsed: tuple[Statement, str] | None = None
        self.owed = 0  # ReadyForQuery bookkeeping of pairing (pair.py)
        self.skipping = False


def _cstr(buf: memoryview, start: int, end: int) -> tuple[str, int] | None:
    """The NUL-terminated string at `start`, before `end`: (text, position after NUL)."""
    raw = bytes(buf[start:end])
    nul = raw.find(b"\0")
    if nul < 0:
        return None
    return raw[:nul].decode("utf-8", "replace"), start + nul + 1


def infer(direction: Direction, head: bytes) -> Role | None:
    """A startup packet (or SSL/GSS/cancel request) from the side that wrote it; or, in a
    connection already running when capture began, a Query or Parse."""
    mine = Role.CLIENT if direction == Direction.EGRESS else Role.SERVER
    if len(head) >= 8 and head[0] == 0:
        length, code = _I32.unpack_from(head)[0], _I32.unpack_from(head, 4)[0]
        if length == 8 and code in (SSL_REQUEST, GSSENC_REQUEST):
            return mine
        if length == 16 and code == CANCEL_REQUEST:
            return mine
        if code >> 16 == 3 and code & 0xFFFF < 16 and 8 < length <= MAX_STARTUP \
                and (len(head) < length or head[length - 1] == 0):
            return mine
        return None
    if len(head) >= 6 and head[0] in b"QP":
        length = _I32.unpack_from(head, 1)[0]
        if not 5 <= length < MAX_LENGTH:
            return None
        body = head[5 : 1 + length]
        if head[0] == ord("Q"):
            if len(head) >= 1 + length and (head[length] != 0 or b"\0" in body[:-1]):
                return None
            text = body.rstrip(b"\0")
        else:
            nul = body.find(b"\0")
            if nul < 0 or nul >= MAX_NAME:
                return None
            text = body[nul + 1 :]
        if not text[:1] or not _sql_start(text):
            return None
        return mine
    return None


def _sql_start(text: bytes) -> bool:
    """The text starts as a statement does: a keyword, a parenthesis or a comment."""
    first = text.lstrip()[:2]
    return bool(first) and (first[:1].isalpha() or first[:1] == b"(" or first in (b"--", b"/*"))


# ---- framing ---------------------------------------------------------------------


def parse(direction: Direction, buf: memoryview, state: PgState
          ) -> tuple[ParseResult, Frame | None, int]:
    if state.encrypted:
        return ParseResult.NEED_MORE, None, UNTIL_CLOSE
    one = _request if direction == state.requests else _response
    # messages stepped over (a Parse, a Bind, rows) and the frame after them in one call:
    # the tracker's step per call costs more than reading a message
    at, have = 0, len(buf)
    while True:
        result, frame, consumed = one(buf[at:] if at else buf, state)
        if result is not _NEED_MORE or consumed <= 0 or consumed >= UNTIL_CLOSE \
                or at + consumed >= have:
            break
        at += consumed
    if not at:
        return result, frame, consumed
    if result is _INVALID:  # the next call reports it, at its own start
        return _NEED_MORE, None, at
    if consumed >= UNTIL_CLOSE:
        return _NEED_MORE, None, UNTIL_CLOSE
    return result, frame, at + consumed


_NEED_MORE, _INVALID = ParseResult.NEED_MORE, ParseResult.INVALID


def _request(buf: memoryview, state: PgState) -> tuple[ParseResult, Frame | None, int]:
    have = len(buf)
    if have == 0:
        return ParseResult.NEED_MORE, None, 0
    first = buf[0]
    if first == 0:
        return _untyped(buf, state)
    if first == 0x16:  # a TLS ClientHello after an SSLRequest: encrypted from here
        state.encrypted = True
        return ParseResult.NEED_MORE, None, UNTIL_CLOSE
    if have < 5:
        return ParseResult.NEED_MORE, None, 0
    kind_b, length = _HEAD.unpack_from(buf)
    kind = kind_b[0]
    if kind not in FRONTEND or not 4 <= length < MAX_LENGTH:
        return ParseResult.INVALID, None, 0
    total = length + 1
    if kind in b"HDdcfpX":  # flush, describe, COPY data, password, terminate: stepped over
        return ParseResult.NEED_MORE, None, total
    if kind == 0x51:  # Q
        if have < total and have < 5 + MAX_TEXT:
            return ParseResult.NEED_MORE, None, 0
        text = bytes(buf[5 : min(total, 5 + MAX_TEXT)]).rstrip(b"\0")
        statement = analyze(text.decode("utf-8", "replace"))
        state.copying = False
        return ParseResult.FRAME, _make_request("Q", statement, "",
                                               statement.top_k if (statement.top_k or 0) > 0 else None), total
    if kind == 0x50:  # P: name, query, parameter types
        if have < total and have < 5 + MAX_NAME + MAX_TEXT:
            return ParseResult.NEED_MORE, None, 0
        got = _cstr(buf, 5, min(total, 5 + MAX_NAME))
        if got is None:
            return ParseResult.INVALID, None, 0
        name, at = got
        raw = bytes(buf[at : min(total, at + MAX_TEXT)])
        nul = raw.find(b"\0")
        statement = analyze((raw if nul < 0 else raw[:nul]).decode("utf-8", "replace"))
        if name:
            state.statements[name] = statement
        else:
            state.unnamed = statement
        state.last_parsed = (statement, name)
        return ParseResult.NEED_MORE, None, total
    if kind == 0x42:  # B: portal, statement, formats, parameters (never kept), formats
        if have < total and have < 5 + 2 * MAX_NAME:
            return ParseResult.NEED_MORE, None, 0
        got = _cstr(buf, 5, min(total, have, 5 + MAX_NAME))
        got2 = got and _cstr(buf, got[1], min(total, have, got[1] + MAX_NAME))
        if not got2:
            return ParseResult.INVALID, None, 0
        portal, name = got[0], got2[0]
        statement = state.statements.get(name) if name else state.unnamed
        top_k = statement.top_k if statement is not None else None
        if top_k is not None and top_k < 0:
            top_k = _bound_limit(buf, got2[1], min(total, have), -top_k)
        entry = Portal(statement, name, top_k)
        if portal:
            state.portals[portal] = entry
        else:
            state.unnamed_portal = entry
        return ParseResult.NEED_MORE, None, total
    if total > MAX_SMALL:
        return ParseResult.INVALID, None, 0
    if have < total:
        return ParseResult.NEED_MORE, None, 0
    if kind == 0x45:  # E: portal, max rows
        state.last_parsed = None
        got = _cstr(buf, 5, total)
        if got is None:
            return ParseResult.INVALID, None, 0
        entry = state.portals.get(got[0]) if got[0] else state.unnamed_portal
        frame = _make_request("E", None, "", None) if entry is None else \
            _make_request("E", entry.statement, entry.name, entry.top_k)
        if bytes(buf[total : total + 5]) == _SYNC:  # one frame for both: the common case
            frame.sync = True
            total += 5
        return ParseResult.FRAME, frame, total
    if kind == 0x53:  # S: carries the Parse before it, which an error there is about
        statement, name = state.last_parsed or (None, "")
        state.last_parsed = None
        return ParseResult.FRAME, _make_request("S", statement, name, None), total
    if kind == 0x43:  # C: close a statement or a portal
        got = _cstr(buf, 6, total)
        if got is not None and got[0]:
            table = state.statements if buf[5] == 0x53 else state.portals
            table.pop(got[0], None)
        return ParseResult.NEED_MORE, None, total
    # F: a function call, answered by FunctionCallResponse and ReadyForQuery
    return ParseResult.FRAME, _make_request("F", None, "", None), total


def _bound_limit(buf: memoryview, at: int, end: int, index: int) -> int | None:
    """Parameter $index of a Bind, when it is an integer (text or binary): the LIMIT of a
    nearest-neighbour query. Only that parameter is read; no other value ever is."""
    try:
        (nformats,) = _I16.unpack_from(buf, at)
        formats = [_I16.unpack_from(buf, at + 2 + 2 * i)[0] for i in range(nformats)]
        at += 2 + 2 * nformats
        (nparams,) = _I16.unpack_from(buf, at)
        at += 2
        if not 0 < index <= nparams:
            return None
        for i in range(index):
            (size,) = _I32.unpack_from(buf, at)
            at += 4
            if i == index - 1:
                if size < 0 or at + size > end:
                    return None
                value = bytes(buf[at : at + size])
                binary = (formats[i] if nformats > 1 else formats[0] if formats else 0) == 1
                if binary:
                    return int.from_bytes(value, "big", signed=True) if size in (2, 4, 8) else None
                text = value.decode("ascii", "replace").strip()
                return int(text) if text.isdigit() and len(text) <= 9 else None
            at += max(size, 0)
            if at > end:
                return None
    except Exception:  # noqa: BLE001 - a Bind cut by the capture: no limit, no error
        return None
    return None


def _untyped(buf: memoryview, state: PgState) -> tuple[ParseResult, Frame | None, int]:
    """A startup packet, or an SSL, GSS or cancel request: no type byte."""
    if len(buf) < 8:
        return ParseResult.NEED_MORE, None, 0
    length, code = _I32.unpack_from(buf)[0], _I32.unpack_from(buf, 4)[0]
    if length == 8 and code in (SSL_REQUEST, GSSENC_REQUEST):
        state.answer_pending = True
        return ParseResult.NEED_MORE, None, 8
    if length == 16 and code == CANCEL_REQUEST:
        state.cancels += 1  # the server closes this connection without an answer
        return ParseResult.NEED_MORE, None, 16
    if code >> 16 != 3 or not 8 < length <= MAX_STARTUP:
        return ParseResult.INVALID, None, 0
    if len(buf) < length:
        return ParseResult.NEED_MORE, None, 0
    fields = bytes(buf[8:length]).split(b"\0")
    params = dict(zip(fields[0::2], fields[1::2], strict=False))
    state.user = params.get(b"user", b"").decode("utf-8", "replace")
    # the database defaults to the user's name
    state.database = params.get(b"database", b"").decode("utf-8", "replace") or state.user
    frame = PgRequest(kind="0")
    return ParseResult.FRAME, frame, length


def _response(buf: memoryview, state: PgState) -> tuple[ParseResult, Frame | None, int]:
    have = len(buf)
    if have == 0:
        return ParseResult.NEED_MORE, None, 0
    if state.answer_pending:  # the one-byte answer to SSLRequest / GSSENCRequest
        state.answer_pending = False
        if buf[0] in b"SG":
            state.encrypted = True
            return ParseResult.NEED_MORE, None, UNTIL_CLOSE
        if buf[0] == 0x4E:  # N: go on in the clear
            return ParseResult.NEED_MORE, None, 1
        # an old server answering with an error message: parse it as one
    if have < 5:
        return ParseResult.NEED_MORE, None, 0
    kind_b, length = _HEAD.unpack_from(buf)
    kind = kind_b[0]
    if kind not in BACKEND or not 4 <= length < MAX_LENGTH:
        return ParseResult.INVALID, None, 0
    total = length + 1
    if kind == 0x44:  # D: DataRows, counted and stepped over, as many as are here
        rows, at = 0, 0
        while True:
            rows += 1
            at += total
            if at + 5 > have or buf[at] != 0x44:
                break
            length = _I32.unpack_from(buf, at + 1)[0]
            if not 4 <= length < MAX_LENGTH:
                break
            total = length + 1
        state.rows += rows
        return ParseResult.NEED_MORE, None, at
    if kind == 0x43:  # C: CommandComplete
        if total > MAX_SMALL:
            return ParseResult.INVALID, None, 0
        if have < total:
            return ParseResult.NEED_MORE, None, 0
        tag = bytes(buf[5:total]).rstrip(b"\0").decode("ascii", "replace")
        rows, state.rows = state.rows, 0
        state.copying = False
        frame = PgResponse(kind="C", tag=tag, rows=rows)
        return ParseResult.FRAME, frame, total + _ready_after(buf, total, frame)
    if kind == 0x5A:  # Z: ReadyForQuery
        if total != 6:
            return ParseResult.INVALID, None, 0
        if have < total:
            return ParseResult.NEED_MORE, None, 0
        state.rows = 0
        state.copying = False
        return ParseResult.FRAME, PgResponse(kind="Z"), total
    if kind == 0x45:  # E: ErrorResponse, the SQLSTATE of its fields (the text never)
        if have < total and have < MAX_SMALL:
            return ParseResult.NEED_MORE, None, 0
        state.rows = 0
        state.copying = False
        frame = PgResponse(kind="E", code=_sqlstate(buf, min(total, have)))
        return ParseResult.FRAME, frame, total + _ready_after(buf, total, frame)
    if kind in b"sI":  # PortalSuspended, EmptyQueryResponse
        rows, state.rows = state.rows, 0
        return ParseResult.FRAME, PgResponse(kind=chr(kind), rows=rows), total
    if kind == 0x47:  # G: CopyInResponse: the client streams now, however long it takes
        state.copying = True
    # everything else (RowDescription, ParameterStatus, notices, COPY data, ...): skipped
    return ParseResult.NEED_MORE, None, total


_SYNC = b"S\0\0\0\x04"
_READY = b"Z\0\0\0\x05"


def _ready_after(buf: memoryview, at: int, frame: PgResponse) -> int:
    """The bytes of a ReadyForQuery right at `at`, read with the frame before it (0 when
    none is there whole): a frame less for the tracker per exchange."""
    if len(buf) >= at + 6 and bytes(buf[at : at + 5]) == _READY:
        frame.ready = True
        return 6
    return 0


def _sqlstate(buf: memoryview, end: int) -> str:
    at = 5
    while at < end and buf[at] != 0:
        field = buf[at]
        got = _cstr(buf, at + 1, end)
        if got is None:
            return ""
        if field == 0x43:  # C: the code
            code = got[0]
            return code if len(code) == 5 and code.isalnum() else ""
        at = got[1]
    return ""


def resync(direction: Direction, buf: memoryview, state: PgState) -> int | None:
    """The first offset where a message of this direction plausibly starts: a known type
    and length, followed by another such message (or a strong type at the buffer's end)."""
    if state.encrypted:
        return None
    mine = direction == state.requests
    valid = FRONTEND if mine else BACKEND
    strong = STRONG[Direction.EGRESS if mine else Direction.INGRESS]
    have = len(buf)
    raw = bytes(buf)
    for i in range(max(0, have - 4)):
        if raw[i] not in valid:
            continue
        length = _I32.unpack_from(raw, i + 1)[0]
        if not 4 <= length < 1 << 24:
            continue
        nxt = i + 1 + length
        if nxt == have or (nxt > have and raw[i] in strong):
            return i
        if nxt + 5 <= have and raw[nxt] in valid \
                and 4 <= _I32.unpack_from(raw, nxt + 1)[0] < 1 << 24:
            return i
    return None
