"""HTTP/2 and gRPC (h2c, prior knowledge): the `http2` protocol parser, one front door over
frames, header blocks, parse, stitch and spans."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, ClassVar

from ..base import (
    ConnInfo,
    Direction,
    Frame,
    NeutralSpan,
    ProtocolParser,
    Record,
    Role,
    SmallDeque,
)
from ..http1.parse import CONTEXT_HEADERS
from ..layers import HTTPLayer, layer_headers
from ..options import Duration, Flag, Integer, Schema
from . import parse as _parse
from .parse import MAX_STREAMS, H2Message, H2Request, H2Response, HTTP2State
from .spans import to_spans
from .stitch import H2Record, pair

__all__ = ["H2Message", "H2Record", "H2Request", "H2Response", "HTTP2Parser", "HTTP2State"]


class HTTP2Parser(ProtocolParser):
    """HTTP/2 and gRPC over a stream (h2c, prior knowledge). correlation_headers (from the
    agent): header names whose values link spans, default [x-request-id]."""

    name = "http2"
    transport = "stream"
    default_enabled = True
    default_rank = 20
    # a syscall that is one whole frame is finished by the tracker's compiled data step
    # (otel_ebpf/_fast/conn.c stream_step; Connection._whole its reference)
    compiled_stream_step = True
    option_schema: ClassVar[Schema] = {
        "response_timeout": Duration(30.0, "a request with no answer begun by then ends as "
                                     "a timeout (answers under way may stream longer)"),
        "capture_headers": Flag(False, "headers and gRPC metadata as span attributes"),
        "max_streams": Integer(MAX_STREAMS, "open streams tracked per connection",
                               least=1, most=65536),
    }

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        super().__init__(options)
        self.response_timeout_ns = int(self.options["response_timeout"] * 1e9)
        self.capture_headers = self.options["capture_headers"]
        self.max_streams = self.options["max_streams"]
        extra = self.options.get("correlation_headers", ["x-request-id"])
        self.carrier_names = CONTEXT_HEADERS | {str(h).lower() for h in extra}
        self.layers: tuple[HTTPLayer, ...] = ()
        fast = _parse.compiled_parse()
        if fast is not None:  # the frame loop in C; _parse.parse is its reference
            self.parse = fast

    def infer(self, direction: Direction, head: bytes, conn: ConnInfo) -> Role | None:
        return _parse.infer(direction, head, conn)

    def new_state(self, conn: ConnInfo) -> HTTP2State:
        return HTTP2State(conn, self.carrier_names, self.capture_headers, self.max_streams,
                          self.layers)

    def use_layers(self, layers: tuple[HTTPLayer, ...]) -> None:
        self.layers = layers
        # headers a layer reads (a session id) are kept as trace headers are
        self.carrier_names = self.carrier_names | layer_headers(layers)

    # parse(direction, buf, state) -> (ParseResult, Frame | None, consumed): the framer
    # itself, no method frame in between (the tracker calls it several times a call)
    parse = staticmethod(_parse.parse)

    def resync(self, direction: Direction, buf: memoryview, state: HTTP2State) -> int | None:
        return _parse.resync(direction, buf, state)

    def finish(self, direction: Direction, state: HTTP2State) -> Frame | None:
        return _parse.finish(direction, state)

    def pair(self, requests: SmallDeque, responses: SmallDeque, closed: bool, now_ns: int,
             state: HTTP2State) -> list[Record]:
        # `closed` is state.closed, which the stream ends read as the stitch runs
        return pair(requests, responses, now_ns, state, self.response_timeout_ns)

    def to_spans(self, record: H2Record, conn: ConnInfo) -> list[NeutralSpan]:
        return to_spans(record, conn, self.capture_headers)

    def counters(self, state: HTTP2State) -> dict[str, int]:
        return {"unknown_headers": state.unknown_headers,
                "orphan_responses": state.orphan_responses,
                "streams_dropped": state.streams_dropped,
                "malformed_blocks": state.malformed_blocks}
