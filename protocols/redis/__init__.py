"""Redis and Valkey (RESP2 and RESP3): the `redis` protocol parser, one front door over
framing (resp), pairing (pair) and spans."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..base import ConnInfo, Direction, NeutralSpan, ParseResult, ProtocolParser, Role, SmallDeque
from ..options import Duration, Flag, Schema
from . import resp
from .pair import RedisRecord, pair
from .resp import RedisFrame, RESPState
from .spans import to_spans

__all__ = ["RESPState", "RedisFrame", "RedisParser", "RedisRecord"]

# inline commands claimed as Redis when a connection starts with one: a short list, since
# other text protocols (memcached's `get k`, SMTP, FTP) start with words too
INLINE_FIRST = frozenset({b"PING", b"HELLO", b"SELECT", b"INFO", b"DBSIZE", b"MULTI",
                          b"SUBSCRIBE", b"PSUBSCRIBE", b"FLUSHDB", b"FLUSHALL", b"MONITOR"})


class RedisParser(ProtocolParser):
    """RESP2/RESP3 commands and replies over a stream: one span per command."""

    name = "redis"
    transport = "stream"
    default_enabled = True
    default_rank = 40  # after HTTP/1, HTTP/2 and RTPS: a `*` or a word is all it asks
    option_schema: ClassVar[Schema] = {
        "response_timeout": Duration(30.0, "a command with no reply by then ends as a timeout "
                                           "(blocking commands wait: BLPOP 0 waits forever)"),
        "capture_keys": Flag(False, "the key of each command in db.query.text (values never)"),
    }

    # the tracker's step for a syscall that is one whole usual frame (a GET, its reply)
    whole = staticmethod(resp.whole)

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.timeout_ns = int(self.options["response_timeout"] * 1e9)
        self.capture_keys = self.options["capture_keys"]

    def infer(self, direction: Direction, head: bytes, conn: ConnInfo) -> Role | None:
        if not _looks_like_command(head):
            return None
        # whoever wrote the first command is the client
        return Role.CLIENT if direction == Direction.EGRESS else Role.SERVER

    def new_state(self, conn: ConnInfo) -> RESPState:
        return RESPState(conn)

    def parse(self, direction: Direction, buf: memoryview, state: RESPState
              ) -> tuple[ParseResult, RedisFrame | None, int]:
        return resp.parse(direction, buf, state)

    def resync(self, direction: Direction, buf: memoryview, state: RESPState) -> int | None:
        return resp.resync(direction, buf, state)

    def pair(self, requests: SmallDeque, responses: SmallDeque, closed: bool, now_ns: int,
             state: RESPState) -> list[RedisRecord]:
        return pair(requests, responses, closed, now_ns, state, self.timeout_ns)

    def to_spans(self, record: RedisRecord, conn: ConnInfo) -> list[NeutralSpan]:
        return to_spans(record, conn, self.capture_keys)

    def counters(self, state: RESPState) -> dict[str, int]:
        return {"orphan_responses": state.orphans, "pushes": state.pushes,
                "evicted": state.evicted}


def _looks_like_command(head: bytes) -> bool:
    """`*<n>\\r\\n$<len>\\r\\n<name>`: an array of bulk strings whose first is a command's
    name; or a line starting with one of INLINE_FIRST."""
    if head[:1] == b"*":
        first, _, rest = head.partition(b"\r\n")
        if not first[1:].isdigit() or not 0 < int(first[1:]) < 1 << 20 \
                or not rest.startswith(b"$"):
            return False
        size, _, name = rest[1:].partition(b"\r\n")
        if not size.isdigit() or not 0 < int(size) <= 32:
            return False
        name = name[:int(size)]
        # a name (GET, CLIENT, JSON.GET), or the head was cut inside it
        return name.replace(b".", b"").replace(b"_", b"").replace(b"-", b"").isalpha() \
            or (not name and len(head) < 64)
    word = head.split(b"\r\n", 1)[0].split(b" ", 1)[0]
    return word.upper() in INLINE_FIRST and (b"\r\n" in head or b" " in head)
