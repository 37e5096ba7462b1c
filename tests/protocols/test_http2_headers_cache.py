"""HPACK blocks decoded once are reused only while they mean the same: the same bytes and
the same dynamic table. Every answer must be what a fresh walk of the block gives."""

from __future__ import annotations

import hpack
from hypothesis import given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.http2.headers import HeaderDecoder

GRPC_CALL = [(":method", "POST"), (":scheme", "http"), (":path", "/test.Echo/Say"),
             (":authority", "127.0.0.1:5000"), ("te", "trailers"),
             ("content-type", "application/grpc"), ("user-agent", "grpc-python/1.76")]


def uncached(decoder: HeaderDecoder, block: bytes):
    decoder.decoded.clear()
    return decoder.decode(block)


def test_a_repeated_block_is_reused_and_still_right():
    enc = hpack.Encoder()
    first, again = enc.encode(GRPC_CALL), enc.encode(GRPC_CALL)
    assert len(again) < len(first)  # all indexed the second time
    decoder = HeaderDecoder()
    decoder.decode(first)
    a = decoder.decode(again)
    assert bytes(again) in decoder.decoded  # kept: it left the table as it was
    b = decoder.decode(again)
    assert a == b == [(n, v) for n, v in GRPC_CALL]


def test_the_same_bytes_after_an_insertion_mean_another_field():
    """Index 62 is the newest entry: after a new insertion the same byte names it."""
    enc = hpack.Encoder()
    decoder = HeaderDecoder()
    decoder.decode(enc.encode([("x-a", "1")]))
    block = bytes([0x80 | 62])
    assert decoder.decode(block) == [("x-a", "1")]
    decoder.decode(enc.encode([("x-b", "2")]))
    assert decoder.decode(block) == [("x-b", "2")]
    decoder.forget()
    assert decoder.decode(block) == [(None, None)]
    assert decoder.unknown_fields == 1


@settings(max_examples=200, deadline=None)
@given(st.lists(st.lists(st.tuples(st.sampled_from(["x-a", "x-b", "content-type", ":path"]),
                                   st.sampled_from(["1", "2", "/p", "application/grpc"])),
                         min_size=1, max_size=4), min_size=1, max_size=12),
       st.lists(st.integers(0, 11), max_size=6))
def test_cached_answers_are_a_fresh_walks(blocks, resizes):
    enc = hpack.Encoder()
    cached, fresh = HeaderDecoder(), HeaderDecoder()
    for i, headers in enumerate(blocks):
        if i in resizes:
            enc.header_table_size = 64 * (1 + i)
        # pseudo-header fields first, as HTTP/2 requires
        block = enc.encode(sorted(headers, key=lambda f: not f[0].startswith(":")))
        version = fresh.version
        assert cached.decode(block) == uncached(fresh, block)
        if fresh.version == version:  # it changed nothing: the peer may send it again
            assert cached.decode(block) == uncached(fresh, block)
        assert cached.version == fresh.version
    assert cached.unknown_fields == fresh.unknown_fields
