"""MCP end to end: the official SDK's server and client in separate processes, over
streamable HTTP (the stateless protocol and a legacy session answered on event streams)
and over the HTTP+SSE transport, the real agent with its BPF programs in between. Every
tool call must give an MCP CLIENT span and an MCP SERVER span, joined as parent and
child; the failing tool's spans must fail; tool arguments and results must not be
exported unless content capture is on."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid
from collections.abc import Iterator

import pytest

from tests.support.ports import free_port
from tests.support.processes import stop_process

from .conftest import REPO, Span, read_histograms, wait_port

pytestmark = pytest.mark.kernel

SERVER, CLIENT = 2, 3
ERROR = 2  # status code
TRANSPORTS = {"auto": ("streamable-http", "/mcp"), "legacy": ("streamable-http", "/mcp"),
              "sse": ("sse", "/sse")}


def mcp_server(tmp_path, transport: str) -> Iterator[int]:
    port = free_port()
    log_path = tmp_path / f"mcp-server-{transport}.log"
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.peers.mcp_server", str(port), transport],
        cwd=REPO, stdout=log_path.open("w"), stderr=subprocess.STDOUT,
        env={**os.environ, "OTEL_SERVICE_NAME": "mcp-weather"})
    try:
        wait_port(port, proc, log_path, timeout_s=60)
        yield port
    finally:
        stop_process(proc)


@pytest.fixture
def servers(tmp_path):
    """A streamable HTTP server and an HTTP+SSE server, each in its own process."""
    http, sse = mcp_server(tmp_path, "streamable-http"), mcp_server(tmp_path, "sse")
    try:
        yield {"streamable-http": next(http), "sse": next(sse)}
    finally:
        http.close()
        sse.close()


def run_client(port: int, mode: str, city: str, reason: str) -> list[dict]:
    _, path = TRANSPORTS[mode]
    out = subprocess.run(
        [sys.executable, "-m", "tests.integration.peers.mcp_client",
         f"http://127.0.0.1:{port}{path}", mode, city, reason],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def calls(spans: list[Span], tool: str, port: int) -> dict[int, list[Span]]:
    """The tools/call spans of `tool` on the server at `port`, by span kind."""
    found = [s for s in spans if s.attrs.get("gen_ai.tool.name") == tool
             and s.attrs.get("server.port") == port]
    return {kind: [s for s in found if s.kind == kind] for kind in (CLIENT, SERVER)}


def markers() -> tuple[str, str]:
    token = uuid.uuid4().hex[:10]
    return f"city-ARG-{token}", f"reason-ARG-{token}"


def each_call_on_both_sides(ports: dict[str, int], modes):
    def done(spans: list[Span]) -> bool:
        return all(len(calls(spans, tool, ports[TRANSPORTS[m][0]])[kind]) >= 1
                   for m in modes for tool in ("get_weather", "fail") for kind in (CLIENT, SERVER))
    return done


def test_sdk_tool_calls_give_mcp_spans_on_both_sides(start_agent, servers):
    agent = start_agent(list(servers.values()))
    city, reason = markers()
    modes = ("auto", "legacy", "sse")
    for mode in modes:
        port = servers[TRANSPORTS[mode][0]]
        results = run_client(port, mode, city, reason)
        expected = [("get_weather", False), ("fail", True)]
        if mode == "legacy":
            expected.insert(1, ("summarize", False))
            assert results[1]["text"] == "in short"  # the client's model answered
        assert [(r["tool"], r["is_error"]) for r in results] == expected
        assert results[0]["text"] == f"sunny in {city}"

    def done(spans: list[Span]) -> bool:
        sampled = [s for s in spans if s.name == "sampling/createMessage"]
        return each_call_on_both_sides(servers, modes)(spans) and len(sampled) >= 2

    spans = agent.wait_for(done, timeout_s=60)
    for mode in modes:
        transport = TRANSPORTS[mode][0]
        port = servers[transport]
        for tool in ("get_weather", "fail"):
            found = calls(spans, tool, port)
            # one call per mode on each port: the legacy and stateless runs share a server
            expected = 2 if transport == "streamable-http" else 1
            assert [len(found[CLIENT]), len(found[SERVER])] == [expected] * 2, \
                (mode, tool, [(s.name, s.kind, s.attrs) for s in spans if "mcp" in s.name])
            for span in found[CLIENT] + found[SERVER]:
                a = span.attrs
                assert span.name == f"tools/call {tool}"
                assert a["mcp.method.name"] == "tools/call"
                assert a["gen_ai.operation.name"] == "execute_tool"
                assert a["jsonrpc.request.id"].isdigit()
                assert a["network.transport"] == "tcp"
                assert "gen_ai.tool.call.arguments" not in a
                assert "gen_ai.tool.call.result" not in a
                if tool == "fail":
                    assert span.status.get("code") == ERROR and a["error.type"] == "tool_error"
                else:
                    assert "error.type" not in a
            for server in found[SERVER]:
                assert server.resource["service.name"] == "mcp-weather"
                # the client's span is its parent: by the wire (streamable HTTP) or by the
                # message identity both ends compute (HTTP+SSE, the answer on the stream)
                parents = [c for c in found[CLIENT] if c.span_id == server.parent_span_id]
                assert len(parents) == 1, (mode, tool, server.attrs)
                assert parents[0].trace_id == server.trace_id
    legacy = [s for s in spans if s.attrs.get("mcp.session.id")
              and s.attrs.get("otel_ebpf.mcp.transport") == "streamable_http"]
    assert {s.attrs["mcp.method.name"] for s in legacy if "mcp.method.name" in s.attrs} >= {
        "initialize", "notifications/initialized", "tools/call", "notifications/message"}
    # the server's own request, on the tools/call's event stream, answered by a POST: a
    # CLIENT span in the server, a SERVER span in the client, parent and child
    sampled = {s.kind: s for s in spans if s.name == "sampling/createMessage"}
    assert sorted(sampled) == [SERVER, CLIENT], [(s.name, s.kind) for s in spans]
    asker, answerer = sampled[CLIENT], sampled[SERVER]
    assert asker.resource["service.name"] == "mcp-weather"
    assert answerer.resource["service.name"] != "mcp-weather"
    assert answerer.parent_span_id == asker.span_id and answerer.trace_id == asker.trace_id
    assert asker.attrs["jsonrpc.request.id"] == answerer.attrs["jsonrpc.request.id"]
    assert asker.attrs["mcp.session.id"] == answerer.attrs["mcp.session.id"]
    assert asker.start <= asker.end and answerer.start <= answerer.end
    summarize = calls(spans, "summarize", servers["streamable-http"])
    assert [len(summarize[CLIENT]), len(summarize[SERVER])] == [1, 1]
    sse = calls(spans, "get_weather", servers["sse"])
    sessions = {s.attrs["mcp.session.id"] for s in sse[CLIENT] + sse[SERVER]}
    assert len(sessions) == 1 and all(sessions)
    assert agent.stop() == 0
    # nothing of the arguments or results left the agent: not by default
    text = agent.traces.read_text()
    assert city not in text and reason not in text
    histograms = read_histograms(agent.traces)
    for name in ("mcp.client.operation.duration", "mcp.server.operation.duration"):
        assert any(p.attrs.get("gen_ai.tool.name") == "get_weather"
                   for p in histograms.get(name, [])), name


def test_content_capture_records_tool_arguments_and_results(start_agent, servers):
    port = servers["streamable-http"]
    agent = start_agent([port], overrides={"receivers": {"ebpf": {"protocols": {
        "mcp": {"capture_content": True}}}}})
    city, reason = markers()
    run_client(port, "auto", city, reason)
    spans = agent.wait_for(each_call_on_both_sides(servers, ("auto",)), timeout_s=60)
    found = calls(spans, "get_weather", port)
    for span in found[CLIENT] + found[SERVER]:
        assert json.loads(span.attrs["gen_ai.tool.call.arguments"]) == {"city": city}
        assert json.loads(span.attrs["gen_ai.tool.call.result"]) == {"result": f"sunny in {city}"}
    for span in calls(spans, "fail", port)[CLIENT]:
        assert json.loads(span.attrs["gen_ai.tool.call.arguments"]) == {"reason": reason}
        assert "gen_ai.tool.call.result" not in span.attrs  # semconv: only when it succeeded
    assert agent.stop() == 0
