"""The mcp_stdio parser: JSON-RPC lines on a client's two pipes and a server's, fed whole,
byte by byte and with garbage, paired across pipes into MCP spans on each side."""

from __future__ import annotations

import json

import pytest
from otel_ebpf.protocols.base import Direction, Role, SpanKind, StatusCode
from otel_ebpf.protocols.mcp_stdio import MCPStdioParser
from otel_ebpf.protocols.testing import ConnectionDriver, conn_info

OUT, IN = Direction.EGRESS, Direction.INGRESS
TO_SERVER, FROM_SERVER = "pipe:[1001]", "pipe:[1002]"  # the server's stdin, its stdout


def line(doc: dict) -> bytes:
    return json.dumps(doc, separators=(",", ":")).encode() + b"\n"


def request(ident, method: str, **params) -> bytes:
    return line({"jsonrpc": "2.0", "id": ident, "method": method, "params": params})


def result(ident, value: dict) -> bytes:
    return line({"jsonrpc": "2.0", "id": ident, "result": value})


CALL = request(1, "tools/call", name="get_weather", arguments={"city": "SECRET-CITY"})
OK = result(1, {"content": [{"type": "text", "text": "SECRET-RESULT"}], "isError": False})
FAILING = request(2, "tools/call", name="fail", arguments={"reason": "x"})
TOOL_ERROR = result(2, {"content": [{"type": "text", "text": "boom"}], "isError": True})
UNKNOWN = request(3, "tools/list")
RPC_ERROR = line({"jsonrpc": "2.0", "id": 3, "error": {"code": -32601, "message": "nope"}})
INIT = request(0, "initialize", protocolVersion="2025-06-18")
INIT_OK = result(0, {"protocolVersion": "2025-06-18", "capabilities": {}})
NOTE = line({"jsonrpc": "2.0", "method": "notifications/initialized"})
EXCHANGES = [(INIT, INIT_OK), (CALL, OK), (FAILING, TOOL_ERROR), (UNKNOWN, RPC_ERROR)]


class Process:
    """One process's two pipes (drivers), sharing one parser."""

    def __init__(self, parser: MCPStdioParser, pid: int, fds: dict[str, int]) -> None:
        self.pipes = {inode: ConnectionDriver(parser, conn_info(
            Role.UNKNOWN, "pipe", pid=pid, fd=fd, local_addr=inode, local_port=0,
            remote_addr="", remote_port=0)) for inode, fd in fds.items()}

    def feed(self, inode: str, direction: Direction, data: bytes, mode: str) -> None:
        driver = self.pipes[inode]
        if mode == "bytes":
            for i in range(len(data)):
                driver.feed(direction, data[i:i + 1])
        else:
            driver.feed(direction, data)

    def spans(self):
        return [s for d in self.pipes.values() for s in d.spans()]


def session(mode: str, parser: MCPStdioParser | None = None, garbage: bytes = b""):
    parser = parser or MCPStdioParser()
    client = Process(parser, 10, {TO_SERVER: 5, FROM_SERVER: 6})
    server = Process(parser, 11, {TO_SERVER: 0, FROM_SERVER: 1})
    client.feed(TO_SERVER, OUT, NOTE, mode)
    for ask, answer in EXCHANGES:
        client.feed(TO_SERVER, OUT, ask, mode)
        server.feed(TO_SERVER, IN, ask, mode)
        if garbage:
            server.feed(FROM_SERVER, OUT, garbage, mode)
            client.feed(FROM_SERVER, IN, garbage, mode)
        server.feed(FROM_SERVER, OUT, answer, mode)
        client.feed(FROM_SERVER, IN, answer, mode)
    return client, server


def check(client: Process, server: Process) -> None:
    for side, kind in ((client, SpanKind.CLIENT), (server, SpanKind.SERVER)):
        spans = {s.name: s for s in side.spans()}
        assert sorted(spans) == ["initialize", "tools/call fail", "tools/call get_weather",
                                 "tools/list"], sorted(spans)
        assert all(s.kind == kind for s in spans.values())
        ok, fail, listed = (spans["tools/call get_weather"], spans["tools/call fail"],
                            spans["tools/list"])
        assert ok.attributes["mcp.method.name"] == "tools/call"
        assert ok.attributes["gen_ai.operation.name"] == "execute_tool"
        assert ok.attributes["gen_ai.tool.name"] == "get_weather"
        assert ok.attributes["jsonrpc.request.id"] == "1"
        assert ok.attributes["network.transport"] == "pipe"
        assert ok.attributes["mcp.protocol.version"] == "2025-06-18"
        assert ok.status == StatusCode.UNSET and "error.type" not in ok.attributes
        assert fail.status == StatusCode.ERROR and fail.attributes["error.type"] == "tool_error"
        assert listed.status == StatusCode.ERROR
        assert listed.attributes["rpc.response.status_code"] == "-32601"
        assert ok.message_id == f"mcp_stdio/{TO_SERVER}/1"
        assert not any("gen_ai.tool.call" in k for s in spans.values() for k in s.attributes)
        assert all(s.start_ns <= s.end_ns for s in spans.values())


@pytest.mark.parametrize("mode", ["whole", "bytes"])
def test_calls_give_one_span_per_request_on_each_side(mode):
    check(*session(mode))


def test_garbage_lines_between_messages_are_counted_not_spans():
    client, server = session("whole", garbage=b"not json at all\n\x00\xff{\"x\": 1}\n")
    check(client, server)
    assert server.pipes[FROM_SERVER].invalid > 0


def test_trailing_garbage_and_random_bytes_never_raise():
    client, server = session("whole")
    for data in (b"\xff" * 100, b"{" * 50 + b"\n", b'{"jsonrpc":"2.0","id":9,"result":1}\n'):
        client.feed(FROM_SERVER, IN, data, "whole")
    check(client, server)  # an answer nobody asked for makes no span


def test_content_is_captured_only_when_asked():
    parser = MCPStdioParser({"capture_content": True})
    client, _ = session("whole", parser)
    ok = next(s for s in client.spans() if s.name == "tools/call get_weather")
    assert json.loads(ok.attributes["gen_ai.tool.call.arguments"]) == {"city": "SECRET-CITY"}
    assert "SECRET-RESULT" in ok.attributes["gen_ai.tool.call.result"]


def test_a_line_cut_by_the_capture_is_read_from_its_head():
    parser = MCPStdioParser()
    client = Process(parser, 10, {TO_SERVER: 5, FROM_SERVER: 6})
    big = request(7, "tools/call", name="upload", arguments={"blob": "x" * 10000})
    client.pipes[TO_SERVER].feed(OUT, big[:4096], gap=len(big) - 4096)
    client.feed(FROM_SERVER, IN, result(7, {"content": []}), "whole")
    spans = client.spans()
    assert [s.name for s in spans] == ["tools/call upload"]
    assert spans[0].attributes["jsonrpc.request.id"] == "7"


def test_two_servers_with_the_same_ids_pair_by_pipe():
    parser = MCPStdioParser()
    client = Process(parser, 10, {"pipe:[1]": 3, "pipe:[2]": 4, "pipe:[3]": 5, "pipe:[4]": 6})
    # each server answers its first call alone: the client learns which pipes go together
    for out, back, tool in (("pipe:[1]", "pipe:[2]", "a"), ("pipe:[3]", "pipe:[4]", "b")):
        client.feed(out, OUT, request(1, "tools/call", name=tool), "whole")
        client.feed(back, IN, result(1, {}), "whole")
    # then both have id 2 in flight, answered in the other order
    client.feed("pipe:[1]", OUT, request(2, "tools/call", name="a2"), "whole")
    client.feed("pipe:[3]", OUT, request(2, "tools/call", name="b2"), "whole")
    client.feed("pipe:[4]", IN, result(2, {"isError": True}), "whole")
    client.feed("pipe:[2]", IN, result(2, {}), "whole")
    spans = {s.name: s for s in client.spans()}
    assert spans["tools/call b2"].status == StatusCode.ERROR
    assert spans["tools/call a2"].status == StatusCode.UNSET


def test_only_pipes_that_speak_json_rpc_are_inferred():
    parser = MCPStdioParser()
    pipe = conn_info(Role.UNKNOWN, "pipe", local_addr=TO_SERVER)
    assert parser.infer(OUT, CALL, pipe) == Role.CLIENT
    assert parser.infer(IN, CALL, pipe) == Role.SERVER
    assert parser.infer(OUT, OK, pipe) == Role.SERVER
    assert parser.infer(OUT, b"commit 1234\n", pipe) is None
    assert parser.infer(OUT, CALL, conn_info(Role.CLIENT)) is None  # a socket: not ours


def test_requests_pushed_out_unanswered_are_exported_as_such():
    parser = MCPStdioParser({"max_pending": 2})
    client = Process(parser, 10, {TO_SERVER: 5, FROM_SERVER: 6})
    for i in range(3):
        client.feed(TO_SERVER, OUT, request(i, "tools/call", name=f"t{i}"), "whole")
    spans = client.spans()
    assert [s.name for s in spans] == ["tools/call t0"]
    assert spans[0].attributes["otel_ebpf.mcp.unanswered"] is True


def test_an_answer_stitched_before_its_request_still_pairs():
    # the agent stitches a process's two pipes in either order: the server's stdout (its
    # answer) may be collected before its stdin (the request) within one batch
    parser = MCPStdioParser()
    server = Process(parser, 11, {TO_SERVER: 0, FROM_SERVER: 1})
    read = server.pipes[TO_SERVER]
    read.connection.on_data(IN, 0, len(CALL), CALL, 10, 10, 0, read.registry, read.stats)
    server.pipes[FROM_SERVER].feed(OUT, OK, at=20)
    read.stitch(30)
    spans = server.spans()
    assert [(s.name, s.kind) for s in spans] == [("tools/call get_weather", SpanKind.SERVER)]
    assert spans[0].start_ns == 10 and spans[0].end_ns == 20
