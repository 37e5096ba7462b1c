"""HTTP/1.0 and 1.1: the `http1` protocol parser, one front door over parse, stitch and spans."""

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
    Record,
    Role,
    SmallDeque,
)
from ..layers import HTTPLayer, layer_headers
from ..options import Duration, Flag, Schema
from . import parse as _parse
from . import spans as _spans
from .parse import CONTEXT_HEADERS, HTTP1State, HTTPMessage, HTTPRequest, HTTPResponse
from .spans import to_spans
from .stitch import HTTPRecord, pair

__all__ = ["HTTP1Parser", "HTTP1State", "HTTPMessage", "HTTPRecord", "HTTPRequest", "HTTPResponse"]


class HTTP1Parser(ProtocolParser):
    """HTTP/1.0 and 1.1 over a stream. correlation_headers (from the agent): header names
    whose values link spans, default [x-request-id]."""

    name = "http1"
    transport = "stream"
    default_enabled = True
    default_rank = 10
    option_schema: ClassVar[Schema] = {
        "response_timeout": Duration(30.0, "a request with no answer by then ends as a timeout"),
        "capture_headers": Flag(False, "headers as span attributes (secrets never)"),
    }
    # the tracker's one step for a syscall that is a body piece of whole chunks, in C
    # (Connection._whole inside a message, with parse._chunks, is its reference); None: the
    # Python steps. A class attribute: otel_ebpf/_fast/conn.c looks it up on the class.
    piece = _parse.compiled_piece()

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.response_timeout_ns = int(self.options["response_timeout"] * 1e9)
        self.capture_headers = self.options["capture_headers"]
        extra = self.options.get("correlation_headers", ["x-request-id"])
        self.carrier_names = CONTEXT_HEADERS | {str(h).lower() for h in extra}
        self.layers: tuple[HTTPLayer, ...] = ()

    def infer(self, direction: Direction, head: bytes, conn: ConnInfo) -> Role | None:
        return _parse.infer(direction, head)

    def new_state(self, conn: ConnInfo) -> HTTP1State:
        return HTTP1State(conn, self.carrier_names, self.layers, self.capture_headers)

    def use_layers(self, layers: tuple[HTTPLayer, ...]) -> None:
        self.layers = layers
        # headers a layer reads (a session id) are kept as trace headers are
        self.carrier_names = self.carrier_names | layer_headers(layers)

    def parse(
        self, direction: Direction, buf: memoryview, state: HTTP1State
    ) -> tuple[ParseResult, Frame | None, int]:
        return _parse.parse(direction, buf, state, self.capture_headers)

    @property
    def whole(self):  # noqa: ANN201 (whole's signature)
        """The tracker's one step for a whole syscall that is one plain message (None from
        it: the general path): in C when compiled, and none on the pure Python path, whose
        heads llhttp reads. parse.whole is the reference of the compiled one."""
        fast = _parse.compiled
        return None if fast is None or self.capture_headers else _parse.compiled_whole(fast)

    def resync(self, direction: Direction, buf: memoryview, state: HTTP1State) -> int | None:
        return _parse.resync(direction, buf, state)

    def finish(self, direction: Direction, state: HTTP1State) -> Frame | None:
        return _parse.finish(direction, state)

    def skip_lost(self, direction: Direction, lost: int, state: HTTP1State) -> bool:
        return _parse.skip_lost(direction, lost, state)

    def pair(self, requests: SmallDeque, responses: SmallDeque, closed: bool, now_ns: int,
             state: HTTP1State) -> list[Record]:
        return pair(requests, responses, closed, now_ns, state, self.response_timeout_ns)

    def to_spans(self, record: HTTPRecord, conn: ConnInfo) -> list[NeutralSpan]:
        # the common case in C when compiled (_parse.c span; spans.to_spans is its
        # reference): None from it, and the Python runs
        fast = _parse.compiled
        if fast is not None and not self.capture_headers:
            if _spans.compiled_for is not fast:
                _spans.compiled_setup(fast)
            spans = fast.span(record, conn)
            if spans is not None:
                return spans
        return to_spans(record, conn, self.capture_headers)

    def counters(self, state: HTTP1State) -> dict[str, int]:
        return {"orphan_responses": state.orphan_responses}
