"""Which requests the LLM layer takes, and what it asks the kernel to capture more of."""

from __future__ import annotations

import pytest
from otel_ebpf.protocols.layers import first_wanting
from otel_ebpf.protocols.llm import LLMLayer
from otel_ebpf.protocols.llm.endpoints import BUILTIN_CAPTURE, Endpoints, Route
from otel_ebpf.protocols.vectordb import VectorDBLayer

BUILTIN = {
    "/v1/chat/completions": Route("chat", "openai"),
    "/v1/completions": Route("text_completion", "openai"),
    "/v1/embeddings": Route("embeddings", "openai"),
    "/v1/responses": Route("chat", "openai", responses_api=True),
    "/v1/messages": Route("chat", "anthropic"),
    "/api/chat": Route("chat", "ollama"),
    "/api/generate": Route("text_completion", "ollama"),
    "/api/embed": Route("embeddings", "ollama"),
    "/api/embeddings": Route("embeddings", "ollama"),
}


@pytest.mark.parametrize("path", sorted(BUILTIN))
def test_builtin_paths(path):
    endpoints = Endpoints()
    assert endpoints.route("POST", path) == BUILTIN[path]
    assert endpoints.route("POST", path + "?api-version=2024-10-21&x=1") == BUILTIN[path]
    assert LLMLayer().wants("POST", path) is True


@pytest.mark.parametrize(
    ("method", "target"),
    [
        ("GET", "/v1/chat/completions"),
        ("PUT", "/api/chat"),
        ("POST", "/v1/models"),
        ("POST", "/v1/files"),
        ("GET", "/api/tags"),
        ("POST", "/v1/chat/completions/extra"),
        ("POST", "/v2/chat/completions"),
        ("POST", "/chat/completions"),  # only with an extra path (LiteLLM style)
        ("POST", "/api/v1/collections/abc/query"),  # Chroma
        ("POST", "/v1/graphql"),  # Weaviate
        ("POST", ""),
        ("POST", "*"),
    ],
)
def test_other_requests_are_not_llm(method, target):
    assert LLMLayer().wants(method, target) is False


def test_absolute_form_target_of_a_proxy():
    assert LLMLayer().wants("POST", "http://api.openai.com/v1/chat/completions") is True
    assert LLMLayer().wants("POST", "http://api.openai.com/v1/models") is False


def test_extra_prefix_matches_known_suffixes_under_it():
    layer = LLMLayer({"extra_paths": ["/openai/deployments"]})
    route = layer.endpoints.route
    assert route("POST", "/openai/deployments/gpt4o/chat/completions?api-version=1") == Route(
        "chat", "openai"
    )
    assert route("POST", "/openai/deployments/gpt4o/embeddings") == Route("embeddings", "openai")
    assert route("POST", "/openai/deployments/gpt4o/completions") == Route(
        "text_completion", "openai"
    )
    assert route("POST", "/openai/deploymentsX/gpt4o/chat/completions") is None  # not under it
    assert route("POST", "/openai/deployments/gpt4o/models") is None


def test_extra_prefix_with_an_api_only_takes_that_dialect():
    layer = LLMLayer({"extra_paths": [{"prefix": "/anthropic", "api": "anthropic"}]})
    assert layer.endpoints.route("POST", "/anthropic/v1/messages") == Route("chat", "anthropic")
    assert layer.endpoints.route("POST", "/anthropic/v1/chat/completions") is None


def test_root_prefix_takes_gateway_paths_without_v1():
    layer = LLMLayer({"extra_paths": [{"prefix": "/", "api": "openai"}]})
    assert layer.endpoints.route("POST", "/chat/completions") == Route("chat", "openai")
    assert layer.endpoints.route("POST", "/embeddings") == Route("embeddings", "openai")
    assert layer.endpoints.route("POST", "/health") is None


@pytest.mark.parametrize(
    "options",
    [
        {"extra_paths": [42]},
        {"extra_paths": [{"api": "openai"}]},
        {"extra_paths": [{"prefix": "/x", "api": "gemini"}]},
        {"provider": ""},
        {"provider": 3},
        {"max_content_bytes": "big"},
        {"max_content_bytes": 0},
        {"body_limit": -1},
        {"body_limit": "1MB and more"},
    ],
)
def test_invalid_options_are_refused(options):
    with pytest.raises(ValueError, match="llm\\."):
        LLMLayer(options)


def test_capture_prefixes_default():
    prefixes = LLMLayer().capture_prefixes()
    # the built-in paths, and Gemini's (its paths name the model after "/models/")
    assert set(prefixes) == set(BUILTIN) | {"/v1beta/models/"}
    # the kernel keys a path by its first 8 bytes: each built-in path must be that long
    assert all(len(p.encode()) >= 8 for p in prefixes)
    assert "/v1/chat/completions" in prefixes and "/api/chat" in prefixes


def test_capture_prefixes_add_configured_ones_bounded():
    extra = ["/openai/deployments", {"prefix": "/gw/openai", "api": "openai"}]
    extra += [f"/p{i}" for i in range(30)] + ["/" + "x" * 60]
    prefixes = LLMLayer({"extra_paths": extra}).capture_prefixes()
    assert prefixes[: len(BUILTIN_CAPTURE)] == BUILTIN_CAPTURE
    assert prefixes[len(BUILTIN_CAPTURE) : len(BUILTIN_CAPTURE) + 2] == (
        "/openai/deployments", "/gw/openai")
    assert len(prefixes) == 16
    assert all(len(p.encode()) <= 31 for p in prefixes)


def test_long_prefix_is_cut_to_the_kernel_slot():
    prefixes = LLMLayer({"extra_paths": ["/" + "y" * 60]}).capture_prefixes()
    assert prefixes[-1] == "/" + "y" * 30


def test_llm_first_then_vectordb_split_the_paths():
    layers = (LLMLayer(), VectorDBLayer())
    assert first_wanting(layers, "POST", "/v1/chat/completions") is layers[0]
    assert first_wanting(layers, "POST", "/api/v1/collections/c1/query") is layers[1]
    assert first_wanting(layers, "POST", "/v1/graphql") is layers[1]
    assert first_wanting(layers, "POST", "/api/chat") is layers[0]
    assert first_wanting(layers, "GET", "/v1/models") is None


def test_body_limit_option():
    assert LLMLayer().body_limit == 1 << 20
    assert LLMLayer({"body_limit": 8 << 20}).body_limit == 8 << 20


def test_default_layers_fit_the_kernels_wide_keys():
    # every built-in prefix of every layer must get a kernel key, or its long prompts lose
    # their model and settings: the kernel table holds MAX_WIDE_KEYS 8-byte path heads
    from otel_ebpf.protocols.registry import Registry

    from otel_ebpf.kernel.abi import MAX_WIDE_KEYS

    prefixes = Registry.from_config(["http1", "http2", "llm", "vectordb"], {}).wide_prefixes()
    heads = {p.encode()[:8] for p in prefixes}
    assert len(heads) <= MAX_WIDE_KEYS, sorted(heads)
    assert b"/v1beta/" in heads
