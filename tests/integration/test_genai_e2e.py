"""Gemini and Bedrock Runtime end to end: the real `google-genai` and `boto3` clients, in
their own process, against local servers that speak the documented wire formats
(tests/support/gemini_server.py: JSON, SSE; tests/support/bedrock_server.py: JSON, AWS
event stream), the real agent with its BPF programs in between. Every call must give a
GenAI CLIENT span and a GenAI SERVER span with the model from the path, the usage the SDK
itself parsed (cache and reasoning details included), the tool calls' names (never their
arguments) and, for streams, time to first token and per output token from the wire."""

from __future__ import annotations

import json
import subprocess
import sys
import uuid

import pytest

from tests.support.bedrock_server import bedrock_server
from tests.support.gemini_server import gemini_server

from .conftest import REPO, Span, read_histograms

pytestmark = pytest.mark.kernel

SERVER, CLIENT = 2, 3
FIRST_TOKEN_S, TOKEN_INTERVAL_S, TOKENS = 0.300, 0.040, 6  # the peer's x-test-* headers
SECRETS = ("SECRET-tool-argument-never-exported", "AIza-test-SECRET-key", "AKIATESTSECRET")
NAMES = "otel_ebpf.gen_ai.response.tool_calls.names"
COUNT = "otel_ebpf.gen_ai.response.tool_calls.count"


def run_calls(api: str, root_url: str, calls: dict[str, str]) -> dict[str, dict]:
    out = subprocess.run([sys.executable, "-m", "tests.integration.peers.genai_client", api,
                          root_url, *(f"{k}:{m}" for k, m in calls.items())], cwd=REPO,
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr[-3000:]
    lines = [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]
    return {line["kind"]: line for line in lines}


def spans_of(spans: list[Span], model: str, kind: int) -> list[Span]:
    return [s for s in spans if s.kind == kind and s.attrs.get("gen_ai.request.model") == model]


def both_sides(models: list[str], count: dict[str, int] | None = None):
    count = count or {}

    def done(spans: list[Span]) -> bool:
        return all(len(spans_of(spans, m, k)) >= count.get(m, 1)
                   for m in models for k in (CLIENT, SERVER))
    return done


def assert_stream_timing(span: Span) -> None:
    """The server cannot send the first token before the injected delay, nor tokens closer
    than the interval: lower bounds only, so a slow machine cannot fail them; the upper
    bound is the injected value plus a second of scheduling."""
    a = span.attrs
    ttft = a["gen_ai.response.time_to_first_chunk"]
    assert FIRST_TOKEN_S * 0.95 <= ttft <= FIRST_TOKEN_S + 1.0, (span.kind, ttft)
    tpot = a["otel_ebpf.gen_ai.time_per_output_token"]
    assert TOKEN_INTERVAL_S * 0.9 <= tpot <= TOKEN_INTERVAL_S + 0.2, (span.kind, tpot)


def unique(kind: str) -> str:
    return f"{kind}-{uuid.uuid4().hex[:8]}"


def test_google_genai_client_gives_gemini_spans(start_agent, tmp_path):
    with gemini_server(log=tmp_path / "gemini.log", env={"OTEL_SERVICE_NAME": "gemini-sim"}
                       ) as server:
        agent = start_agent([server.port])
        calls = {"generate": unique("gemini-gen"), "stream": unique("gemini-stream"),
                 "embed": unique("text-embedding"), "missing": unique("missing-gemini")}
        seen = run_calls("gemini", server.root_url, calls)
        spans = agent.wait_for(both_sides(list(calls.values())))
    for kind in ("generate", "stream"):
        model, sdk = calls[kind], seen[kind]
        for side in (CLIENT, SERVER):
            (span,) = spans_of(spans, model, side)
            a = span.attrs
            assert span.name == f"chat {model}"
            assert a["gen_ai.operation.name"] == "chat"
            assert a["gen_ai.provider.name"] == "gemini_compatible"
            assert a["gen_ai.request.max_tokens"] == 64 and a["gen_ai.request.temperature"] == 0.5
            assert a["gen_ai.response.model"] == model
            assert a["gen_ai.response.finish_reasons"] == ["STOP"]
            # what the SDK parsed, in semconv's counting: thoughts inside the output
            assert a["gen_ai.usage.input_tokens"] == sdk["input"]
            assert a["gen_ai.usage.output_tokens"] == sdk["output"] + sdk["thoughts"]
            assert a["gen_ai.usage.reasoning.output_tokens"] == sdk["thoughts"] == 5
            assert a["gen_ai.usage.cache_read.input_tokens"] == 2
            assert a[NAMES] == sdk["tools"] == ["get_weather", "get_time"] and a[COUNT] == 2
            if kind == "stream":
                assert a["gen_ai.request.stream"] is True
                assert a["otel_ebpf.gen_ai.response.chunk_count"] == sdk["chunks"] == TOKENS
                assert a["otel_ebpf.gen_ai.output_tokens.source"] == "usage"
                assert_stream_timing(span)
    for side in (CLIENT, SERVER):
        (span,) = spans_of(spans, calls["embed"], side)
        assert span.name == f"embeddings {calls['embed']}"
        assert span.attrs["gen_ai.embeddings.dimension.count"] == 4
        (span,) = spans_of(spans, calls["missing"], side)
        assert span.attrs["error.type"] == "NOT_FOUND"
        assert span.attrs["http.response.status_code"] == seen["missing"]["status"] == 404
    assert agent.stop() == 0
    exported = agent.traces.read_text()
    assert not any(secret in exported for secret in SECRETS)
    ttft = [p for p in read_histograms(agent.traces).get("gen_ai.server.time_to_first_token", [])
            if p.attrs.get("gen_ai.request.model") == calls["stream"]]
    assert sum(p.count for p in ttft) == 1
    assert ttft[0].resource["service.name"] == "gemini-sim"


def test_boto3_bedrock_runtime_gives_bedrock_spans(start_agent, tmp_path):
    with bedrock_server(log=tmp_path / "bedrock.log", env={"OTEL_SERVICE_NAME": "bedrock-sim"}
                        ) as server:
        agent = start_agent([server.port])
        calls = {"converse": f"anthropic.{unique('claude')}-v1:0",
                 "converse-stream": f"amazon.{unique('nova')}-v1:0",
                 "invoke": f"anthropic.{unique('claude-invoke')}",
                 "invoke-stream": f"anthropic.{unique('claude-invoke-stream')}",
                 "missing": unique("missing-bedrock")}
        seen = run_calls("bedrock", server.root_url, calls)
        # converse runs twice: the cache is written, then read
        spans = agent.wait_for(both_sides(list(calls.values()), {calls["converse"]: 2}))
    for side in (CLIENT, SERVER):
        written, read = sorted(spans_of(spans, calls["converse"], side), key=lambda s: s.start)
        for span in (written, read):
            a = span.attrs
            assert span.name == f"chat {calls['converse']}"
            assert a["gen_ai.provider.name"] == "bedrock_compatible"
            assert a["gen_ai.request.max_tokens"] == 64
            assert a["gen_ai.response.finish_reasons"] == ["tool_use"]
            assert a["gen_ai.usage.output_tokens"] == seen["converse"]["output"] == TOKENS
            assert a[NAMES] == seen["converse"]["tools"] == ["get_weather"]
        cached = seen["converse"]["cache_read"]
        assert cached > 0
        assert written.attrs["gen_ai.usage.cache_creation.input_tokens"] == cached
        assert "gen_ai.usage.cache_read.input_tokens" not in written.attrs
        assert read.attrs["gen_ai.usage.cache_read.input_tokens"] == cached
        # semconv: cached tokens inside the input count; Bedrock reports them apart
        assert read.attrs["gen_ai.usage.input_tokens"] == seen["converse"]["input"] + cached

        (span,) = spans_of(spans, calls["converse-stream"], side)
        a, sdk = span.attrs, seen["converse-stream"]
        assert a["gen_ai.request.stream"] is True
        assert a["gen_ai.usage.output_tokens"] == sdk["output"]
        assert a["gen_ai.usage.cache_read.input_tokens"] == sdk["cache_read"]
        assert a[NAMES] == sdk["tools"] == ["get_weather"]
        # six text deltas and the tool's input delta
        assert a["otel_ebpf.gen_ai.response.chunk_count"] == sdk["chunks"] + 1
        assert "otel_ebpf.gen_ai.response.chunks_lost" not in a
        assert_stream_timing(span)

        (span,) = spans_of(spans, calls["invoke"], side)
        assert span.attrs["gen_ai.usage.output_tokens"] == seen["invoke"]["output"]
        assert span.attrs["gen_ai.response.id"].startswith("msg_bdrk_")
        (span,) = spans_of(spans, calls["invoke-stream"], side)
        assert span.attrs["gen_ai.usage.output_tokens"] == TOKENS
        assert span.attrs["otel_ebpf.gen_ai.response.chunk_count"] == TOKENS
        assert "gen_ai.response.time_to_first_chunk" in span.attrs
        (span,) = spans_of(spans, calls["missing"], side)
        assert span.attrs["error.type"] == "404" == str(seen["missing"]["status"])
    assert agent.stop() == 0
    exported = agent.traces.read_text()
    assert not any(secret in exported for secret in SECRETS)
    histograms = read_histograms(agent.traces)
    for name in ("gen_ai.server.time_to_first_token", "gen_ai.server.time_per_output_token",
                 "gen_ai.client.operation.time_to_first_chunk"):
        assert any(p.attrs.get("gen_ai.request.model") == calls["converse-stream"]
                   for p in histograms.get(name, [])), name
