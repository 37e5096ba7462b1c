"""HTTP/1 messages of MCP's transports, as the official SDK writes them (shapes seen on the
wire), and a driver that runs them through the real HTTP/1 parser with the MCP layer."""

from __future__ import annotations

import orjson
from otel_ebpf.protocols.base import Direction, Role
from otel_ebpf.protocols.http1 import HTTP1Parser
from otel_ebpf.protocols.mcp import MCPLayer
from otel_ebpf.protocols.testing import ConnectionDriver, conn_info

SESSION = "a7abe3f3461d489da1114a35e92a6ee9"
MODERN = "2026-07-28"
LEGACY = "2025-11-25"


def rpc(**fields) -> bytes:
    return orjson.dumps({"jsonrpc": "2.0", **fields})


def post(target: str, body: bytes, *, session: str = "", version: str = "") -> bytes:
    head = [f"POST {target} HTTP/1.1", "Host: 127.0.0.1:8000",
            "accept: application/json, text/event-stream", "content-type: application/json"]
    if session:
        head.append(f"mcp-session-id: {session}")
    if version:
        head.append(f"mcp-protocol-version: {version}")
    head.append(f"Content-Length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def get(target: str, *, session: str = "") -> bytes:
    head = [f"GET {target} HTTP/1.1", "Host: 127.0.0.1:8000", "accept: text/event-stream"]
    if session:
        head.append(f"mcp-session-id: {session}")
    return ("\r\n".join(head) + "\r\n\r\n").encode()


def json_answer(body: bytes, *, status: int = 200, session: str = "") -> bytes:
    reason = {200: "OK", 202: "Accepted", 400: "Bad Request"}[status]
    head = [f"HTTP/1.1 {status} {reason}", "content-type: application/json"]
    if session:
        head.append(f"mcp-session-id: {session}")
    head.append(f"content-length: {len(body)}")
    return ("\r\n".join(head) + "\r\n\r\n").encode() + body


def sse_head(*, session: str = "") -> bytes:
    head = ["HTTP/1.1 200 OK", "cache-control: no-cache, no-transform",
            "content-type: text/event-stream", "transfer-encoding: chunked"]
    if session:
        head.append(f"mcp-session-id: {session}")
    return ("\r\n".join(head) + "\r\n\r\n").encode()


def sse_chunk(data: bytes, event: str = "message") -> bytes:
    payload = f"event: {event}\r\ndata: ".encode() + data + b"\r\n\r\n"
    return f"{len(payload):x}\r\n".encode() + payload + b"\r\n"


SSE_END = b"0\r\n\r\n"


class Peer:
    """One traced process's side of MCP: connections through the real tracker and HTTP/1
    parser, all sharing one MCP layer (which pairs messages across connections)."""

    def __init__(self, role: Role, layer: MCPLayer | None = None) -> None:
        self.role = role
        self.layer = layer or MCPLayer()
        self.fds = 10
        self.now = 0  # one clock for all the peer's connections

    def connection(self) -> ConnectionDriver:
        self.fds += 1
        return ConnectionDriver(HTTP1Parser(), conn_info(self.role, fd=self.fds),
                                layers=(self.layer,))

    def ask(self, tracker: ConnectionDriver, data: bytes, *, mode: str = "whole") -> None:
        self._feed(tracker, Direction.EGRESS if self.role == Role.CLIENT else Direction.INGRESS,
                   data, mode)

    def answer(self, tracker: ConnectionDriver, data: bytes, *, mode: str = "whole") -> None:
        self._feed(tracker, Direction.INGRESS if self.role == Role.CLIENT else Direction.EGRESS,
                   data, mode)

    def _feed(self, tracker: ConnectionDriver, direction: Direction, data: bytes,
              mode: str) -> None:
        pieces = [data[i:i + 1] for i in range(len(data))] if mode == "bytes" else [data]
        for piece in pieces:
            self.now += 1000
            tracker.feed(direction, piece, at=self.now)
