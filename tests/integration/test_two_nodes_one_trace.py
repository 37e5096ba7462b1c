"""Two nodes, one agent each, with trace context propagation on (the TCP option,
bpf/propagation.bpf.c, each agent's program on its own node's cgroup): the gateway on node A
and the streaming server on node B give ONE trace per request, the server span a child of
the gateway's CLIENT span, directly, through a Service's DNAT and through one that also
masquerades. Node A's agent sends the trace of each call once it has decided it; node B's
agent settles the server request when the option comes."""

from __future__ import annotations

import pytest

from bench.two_nodes import UPSTREAM_PATH, _rid, score

from .conftest import read_metrics, read_spans
from .test_two_nodes import SERVER_KIND, _spans_of, traced_nodes

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(900)]
REQUESTS = 100


def _propagating(node) -> dict:
    if node.cgroup is None:
        pytest.fail("no cgroup v2 here: each agent's TCP option program needs its node's")
    return {"receivers": {"ebpf": {"propagation": {"enabled": True,
                                                   "cgroup": str(node.cgroup)}}}}


@pytest.fixture(scope="module")
def cluster(tmp_path_factory):
    nodes = traced_nodes(tmp_path_factory.mktemp("two-nodes-one-trace"), _propagating)
    yield from nodes


@pytest.mark.parametrize("concurrency", [1, 16])
@pytest.mark.parametrize("route", ["direct", "vip", "vip-masquerade"])
def test_one_trace_across_the_nodes(cluster, route, concurrency):
    a, b, topo, (agent_a, agent_b) = cluster
    out = topo.load(REQUESTS, concurrency, route)
    assert out["errors"] == 0, out["first_error"]
    rids = set(out["rids"])
    assert len(rids) == REQUESTS
    server_spans = _spans_of(agent_b, rids, lambda s: s.kind == SERVER_KIND)
    gateway_spans = _spans_of(
        agent_a, rids, lambda s: s.kind == 3 and UPSTREAM_PATH in str(s.attrs.get("url.full")))
    result = score(list(rids), gateway_spans, server_spans)
    assert result.both_ends == REQUESTS, result.row()
    # every request is one trace, or linked: never lost, never another's. How many are one
    # trace depends on timing (a context rides the connection's next segment after the
    # client's agent read the call; the last calls of a connection that goes idle may find
    # none within the server's wait): measured 90-100 % on a quiet machine, 92 % in a loaded
    # CI run (docs/correlation.md); here, that the carrier joins most of them
    assert result.one_trace + result.linked >= REQUESTS, result.row()
    assert result.one_trace >= REQUESTS // 2, result.row()
    assert result.evidence.get("tcp_option", 0) == result.one_trace, result.row()
    # the server span's parent is the gateway's call itself, never another request's
    calls = {s.span_id: s for s in gateway_spans if s.kind == 3}
    for server in server_spans:
        if server.kind == SERVER_KIND and server.attrs.get("otel_ebpf.correlation") == \
                "tcp_option":
            call = calls.get(server.parent_span_id)
            assert call is not None and call.trace_id == server.trace_id
            assert _rid(call) == _rid(server)


def test_the_options_were_counted(cluster):
    _, _, _, (agent_a, agent_b) = cluster
    sent = read_metrics(agent_a.traces).get("otel_ebpf.propagation.contexts", 0)
    assert sent > 0
    received = read_spans(agent_b.traces)
    assert any(s.attrs.get("otel_ebpf.correlation") == "tcp_option" for s in received)
