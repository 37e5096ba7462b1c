"""MCP operations as spans after the MCP semantic conventions (semantic-conventions-genai):
name `{mcp.method.name} {target}`, the method, tool, prompt and resource, the session and
request id, errors from JSON-RPC error objects and from tool results marked isError."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from ..base import (
    AttributeValue,
    ConnInfo,
    Instrument,
    Measurement,
    NeutralSpan,
    SpanKind,
    StatusCode,
)
from .messages import ERROR, NOTIFICATION, Message

CLIENT_DURATION = "mcp.client.operation.duration"
SERVER_DURATION = "mcp.server.operation.duration"
_BOUNDARIES = (0.01, 0.02, 0.05, 0.1, 0.2, 0.5, 1.0, 2.0, 5.0, 10.0, 30.0, 60.0, 120.0, 300.0)
INSTRUMENTS: Mapping[str, Instrument] = {
    CLIENT_DURATION: Instrument(
        "s", "The duration of the MCP request or notification as observed on the sender "
        "from the time it was sent until the response or ack is received.", _BOUNDARIES),
    SERVER_DURATION: Instrument(
        "s", "MCP request or notification duration as observed on the receiver from the "
        "time it was received until the result or ack is sent.", _BOUNDARIES),
}
# the attributes the duration histograms are split by (low cardinality only)
_METRIC_KEYS = ("mcp.method.name", "gen_ai.tool.name", "gen_ai.prompt.name",
                "gen_ai.operation.name", "error.type", "rpc.response.status_code",
                "mcp.protocol.version", "network.transport", "network.protocol.name",
                "network.protocol.version", "server.address", "server.port")
_RESOURCE_METHODS = frozenset({"resources/read", "resources/subscribe", "resources/unsubscribe",
                               "notifications/resources/updated"})
# ours: how the operation travelled, for the transports semconv does not tell apart
TRANSPORT_ATTRIBUTE = "otel_ebpf.mcp.transport"
STREAMABLE_HTTP = "streamable_http"
HTTP_SSE = "http_sse"  # the HTTP+SSE transport of protocol versions before 2025-03-26
PROTOCOL_META_KEY = "io.modelcontextprotocol/protocolVersion"

Attributes = dict[str, AttributeValue]


@dataclass(frozen=True, slots=True)
class Content:
    """Whether tool arguments and results are recorded (opt-in), and their byte budget."""

    capture: bool = False
    max_bytes: int = 4096


def _text(value: Any) -> str:
    return value if isinstance(value, str) else ""


def span_name(request: Message) -> str:
    target = _text(request.params.get("name"))
    return f"{request.method} {target}" if target else request.method


def protocol_version(headers: Mapping[str, str], *messages: Message | None) -> str:
    """The MCP version: the header every request after initialization carries, else what
    initialize asked for or answered, else what a stateless request's _meta says."""
    version = headers.get("mcp-protocol-version", "")
    if version:
        return version
    for msg in messages:
        if msg is None:
            continue
        for place in (msg.params, msg.result if isinstance(msg.result, dict) else {}):
            version = _text(place.get("protocolVersion"))
            if version:
                return version
        meta = msg.params.get("_meta")
        if isinstance(meta, dict) and _text(meta.get(PROTOCOL_META_KEY)):
            return meta[PROTOCOL_META_KEY]
    return ""


def _cut(text: str, limit: int) -> tuple[str, bool]:
    data = text.encode()
    if len(data) <= limit:
        return text, False
    return data[:limit].decode("utf-8", "ignore"), True


def _content(attrs: Attributes, key: str, value: Any, content: Content) -> None:
    text, cut = _cut(orjson.dumps(value).decode(), content.max_bytes)
    attrs[key] = text
    if cut:
        attrs["otel_ebpf.mcp.content_truncated"] = True


def operation_attributes(request: Message, answer: Message | None, session: str,
                         version: str, content: Content, attrs: Attributes) -> None:
    """The MCP attributes of a request (or notification) and its answer, into `attrs`."""
    method = request.method
    attrs["mcp.method.name"] = method
    if session:
        attrs["mcp.session.id"] = session
    if request.id is not None:
        attrs["jsonrpc.request.id"] = request.id
    if request.version != "2.0":
        attrs["jsonrpc.protocol.version"] = request.version
    if version:
        attrs["mcp.protocol.version"] = version
    params = request.params
    name = _text(params.get("name"))
    if method == "tools/call":
        attrs["gen_ai.operation.name"] = "execute_tool"
        if name:
            attrs["gen_ai.tool.name"] = name
        if content.capture and "arguments" in params:
            _content(attrs, "gen_ai.tool.call.arguments", params["arguments"], content)
    elif method == "prompts/get" and name:
        attrs["gen_ai.prompt.name"] = name
    if method in _RESOURCE_METHODS and _text(params.get("uri")):
        attrs["mcp.resource.uri"] = params["uri"]
    if answer is None:
        return
    if answer.kind == ERROR:
        code = "" if answer.error_code is None else str(answer.error_code)
        attrs["error.type"] = code or "_OTHER"
        if code:
            attrs["rpc.response.status_code"] = code
        return
    result = answer.result if isinstance(answer.result, dict) else {}
    if method == "tools/call":
        if result.get("isError") is True:
            attrs["error.type"] = "tool_error"
        elif content.capture:
            _content(attrs, "gen_ai.tool.call.result", _tool_result(result), content)


def _tool_result(result: Mapping[str, Any]) -> Any:
    """A tool's result: its structured content when it gave one, else its content blocks."""
    if "structuredContent" in result:
        return result["structuredContent"]
    return result.get("content")


def status_of(answer: Message | None, attrs: Attributes) -> tuple[StatusCode, str]:
    if "error.type" not in attrs:
        return StatusCode.UNSET, ""
    if answer is not None and answer.kind == ERROR:
        return StatusCode.ERROR, answer.error_message
    if attrs["error.type"] == "tool_error":
        return StatusCode.ERROR, "tool returned isError"
    return StatusCode.ERROR, str(attrs["error.type"])


def measure(span: NeutralSpan) -> None:
    """The operation's duration, into the side's histogram."""
    name = CLIENT_DURATION if span.kind == SpanKind.CLIENT else SERVER_DURATION
    attrs = {k: span.attributes[k] for k in _METRIC_KEYS if k in span.attributes}
    span.measurements.append(
        Measurement(name, max(span.end_ns - span.start_ns, 0) / 1e9, attrs))


def transport_attributes(conn: ConnInfo, attrs: Attributes) -> None:
    """What a span made from stream messages shares with its HTTP exchange's span."""
    attrs["network.transport"] = "unix" if conn.family == "unix" else "tcp"
    attrs["network.protocol.name"] = "http"


def is_notification(msg: Message) -> bool:
    return msg.kind == NOTIFICATION


def new_span(name: str, kind: SpanKind, start_ns: int, end_ns: int, conn: ConnInfo,
             attrs: Attributes, answer: Message | None, message_id: str = "") -> NeutralSpan:
    status, text = status_of(answer, attrs)
    span = NeutralSpan(name=name, kind=kind, start_ns=start_ns, end_ns=max(end_ns, start_ns),
                       conn=conn, attributes=attrs, status=status, status_message=text,
                       protocol="mcp", message_id=message_id)
    measure(span)
    return span
