"""LLM APIs end to end: the real `openai` client (sync and async, streaming and not, with
and without include_usage) and httpx against a local OpenAI-compatible server that streams
SSE with a set first-token delay and token interval, the real agent with its BPF programs
in between. Every call must give a GenAI CLIENT span and a GenAI SERVER span whose time
to first token and time per output token match the injected values within 10%, and the
GenAI histograms must reach the metrics exporter."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from tests.support.openai_server import openai_server

from tests.support.wallclock import WRITE_RETURN_NS

from .conftest import REPO, Span, read_histograms, read_metrics

pytestmark = pytest.mark.kernel

SERVER, CLIENT = 2, 3
FIRST_TOKEN_S, TOKEN_INTERVAL_S, TOKENS = 0.300, 0.040, 8  # the client's x-test-* headers
SECRET = "sk-test-SECRET-never-exported"


def run_calls(base_url: str, calls: list[str]) -> list[dict]:
    out = subprocess.run([sys.executable, "-m", "tests.integration.peers.llm_client",
                          base_url, *calls], cwd=REPO, capture_output=True, text=True,
                         timeout=120, check=True)
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def model_name(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:8]}"


def spans_of(spans: list[Span], model: str, kind: int) -> list[Span]:
    return [s for s in spans if s.kind == kind and s.attrs.get("gen_ai.request.model") == model]


def both_sides(models: list[str]):
    def done(spans: list[Span]) -> bool:
        return all(spans_of(spans, m, CLIENT) and spans_of(spans, m, SERVER) for m in models)
    return done


def within(measured: float, expected: float, tolerance: float = 0.10) -> bool:
    return abs(measured - expected) <= tolerance * expected


@pytest.fixture
def llm_server(tmp_path):
    with openai_server(log=tmp_path / "openai-server.log",
                       env={"OTEL_SERVICE_NAME": "vllm-sim"}) as server:
        yield server


def test_openai_client_chat_calls_give_genai_spans_with_wire_ttft(start_agent, llm_server):
    agent = start_agent([llm_server.port])
    kinds = ["sync-stream-usage", "sync-stream", "sync-json", "async-stream-usage",
             "async-json"]
    calls = {kind: model_name(kind) for kind in kinds}
    timings = run_calls(llm_server.base_url, [f"{k}:{m}" for k, m in calls.items()])
    assert [t["kind"] for t in timings] == kinds
    spans = agent.wait_for(both_sides(list(calls.values())))
    for kind, model in calls.items():
        clients, servers = spans_of(spans, model, CLIENT), spans_of(spans, model, SERVER)
        assert len(clients) == 1 and len(servers) == 1, (kind, [s.name for s in spans])
        client, server = clients[0], servers[0]
        streaming = "stream" in kind
        for span in (client, server):
            a = span.attrs
            assert span.name == f"chat {model}"
            assert a["gen_ai.operation.name"] == "chat"
            assert a["gen_ai.response.model"] == model
            assert a["gen_ai.response.finish_reasons"] == ["stop"]
            assert a["gen_ai.response.id"].startswith("chatcmpl-")
            # semconv: set if and only if the request asked for a stream
            assert a.get("gen_ai.request.stream", False) is streaming
            assert a.get("gen_ai.usage.output_tokens") == TOKENS, (kind, span.kind, a)
            assert a["http.response.status_code"] == 200  # the HTTP attributes stay
            if kind != "sync-stream" and kind != "async-stream":  # usage came over the wire
                assert a["gen_ai.usage.input_tokens"] == 2  # "Say hello"
            if streaming:
                ttft = a["gen_ai.response.time_to_first_chunk"]
                assert within(ttft, FIRST_TOKEN_S), (kind, span.kind, ttft)
                tpot = a["otel_ebpf.gen_ai.time_per_output_token"]
                assert within(tpot, TOKEN_INTERVAL_S), (kind, span.kind, tpot)
                source = "usage" if kind.endswith("usage") else "chunks"
                assert a["otel_ebpf.gen_ai.output_tokens.source"] == source
            assert not any(SECRET in str(v) for v in a.values())
        if kind.startswith("sync"):
            assert client.attrs["gen_ai.request.max_tokens"] == 64
        assert server.resource["service.name"] == "vllm-sim"
        # the server's span is inside the client's
        assert client.start <= server.start and server.end <= client.end + WRITE_RETURN_NS
    assert agent.stop() == 0
    # the client's and the server's connections were captured wide (an LLM request)
    assert read_metrics(agent.traces)["otel_ebpf.kernel.widened"] >= 2
    histograms = read_histograms(agent.traces)
    ttft_points = [p for p in histograms.get("gen_ai.server.time_to_first_token", [])
                   if p.attrs.get("gen_ai.request.model") in calls.values()]
    assert sum(p.count for p in ttft_points) == 3  # the three streamed calls
    assert all(p.resource["service.name"] == "vllm-sim" for p in ttft_points)
    for name in ("gen_ai.client.operation.duration", "gen_ai.client.token.usage",
                 "gen_ai.server.request.duration", "gen_ai.server.time_per_output_token"):
        assert any(p.attrs.get("gen_ai.request.model") in calls.values()
                   for p in histograms.get(name, [])), name


def test_embeddings_errors_and_a_200_kib_prompt(start_agent, llm_server):
    agent = start_agent([llm_server.port])
    calls = {kind: model_name(kind) for kind in ("embeddings", "error", "long-prompt")}
    timings = run_calls(llm_server.base_url, [f"{k}:{m}" for k, m in calls.items()])
    assert timings[2]["body_bytes"] > 200 * 1024
    missing = "missing-" + calls["error"]
    models = [calls["embeddings"], missing, calls["long-prompt"]]
    spans = agent.wait_for(both_sides(models))
    for span in spans_of(spans, calls["embeddings"], CLIENT) + spans_of(
            spans, calls["embeddings"], SERVER):
        assert span.name == f"embeddings {calls['embeddings']}"
        assert span.attrs["gen_ai.operation.name"] == "embeddings"
        assert span.attrs["gen_ai.usage.input_tokens"] == 4  # "one two three", "four"
    for span in spans_of(spans, missing, CLIENT) + spans_of(spans, missing, SERVER):
        assert span.name == f"chat {missing}"
        assert span.attrs["error.type"] == "model_not_found"
        assert span.attrs["http.response.status_code"] == 404
    # the prompt's JSON named the model only after 200 KiB of messages: the kernel widened
    # the connection and sent the request's last bytes, so the model is still known
    for kind in (CLIENT, SERVER):
        (span,) = spans_of(spans, calls["long-prompt"], kind)
        assert span.name == f"chat {calls['long-prompt']}"
        assert span.attrs["gen_ai.request.stream"] is True
        assert span.attrs["gen_ai.usage.input_tokens"] == 200 * 1024 // 5
        assert within(span.attrs["gen_ai.response.time_to_first_chunk"], FIRST_TOKEN_S)
    all_text = agent.traces.read_text()
    assert SECRET not in all_text and "Bearer" not in all_text
