"""Redis pairing: replies answer commands in order (a pipeline's N commands, then its N
replies), except pushes (pub/sub messages, invalidations), which answer nothing.

What pairing also follows, per connection: the database index (SELECT), pub/sub mode
(RESP2 sends its messages as plain arrays once a subscription is open), a transaction
(MULTI's commands are answered +QUEUED, EXEC's reply is their results)."""

from __future__ import annotations

from dataclasses import dataclass

from ..base import Record, SmallDeque
from .resp import RedisFrame, RESPState

# (un)subscribe commands: each channel named is confirmed by a push of the command's name
SUBSCRIBES = frozenset({"subscribe", "unsubscribe", "psubscribe", "punsubscribe",
                        "ssubscribe", "sunsubscribe"})
# what a RESP2 array starts with when it is a pub/sub push, not a reply
PUBSUB_KINDS = SUBSCRIBES | {"message", "pmessage", "smessage"}
_PUSH, _ARRAY = 62, 42  # > *
MAX_WAITING = 4096  # commands awaiting a reply on one connection


@dataclass(slots=True, kw_only=True)
class RedisRecord(Record):
    """A command and its reply; reply None when none came (see `error`)."""

    request: RedisFrame
    response: RedisFrame | None = None
    # "timeout", "connection_closed"; None without a reply: it was lost from the capture
    error: str | None = None
    db: str | None = None  # the connection's database index when the command ran
    queued: bool = False  # inside MULTI: the reply only said QUEUED


def command_of(frame: RedisFrame) -> str:
    """The command's name as sent, lower case (what pairing compares)."""
    args = frame.args
    return args[0].lower() if args else ""


def pair(requests: SmallDeque, responses: SmallDeque, closed: bool, now_ns: int,
         state: RESPState, timeout_ns: int) -> list[RedisRecord]:
    records: list[RedisRecord] = []
    for request in requests:
        if request.after_gap:  # commands were lost: a SELECT among them, maybe
            request.after_gap = False
            state.db = None
    while requests and not requests[0].args:  # an empty inline line: no reply comes
        requests.popleft()
    while len(requests) > MAX_WAITING:
        # a client that pipelines without reading: the oldest commands end now, and their
        # replies, when they come, are stepped over by count (pairing stays in order)
        records.append(RedisRecord(request=requests.popleft(), db=state.db))
        state.evicted += 1
        state.skip_replies += 1
    while responses:
        reply = responses[0]
        if reply.after_gap:
            # replies were lost before this one: the commands they answered are done
            # without one; this answers the newest command sent before it came
            reply.after_gap = False
            while len(requests) > 1 and requests[1].start_ns <= reply.start_ns:
                records.append(RedisRecord(request=requests.popleft(), db=state.db))
        if _is_push(reply, requests, state):
            responses.popleft()
            _push(reply, requests, state, records)
            continue
        if state.skip_replies:  # a command evicted unanswered: this was its reply
            responses.popleft()
            state.skip_replies -= 1
            continue
        if not requests or reply.start_ns < requests[0].start_ns:
            # it answers a command never seen (capture began after it, or it was lost)
            responses.popleft()
            state.orphans += 1
            continue
        request = requests.popleft()
        responses.popleft()
        records.append(_answered(request, reply, state))
        while requests and not requests[0].args:
            requests.popleft()
    while requests and (closed or now_ns - requests[0].end_ns > timeout_ns):
        request = requests.popleft()
        if request.args:
            error = "connection_closed" if closed else "timeout"
            records.append(RedisRecord(request=request, error=error, db=state.db))
    return records


def _is_push(reply: RedisFrame, requests: SmallDeque, state: RESPState) -> bool:
    """A RESP3 push, or in RESP2's pub/sub mode an array that starts with a message kind
    (`message`, `subscribe`...): out of band, or a subscription's confirmation."""
    if reply.kind == _PUSH:
        return True
    if reply.kind != _ARRAY or reply.head not in PUBSUB_KINDS:
        return False
    return state.subscribed or bool(requests and command_of(requests[0]) in SUBSCRIBES)


def _push(reply: RedisFrame, requests: SmallDeque, state: RESPState,
          records: list[RedisRecord]) -> None:
    """A push: the confirmation a (un)subscribe command waits for (one per channel it
    names), or a message, which answers no command."""
    kind = reply.head
    if kind in SUBSCRIBES:
        if reply.last_int is not None:
            state.subscribed = reply.last_int > 0  # subscriptions left open
        if requests and command_of(requests[0]) == kind:
            request = requests[0]
            channels = max(1, request.argc - 1)  # no channel named: one confirmation at least
            request.confirmed += 1
            if request.confirmed >= channels:
                requests.popleft()
                records.append(RedisRecord(request=request, response=reply, db=state.db))
            return
    state.pushes += 1


def _answered(request: RedisFrame, reply: RedisFrame, state: RESPState) -> RedisRecord:
    """The record of a command and its reply, after the connection's state moved by it."""
    record = RedisRecord(request=request, response=reply, db=state.db)
    if reply.error is not None:
        return record
    command = command_of(request)
    if state.multi and reply.text == "QUEUED":
        record.queued = True
    elif command == "select" and reply.text == "OK":
        args = request.args
        if args and len(args) > 1 and args[1].isdigit():
            state.db = record.db = str(int(args[1]))
    elif command == "multi":
        state.multi = True
    elif command in ("exec", "discard", "reset"):
        state.multi = False
        if command == "reset":  # back to database 0, subscriptions closed
            state.db, state.subscribed = "0", False
    return record
