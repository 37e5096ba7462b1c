"""JSON-RPC 2.0 messages read from MCP's HTTP bodies: a JSON body (one message, or a batch
as older protocol versions allow) or an event stream (one message per SSE event), each
with the kernel time it crossed the syscall."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from types import MappingProxyType
from typing import Any, NamedTuple
from urllib.parse import parse_qs, urlsplit

import orjson

from ..layers import Body
from ..llm.stream import decode_sse

REQUEST = "request"
NOTIFICATION = "notification"
RESPONSE = "response"  # a result
ERROR = "error"  # a JSON-RPC error object

# query keys the HTTP+SSE transport names its session by (the Python and TypeScript SDKs)
SESSION_QUERY_KEYS = ("session_id", "sessionId")
_EMPTY: Mapping[str, Any] = MappingProxyType({})  # shared: never written


class Message(NamedTuple):
    """One JSON-RPC message. `id` is the request id as a string (semconv's
    jsonrpc.request.id), None for notifications and for a null id. A named tuple: one is
    made per message, and a dataclass called with keywords costs several times more."""

    kind: str
    ns: int  # kernel time of the bytes that carried it (an SSE event's last piece)
    method: str = ""
    id: str | None = None
    params: Mapping[str, Any] = _EMPTY
    result: Any = None
    error_code: int | None = None
    error_message: str = ""
    version: str = "2.0"

    @property
    def answers(self) -> bool:
        return self.kind in (RESPONSE, ERROR)


@dataclass(slots=True)
class Read:
    """What a body held: its messages in order, the endpoint an HTTP+SSE stream announced
    (the URL clients post to, which names the session), and how many messages could not
    be read (cut by bytes the kernel did not capture, or not JSON-RPC)."""

    messages: list[Message] = field(default_factory=list)
    endpoint: str = ""
    unread: int = 0


def _request_id(value: Any) -> str | None:
    # JSON-RPC ids are strings or integers (bool is an int to Python, not to JSON)
    if isinstance(value, str):
        return value
    if isinstance(value, int) and not isinstance(value, bool):
        return str(value)
    return None


def message(doc: Any, ns: int) -> Message | None:
    """The JSON-RPC message a decoded JSON value is, or None when it is not one."""
    if not isinstance(doc, dict):
        return None
    version = doc.get("jsonrpc")
    if not isinstance(version, str):  # every MCP message says "2.0"; other JSON is not one
        return None
    method = doc.get("method")
    if isinstance(method, str) and method:
        params = doc.get("params")
        params = params if isinstance(params, dict) else _EMPTY
        if "id" in doc:
            return Message(REQUEST, ns, method, _request_id(doc["id"]), params, None, None, "",
                           version)
        return Message(NOTIFICATION, ns, method, None, params, None, None, "", version)
    if method is not None:
        return None
    if "result" in doc:
        return Message(RESPONSE, ns, "", _request_id(doc.get("id")), _EMPTY, doc["result"],
                       None, "", version)
    error = doc.get("error")
    if isinstance(error, dict):
        code = error.get("code")
        text = error.get("message")
        return Message(ERROR, ns, "", _request_id(doc.get("id")), _EMPTY, None,
                       code if isinstance(code, int) and not isinstance(code, bool) else None,
                       text if isinstance(text, str) else "", version)
    return None


def _json(data: bytes, ns: int, read: Read) -> None:
    try:
        doc = orjson.loads(data)
    except orjson.JSONDecodeError:
        read.unread += 1
        return
    docs = doc if isinstance(doc, list) else [doc]
    for item in docs:
        found = message(item, ns)
        if found is None:
            read.unread += 1
        else:
            read.messages.append(found)


def _is_sse(content_type: str, body: Body) -> bool:
    kind = content_type.partition(";")[0].strip().lower()
    if kind == "text/event-stream":
        return True
    if kind:
        return False
    head = body.pieces[0].data[:16].lstrip() if body.pieces else b""
    return head.startswith((b"event:", b"data:", b":", b"id:"))


def read_body(body: Body | None, content_type: str) -> Read:
    """The messages of a request or response body (empty for no body, 202 Accepted)."""
    read = Read()
    if body is None or not body.pieces or body.size == 0:
        return read
    if _is_sse(content_type, body):
        decoded = decode_sse(body)
        read.unread += decoded.dropped
        for event in decoded.events:
            if event.name == "endpoint":  # HTTP+SSE: where to post, naming the session
                read.endpoint = event.data.decode("utf-8", "replace").strip()
            elif event.data.strip():
                _json(event.data, event.ns, read)
        return read
    if not body.complete:  # a JSON document cut by uncaptured bytes cannot be read
        read.unread += 1
        return read
    data = body.contiguous()  # all of it: the body is complete
    if data.strip():
        _json(data, body.pieces[-1].ns, read)
    return read


def session_of_target(target: str) -> str:
    """The session an HTTP+SSE request target names in its query ("" when none)."""
    query = urlsplit(target).query if "?" in target else ""
    if not query:
        return ""
    values = parse_qs(query)
    for key in SESSION_QUERY_KEYS:
        if values.get(key):
            return values[key][0]
    return ""
