"""Requests and their answers, in order: a simple query ends at ReadyForQuery (every
statement's completion before it counts), an Execute at its own completion or error; an
Execute the server skipped after an error (until Sync) has no answer and no span; a Sync
that meets an error no Execute took (a prepare that failed) is reported with its Parse."""

from __future__ import annotations

from dataclasses import dataclass

from ..base import Record, SmallDeque
from .wire import PgRequest, PgResponse, PgState

_UNTIL_READY = frozenset("QF0")  # answered up to ReadyForQuery (0: the startup)


@dataclass(slots=True, kw_only=True)
class PgRecord(Record):
    request: PgRequest  # named so: the tracker fills the span's correlation from them
    response: PgResponse | None = None
    database: str = ""
    tags: tuple[str, ...] = ()
    rows: int = 0  # DataRows received
    code: str = ""  # SQLSTATE of an ErrorResponse
    error: str | None = None  # "timeout" or "connection_closed" when no answer came


def pair(requests: SmallDeque, responses: SmallDeque, closed: bool, now_ns: int,
         state: PgState, timeout_ns: int) -> list[PgRecord]:
    """A ReadyForQuery may come as a frame of its own or folded into the completion or
    error before it (`ready`); a Sync as a frame or folded into the Execute before it
    (`sync`). `state.owed` counts ReadyForQuery frames an Execute with its Sync still has
    to take; `state.skipping` says the batch's ReadyForQuery came before its Sync did (an
    error, or a folded completion): requests up to that Sync get no answer."""
    records: list[PgRecord] = []
    while True:
        _pay(responses, state)
        if not requests:
            break
        request = requests[0]
        kind = request.kind
        if state.skipping and kind in "ES":  # the batch's ReadyForQuery is already taken
            requests.popleft()
            if kind == "E":
                state.not_executed += 1
            state.skipping = kind == "E" and not request.sync
            continue
        state.skipping = False
        if kind in _UNTIL_READY or kind == "S":
            done = False
            while responses:
                response = responses.popleft()
                if response.kind == "Z":
                    done = True
                    break
                _take(request, response)
                if response.ready:
                    done = True
                    break
            if done:
                requests.popleft()
                # a Sync's error is one of a Parse (a prepare that failed) when no Execute
                # took it: reported with that Parse's statement
                if kind in "QF" or (kind == "S" and request.code and request.statement):
                    records.append(_record(request, response, state))
                continue
        elif kind == "E":
            if responses:
                response = responses.popleft()
                requests.popleft()
                if response.kind == "Z":  # skipped after an error: the Sync's answer
                    state.not_executed += 1
                    state.skipping = not request.sync  # up to the Sync it belongs to
                    continue
                records.append(_record(request, response, state, response.rows))
                if request.sync and not response.ready:
                    state.owed += 1
                elif response.ready and not request.sync:
                    state.skipping = True
                continue
        else:  # unknown kind: nothing answers it
            requests.popleft()
            continue
        # no (whole) answer yet: wait, unless the connection ended or it is late
        late = now_ns - request.end_ns > timeout_ns and not state.copying
        if not (closed or late):
            break
        requests.popleft()
        if kind in "QFE":
            records.append(_record(request, None, state,
                                   error="connection_closed" if closed else "timeout"))
    if responses:
        state.orphans += sum(1 for r in responses if r.kind != "Z")
        responses.clear()
    return records


def _pay(responses: SmallDeque, state: PgState) -> None:
    """Take the ReadyForQuery an Execute with its Sync owes (and what precedes it)."""
    while state.owed and responses:
        response = responses.popleft()
        if response.kind == "Z" or response.ready:
            state.owed -= 1


def _take(request: PgRequest, response: PgResponse) -> None:
    """One statement's completion (or error) inside a simple query."""
    if response.kind == "E":
        request.code = request.code or response.code
    elif response.kind == "C":
        if request.tags is None:
            request.tags = []
        request.tags.append(response.tag)
    request.rows += response.rows


def _record(request: PgRequest, response: PgResponse | None, state: PgState,
            rows: int | None = None, error: str | None = None) -> PgRecord:
    if request.kind == "E":
        tags = (response.tag,) if response is not None and response.kind == "C" else ()
        code = response.code if response is not None else ""
        if request.statement is None:
            state.unknown += 1
    else:
        tags, code, rows = tuple(request.tags or ()), request.code, request.rows
    return PgRecord(request=request, response=response, database=state.database, tags=tags,
                    rows=rows or 0, code=code, error=error)
