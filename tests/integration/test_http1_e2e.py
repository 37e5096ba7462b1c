"""HTTP/1.x end to end: a real uvicorn server, real clients in their own processes, the
real agent with its BPF programs; every request must give exactly one CLIENT and one
SERVER span with the right attributes, inside the wall time the client measured."""

from __future__ import annotations

import json
import subprocess
import time
import uuid

import pytest

from tests.support.wallclock import slack_ns

from tests.support.wallclock import WRITE_RETURN_NS

from .conftest import Span, read_metrics, run_client

pytestmark = pytest.mark.kernel

SERVER, CLIENT = 2, 3
CLOCK_SLACK_NS = 200_000  # kernel-monotonic to wall-clock conversion error allowance


def slack() -> int:
    """The allowance plus what the host moved the wall clock during the test."""
    return slack_ns(CLOCK_SLACK_NS)


def unique(prefix: str) -> str:
    return f"/{prefix}/{uuid.uuid4().hex[:12]}"


def spans_for(spans: list[Span], path: str, kind: int) -> list[Span]:
    return [s for s in spans if s.kind == kind and s.attrs.get("url.path") == path]


def have_pairs(paths: list[str]):
    def done(spans: list[Span]) -> bool:
        return all(spans_for(spans, p, SERVER) and spans_for(spans, p, CLIENT) for p in paths)
    return done


def check_request(spans: list[Span], timing: dict, port: int, method: str = "GET",
                  status: int = 200, joined: bool = True) -> tuple[Span, Span]:
    """The request's one CLIENT and one SERVER span, checked; `joined`: the SERVER span
    must be the CLIENT span's child (else it may be a root, never another's child)."""
    path = timing["path"]
    clients, servers = spans_for(spans, path, CLIENT), spans_for(spans, path, SERVER)
    assert len(clients) == 1, f"{path}: {len(clients)} client spans"
    assert len(servers) == 1, f"{path}: {len(servers)} server spans"
    client, server = clients[0], servers[0]
    for span in (client, server):
        assert span.name == method
        assert span.attrs["http.request.method"] == method
        assert span.attrs["http.response.status_code"] == status
        assert span.attrs["server.port"] == port
        assert span.attrs["network.peer.address"] == "127.0.0.1"
        assert span.attrs["network.protocol.version"] == "1.1"
        assert span.start <= span.end
        assert timing["t0"] - slack() <= span.start, (path, span)
        assert span.end <= timing["t1"] + slack(), (path, span)
    assert client.attrs["network.peer.port"] == port
    assert server.attrs["client.address"] == "127.0.0.1"
    assert server.attrs["network.peer.port"] == server.attrs["client.port"]
    assert server.resource["service.name"] == "test-http-app"
    # the server handled the request inside the client's wait for it
    assert client.start <= server.start and server.end <= client.end + WRITE_RETURN_NS
    # and the two are one exchange: the SERVER span is the CLIENT span's child
    if joined or server.parent_span_id:
        assert server.trace_id == client.trace_id, (path, client, server)
        assert server.parent_span_id == client.span_id, (path, client, server)
    return client, server


def test_requests_keepalive_session(start_agent, uvicorn_server):
    port = uvicorn_server
    agent = start_agent([port])
    paths = [unique("items") for _ in range(4)] + [unique("echo")]
    timings = run_client("requests", port, paths)
    spans = agent.wait_for(have_pairs(paths))
    for t in timings:
        check_request(spans, t, port, method="POST" if t["path"].startswith("/echo") else "GET")
    posts = spans_for(spans, paths[-1], CLIENT)
    assert posts[0].attrs["http.request.body.size"] == 100
    # one keep-alive connection: every client span came from the same local port
    assert len({s.attrs["client.port"] for p in paths for s in spans_for(spans, p, SERVER)}) == 1
    assert agent.stop() == 0
    # the agent's own counters went out through the metrics pipeline, and at exit
    metrics = read_metrics(agent.traces)
    assert metrics["otel_ebpf.spans.produced"] >= 2 * len(paths)
    assert metrics["otel_ebpf.events"] > 0 and metrics["otel_ebpf.kernel.drops"] == 0
    assert "otel_ebpf.spans.exported" in agent.stderr


def test_httpx_client(start_agent, uvicorn_server):
    port = uvicorn_server
    agent = start_agent([port])
    paths = [unique("items") for _ in range(3)]
    timings = run_client("httpx", port, paths)
    spans = agent.wait_for(have_pairs(paths))
    for t in timings:
        client, _ = check_request(spans, t, port)
        assert client.attrs["user_agent.original"].startswith("python-httpx/")
        assert client.attrs["url.full"] == f"http://127.0.0.1:{port}{t['path']}"


def test_curl_and_error_statuses(start_agent, uvicorn_server):
    port = uvicorn_server
    agent = start_agent([port])
    cases = [(unique("items"), 200), (unique("missing"), 404), (unique("boom"), 500)]
    timings = []
    for path, _ in cases:
        t0 = time.time_ns()
        subprocess.run(["curl", "-s", "-o", "/dev/null", f"http://127.0.0.1:{port}{path}"],
                       check=True, timeout=30)
        timings.append({"path": path, "t0": t0, "t1": time.time_ns()})
    spans = agent.wait_for(have_pairs([p for p, _ in cases]))
    for (path, status), t in zip(cases, timings, strict=True):
        client, server = check_request(spans, t, port, status=status)
        assert client.resource["service.name"] == "curl"
        assert client.attrs["user_agent.original"].startswith("curl/")
        client_error = client.status.get("code") == 2
        server_error = server.status.get("code") == 2
        assert client_error == (status >= 400), (path, client.status)
        assert server_error == (status >= 500), (path, server.status)
        if status >= 400:
            assert client.attrs["error.type"] == str(status)


def test_pipelined_requests(start_agent, uvicorn_server):
    port = uvicorn_server
    agent = start_agent([port])
    # ids of different lengths: each answer ({"id": ..., "ok": true}) has a size of its own,
    # so a response paired with another request shows in the spans' body sizes
    ids = [uuid.uuid4().hex[:4 + 6 * i] for i in range(3)]
    paths = [f"/items/{item_id}" for item_id in ids]
    timings = run_client("pipelined", port, paths)
    spans = agent.wait_for(have_pairs(paths))
    servers = []
    for t, item_id in zip(timings, ids, strict=True):
        assert json.loads(t["body"]) == {"id": item_id, "ok": True}  # what the client read
        client, server = check_request(spans, t, port)  # one pair, parent and trace ids
        for span in (client, server):  # request n paired with response n, by content
            assert span.attrs["http.response.body.size"] == len(t["body"].encode()), (t, span)
        servers.append(server)
    # in order, on one connection
    assert [s.start for s in servers] == sorted(s.start for s in servers)
    assert len({s.attrs["client.port"] for s in servers}) == 1


def test_chunked_streaming_response(start_agent, uvicorn_server):
    port = uvicorn_server
    agent = start_agent([port])
    path = unique("stream")
    timings = run_client("requests", port, [path])
    spans = agent.wait_for(have_pairs([path]))
    client, server = check_request(spans, timings[0], port)
    # five 10 ms chunks: the span lasts until the last chunk, not the first
    assert server.end - server.start >= 40_000_000
    assert client.attrs["http.response.body.size"] == len("chunk 0\n") * 5


def test_large_body_beyond_capture(start_agent, uvicorn_server):
    """A 200 kB response is captured as its first 4 KiB; the rest is skipped by length
    and the next request on the same connection is still parsed."""
    port = uvicorn_server
    agent = start_agent([port])
    paths = [unique("big"), unique("items")]
    timings = run_client("requests", port, paths)
    spans = agent.wait_for(have_pairs(paths))
    client, _ = check_request(spans, timings[0], port)
    assert client.attrs["http.response.body.size"] == 200_000
    check_request(spans, timings[1], port)


def test_unanswered_request_times_out(start_agent):
    """A server that never answers: after response_timeout (2 s here) both sides get a
    span with error.type=timeout, while the connection is still open."""
    import sys

    from .conftest import REPO, free_port

    port = free_port()
    agent = start_agent([port], response_timeout="2s")
    peer = [sys.executable, "-m", "tests.integration.peers.sockets"]
    server = subprocess.Popen([*peer, "silent_server", str(port)], cwd=REPO,
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "listening"
        subprocess.run([*peer, "patient_client", str(port)], cwd=REPO, check=True, timeout=30)
        spans = agent.wait_for(lambda s: len([x for x in s if x.attrs.get("url.path") == "/never"]) >= 2)
    finally:
        server.kill()
        server.wait(5)
    never = [s for s in spans if s.attrs.get("url.path") == "/never"]
    assert sorted(s.kind for s in never) == [SERVER, CLIENT]
    for span in never:
        assert span.attrs["error.type"] == "timeout"
        assert span.status.get("code") == 2
        assert "http.response.status_code" not in span.attrs
