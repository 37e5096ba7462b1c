"""A real LLM gateway end to end: the `openai` client (its own process) -> the LiteLLM proxy
(FastAPI under uvicorn on uvloop, aiohttp to its upstream; .venv-gateway) -> a local
OpenAI-compatible server streaming SSE, the real agent with its BPF programs watching all
three. 16 streamed chat completions, 4 at a time, must give 16 traces of exactly four
spans: the client's CLIENT span -> LiteLLM's SERVER span -> LiteLLM's CLIENT span (joined
to the request it serves by the asyncio task evidence, through uvloop's run_in_context) ->
the upstream's SERVER span, each a GenAI span with the model, the tokens and the time to
first token measured at its own end of its own hop."""

from __future__ import annotations

import json
import os
import statistics
import subprocess
import sys
from collections import Counter, defaultdict
from pathlib import Path

import pytest

from tests.support.litellm_proxy import (
    GATEWAY_MODEL,
    MASTER_KEY,
    START_TIMEOUT_S,
    UPSTREAM_KEY,
    UPSTREAM_MODEL,
    litellm_proxy,
    unavailable_reason,
)
from tests.support.openai_server import openai_server

from tests.support.wallclock import WRITE_RETURN_NS

from .conftest import REPO, Span, require_peer

# every wait below is bounded on its own, for a loaded machine: LiteLLM's start (10-30 s
# idle, START_TIMEOUT_S), the agent's start and stop, the client's calls; the test's own
# timeout is their sum
pytestmark = [pytest.mark.kernel, pytest.mark.timeout(1500)]

SERVER, CLIENT = 2, 3
CALLS, CONCURRENCY = 16, 4
FIRST_TOKEN_S, TOKEN_INTERVAL_S, TOKENS = 0.300, 0.040, 8  # the upstream's generation
PROMPT_TOKENS = 5  # "Say hello through the gateway" (the upstream counts words)
CLIENT_SERVICE, GATEWAY_SERVICE, UPSTREAM_SERVICE = "openai-app", "litellm-gw", "llm-upstream"
TTFT = "gen_ai.response.time_to_first_chunk"
# bounds for a loaded machine: the spans' arrival after the last call, the agent's stop
# (its flush and uprobe detaching took more than 60 s with the 2 cores under stress)
SPANS_TIMEOUT_S, STOP_TIMEOUT_S = 120.0, 180.0


@pytest.fixture
def servers(tmp_path):
    """(the upstream, LiteLLM in front of it), both started before the agent."""
    require_peer(unavailable_reason())
    with openai_server(FIRST_TOKEN_S, TOKEN_INTERVAL_S, TOKENS, log=tmp_path / "upstream.log",
                       env={"OTEL_SERVICE_NAME": UPSTREAM_SERVICE},
                       start_timeout_s=START_TIMEOUT_S) as upstream, \
            litellm_proxy(tmp_path, upstream.base_url,
                          env={"OTEL_SERVICE_NAME": GATEWAY_SERVICE}) as gateway:
        yield upstream, gateway


def run_client(base_url: str) -> list[dict]:
    out = subprocess.run(
        [sys.executable, "-m", "tests.integration.peers.gateway_client", base_url,
         MASTER_KEY, GATEWAY_MODEL, str(CALLS), str(CONCURRENCY)],
        cwd=REPO, capture_output=True, text=True, timeout=300,
        env={**os.environ, "OTEL_SERVICE_NAME": CLIENT_SERVICE})
    if out.returncode != 0:
        raise RuntimeError(f"gateway_client failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def role(span: Span) -> tuple[str, int]:
    return span.resource.get("service.name"), span.kind


HOPS = [(CLIENT_SERVICE, CLIENT), (GATEWAY_SERVICE, SERVER), (GATEWAY_SERVICE, CLIENT),
        (UPSTREAM_SERVICE, SERVER)]  # one call's spans, each the parent of the next


def all_hops_seen(spans: list[Span]) -> bool:
    return Counter(role(s) for s in spans) == {hop: CALLS for hop in HOPS}


def shapes(spans: list[Span]) -> str:
    """Each trace's spans (service, kind, correlation, parent found in the trace), for
    assertion messages."""
    traces: dict[str, list[Span]] = defaultdict(list)
    for span in spans:
        traces[span.trace_id].append(span)
    lines = []
    for trace_id, members in traces.items():
        ids = {s.span_id for s in members}
        lines.append(trace_id[:8] + ": " + ", ".join(
            f"{s.resource.get('service.name')}/{'SERVER' if s.kind == SERVER else 'CLIENT'}"
            f"[{s.attrs.get('otel_ebpf.correlation', '-')}"
            f"{'' if not s.parent_span_id or s.parent_span_id in ids else ' parent elsewhere'}]"
            for s in sorted(members, key=lambda s: s.start)))
    return "\n".join(lines)


def uses_uvloop(pid: int) -> bool:
    return "/uvloop/loop." in Path(f"/proc/{pid}/maps").read_text()


def test_litellm_streams_give_four_span_traces(start_agent, servers):
    upstream, gateway = servers
    agent = start_agent([gateway.port, upstream.port])
    answers = run_client(gateway.base_url)
    # the gateway this test means: LiteLLM's uvicorn on uvloop, whose outbound calls are
    # joined through uvloop's run_in_context (asyncio's own loop is covered elsewhere)
    assert uses_uvloop(gateway.proc.pid), "LiteLLM did not run on uvloop"
    assert len(answers) == CALLS
    assert len({a["id"] for a in answers}) == CALLS  # the upstream's ids tell calls apart
    for answer in answers:
        assert answer["chunks"] == TOKENS and answer["finish_reason"] == "stop", answer
        assert answer["model"] == GATEWAY_MODEL, answer  # LiteLLM answers in its own name
        assert answer["usage"] == {"prompt_tokens": PROMPT_TOKENS, "completion_tokens": TOKENS}
    agent.wait_for(all_hops_seen, timeout_s=SPANS_TIMEOUT_S)
    assert agent.stop(STOP_TIMEOUT_S) == 0
    spans = agent.spans()  # all the agent exported, flushed by its stop

    # exact counts: 16 of each hop's span and nothing else, all in 16 traces of four
    assert Counter(role(s) for s in spans) == {hop: CALLS for hop in HOPS}, shapes(spans)
    traces: dict[str, dict[tuple[str, int], Span]] = defaultdict(dict)
    for span in spans:
        traces[span.trace_id][role(span)] = span
    assert len(traces) == CALLS and all(len(t) == len(HOPS) for t in traces.values()), (
        shapes(spans))

    answered = {a["id"] for a in answers}
    seen_ids = set()
    for trace in traces.values():
        app, gw_server, gw_client, up_server = (trace[hop] for hop in HOPS)
        context = shapes(list(trace.values()))
        # the chain of parents: each span's parent is the span before it
        assert app.parent_span_id == "", context
        assert app.attrs.get("otel_ebpf.correlation") != "ambiguous", context
        assert gw_server.parent_span_id == app.span_id, context
        assert gw_client.parent_span_id == gw_server.span_id, context
        assert up_server.parent_span_id == gw_client.span_id, context
        # both ends of each connection seen: the servers' spans are joined by the wire; the
        # gateway's call by the asyncio task that served the request, never left undecided
        assert gw_server.attrs["otel_ebpf.correlation"] == "wire", context
        assert up_server.attrs["otel_ebpf.correlation"] == "wire", context
        assert gw_client.attrs["otel_ebpf.correlation"] == "task", context

        # one call: LiteLLM passes the upstream's response id through, so all four spans
        # carry the id the client got (a wrong parent among the concurrent calls shows here)
        ident = up_server.attrs["gen_ai.response.id"]
        assert ident in answered and ident not in seen_ids, (ident, context)
        seen_ids.add(ident)
        for span in (app, gw_server, gw_client, up_server):
            assert span.attrs["gen_ai.response.id"] == ident, (role(span), span.attrs)

        # GenAI attributes at each end of each hop: the client's hop names the gateway's
        # model, the gateway's hop the upstream model it routes to
        for span, port, model in ((app, gateway.port, GATEWAY_MODEL),
                                  (gw_server, gateway.port, GATEWAY_MODEL),
                                  (gw_client, upstream.port, UPSTREAM_MODEL),
                                  (up_server, upstream.port, UPSTREAM_MODEL)):
            a, where = span.attrs, role(span)
            assert span.name == f"chat {model}", (where, span.name)
            assert a["server.port"] == port, (where, a)
            assert a["gen_ai.operation.name"] == "chat", (where, a)
            assert a["gen_ai.provider.name"] == "openai_compatible", (where, a)
            assert a["gen_ai.request.model"] == model, (where, a)
            assert a["gen_ai.response.model"] == model, (where, a)
            assert a["gen_ai.request.stream"] is True, (where, a)
            assert a["gen_ai.request.max_tokens"] == 64, (where, a)
            assert a["gen_ai.response.finish_reasons"] == ["stop"], (where, a)
            assert a["http.response.status_code"] == 200, (where, a)
            # usage: the upstream reports it (include_usage), LiteLLM relays it
            assert a["gen_ai.usage.input_tokens"] == PROMPT_TOKENS, (where, a)
            assert a["gen_ai.usage.output_tokens"] == TOKENS, (where, a)
            assert a["otel_ebpf.gen_ai.output_tokens.source"] == "usage", (where, a)
            assert a["otel_ebpf.gen_ai.response.chunk_count"] == TOKENS, (where, a)
            assert a[TTFT] > 0, (where, a)
            assert a["otel_ebpf.gen_ai.time_per_output_token"] >= 0, (where, a)

        # time to first token at each end of each hop, ordered as the request went: a
        # client's interval (its request's first byte written to the first token read)
        # holds its server's (the request's last byte read to the first token written),
        # and the gateway's server interval holds its own call upstream; the gateway's call
        # began before the upstream had its request, which waited FIRST_TOKEN_S for its
        # first token, so that call cannot have waited less
        ttft = [span.attrs[TTFT] for span in (app, gw_server, gw_client, up_server)]
        assert ttft == sorted(ttft, reverse=True), (ttft, context)
        assert ttft[2] >= FIRST_TOKEN_S, (ttft, context)

        # each hop's server span inside its client span (the same request seen from both
        # ends; the server's end is its last write, a moment before the client's read), and
        # the gateway's call made after its request began
        for outer, inner in ((app, gw_server), (gw_client, up_server)):
            assert outer.start <= inner.start, context
            assert inner.end <= outer.end + WRITE_RETURN_NS, context
        assert gw_server.start <= gw_client.start, context
    assert seen_ids == answered
    means = [statistics.fmean(t[hop].attrs[TTFT] for t in traces.values()) * 1e3
             for hop in HOPS]
    print("\nTTFT means over {} streams (ms): openai client {:.1f}, LiteLLM server {:.1f}, "
          "LiteLLM client {:.1f}, upstream server {:.1f}".format(CALLS, *means))

    # neither the gateway's master key nor the upstream's API key leaves in a span
    text = agent.traces.read_text()
    assert MASTER_KEY not in text and UPSTREAM_KEY not in text and "Bearer" not in text
