"""Two nodes, one agent each (tests/support/nodes.py, bench/two_nodes.py): a FastAPI gateway
on node A streams a chat completion (server-sent events) from a server on node B, called by
its pod address, through a Service's VIP (kube-proxy's nftables DNAT in node A), and
through a Service that also masquerades (SNAT, the source port rewritten). Each agent sees
one end of the call: the gateway's CLIENT span must link to the server's trace, the link's
span ID being the server span's parent, whatever NAT lay between them (node A's agent reads
the connection as the server saw it from conntrack). A client on node A that no agent
selects leaves the server's trace starting at the server's span."""

from __future__ import annotations

import json
import sys
import time
from pathlib import Path

import pytest

from bench.two_nodes import GATEWAY_PORT, SERVER_PORT, UPSTREAM_PATH, score, start_topology
from tests.support.nodes import require_tools, start_node_agent, two_nodes, wait_ready

from .conftest import REQUIRE_BPF, read_spans, require_kernel

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(900)]  # two agents start on 2 cores
REQUESTS = 100
SPANS_WAIT_S = 60.0  # after the load: a server span waits the correlation window (2 s)
SERVER_KIND = 2


def traced_nodes(workdir: Path, overrides=lambda node: None, gateways=("async",)):
    """Two nodes, an agent each (`overrides(node)`: its config's overrides), the gateway ->
    server topology with the gateways of these kinds (bench/two_nodes.py GATEWAYS) side by
    side; yields (node A, node B, topology, [agent A, agent B])."""
    require_kernel()
    why = require_tools()
    if why:
        if REQUIRE_BPF:
            pytest.fail(why)
        pytest.skip(why)
    with two_nodes() as (a, b):
        agents, topo = [], None
        try:
            agents = [start_node_agent(a, workdir / "agent-a", overrides(a)),
                      start_node_agent(b, workdir / "agent-b", overrides(b))]
            wait_ready(*agents)
            topo = start_topology(a, b, workdir, gateways)
            yield a, b, topo, agents
        finally:
            for agent in agents:
                agent.stop()
            if topo is not None:
                topo.stop()


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    yield from traced_nodes(tmp_path_factory.mktemp("two-nodes"))


def _spans_of(agent, rids: set[str], predicate) -> list:
    """The agent's spans once every rid has one span matching `predicate` (bounded wait)."""
    from bench.two_nodes import _rid

    deadline = time.monotonic() + SPANS_WAIT_S
    while True:
        spans = read_spans(agent.traces)
        if rids <= {_rid(s) for s in spans if predicate(s)} or time.monotonic() > deadline:
            return spans
        time.sleep(0.5)


@pytest.mark.parametrize("concurrency", [1, 16])
@pytest.mark.parametrize("route", ["direct", "vip", "vip-masquerade"])
def test_gateway_call_links_to_the_server_trace(cluster, route, concurrency):
    a, b, topo, (agent_a, agent_b) = cluster
    out = topo.load(REQUESTS, concurrency, route)
    assert out["errors"] == 0, out["first_error"]
    rids = out["rids"]
    assert len(rids) == REQUESTS
    server_spans = _spans_of(agent_b, set(rids), lambda s: s.kind == SERVER_KIND)
    gateway_spans = _spans_of(
        agent_a, set(rids), lambda s: s.kind == 3 and UPSTREAM_PATH in str(s.attrs.get("url.full")))
    result = score(rids, gateway_spans, server_spans)
    assert result.both_ends == REQUESTS, result.row()
    assert result.linked >= 0.99 * REQUESTS, result.row()
    assert result.evidence == {"derived": REQUESTS}, result.row()
    # the gateway's span keeps the Service as it was addressed, and names the pod behind it
    calls = [s for s in gateway_spans if s.kind == 3 and UPSTREAM_PATH in str(
        s.attrs.get("url.full")) and s.attrs["url.full"].split("rid=")[-1] in set(rids)]
    for span in calls:
        if route == "direct":
            assert span.attrs["server.address"] == b.address
            assert "otel_ebpf.nat.peer.address" not in span.attrs
        else:
            assert span.attrs["server.address"].startswith("10.96.")
            assert span.attrs["network.peer.address"] == span.attrs["server.address"]
            assert span.attrs["otel_ebpf.nat.peer.address"] == b.address
            assert span.attrs["otel_ebpf.nat.peer.port"] == SERVER_PORT


# requests straight to the server from a process of node A that no agent selects (a child of
# the test, not of node A's parent process)
UNTRACED_CLIENT = """
import json, sys, uuid, urllib.request
rids = []
for _ in range(int(sys.argv[2])):
    rid = uuid.uuid4().hex
    req = urllib.request.Request(f"{sys.argv[1]}?rid={rid}", method="POST", data=b"{}",
                                 headers={"content-type": "application/json"})
    with urllib.request.urlopen(req, timeout=30) as r:
        r.read()
    rids.append(rid)
print(json.dumps(rids))
"""


def test_untraced_client_leaves_the_server_span_on_top_of_its_trace(cluster):
    """Server node traced, client node not: nothing on node A is exported for these calls,
    and each server span starts a trace of its own (derived from the connection), is the
    topmost span of it (no exported span is its parent), and took no other request's
    trace: its parent is the derived span ID, which only a client's agent would link to."""
    a, b, topo, (agent_a, agent_b) = cluster
    n = 10
    out = a.exec([sys.executable, "-c", UNTRACED_CLIENT,
                  f"http://{b.address}:{SERVER_PORT}{UPSTREAM_PATH}", str(n)], timeout_s=120)
    rids = json.loads(out.stdout.strip().splitlines()[-1])
    from bench.two_nodes import _rid

    spans_b = _spans_of(agent_b, set(rids), lambda s: s.kind == SERVER_KIND)
    servers = {r: s for s in spans_b if s.kind == SERVER_KIND and (r := _rid(s)) in rids}
    assert set(servers) == set(rids)
    traces = {s.trace_id for s in servers.values()}
    assert len(traces) == n  # one trace per request
    exported = read_spans(agent_a.traces) + spans_b
    ids = {s.span_id for s in exported}
    for server in servers.values():
        assert server.attrs["otel_ebpf.correlation"] == "derived"
        assert server.parent_span_id and server.parent_span_id not in ids
        in_trace = [s for s in exported if s.trace_id == server.trace_id]
        assert [s for s in in_trace if s.parent_span_id not in ids] == [server]
    spans_a = read_spans(agent_a.traces)
    assert not [s for s in spans_a if _rid(s) in set(rids)]  # the client was not selected
    assert not [s for s in spans_a for link in s.links if link.get("traceId") in traces]


def test_each_agent_selected_its_own_node(cluster):
    """The harness itself: each node is its own network namespace (and cgroup, where cgroup
    v2 is mounted), and each agent exported the spans of its own node's programs only: the
    server's on node B, the gateway's and the load generator's on node A."""
    a, b, topo, (agent_a, agent_b) = cluster
    assert Path(f"/proc/{a.pid}/ns/net").stat().st_ino != \
        Path(f"/proc/{b.pid}/ns/net").stat().st_ino
    for node in (a, b):
        for proc in node.processes:
            if proc.poll() is None and node.cgroup is not None:
                assert Path(f"/proc/{proc.pid}/cgroup").read_text().strip().endswith(
                    f"/{node.name}")
    # by what each span served (a process's name is read from /proc, which a short-lived
    # load generator may have left before its agent looked)
    spans_a, spans_b = read_spans(agent_a.traces), read_spans(agent_b.traces)
    assert spans_a and spans_b
    assert {s.attrs.get("server.port") for s in spans_a if s.kind == SERVER_KIND} == {
        GATEWAY_PORT}
    assert {(s.kind, s.attrs.get("server.port")) for s in spans_b} == {
        (SERVER_KIND, SERVER_PORT)}
