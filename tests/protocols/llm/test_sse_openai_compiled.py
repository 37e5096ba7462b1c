"""The compiled OpenAI chunk reader (protocols/llm/_stream.c `openai_events`, reached through
events.read_sse) against the Python reference, `read_events(decode_sse(body))` with the
Python SSE splitter: the same ResponseInfo, field for field, from the recorded chat stream
(whole, a piece per chunk, gaps, random cuts) and from chunks whose JSON crosses every line
the C reader draws (escapes, UTF-8, numbers, duplicate keys, nesting, errors, usage, tool
calls, several choices), whole, cut and altered."""

from __future__ import annotations

import gzip
import json
import random

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.layers import Body, BodyPiece
from otel_ebpf.protocols.llm import events, stream
from otel_ebpf.protocols.llm.endpoints import Endpoints
from otel_ebpf.protocols.llm.response import ResponseInfo

from .test_sse_compiled import RECORDING, body_of

pytestmark = pytest.mark.skipif(stream.compiled is None, reason="built without the C extensions "
                                "(or OTEL_EBPF_PURE_PYTHON=1): only the reference runs")
CHAT = Endpoints(()).route("POST", "/v1/chat/completions")
COMPLETIONS = Endpoints(()).route("POST", "/v1/completions")


def _reference(body: Body, route, info: ResponseInfo) -> None:
    with pytest.MonkeyPatch.context() as m:
        m.setattr(stream, "compiled", None)  # the Python splitter too
        events.read_events(stream.decode_sse(body), route, info)


def fields(info: ResponseInfo) -> dict:
    out = {name: getattr(info, name) for name in ResponseInfo.__slots__}
    out["finish_reasons"] = list(info.finish_reasons.items())  # in the same order
    out["types"] = [type(getattr(info, name)) for name in ResponseInfo.__slots__]
    return out


def same(body: Body, route=CHAT, start=ResponseInfo) -> ResponseInfo:
    want, got = start(), start()
    _reference(body, route, want)
    events.read_sse(body, route, got)
    assert fields(got) == fields(want)
    return got


def test_the_agent_uses_it(monkeypatch) -> None:
    body, info = body_of([b'data: {"choices": []}\n\n']), ResponseInfo()
    calls = []
    monkeypatch.setattr(stream, "compiled", _Spy(stream.compiled, calls))
    events.read_sse(body, CHAT, info)
    assert calls == ["openai_events"]


class _Spy:
    """The compiled module, with the names of the functions called on it recorded."""

    def __init__(self, module, calls: list) -> None:
        self.module, self.calls = module, calls

    def __getattr__(self, name: str):  # noqa: ANN204
        self.calls.append(name)
        return getattr(self.module, name)


def recorded_streams() -> list[list[bytes]]:
    """Each recorded answer's body, a piece per HTTP chunk (as the server wrote them)."""
    doc = json.loads(gzip.decompress(RECORDING.read_bytes()))
    raw = b"".join(d.encode("latin-1") for c, d in doc["chunks"] if not c)
    streams, at = [], 0
    while (head := raw.find(b"HTTP/1.1 ", at)) >= 0:
        at, pieces = raw.index(b"\r\n\r\n", head) + 4, []
        while (size := int(raw[at:raw.index(b"\r\n", at)], 16)):
            at = raw.index(b"\r\n", at) + 2
            pieces.append(raw[at:at + size])
            at += size + 2
        at = raw.index(b"\r\n", at) + 4
        streams.append(pieces)
    return streams


def test_recorded_streams() -> None:
    streams = recorded_streams()
    assert len(streams) == 20 and all(len(s) == 35 for s in streams)
    rng = random.Random(7)
    for pieces in streams:
        info = same(body_of(pieces))
        assert info.finish_reasons == {0: "stop"} and len(info.content_ns) == 32
        same(body_of([b"".join(pieces)]))
        for gap in (0, 1, 17, 34):
            same(body_of(pieces, gap))
        data = b"".join(pieces)
        at = sorted(rng.sample(range(1, len(data)), 12))
        same(body_of([data[a:b] for a, b in zip([0, *at], [*at, len(data)])]))


def test_what_the_info_already_holds() -> None:
    """A ResponseInfo read by the compiled reader from where the Python one left it."""
    pieces = recorded_streams()[0]

    def full() -> ResponseInfo:  # one content time short of the limit
        return ResponseInfo(content_ns=[0] * (events.MAX_CONTENT_TIMES - 1))

    def named() -> ResponseInfo:
        return ResponseInfo(id="x", system_fingerprint="", service_tier="t",
                            reasoning_streamed=True, finish_reasons={3: "length"})

    for start in (full, named):
        same(body_of(pieces), start=start)


def test_content_capture_and_other_dialects_take_the_reference() -> None:
    pieces = recorded_streams()[0]
    info = ResponseInfo(capture=True)
    events.read_sse(body_of(pieces), CHAT, info)
    assert info.choices[0].text  # kept: only the Python reader keeps content
    same(body_of(pieces), route=Endpoints(()).route("POST", "/v1/responses"))
    same(body_of(pieces), route=Endpoints(()).route("POST", "/v1/messages"))


def test_a_byte_that_needs_a_look_at_every_place_in_a_string() -> None:
    """The strings are scanned eight bytes at a time: each byte the scan must stop at
    (quote, backslash escapes, control bytes, UTF-8 leads good and bad), at every place
    of a word and across two."""
    specials = [b'\\"', b"\\n", b"\\u00e9", b"\x00", b"\x1f", b"\x7f", b"\x80", b"\xc3\xa9",
                b"\xc3", b"\xe2\x82\xac", b"\xf0\x9f\x98\x80", b"\xff", b'"']
    for special in specials:
        for at in range(18):
            words = b"w" * at + special + b"x" * (17 - at)
            for key in (b"content", b"id"):
                chunk = (b'{"%s":"%s","choices":[{"index":0,"delta":{"content":"%s"}}]}'
                         % (key, words, words))
                same(body_of([b"data: " + chunk + b"\n\n"]))


# chunks whose JSON crosses the C reader's lines ------------------------------------------

ws = st.sampled_from([b"", b"", b" ", b"\t", b"\r\n ", b"\n"])
text = st.sampled_from([
    b'""', b'"x"', b'"chatcmpl-1"', b'"stop"', b'"a\\"b"', b'"\\u00e9"', b'"\\n"', b'"\\/"',
    b'"\\ud83d\\ude00"', b'"\\ud800"', b'"\\uDC00x"', b'"\\x"', b'"\\u12g4"', '"é😀"'.encode(),
    b'"\xc3"', b'"\xed\xa0\x80"', b'"\xf4\x90\x80\x80"', b'"\xc0\x80"', b'"\xe0\x9f\xbf"',
    b'"\x01"', b'"\x7f"', b'"tab\there"', b'"unterminated', b'"\\u0000"',
])
number = st.sampled_from([
    b"0", b"-0", b"1", b"-1", b"7", b"123456789012345678", b"1234567890123456789",
    b"123456789012345678901234", b"01", b"1.5", b"-0.0", b"1e3", b"2E-2", b"-", b"1.", b"+1",
])
literal = st.sampled_from([b"true", b"false", b"null", b"nul", b"True", b"nullx"])
scalar = st.one_of(text, number, literal)


def obj(members: list[tuple[bytes, bytes]], space: bytes) -> bytes:
    return b"{" + space + (b"," + space).join(k + space + b":" + space + v
                                              for k, v in members) + space + b"}"


def arr(items: list[bytes], space: bytes) -> bytes:
    return b"[" + space + (b"," + space).join(items) + space + b"]"


value = st.recursive(scalar, lambda inner: st.one_of(
    st.builds(arr, st.lists(inner, max_size=3), ws),
    st.builds(obj, st.lists(st.tuples(st.sampled_from([b'"a"', b'"b"', b'"\\u0061"']), inner),
                            max_size=3), ws)), max_leaves=6)


def key(*names: str) -> st.SearchStrategy[bytes]:
    """One of the names, now and then escaped or another key."""
    quoted = [f'"{n}"'.encode() for n in names]
    escaped = [f'"\\u{ord(n[0]):04x}{n[1:]}"'.encode() for n in names]
    return st.one_of(st.sampled_from(quoted), st.sampled_from(escaped + [b'"other"', b'"\xc3\xa9"']))


delta = st.builds(obj, st.lists(st.tuples(
    key("content", "reasoning_content", "reasoning", "refusal", "tool_calls", "role"),
    st.one_of(value, st.just(b'[{"index":0,"function":{"name":"f"}}]'), st.just(b"[]"))),
    max_size=4), ws)
choice = st.one_of(
    st.builds(obj, st.lists(st.tuples(
        key("index", "delta", "finish_reason", "text", "logprobs"),
        st.one_of(value, delta, delta)), max_size=5), ws),
    scalar, st.just(b"[]"))
chunk = st.builds(obj, st.lists(st.tuples(
    key("id", "model", "error", "usage", "system_fingerprint", "service_tier", "choices",
        "object", "created"),
    st.one_of(value, st.builds(arr, st.lists(choice, max_size=4), ws),
              st.builds(arr, st.lists(choice, max_size=2), ws),
              st.just(b'{"prompt_tokens":3,"completion_tokens":5}'), st.just(b"{}"))),
    max_size=8), ws)
plain = st.builds(lambda id_, model, fp, words, finish: obj([
    (b'"id"', id_), (b'"model"', model), (b'"system_fingerprint"', fp),
    (b'"choices"', arr([obj([(b'"index"', b"0"), (b'"delta"', obj([(b'"content"', words)], b"")),
                             (b'"finish_reason"', finish)], b"")], b""))], b""),
    text, text, st.sampled_from([b"null", b'"fp"', b'""']), text, st.sampled_from([b"null", b'"stop"']))


def altered(data: bytes, how: int, at: int) -> bytes:
    """Cut, a byte gone, a bracket more, trailing garbage, a BOM, a bit flipped, spaces
    around; and, as often, as it was."""
    if not data or not 1 <= how <= 7:
        return data
    at %= len(data)
    return [data[:at], data[:at] + data[at + 1:], data[:at] + b"}" + data[at:],
            data + b" x", b"\xef\xbb\xbf" + data, data[:at] + bytes([data[at] ^ 0x20]) + data[at + 1:],
            b" " + data + b"\n "][how - 1]


doc = st.builds(altered, st.one_of(chunk, chunk, plain), st.integers(0, 14), st.integers(0, 1 << 16))
event = st.one_of(doc.map(lambda d: b"data: " + d), doc.map(lambda d: b"data:" + d),
                  st.sampled_from([b"data: [DONE]", b": ping", b"event: x\ndata: {}"]),
                  doc.map(lambda d: b"event: chunk\ndata: " + d))


@settings(max_examples=2500, deadline=None)
@given(st.lists(event, min_size=1, max_size=6), st.lists(st.integers(0, 2000), max_size=3),
       st.one_of(st.none(), st.integers(0, 6)), st.booleans())
def test_random_chunks(events_, cuts, gap_at, completions) -> None:
    route = COMPLETIONS if completions else CHAT
    whole = [e + b"\n\n" for e in events_]  # a piece per event, as a server writes them
    same(body_of(whole, gap_at), route)
    data = b"".join(whole)
    at = sorted({c % (len(data) + 1) for c in cuts} | {0, len(data)})
    same(body_of([data[a:b] for a, b in zip(at, at[1:])] or [b""], gap_at), route)


@settings(max_examples=1500, deadline=None)
@given(doc)
def test_one_chunk_read_or_left_as_it_was(data) -> None:
    """A chunk the C reader does not read reaches the Python one with the info untouched:
    both paths end equal from every starting state."""
    for start in (ResponseInfo, lambda: ResponseInfo(id="i", model="m", system_fingerprint="f",
                                                      service_tier="s", reasoning_streamed=True)):
        same(body_of([b"data: " + data + b"\n\n"]), start=start)
