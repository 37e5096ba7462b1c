"""The MCP layer over the real HTTP/2 parser: the session header of the answer (as an
initialize answer names a new session) reaches the layer through HPACK, and an
event-stream answer in DATA frames gives its spans."""

from __future__ import annotations

from otel_ebpf.protocols.base import Direction, Role, SpanKind
from otel_ebpf.protocols.http2 import HTTP2Parser
from otel_ebpf.protocols.mcp import MCPLayer
from otel_ebpf.protocols.testing import ConnectionDriver, conn_info

from ..http2.wire import PREFACE, Peer, data, http_request, settings
from .wire import SESSION, rpc

CALL = rpc(id=5, method="tools/call", params={"name": "search", "arguments": {"q": "x"}})
NOTE = rpc(method="notifications/progress", params={"progress": 1, "progressToken": 5})
FAILED = rpc(id=5, result={"content": [], "isError": True})


def test_http2_session_header_and_event_stream_answer():
    tracker = ConnectionDriver(HTTP2Parser(), conn_info(Role.CLIENT), layers=(MCPLayer(),))
    client, server = Peer(), Peer()
    out, back = Direction.EGRESS, Direction.INGRESS
    tracker.feed(out, PREFACE + settings() + client.headers(1, http_request(
        "POST", "/mcp", extra=[("content-type", "application/json")])), at=100)
    tracker.feed(out, data(1, CALL, end_stream=True), at=150)
    tracker.feed(back, settings() + server.headers(1, [
        (":status", "200"), ("content-type", "text/event-stream"),
        ("mcp-session-id", SESSION)]), at=1_000)
    tracker.feed(back, data(1, b"event: message\ndata: " + NOTE + b"\n\n"), at=2_000)
    tracker.feed(back, data(1, b"event: message\ndata: " + FAILED + b"\n\n")
                 + data(1, b"", end_stream=True), at=3_000)
    call, progress = tracker.spans()
    assert (call.name, call.kind) == ("tools/call search", SpanKind.CLIENT)
    assert call.attributes["mcp.session.id"] == SESSION
    assert call.attributes["error.type"] == "tool_error"
    assert call.attributes["network.protocol.version"] == "2"
    assert (progress.name, progress.kind, progress.start_ns) == (
        "notifications/progress", SpanKind.SERVER, 2_000)
