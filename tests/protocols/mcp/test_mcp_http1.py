"""The MCP layer through the real tracker and HTTP/1 parser: each transport's exchanges,
fed whole, byte by byte and followed by garbage, on both sides of the connection."""

from __future__ import annotations

import pytest
from otel_ebpf.protocols.base import Direction, Role, SpanKind, StatusCode
from otel_ebpf.protocols.mcp import UNANSWERED, MCPLayer

from .wire import (
    LEGACY,
    MODERN,
    SESSION,
    SSE_END,
    Peer,
    get,
    json_answer,
    post,
    rpc,
    sse_chunk,
    sse_head,
)

MODES = ("whole", "bytes", "garbage")
GARBAGE = b"\x00\xff garbage \r\n\r\n{not json"
CALL = rpc(id=2, method="tools/call", params={"name": "get_weather",
                                              "arguments": {"city": "Paris"}})
RESULT = rpc(id=2, result={"content": [{"type": "text", "text": "sunny in Paris"}],
                           "isError": False, "structuredContent": {"result": "sunny in Paris"}})
CONTENT_KEYS = ("gen_ai.tool.call.arguments", "gen_ai.tool.call.result")


def _exchange(role: Role, request: bytes, answer: bytes, mode: str, layer=None):
    peer = Peer(role, layer)
    tracker = peer.connection()
    peer.ask(tracker, request, mode="bytes" if mode == "bytes" else "whole")
    peer.answer(tracker, answer, mode="bytes" if mode == "bytes" else "whole")
    if mode == "garbage":
        peer.ask(tracker, GARBAGE)
        peer.answer(tracker, GARBAGE)
    tracker.close()
    return tracker.spans()


def _mcp(spans):
    return [s for s in spans if "mcp.method.name" in s.attributes]


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("role", [Role.CLIENT, Role.SERVER])
def test_stateless_tool_call_answered_with_json(role, mode):
    spans = _mcp(_exchange(role, post("/mcp", CALL, version=MODERN), json_answer(RESULT), mode))
    assert len(spans) == 1
    span = spans[0]
    assert span.name == "tools/call get_weather"
    assert span.kind == (SpanKind.CLIENT if role == Role.CLIENT else SpanKind.SERVER)
    assert span.status == StatusCode.UNSET
    attrs = span.attributes
    assert {k: attrs[k] for k in ("mcp.method.name", "gen_ai.tool.name", "gen_ai.operation.name",
                                  "jsonrpc.request.id", "mcp.protocol.version")} == {
        "mcp.method.name": "tools/call", "gen_ai.tool.name": "get_weather",
        "gen_ai.operation.name": "execute_tool", "jsonrpc.request.id": "2",
        "mcp.protocol.version": MODERN}
    assert attrs["http.response.status_code"] == 200  # the HTTP attributes stay
    assert "mcp.session.id" not in attrs
    assert not any(k in attrs for k in CONTENT_KEYS)  # arguments and results are opt-in
    histogram = "mcp.client.operation.duration" if role == Role.CLIENT \
        else "mcp.server.operation.duration"
    assert [m.instrument for m in span.measurements] == [histogram]
    assert span.measurements[0].attributes["gen_ai.tool.name"] == "get_weather"


@pytest.mark.parametrize("role", [Role.CLIENT, Role.SERVER])
def test_content_capture_records_arguments_and_result(role):
    layer = MCPLayer({"capture_content": True})
    (span,) = _mcp(_exchange(role, post("/mcp", CALL), json_answer(RESULT), "whole", layer))
    assert span.attributes["gen_ai.tool.call.arguments"] == '{"city":"Paris"}'
    assert span.attributes["gen_ai.tool.call.result"] == '{"result":"sunny in Paris"}'


def test_content_is_cut_to_its_budget():
    layer = MCPLayer({"capture_content": True, "max_content_bytes": 8})
    (span,) = _mcp(_exchange(Role.CLIENT, post("/mcp", CALL), json_answer(RESULT), "whole", layer))
    assert span.attributes["gen_ai.tool.call.arguments"] == '{"city":'
    assert span.attributes["otel_ebpf.mcp.content_truncated"] is True


@pytest.mark.parametrize("mode", MODES)
def test_tool_result_marked_is_error_fails_the_span(mode):
    failed = rpc(id=4, result={"content": [{"type": "text", "text": "Error executing tool fail"}],
                               "isError": True})
    call = rpc(id=4, method="tools/call", params={"name": "fail", "arguments": {"reason": "no"}})
    (span,) = _mcp(_exchange(Role.CLIENT, post("/mcp", call), json_answer(failed), mode))
    assert span.name == "tools/call fail"
    assert span.status == StatusCode.ERROR
    assert span.attributes["error.type"] == "tool_error"


def test_json_rpc_error_fails_the_span_with_its_code_and_message():
    error = rpc(id=7, error={"code": -32602, "message": "Unknown tool: nope"})
    call = rpc(id=7, method="tools/call", params={"name": "nope"})
    (span,) = _mcp(_exchange(Role.SERVER, post("/mcp", call), json_answer(error), "whole"))
    assert (span.status, span.status_message) == (StatusCode.ERROR, "Unknown tool: nope")
    assert span.attributes["error.type"] == "-32602"
    assert span.attributes["rpc.response.status_code"] == "-32602"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("role", [Role.CLIENT, Role.SERVER])
def test_session_call_answered_on_an_event_stream_with_a_notification(role, mode):
    note = rpc(method="notifications/message", params={"level": "info", "data": "looking up"})
    answer = sse_head(session=SESSION) + sse_chunk(note) + sse_chunk(RESULT) + SSE_END
    request = post("/mcp", CALL, session=SESSION, version=LEGACY)
    spans = _mcp(_exchange(role, request, answer, mode))
    assert [s.name for s in spans] == ["tools/call get_weather", "notifications/message"]
    call, notification = spans
    assert call.attributes["mcp.session.id"] == SESSION
    assert call.attributes["mcp.protocol.version"] == LEGACY
    assert call.attributes["otel_ebpf.mcp.transport"] == "streamable_http"
    # the server sends the notification: its CLIENT span, the client's SERVER span
    assert notification.kind == (SpanKind.SERVER if role == Role.CLIENT else SpanKind.CLIENT)
    assert notification.start_ns == notification.end_ns
    assert call.start_ns <= notification.start_ns <= call.end_ns
    assert notification.attributes["mcp.session.id"] == SESSION
    assert "jsonrpc.request.id" not in notification.attributes


def test_initialize_takes_the_session_from_the_answer_and_the_version_from_the_body():
    init = rpc(id=1, method="initialize", params={"protocolVersion": LEGACY, "capabilities": {}})
    result = rpc(id=1, result={"protocolVersion": LEGACY, "capabilities": {}})
    answer = sse_head(session=SESSION) + sse_chunk(result) + SSE_END
    (span,) = _mcp(_exchange(Role.CLIENT, post("/mcp", init), answer, "whole"))
    assert span.name == "initialize"
    assert span.attributes["mcp.session.id"] == SESSION
    assert span.attributes["mcp.protocol.version"] == LEGACY


def test_notification_acknowledged_with_202():
    note = rpc(method="notifications/initialized")
    (span,) = _mcp(_exchange(Role.CLIENT, post("/mcp", note, session=SESSION),
                             json_answer(b"", status=202, session=SESSION), "whole"))
    assert span.name == "notifications/initialized"
    assert span.kind == SpanKind.CLIENT
    assert "jsonrpc.request.id" not in span.attributes


def test_a_batch_gives_a_span_per_request():
    batch = b"[" + rpc(id=1, method="ping") + b"," + rpc(id=2, method="tools/list") + b"]"
    answers = b"[" + rpc(id=2, result={"tools": []}) + b"," + rpc(id=1, result={}) + b"]"
    spans = _mcp(_exchange(Role.CLIENT, post("/mcp", batch), json_answer(answers), "whole"))
    assert [(s.name, s.attributes["jsonrpc.request.id"]) for s in spans] == [
        ("ping", "1"), ("tools/list", "2")]


@pytest.mark.parametrize("role", [Role.CLIENT, Role.SERVER])
def test_server_request_on_the_get_stream_pairs_with_the_posted_answer(role):
    peer = Peer(role)
    stream, answers = peer.connection(), peer.connection()
    sampling = rpc(id=0, method="sampling/createMessage", params={"messages": [], "maxTokens": 5})
    peer.ask(stream, get("/mcp", session=SESSION))
    peer.answer(stream, sse_head(session=SESSION) + sse_chunk(sampling))
    # the client answers on another connection; that exchange ends first
    peer.ask(answers, post("/mcp", rpc(id=0, result={"role": "assistant"}), session=SESSION))
    peer.answer(answers, json_answer(b"", status=202, session=SESSION))
    answers.close()
    assert _mcp(answers.spans()) == []
    (http_post,) = answers.spans()
    assert http_post.attributes["mcp.session.id"] == SESSION  # an answer: it stays HTTP
    peer.answer(stream, SSE_END)
    stream.close()
    (span,) = _mcp(stream.spans())
    assert span.name == "sampling/createMessage"
    # the server asked: the server's span is its CLIENT span, the client's its SERVER span
    assert span.kind == (SpanKind.SERVER if role == Role.CLIENT else SpanKind.CLIENT)
    assert span.message_id == f"mcp/{SESSION}/s/0"  # both ends compute it: parent and child
    assert span.start_ns < span.end_ns
    assert span.attributes["jsonrpc.request.id"] == "0"


@pytest.mark.parametrize("mode", MODES)
@pytest.mark.parametrize("role", [Role.CLIENT, Role.SERVER])
def test_http_sse_transport_pairs_posted_requests_with_stream_answers(role, mode):
    peer = Peer(role)
    stream, posts = peer.connection(), peer.connection()
    endpoint = f"/messages/?session_id={SESSION}".encode()
    peer.ask(stream, get("/sse"), mode=mode)
    peer.answer(stream, sse_head() + sse_chunk(endpoint, "endpoint"), mode=mode)
    target = f"/messages/?session_id={SESSION}"
    for request in (CALL, rpc(id=3, method="tools/list")):
        peer.ask(posts, post(target, request), mode=mode)
        peer.answer(posts, json_answer(b"Accepted", status=202), mode=mode)
    posts.close()
    assert _mcp(posts.spans()) == []  # answered on the stream, which has not ended
    peer.answer(stream, sse_chunk(RESULT), mode=mode)
    if mode == "garbage":  # after the stream's end
        peer.answer(stream, SSE_END + GARBAGE)
    stream.close()
    spans = _mcp(stream.spans())
    assert [s.name for s in spans] == ["tools/call get_weather", "tools/list"]
    call, unanswered = spans
    assert call.kind == (SpanKind.CLIENT if role == Role.CLIENT else SpanKind.SERVER)
    assert call.attributes["otel_ebpf.mcp.transport"] == "http_sse"
    assert call.attributes["mcp.session.id"] == SESSION
    assert call.message_id == f"mcp/{SESSION}/c/2"
    assert UNANSWERED not in call.attributes
    assert unanswered.attributes[UNANSWERED] is True  # its stream ended first


def test_a_body_that_is_not_json_rpc_leaves_the_http_span_alone():
    (span,) = _exchange(Role.CLIENT, post("/mcp", b'{"hello": "world"}'),
                        json_answer(b"[1, 2]"), "whole")
    assert span.name == "POST"
    assert not any(k.startswith(("mcp.", "otel_ebpf.mcp")) for k in span.attributes)


def test_a_cut_body_costs_the_operation_not_the_http_span():
    peer = Peer(Role.CLIENT)
    tracker = peer.connection()
    request = post("/mcp", CALL)
    tracker.feed(Direction.EGRESS, request[:-40], gap=40)  # the body's end was not captured
    peer.answer(tracker, json_answer(RESULT))
    tracker.close()
    (span,) = tracker.spans()
    assert span.name == "POST"
    assert span.attributes["http.response.status_code"] == 200


def test_the_session_id_can_stay_on_the_host():
    layer = MCPLayer({"session_id": False})
    answer = sse_head(session=SESSION) + sse_chunk(RESULT) + SSE_END
    (span,) = _mcp(_exchange(Role.CLIENT, post("/mcp", CALL, session=SESSION), answer,
                             "whole", layer))
    assert span.name == "tools/call get_weather"
    assert SESSION not in repr(span.attributes)


@pytest.mark.parametrize(("options", "message"), [
    ({"paths": "/mcp"}, "mcp.paths: expected a list of paths starting with '/'"),
    ({"sse_paths": ["sse"]}, "mcp.sse_paths: expected a list of paths starting with '/'"),
    ({"capture_content": "maybe"}, "mcp.capture_content: expected true or false"),
    ({"session_id": 1}, "mcp.session_id: expected true or false"),
    ({"max_content_bytes": 1}, "mcp.max_content_bytes: expected a size from 2 to"),
    ({"max_pending": True}, "mcp.max_pending: expected an integer"),
    ({"max_pending": 0}, "mcp.max_pending: expected at least 1"),
    ({"body_limit": -1}, "mcp.body_limit: expected a size from 0 to"),
])
def test_bad_options_are_refused_with_their_name(options, message):
    with pytest.raises(ValueError, match=message.replace("(", r"\(")):
        MCPLayer(options)


@pytest.mark.parametrize(("method", "target", "wanted"), [
    ("POST", "/mcp", True), ("GET", "/mcp", True), ("POST", "/mcp/", True),
    ("POST", "/mcp/tenant-1", True), ("POST", "/mcpx", False), ("DELETE", "/mcp", False),
    ("GET", "/sse", True), ("POST", "/sse", False),
    ("POST", "/messages/?session_id=abc", True), ("POST", "/messages?sessionId=abc", True),
    ("POST", "/messages/", False),  # a chat API's messages, not an MCP session's
    ("GET", "/messages/?session_id=abc", False), ("POST", "/v1/chat/completions", False),
])
def test_which_requests_the_layer_takes(method, target, wanted):
    assert MCPLayer().wants(method, target) is wanted


def test_capture_prefixes_are_what_the_kernel_can_match():
    from otel_ebpf.protocols.registry import Registry

    from otel_ebpf.kernel import abi

    # with the LLM and vector-DB layers' keys, the kernel's table still holds MCP's
    enabled = Registry.from_config(["http1", "llm", "vectordb", "mcp"], {})
    keys = {p.encode()[:8] for p in enabled.wide_prefixes()}
    assert len(keys) <= abi.MAX_WIDE_KEYS and b"/mcp HTT" in keys
    assert MCPLayer().capture_prefixes() == ("/mcp HTT",)
    assert all(len(p) >= 8 for p in MCPLayer({"paths": ["/a", "/tools/mcp"]}).capture_prefixes())
