"""Requests and answers that cross HTTP exchanges: an HTTP+SSE client posts a request and
reads its answer on the session's event stream; a server sends its own requests (sampling,
elicitation, roots) on a stream and the client posts the answers. Either half may be seen
first (a stream is handed over when it ends), so each waits here for the other."""

from __future__ import annotations

from dataclasses import dataclass, field

from ..base import AttributeValue, ConnInfo, SpanKind
from ..common import BoundedTable
from .messages import Message

# (pid, session, who asked: "c" the MCP client or "s" the server, request id)
PairKey = tuple[int, str, str, str]


@dataclass(slots=True)
class Half:
    message: Message
    ns: int  # a request: when it was sent or read; an answer: when it was sent or read
    conn: ConnInfo
    kind: SpanKind  # of the operation's span in this process
    attributes: dict[str, AttributeValue] = field(default_factory=dict)  # transport's


class Pairs:
    """Halves waiting for their other half, at most `limit`; the oldest go first."""

    def __init__(self, limit: int) -> None:
        self.limit = limit
        self.evicted: list[Half] = []  # requests pushed out unanswered, to emit as such
        self.waiting = BoundedTable(limit, self._pushed_out)  # PairKey -> Half

    def _pushed_out(self, key: PairKey, half: Half) -> None:
        if not half.message.answers:
            self.evicted.append(half)

    def add(self, key: PairKey, half: Half) -> tuple[Half, Half] | None:
        """(request, answer) once both halves are in, else None (the half waits)."""
        other = self.waiting.pop(key, None)
        if other is not None and other.message.answers != half.message.answers:
            return (other, half) if half.message.answers else (half, other)
        if other is not None and not other.message.answers:
            self.evicted.append(other)  # the same id asked again: the first went unanswered
        self.waiting[key] = half
        return None

    def unanswered(self, pid: int, session: str) -> list[Half]:
        """Requests of a session still waiting for answers, taken out (its stream ended)."""
        keys = [k for k, h in self.waiting.items()
                if k[0] == pid and k[1] == session and not h.message.answers]
        return [self.waiting.pop(k) for k in keys]

    def take_evicted(self) -> list[Half]:
        out, self.evicted = self.evicted, []
        return out
