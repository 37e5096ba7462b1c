"""HTTP/2 and gRPC end to end: real grpcio servers and clients, hypercorn and httpx over
h2c, each in its own process, and the real agent with its BPF programs. Every call gives
one CLIENT and one SERVER span, inside the wall time the client measured; a capture that
begins on a channel already in use may leave a method unknown, never wrong."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.processes import stop_process
from tests.support.wallclock import slack_ns

from tests.support.wallclock import WRITE_RETURN_NS

from .conftest import REPO, Span, free_port, wait_port

pytestmark = pytest.mark.kernel

SERVER, CLIENT = 2, 3
CLOCK_SLACK_NS = 200_000  # kernel-monotonic to wall-clock conversion error allowance


def slack() -> int:
    """The allowance plus what the host moved the wall clock during the test."""
    return slack_ns(CLOCK_SLACK_NS)
GRPC_PEER = [sys.executable, "-m", "tests.integration.peers.grpc_peer"]
H2_PEER = [sys.executable, "-m", "tests.integration.peers.h2_app"]


def _serve(cmd: list[str], port: int, log_path: Path, service: str) -> Iterator[int]:
    log = log_path.open("w")
    proc = subprocess.Popen([*cmd, "server", str(port)], cwd=REPO, stdout=log,
                            stderr=subprocess.STDOUT, env={**os.environ, "OTEL_SERVICE_NAME": service})
    try:
        wait_port(port, proc, log_path)
        yield port
    finally:
        stop_process(proc)


@pytest.fixture
def grpc_server(tmp_path: Path) -> Iterator[int]:
    yield from _serve(GRPC_PEER, free_port(), tmp_path / "grpc.log", "test-grpc-server")


@pytest.fixture
def h2_server(tmp_path: Path) -> Iterator[int]:
    yield from _serve(H2_PEER, free_port(), tmp_path / "hypercorn.log", "test-h2-server")


def grpc_calls(port: int, *calls: str) -> list[dict]:
    out = subprocess.run([*GRPC_PEER, "client", f"127.0.0.1:{port}", *calls], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def in_window(spans: list[Span], call: dict, kind: int) -> list[Span]:
    """Spans of one kind that lie within a call's wall-clock window."""
    return [s for s in spans if s.kind == kind and s.attrs.get("rpc.system.name") == "grpc"
            and call["t0"] - slack() <= s.start and s.end <= call["t1"] + slack()]


def by_method(spans: list[Span], method: str, kind: int) -> list[Span]:
    return [s for s in spans if s.kind == kind and s.attrs.get("rpc.method") == method]


def have_calls(calls: list[dict]):
    def done(spans: list[Span]) -> bool:
        return all(in_window(spans, c, kind) for c in calls for kind in (CLIENT, SERVER))
    return done


def check_call(spans: list[Span], call: dict, port: int) -> tuple[Span, Span]:
    method = call["method"].lstrip("/")
    clients, servers = in_window(spans, call, CLIENT), in_window(spans, call, SERVER)
    assert [s.name for s in clients] == [method], (call, clients)
    assert [s.name for s in servers] == [method], (call, servers)
    client, server = clients[0], servers[0]
    for span in (client, server):
        assert span.attrs["rpc.method"] == method
        assert span.attrs["rpc.response.status_code"] == call["code"]
        assert span.attrs["server.port"] == port
        assert span.attrs["network.protocol.version"] == "2"
        assert span.attrs["network.peer.address"] == "127.0.0.1"
        assert span.start <= span.end
    assert server.resource["service.name"] == "test-grpc-server"
    assert client.attrs["network.peer.port"] == port
    assert server.attrs["client.port"] == server.attrs["network.peer.port"]
    # the server handled the call inside the client's wait for it
    assert client.start <= server.start
    assert server.end <= client.end + WRITE_RETURN_NS
    # one trace: the server span's parent is the client span (same TCP sequence number)
    assert server.trace_id == client.trace_id and server.parent_span_id == client.span_id
    return client, server


def test_grpc_unary_streaming_and_errors(start_agent, grpc_server):
    port = grpc_server
    agent = start_agent([port])
    calls = grpc_calls(port, "unary:Say", "unary:Fail", "stream:Count:3", "bidi:Chat:4",
                       "client:Sum:3")
    assert [c["code"] for c in calls] == ["OK", "NOT_FOUND", "OK", "OK", "OK"]
    spans = agent.wait_for(have_calls(calls))
    pairs = [check_call(spans, c, port) for c in calls]
    (say_c, say_s), (fail_c, fail_s), (count_c, count_s), (chat_c, chat_s), (sum_c, sum_s) = pairs
    assert say_s.name == "test.Echo/Say" and say_s.attrs["rpc.response.status_code"] == "OK"
    assert say_s.status.get("code", 0) == 0 and "error.type" not in say_s.attrs
    # NOT_FOUND fails the client's span, not the server's (semconv for gRPC servers)
    assert fail_c.status.get("code") == 2 and fail_c.attrs["error.type"] == "NOT_FOUND"
    assert fail_c.status.get("message") == "no such key: k1"
    assert fail_s.status.get("code", 0) == 0 and "error.type" not in fail_s.attrs
    for span in (fail_c, fail_s):
        assert span.attrs["rpc.grpc.status_message"] == "no such key: k1"
    for span in (count_c, count_s, chat_c, chat_s, sum_c, sum_s):
        assert span.status.get("code", 0) == 0 and "error.type" not in span.attrs
    # message counts, from the length prefixes
    assert count_s.attrs["rpc.response.message.count"] == 3
    assert (chat_s.attrs["rpc.request.message.count"],
            chat_s.attrs["rpc.response.message.count"]) == (4, 4)
    assert sum_s.attrs["rpc.request.message.count"] == 3
    for client, server in pairs:
        for key in ("rpc.request.message.count", "rpc.response.message.count"):
            if key in client.attrs and key in server.attrs:
                assert client.attrs[key] == server.attrs[key]
    # nothing else was made of the bytes: at most one span per call and side
    grpc_spans = [s for s in spans if s.attrs.get("rpc.system.name") == "grpc"]
    assert len(grpc_spans) == 2 * len(calls)
    assert agent.stop() == 0


def test_capture_begins_on_a_channel_in_use(start_agent, grpc_server, tmp_path):
    """The channel made calls before the agent started: HPACK entries it inserted then are
    unknown to the agent. A repeated call may lose its method, never get a wrong one; a
    method never called before is sent as a literal and known."""
    port = grpc_server
    go = tmp_path / "go"
    client = subprocess.Popen(
        [*GRPC_PEER, "client", f"127.0.0.1:{port}", "unary:Say", "stream:Count:2",
         "--wait", str(go), "unary:Say", "unary:Fail", "stream:Count:2", "unary:Say",
         "bidi:Chat:2"],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    try:
        lines = []
        while True:
            line = client.stdout.readline()
            assert line, f"client ended early: {client.stderr.read()}"
            if line.strip() == "waiting":
                break
            lines.append(line)
        agent = start_agent([port])
        go.touch()
        out, err = client.communicate(timeout=60)
    finally:
        if client.poll() is None:
            client.kill()
            client.wait(5)
    assert client.returncode == 0, err
    calls = [json.loads(line) for line in out.splitlines() if line.startswith("{")]
    assert [c["call"] for c in calls] == ["unary:Say", "unary:Fail", "stream:Count:2",
                                          "unary:Say", "bidi:Chat:2"]
    spans = agent.wait_for(have_calls(calls))
    agent.stop()
    spans = agent.spans()
    for call in calls:
        method = call["method"].lstrip("/")
        window = [s for s in spans if call["t0"] - slack() <= s.start
                  and s.end <= call["t1"] + slack()]
        # the connection was claimed on its first header block: every call has its spans
        clients, servers = in_window(spans, call, CLIENT), in_window(spans, call, SERVER)
        assert len(clients) == 1 and len(servers) == 1, (call, window)
        assert servers[0].parent_span_id == clients[0].span_id
        # none carries another call's method or path, whatever it could not resolve
        for span in window:
            assert span.attrs.get("rpc.method", method) == method, (call, span)
            assert "url.path" not in span.attrs, (call, span)
            assert span.name in (method, "grpc"), (call, span)
    # methods first called after capture began went out as literals: known on both sides
    for call in (calls[1], calls[4]):
        for span in in_window(spans, call, CLIENT) + in_window(spans, call, SERVER):
            assert span.name == span.attrs["rpc.method"] == call["method"].lstrip("/")
    (fail_client,) = in_window(spans, calls[1], CLIENT)
    assert fail_client.attrs["rpc.response.status_code"] == "NOT_FOUND"
    # and the case this test is about did happen: a :path the channel had put in its HPACK
    # table before the agent started was left unknown
    assert any(s.name == "grpc" and "rpc.method" not in s.attrs for s in spans)


def test_plain_http2_with_httpx_and_hypercorn(start_agent, h2_server):
    port = h2_server
    agent = start_agent([port])
    paths = ["/items/h2-1", "/echo/h2-2", "/boom/h2-3", "/items/h2-4"]
    out = subprocess.run([*H2_PEER, "client", f"http://127.0.0.1:{port}", *paths], cwd=REPO,
                         capture_output=True, text=True, timeout=60, check=True)
    timings = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    assert [t["http_version"] for t in timings] == ["HTTP/2"] * 4

    def spans_for(spans: list[Span], path: str, kind: int) -> list[Span]:
        return [s for s in spans if s.kind == kind and s.attrs.get("url.path") == path]

    spans = agent.wait_for(lambda s: all(spans_for(s, p, k) for p in paths
                                         for k in (CLIENT, SERVER)))
    for t in timings:
        method = "POST" if t["path"].startswith("/echo") else "GET"
        clients, servers = spans_for(spans, t["path"], CLIENT), spans_for(spans, t["path"], SERVER)
        assert len(clients) == 1 and len(servers) == 1, (t, clients, servers)
        client, server = clients[0], servers[0]
        for span in (client, server):
            assert span.name == method and span.attrs["http.request.method"] == method
            assert span.attrs["http.response.status_code"] == t["status"]
            assert span.attrs["network.protocol.version"] == "2"
            assert span.attrs["server.port"] == port
            assert "rpc.system.name" not in span.attrs
            assert t["t0"] - slack() <= span.start <= span.end <= t["t1"] + slack()
        assert client.attrs["url.full"] == f"http://127.0.0.1:{port}{t['path']}"
        assert client.attrs["user_agent.original"].startswith("python-httpx/")
        assert server.resource["service.name"] == "test-h2-server"
        assert client.start <= server.start
        assert server.end <= client.end + WRITE_RETURN_NS
        assert server.trace_id == client.trace_id and server.parent_span_id == client.span_id
        if method == "POST":
            assert client.attrs["http.request.body.size"] == 100
        if t["status"] == 500:
            assert client.status.get("code") == 2 and server.status.get("code") == 2
