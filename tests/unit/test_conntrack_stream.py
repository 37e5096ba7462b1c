"""Positioned stream buffers: contiguity, holes (lost and uncaptured bytes), skip by
length, and time/sequence look-ups by position."""

from otel_ebpf.conntrack.stream import Chunk, Stream


def chunk(pos: int, data: bytes, msg_len: int | None = None, t: int = 0, seq: int | None = None
          ) -> Chunk:
    return Chunk(pos, pos + (len(data) if msg_len is None else msg_len), data, t, t + 1, seq)


def test_contiguous_chunks_join():
    s = Stream()
    s.add(chunk(0, b"abc"))
    s.add(chunk(3, b"def"))
    assert bytes(s.buf) == b"abcdef" and not s.hole_ahead()


def test_first_chunk_sets_the_start():
    s = Stream()
    s.add(chunk(1000, b"xyz"))
    assert s.head == 1000 and bytes(s.buf) == b"xyz"


def test_lost_bytes_are_a_hole_never_glued():
    s = Stream()
    s.add(chunk(0, b"abc"))
    s.add(chunk(10, b"klm"))
    assert bytes(s.buf) == b"abc" and s.hole_ahead()
    s.consume(3)
    assert s.jump_hole() == 7
    assert s.head == 10 and bytes(s.buf) == b"klm"


def test_truncated_message_leaves_a_hole_of_known_size():
    s = Stream()
    s.add(chunk(0, b"head", msg_len=100))
    s.add(chunk(100, b"next"))
    assert bytes(s.buf) == b"head" and s.hole_ahead()
    s.consume(4)
    assert s.jump_hole() == 96
    assert bytes(s.buf) == b"next"


def test_skip_past_uncaptured_bytes_needs_no_resync():
    s = Stream()
    s.add(chunk(0, b"HDR|body-start", msg_len=1000))
    s.consume(1000)  # the parser knows the body length: skip it whole
    assert s.head == 1000 and not s.buf and not s.hole_ahead()
    s.add(chunk(1000, b"NEXT"))
    assert bytes(s.buf) == b"NEXT"


def test_skip_ahead_of_data_not_yet_received():
    s = Stream()
    s.add(chunk(0, b"HDR"))
    s.consume(3 + 5000)
    s.add(chunk(3, b"x" * 4000))  # wholly inside the skipped body
    assert not s.buf
    s.add(chunk(4003, b"y" * 1000 + b"NEXT"))  # body ends inside this chunk
    assert bytes(s.buf) == b"NEXT"


def test_time_and_sequence_by_position():
    s = Stream()
    s.add(chunk(0, b"abcd", t=100, seq=4_294_967_294))
    s.add(chunk(4, b"efgh", t=200, seq=2))
    assert s.time_of_first(2) == (100, 0, 0, 0)  # sequence numbers wrap at 2**32
    assert s.time_of_first(5) == (200, 3, 0, 0)
    assert s.time_of_last(4) == 101 and s.time_of_last(8) == 201
    assert s.time_of_last(9) is None  # not arrived yet
    s.prune(4)
    assert s.time_of_first(5) == (200, 3, 0, 0)
