"""One trace across processes, from the wire alone: client <-> server by TCP sequence
number, server -> outbound call on the reading thread, W3C traceparent, x-request-id."""

from __future__ import annotations

import subprocess
import uuid

import pytest

from .conftest import Span, run_client

pytestmark = pytest.mark.kernel

SERVER, CLIENT = 2, 3


def one(spans: list[Span], kind: int, path: str) -> Span:
    found = [s for s in spans if s.kind == kind and s.attrs.get("url.path") == path]
    assert len(found) == 1, (kind, path, found)
    return found[0]


def test_chain_is_one_trace(start_agent, relay):
    """client -> relay (server, then client on the reading thread) -> uvicorn."""
    relay_port, app_port = relay
    agent = start_agent([relay_port, app_port])
    tags = [uuid.uuid4().hex[:10] for _ in range(3)]
    run_client("requests", relay_port, [f"/hop/{t}" for t in tags])  # keep-alive: n pairs n
    expected = 4 * len(tags)
    spans = agent.wait_for(lambda s: len([x for x in s if "/hop/" in x.attrs.get("url.path", "")
                                          or "-down" in x.attrs.get("url.path", "")]) >= expected)
    for tag in tags:
        c0 = one(spans, CLIENT, f"/hop/{tag}")
        s1 = one(spans, SERVER, f"/hop/{tag}")
        c1 = one(spans, CLIENT, f"/items/{tag}-down")
        s2 = one(spans, SERVER, f"/items/{tag}-down")
        assert c0.parent_span_id == ""  # the client is where the trace starts
        assert s1.parent_span_id == c0.span_id and s1.attrs["otel_ebpf.correlation"] == "wire"
        assert c1.parent_span_id == s1.span_id and c1.attrs["otel_ebpf.correlation"] == "thread"
        assert s2.parent_span_id == c1.span_id and s2.attrs["otel_ebpf.correlation"] == "wire"
        assert len({c0.trace_id, s1.trace_id, c1.trace_id, s2.trace_id}) == 1
    assert len({one(spans, CLIENT, f"/hop/{t}").trace_id for t in tags}) == len(tags)


def test_incoming_traceparent_is_honored(start_agent, uvicorn_server):
    port = uvicorn_server
    agent = start_agent([port])
    trace, parent = uuid.uuid4().hex, uuid.uuid4().hex[:16]
    path = f"/items/{uuid.uuid4().hex[:10]}"
    subprocess.run(["curl", "-s", "-o", "/dev/null", "-H", f"traceparent: 00-{trace}-{parent}-01",
                    f"http://127.0.0.1:{port}{path}"], check=True, timeout=30)
    spans = agent.wait_for(lambda s: len([x for x in s if x.attrs.get("url.path") == path]) >= 2)
    server, client = one(spans, SERVER, path), one(spans, CLIENT, path)
    # the app's own context wins: both our spans join its trace under its span
    assert server.trace_id == client.trace_id == trace
    assert server.parent_span_id == client.parent_span_id == parent
    assert server.attrs["otel_ebpf.correlation"] == "traceparent"


def test_request_id_links_unjoined_hops(start_agent, uvicorn_server):
    """Two requests carrying the same x-request-id, with nothing else joining them: the
    later one links to the first."""
    port = uvicorn_server
    agent = start_agent([port])
    rid = uuid.uuid4().hex
    paths = [f"/items/{uuid.uuid4().hex[:10]}" for _ in range(2)]
    for path in paths:
        subprocess.run(["curl", "-s", "-o", "/dev/null", "-H", f"x-request-id: {rid}",
                        f"http://127.0.0.1:{port}{path}"], check=True, timeout=30)
    spans = agent.wait_for(lambda s: len([x for x in s if x.attrs.get("url.path") in paths]) >= 4)
    first, second = one(spans, CLIENT, paths[0]), one(spans, CLIENT, paths[1])
    assert first.trace_id != second.trace_id
    assert [(link["traceId"], link["spanId"]) for link in second.links] == [
        (first.trace_id, first.span_id)]


def test_two_agents_one_side_each_derive_the_same_ids(start_agent, uvicorn_server):
    """Across hosts, without talking: each agent sees one end of the connection. The
    client's span links to exactly the IDs the server's trace starts with."""
    port = uvicorn_server
    client_side = start_agent([], targets={"process_names": ["curl"]})
    server_side = start_agent([], targets={"process_names": ["uvicorn"]})
    path = f"/items/{uuid.uuid4().hex[:10]}"
    subprocess.run(["curl", "-s", "-o", "/dev/null", f"http://127.0.0.1:{port}{path}"],
                   check=True, timeout=30)
    client = one(client_side.wait_for(lambda s: any(x.attrs.get("url.path") == path for x in s)),
                 CLIENT, path)
    # the server waits for a client end it never sees (the window), then derives
    server = one(server_side.wait_for(lambda s: any(x.attrs.get("url.path") == path for x in s)),
                 SERVER, path)
    assert server.attrs["otel_ebpf.correlation"] == "derived"
    assert (server.trace_id, server.parent_span_id) in [
        (link["traceId"], link["spanId"]) for link in client.links]
    assert not [s for s in client_side.spans() if s.kind == SERVER and s.attrs.get("url.path") == path]
