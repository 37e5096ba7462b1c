"""HPACK decoding against a table with an unseen past: what it resolves is what was sent,
what it cannot resolve is unknown, never another entry."""

from __future__ import annotations

import hpack
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.http2.headers import Field, HeaderDecoder, Malformed

FIELDS = [
    (":method", "POST"), (":method", "GET"), (":path", "/a.B/C"), (":path", "/a.B/D"),
    (":path", "/x?y=1"), (":authority", "svc:50051"), (":status", "200"), (":status", "404"),
    ("content-type", "application/grpc"), ("te", "trailers"), ("grpc-status", "0"),
    ("grpc-status", "5"), ("x-request-id", "r1"), ("x-request-id", "r2"), ("x-big", "v" * 700),
    ("user-agent", "grpc-python/1.0"), ("grpc-message", "oops"),
]


def decode_all(blocks: list[bytes]) -> list[list[tuple[str, str]]]:
    reference = hpack.Decoder()
    return [[(n, v) for n, v in reference.decode(b)] for b in blocks]


def test_same_fields_as_hpack_when_the_whole_connection_is_seen():
    enc = hpack.Encoder()
    header_lists = [[FIELDS[i] for i in (0, 2, 5, 8, 9)], [FIELDS[i] for i in (0, 3, 5, 8, 9)],
                    [FIELDS[6], FIELDS[8]], [FIELDS[10]], [FIELDS[1], FIELDS[4], FIELDS[14]]]
    blocks = [enc.encode(h) for h in header_lists]
    ours = HeaderDecoder()
    for block, expected in zip(blocks, decode_all(blocks), strict=True):
        assert ours.decode(block) == [Field(n, v) for n, v in expected]
    assert ours.unknown_fields == 0


def test_an_index_into_the_unseen_past_is_unknown_and_later_insertions_stay_aligned():
    enc = hpack.Encoder()
    before = enc.encode([FIELDS[0], FIELDS[2], FIELDS[8]])  # never seen by our decoder
    block = enc.encode([FIELDS[0], FIELDS[2], FIELDS[12], FIELDS[8]])  # refers to `before`
    after = enc.encode([FIELDS[12], FIELDS[2]])  # refers to both
    ours = HeaderDecoder()
    assert ours.decode(block) == [Field(":method", "POST"), Field(None, None),
                                  Field("x-request-id", "r1"), Field(None, None)]
    # x-request-id was inserted after the unseen entries: its index resolves, /a.B/C's not
    assert ours.decode(after) == [Field("x-request-id", "r1"), Field(None, None)]
    assert ours.unknown_fields == 3
    del before


@settings(max_examples=200, deadline=None)
@given(lists=st.lists(st.lists(st.sampled_from(FIELDS), min_size=1, max_size=6).map(
           lambda fs: sorted(fs, key=lambda f: not f[0].startswith(":"))),  # pseudo first
       min_size=1, max_size=12),
       start=st.integers(0, 11), forget_at=st.integers(0, 12), table=st.sampled_from([0, 256, 4096]))
def test_never_a_wrong_field(lists, start, forget_at, table):
    """Whatever the encoder's past we missed (and whatever bytes we lost later), every field
    we resolve is the field that was sent."""
    enc = hpack.Encoder()
    enc.header_table_size = table
    blocks = [enc.encode(h) for h in lists]
    truth = decode_all(blocks)
    ours = HeaderDecoder()
    for i in range(min(start, len(blocks)), len(blocks)):
        if i == forget_at:
            ours.forget()  # bytes lost just before this block
        got = ours.decode(blocks[i])
        assert len(got) == len(truth[i])
        for field, (name, value) in zip(got, truth[i], strict=True):
            if field.name is not None:
                assert field.name == name
            if field.value is not None:
                secret = name in ("authorization", "cookie") or "key" in name
                assert field.value == ("" if secret else value)


def test_secret_values_never_reach_fields_or_the_table():
    enc = hpack.Encoder()
    blocks = [enc.encode([("authorization", "Bearer sk-1"), ("x-api-key", "k-1")]),
              enc.encode([("authorization", "Bearer sk-1")])]  # now an index into the table
    ours = HeaderDecoder()
    assert ours.decode(blocks[0]) == [Field("authorization", ""), Field("x-api-key", "")]
    assert ours.decode(blocks[1]) == [Field("authorization", "")]
    assert all("sk-1" not in v and "k-1" not in v for _, v, _ in ours.entries)


def test_table_size_updates_evict_like_the_encoder():
    enc = hpack.Encoder()
    ours = HeaderDecoder()
    ours.decode(enc.encode([("x-a", "1"), ("x-b", "2")]))
    enc.header_table_size = 40  # room for one small entry: the update opens the next block
    block = enc.encode([("x-c", "3"), ("x-c", "3")])
    assert ours.decode(block) == [Field("x-c", "3"), Field("x-c", "3")]
    assert ours.max_size == 40 and [e[:2] for e in ours.entries] == [("x-c", "3")]


def test_huffman_and_never_indexed_literals():
    enc = hpack.Encoder()
    block = enc.encode([("x-token-ish", "value"), hpack.NeverIndexedHeaderTuple("x-n", "v")],
                       huffman=True)
    assert HeaderDecoder().decode(block) == [Field("x-token-ish", ""), Field("x-n", "v")]


@pytest.mark.parametrize("block", [
    b"\x80",  # index 0
    b"\x40\x85ab",  # a string longer than the block
    b"\x00\x03A-B\x01v",  # an upper-case name
    b"\x00\x01x\x03a\nb",  # a line feed in a value
    b"\x00\x01x\x01v\x84",  # :path after a regular field
    b"\x88\x3f\xe1\x1f",  # a size update after a field
    b"\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff\xff",  # an integer that never ends
    b"\xff\xff\x7f",  # an index past any table
])
def test_malformed_blocks_raise_and_forget_the_table(block):
    ours = HeaderDecoder()
    ours.decode(hpack.Encoder().encode([("x-a", "1")]))
    with pytest.raises(Malformed):
        ours.decode(block)
    assert not ours.entries and ours.errors == 1
