"""Request bodies -> model and settings: whole bodies, bodies with a gap, garbage."""

from __future__ import annotations

import orjson
from hypothesis import given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.layers import Body
from otel_ebpf.protocols.llm.endpoints import Route
from otel_ebpf.protocols.llm.request import RequestInfo, read_request

from .build import body, gapped, json_values

CHAT = Route("chat", "openai")
MESSAGES = Route("chat", "anthropic")
OLLAMA_CHAT = Route("chat", "ollama")
RESPONSES = Route("chat", "openai", responses_api=True)
EMBED = Route("embeddings", "openai")


def whole(doc) -> Body:
    return body(orjson.dumps(doc))


def test_openai_chat_request():
    info = read_request(
        whole(
            {
                "messages": [{"role": "user", "content": "hi"}],
                "model": "gpt-4o",
                "stream": True,
                "stream_options": {"include_usage": True},
                "max_completion_tokens": 256,
                "max_tokens": 99,
                "temperature": 0,
                "top_p": 0.9,
                "n": 3,
            }
        ),
        CHAT,
    )
    assert (info.model, info.stream, info.include_usage) == ("gpt-4o", True, True)
    assert (info.max_tokens, info.temperature, info.top_p, info.choice_count) == (256, 0.0, 0.9, 3)
    assert isinstance(info.temperature, float)
    assert info.document is not None and info.document["model"] == "gpt-4o"


def test_anthropic_and_responses_max_tokens_keys():
    assert (
        read_request(whole({"model": "claude-x", "max_tokens": 1024}), MESSAGES).max_tokens == 1024
    )
    info = read_request(
        whole({"model": "gpt-5", "input": "hi", "max_output_tokens": 50}), RESPONSES
    )
    assert (info.model, info.max_tokens) == ("gpt-5", 50)


def test_ollama_settings_are_in_options():
    info = read_request(
        whole(
            {
                "model": "llama3.2",
                "messages": [],
                "options": {"temperature": 0.7, "top_p": 0.5, "num_predict": 128},
            }
        ),
        OLLAMA_CHAT,
    )
    assert (info.model, info.temperature, info.top_p, info.max_tokens) == (
        "llama3.2",
        0.7,
        0.5,
        128,
    )
    assert info.stream is None  # Ollama streams unless told not to; the body did not say


def test_embeddings_request():
    info = read_request(
        whole(
            {
                "input": ["a", "b"],
                "model": "text-embedding-3-small",
                "encoding_format": "base64",
                "dimensions": 512,
            }
        ),
        EMBED,
    )
    assert (info.model, info.encoding_formats, info.dimensions) == (
        "text-embedding-3-small",
        ["base64"],
        512,
    )


def test_wrong_types_are_ignored():
    info = read_request(
        whole(
            {
                "model": 5,
                "stream": "yes",
                "max_tokens": "10",
                "temperature": True,
                "n": 2.5,
                "stream_options": [],
                "top_p": None,
            }
        ),
        CHAT,
    )
    assert info == RequestInfo(document=info.document)


def test_big_prompt_with_a_gap_keeps_the_model_from_the_tail():
    """The openai client writes messages first: a 200 KiB prompt leaves model and settings
    in the last bytes; the first 32 KiB and the last 4 KiB are all the kernel kept."""
    prompt = ('say "model": "decoy" and \\"stream\\": false ' + "lorem ipsum " * 20_000)[:200_000]
    data = orjson.dumps(
        {
            "messages": [
                {"role": "system", "content": "be brief"},
                {"role": "user", "content": prompt},
            ],
            "model": "meta-llama/Llama-3.1-8B-Instruct",
            "stream": True,
            "max_tokens": 300,
            "temperature": 0.25,
            "top_p": 1,
            "n": 1,
            "stream_options": {"include_usage": True},
        }
    )
    assert len(data) > 200_000
    request = gapped(data, head=32 * 1024, tail=4 * 1024)
    assert not request.complete
    info = read_request(request, CHAT)
    assert info.model == "meta-llama/Llama-3.1-8B-Instruct"
    assert (info.stream, info.max_tokens, info.temperature, info.top_p) == (True, 300, 0.25, 1.0)
    assert (info.choice_count, info.include_usage, info.document) == (1, True, None)


def test_model_first_client_with_a_gap_keeps_the_model_from_the_head():
    data = orjson.dumps(
        {
            "model": "qwen2.5:7b",
            "stream": False,
            "messages": [{"role": "user", "content": "x" * 100_000}],
        }
    )
    info = read_request(gapped(data, head=8192, tail=64), OLLAMA_CHAT)
    assert (info.model, info.stream) == ("qwen2.5:7b", False)


def test_escaped_keys_inside_the_prompt_never_match():
    data = orjson.dumps(
        {"messages": [{"role": "user", "content": '{"model": "fake"}' + "y" * 50_000}]}
    )
    info = read_request(gapped(data, head=4096, tail=100), CHAT)
    assert info.model is None


def test_no_body_or_empty_body():
    assert read_request(None, CHAT) == RequestInfo()
    assert read_request(Body(), CHAT) == RequestInfo()


@settings(max_examples=300, deadline=None)
@given(
    data=st.binary(max_size=2048),
    cut=st.integers(0, 2048),
    route=st.sampled_from([CHAT, MESSAGES, OLLAMA_CHAT, RESPONSES, EMBED]),
)
def test_garbage_never_raises(data, cut, route):
    info = read_request(body(data), route)
    assert isinstance(info, RequestInfo)
    if len(data) > 2:
        cut = min(cut, len(data) - 1)
        assert isinstance(read_request(gapped(data, head=max(cut, 1), tail=1), route), RequestInfo)


KEYS = [
    "model",
    "stream",
    "max_tokens",
    "max_completion_tokens",
    "max_output_tokens",
    "options",
    "temperature",
    "top_p",
    "n",
    "stream_options",
    "encoding_format",
    "dimensions",
    "messages",
]


@settings(max_examples=300, deadline=None)
@given(
    doc=st.dictionaries(st.sampled_from(KEYS), json_values, max_size=8),
    route=st.sampled_from([CHAT, MESSAGES, OLLAMA_CHAT, RESPONSES, EMBED]),
)
def test_hostile_json_shapes_never_raise(doc, route):
    data = orjson.dumps(doc)
    assert isinstance(read_request(body(data), route), RequestInfo)
    if len(data) > 4:
        assert isinstance(
            read_request(gapped(data, head=len(data) // 2, tail=2), route), RequestInfo
        )
