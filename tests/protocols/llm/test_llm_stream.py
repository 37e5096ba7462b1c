"""SSE and NDJSON bodies -> timed events: boundaries across pieces, gaps, odd line ends."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.llm.stream import StreamEvent, decode_ndjson, decode_sse

from .build import Lost, body

WIRE = b'data: {"a":1}\n\nevent: message_delta\ndata: {"b":2}\n\n: keep-alive\n\ndata: [DONE]\n\n'


def test_events_take_the_time_of_the_piece_with_their_last_byte():
    decoded = decode_sse(
        body(
            (b'data: {"a":', 100),
            (b"1}\n", 200),
            (b'\ndata: {"b":2}\n\ndata: x', 300),  # the blank line of the first event ends here
            (b"y\n\n", 400),
        )
    )
    assert decoded.events == [
        StreamEvent("", b'{"a":1}', 300),
        StreamEvent("", b'{"b":2}', 300),
        StreamEvent("", b"xy", 400),
    ]
    assert decoded.dropped == 0


def test_event_names_comments_and_done():
    decoded = decode_sse(body((WIRE, 7)))
    assert decoded.events == [
        StreamEvent("", b'{"a":1}', 7),
        StreamEvent("message_delta", b'{"b":2}', 7),
        StreamEvent("", b"[DONE]", 7),
    ]


def test_crlf_and_cr_line_ends_and_multiline_data():
    wire = b"event: e1\r\ndata: one\r\ndata: two\r\n\r\ndata:three\r\rdata: four\n\ndata: 5\r\r"
    decoded = decode_sse(body((wire, 5)))
    assert decoded.events == [
        StreamEvent("e1", b"one\ntwo", 5),
        StreamEvent("", b"three", 5),
        StreamEvent("", b"four", 5),
        StreamEvent("", b"5", 5),  # at the body's end: a lone CR there ends its line
    ]


def test_crlf_blank_line_split_between_pieces():
    decoded = decode_sse(body((b"data: a\r\n", 1), (b"\r", 2), (b"\ndata: b\r\n\r\n", 3)))
    assert [(e.data, e.ns) for e in decoded.events] == [(b"a", 3), (b"b", 3)]


def test_an_event_cut_by_a_gap_is_dropped_and_decoding_resumes():
    decoded = decode_sse(
        body(
            (b'data: {"n":1}\n\ndata: {"n":', 10),
            Lost(500),
            (b'9}\n\ndata: {"n":3}\n\n', 30),  # the tail of a cut event, then a whole one
            (b'data: {"n":4}\n\n', 40),
        )
    )
    assert [(e.data, e.ns) for e in decoded.events] == [
        (b'{"n":1}', 10),
        (b'{"n":3}', 30),
        (b'{"n":4}', 40),
    ]
    assert decoded.dropped == 1


def test_pieces_past_the_keep_limit_are_a_gap():
    stream = body((b"data: 1\n\n", 1), (b"data: 2\n\n", 2))
    stream.limit = stream.kept  # what Body.add does past its limit: time and place only
    stream.add(b"data: 3\n\n", 3)
    assert stream.pieces[-1].data == b""
    decoded = decode_sse(stream)
    assert [e.data for e in decoded.events] == [b"1", b"2"]
    assert decoded.dropped == 1


def test_last_event_without_blank_line_counts_when_the_body_ended():
    assert [e.data for e in decode_sse(body(b"data: 1\n\ndata: 2")).events] == [b"1", b"2"]
    cut = body(b"data: 1\n\ndata: 2", Lost(10))  # its end not seen: the rest may be missing
    assert [e.data for e in decode_sse(cut).events] == [b"1"]


def test_events_without_data_are_not_dispatched():
    assert decode_sse(body(b"event: ping\n\nid: 3\n\n: c\n\n")).events == []


def test_ndjson_lines_with_times():
    decoded = decode_ndjson(
        body(
            (b'{"a":1}\n{"b"', 100),
            (b":2}\n\n  \n", 200),
            (b'{"done":true}', 300),
        )
    )
    assert decoded.events == [
        StreamEvent("", b'{"a":1}', 100),
        StreamEvent("", b'{"b":2}', 200),
        StreamEvent("", b'{"done":true}', 300),
    ]


def test_ndjson_gap_drops_the_cut_line():
    decoded = decode_ndjson(body((b'{"a":1}\n{"b":', 1), Lost(40), (b'2}\n{"c":3}\n', 2)))
    assert [e.data for e in decoded.events] == [b'{"a":1}', b'{"c":3}']
    assert decoded.dropped == 1


@settings(max_examples=200, deadline=None)
@given(cuts=st.lists(st.integers(1, len(WIRE) - 1), max_size=12, unique=True))
def test_any_split_gives_the_same_events(cuts):
    bounds = [0, *sorted(cuts), len(WIRE)]
    pieces = [(WIRE[a:b], i) for i, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False))]
    decoded = decode_sse(body(*pieces))
    assert [(e.name, e.data) for e in decoded.events] == [
        ("", b'{"a":1}'),
        ("message_delta", b'{"b":2}'),
        ("", b"[DONE]"),
    ]
    # each event is timed by the piece that holds the last byte of its blank line
    ends = [WIRE.index(b"\n\n", WIRE.index(d)) + 2 for d in (b'{"a"', b'{"b"', b"[DONE]")]
    assert [e.ns for e in decoded.events] == [
        next(i for i, (a, b) in enumerate(zip(bounds, bounds[1:], strict=False)) if a < end <= b)
        for end in ends
    ]


@settings(max_examples=300, deadline=None)
@given(
    pieces=st.lists(st.one_of(st.binary(max_size=64), st.integers(1, 50).map(Lost)), max_size=10)
)
def test_garbage_never_raises(pieces):
    stream = body(*[p for p in pieces if not isinstance(p, bytes) or p])
    for decode in (decode_sse, decode_ndjson):
        decoded = decode(stream)
        assert all(isinstance(e, StreamEvent) for e in decoded.events)


_SSE_PIECE = st.one_of(
    st.sampled_from([b"data: {}\n\n", b"data: a\n\n", b"data:b\n\n", b"event: e\ndata: c\n\n",
                     b": ping\n\n", b"data: x\ndata: y\n\n", b"\n\n", b"x", b"\n", b"data: z\r\n\r\n",
                     b"data: q\n\n\n", b"data: 1\n\ndata: 2\n\n", b"\n\n\n\n", b"data: r\n",
                     b"data: 3\n\n\ndata: 4\n\n", b""]),
    st.binary(max_size=12), st.integers(1, 9).map(Lost))


@settings(max_examples=400, deadline=None)
@given(pieces=st.lists(_SSE_PIECE, max_size=8))
def test_a_piece_per_event_reads_as_the_search_does(pieces):
    """decode_sse reads the pieces that end where events end without searching them:
    what it finds must be what the search finds, whatever the pieces are."""
    from otel_ebpf.protocols.llm import stream

    made = body(*[p for p in pieces if not isinstance(p, bytes) or p])
    searched = stream.Decoded([], 0)
    for block in stream._blocks(made, stream._SSE_END):
        if block is None:
            searched.dropped += 1
        elif (event := stream._sse_event(*block)) is not None:
            searched.events.append(event)
    assert decode_sse(made) == searched
