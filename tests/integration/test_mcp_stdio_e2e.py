"""MCP over stdio end to end: the official SDK's client runs the SDK's server as a
subprocess and calls its tools over the pipes between them, the real agent with its BPF
programs watching the pipes of the processes it was told to select. Every tool call must
give an MCP CLIENT span in the client and an MCP SERVER span in the server, joined as
parent and child; the failing tool's spans must fail; no tool argument or result may be
exported; a client and server whose pipes are not selected must give no span at all."""

from __future__ import annotations

import json
import os
import site
import subprocess
import uuid
from pathlib import Path

import pytest

from .conftest import REPO, VENV_BIN, Span

pytestmark = pytest.mark.kernel

SERVER, CLIENT = 2, 3
ERROR = 2  # status code
HOST = "mcp-host"  # the selected client's command name (a link to the interpreter)


def run_client(executable: str, *calls: str) -> list[dict]:
    # the link is not inside the venv: its packages come by PYTHONPATH
    path = os.pathsep.join([str(REPO), *site.getsitepackages()])
    out = subprocess.run(
        [executable, "-m", "tests.integration.peers.mcp_stdio_client", str(REPO), *calls],
        cwd=REPO, capture_output=True, text=True, timeout=120, check=True,
        env={**os.environ, "PYTHONPATH": path})
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def tool_spans(spans: list[Span], tool: str) -> dict[int, list[Span]]:
    found = [s for s in spans if s.attrs.get("gen_ai.tool.name") == tool]
    return {kind: [s for s in found if s.kind == kind] for kind in (CLIENT, SERVER)}


def test_stdio_tool_calls_give_mcp_spans_on_both_sides(start_agent, tmp_path: Path):
    host = tmp_path / "bin" / HOST
    host.parent.mkdir()
    host.symlink_to(VENV_BIN / "python")
    # sockets of nothing (an unused port): only the pipes are of interest here
    agent = start_agent([1], overrides={"receivers": {"ebpf": {
        "pipes": {"process_names": [HOST]}}}})
    token = uuid.uuid4().hex[:10]
    city, reason = f"city-ARG-{token}", f"reason-ARG-{token}"
    # not selected: its name is the interpreter's, and the agent must see none of it
    unselected = run_client(str(VENV_BIN / "python"), "ping", f"get_weather={city}")
    assert [r["tool"] for r in unselected] == ["ping", "get_weather"]
    results = run_client(str(host), f"get_weather={city}", f"fail={reason}")
    assert [(r["tool"], r["is_error"]) for r in results] == [("get_weather", False),
                                                              ("fail", True)]
    assert results[0]["text"] == f"sunny in {city}"
    client_pid = results[0]["pid"]

    def done(spans: list[Span]) -> bool:
        return all(len(tool_spans(spans, tool)[kind]) >= 1
                   for tool in ("get_weather", "fail") for kind in (CLIENT, SERVER))

    spans = agent.wait_for(done, timeout_s=60)
    for tool in ("get_weather", "fail"):
        found = tool_spans(spans, tool)
        assert [len(found[CLIENT]), len(found[SERVER])] == [1, 1], \
            [(s.name, s.kind, s.resource.get("process.pid"), s.attrs.get("jsonrpc.request.id")) for s in spans]
        client, server = found[CLIENT][0], found[SERVER][0]
        for span in (client, server):
            a = span.attrs
            assert span.name == f"tools/call {tool}"
            assert a["mcp.method.name"] == "tools/call"
            assert a["gen_ai.operation.name"] == "execute_tool"
            assert a["jsonrpc.request.id"].isdigit()
            assert a["network.transport"] == "pipe"
            assert a["otel_ebpf.mcp.transport"] == "stdio"
            assert "gen_ai.tool.call.arguments" not in a and "gen_ai.tool.call.result" not in a
            if tool == "fail":
                assert span.status.get("code") == ERROR and a["error.type"] == "tool_error"
            else:
                assert "error.type" not in a
            assert span.start <= span.end
        assert client.resource["process.pid"] == client_pid
        assert server.resource["service.name"] == "mcp-stdio-weather"
        assert server.resource["process.pid"] != client_pid
        # both ends name the request by the pipe it went on: the client's span is the parent
        assert server.parent_span_id == client.span_id and server.trace_id == client.trace_id
        assert client.start <= server.start and server.end <= client.end
    # the SDK (auto mode) discovers the server, lists its tools, then calls them
    assert {s.attrs.get("mcp.method.name") for s in spans} >= {"tools/list", "tools/call"}
    assert not tool_spans(spans, "ping")[CLIENT] and not tool_spans(spans, "ping")[SERVER]
    assert agent.stop() == 0
    text = agent.traces.read_text()
    assert city not in text and reason not in text
    assert '"ping"' not in text


def test_a_process_selected_by_pid_and_the_server_it_forks(start_agent):
    # the client waits for a line before it runs its server: the agent is told its pid,
    # and its server (named as any Python) is selected because the client forked it
    client = subprocess.Popen(
        [str(VENV_BIN / "python"), "-m", "tests.integration.peers.mcp_stdio_client",
         str(REPO), "get_weather=Paris"], cwd=REPO, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, text=True,
        env={**os.environ, "MCP_WAIT": "1"})
    try:
        assert client.stdout.readline().strip() == "waiting"
        agent = start_agent([1], overrides={"receivers": {"ebpf": {
            "pipes": {"pids": [client.pid]}}}})
        client.stdin.write("go\n")
        client.stdin.flush()
        out, _ = client.communicate(timeout=120)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait()
    assert json.loads(out.splitlines()[0])["text"] == "sunny in Paris"

    def done(spans: list[Span]) -> bool:
        found = tool_spans(spans, "get_weather")
        return bool(found[CLIENT] and found[SERVER])

    spans = agent.wait_for(done, timeout_s=60)
    found = tool_spans(spans, "get_weather")
    assert found[CLIENT][0].resource["process.pid"] == client.pid
    assert found[SERVER][0].resource["service.name"] == "mcp-stdio-weather"
    assert found[SERVER][0].parent_span_id == found[CLIENT][0].span_id
    assert agent.stop() == 0
