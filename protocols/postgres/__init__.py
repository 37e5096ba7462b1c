"""PostgreSQL (frontend/backend protocol 3.0): the `postgres` protocol parser, one front
door over wire (framing, statements), pair and spans."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..base import (
    ConnInfo,
    Direction,
    Frame,
    NeutralSpan,
    ParseResult,
    ProtocolParser,
    Role,
    SmallDeque,
)
from ..options import Duration, Integer, Schema
from . import wire
from .pair import PgRecord, pair
from .spans import to_spans
from .sql import Statement, analyze
from .wire import PgRequest, PgResponse, PgState

__all__ = ["PgRecord", "PgRequest", "PgResponse", "PgState", "PostgresParser", "Statement",
           "analyze"]


class PostgresParser(ProtocolParser):
    """PostgreSQL clients and servers: simple and extended query protocol (pipelined),
    prepared statements, COPY, errors by SQLSTATE. TLS-encrypted sessions (SSLRequest
    answered yes) are left alone unless the TLS library's plaintext is captured."""

    name = "postgres"
    transport = "stream"
    default_enabled = True
    default_rank = 40  # after http1, http2, rtps: its startup packet is unambiguous
    option_schema: ClassVar[Schema] = {
        "response_timeout": Duration(60.0, "a query with no answer by then ends as a timeout"),
        "max_statements": Integer(256, "prepared statements (and portals) remembered per "
                                  "connection; one pushed out runs as unknown", least=1,
                                  most=1 << 20),
    }

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.timeout_ns = int(self.options["response_timeout"] * 1e9)
        self.max_statements = self.options["max_statements"]

    def infer(self, direction: Direction, head: bytes, conn: ConnInfo) -> Role | None:
        return wire.infer(direction, head)

    def new_state(self, conn: ConnInfo) -> PgState:
        return PgState(conn, self.max_statements)

    def parse(self, direction: Direction, buf: memoryview, state: PgState
              ) -> tuple[ParseResult, Frame | None, int]:
        return wire.parse(direction, buf, state)

    def resync(self, direction: Direction, buf: memoryview, state: PgState) -> int | None:
        return wire.resync(direction, buf, state)

    def pair(self, requests: SmallDeque, responses: SmallDeque, closed: bool, now_ns: int,
             state: PgState) -> list[PgRecord]:
        return pair(requests, responses, closed, now_ns, state, self.timeout_ns)

    def to_spans(self, record: PgRecord, conn: ConnInfo) -> list[NeutralSpan]:
        return to_spans(record, conn)

    def counters(self, state: PgState) -> dict[str, int]:
        return {
            "orphan_responses": state.orphans,
            "unknown_statements": state.unknown,
            "statements_evicted": state.statements.evicted + state.portals.evicted,
            "not_executed": state.not_executed,
            "cancel_requests": state.cancels,
            "encrypted": int(state.encrypted),
        }
