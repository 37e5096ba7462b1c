"""HTTP/1 verbs called directly: infer, parse, resync, finish and stitch on chosen bytes."""

from __future__ import annotations

import pytest
from otel_ebpf.protocols.base import UNTIL_CLOSE, Direction, ParseResult, Role
from otel_ebpf.protocols.http1 import HTTP1Parser, HTTPRequest, HTTPResponse
from otel_ebpf.protocols.http1.parse import MAX_HEAD

E, I = Direction.EGRESS, Direction.INGRESS  # noqa: E741 (egress, ingress)
FRAME, NEED, INVALID = ParseResult.FRAME, ParseResult.NEED_MORE, ParseResult.INVALID
parser = HTTP1Parser()


@pytest.fixture
def client(make_conn):
    return parser.new_state(make_conn(Role.CLIENT))


@pytest.mark.parametrize(
    ("direction", "head", "role"),
    [
        (E, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", Role.CLIENT),
        (I, b"GET / HTTP/1.1\r\nHost: x\r\n\r\n", Role.SERVER),
        (E, b"HTTP/1.1 200 OK\r\n", Role.SERVER),
        (I, b"HTTP/1.0 404 Not Found\r\nContent-Length: 0\r\n\r\n", Role.CLIENT),
        (E, b"POST /v1/chat/completions HTTP/1.1\r\nContent-Length: 10", Role.CLIENT),
        (E, b"OPTIONS * HTTP/1.1\r\n\r\n", Role.CLIENT),
        (E, b"CONNECT example.com:443 HTTP/1.1\r\n\r\n", Role.CLIENT),
        (E, b"GET http://example.com/x HTTP/1.0\r\n\r\n", Role.CLIENT),
        (E, b"DELETE /items/1 HTTP/1.1\r", Role.CLIENT),  # cut inside the CRLF
        (E, b"PATCH /very/long/path/cut-by-the-capt", Role.CLIENT),  # cut inside the target
        (E, b"PUT /x HTT", Role.CLIENT),  # cut inside the version
        (I, b"HTTP/1.1 20", Role.CLIENT),  # cut inside the status
        (E, b"GET / HTTP/2.0\r\n\r\n", None),
        (E, b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", None),  # HTTP/2 preface
        (E, b"GET /a b HTTP/1.1\r\n", None),  # space in the target
        (E, b"GET foo HTTP/1.1\r\n", None),  # not a target
        (E, b"GETX / HTTP/1.1\r\n", None),
        (E, b"get / HTTP/1.1\r\n", None),
        (E, b"GET ", None),  # too short to say
        (I, b"HTTP/1.1 999 Odd\r\n", None),
        (I, b"HTTP/2 200\r\n", None),
        (I, b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03", None),  # TLS ClientHello
        (E, b"", None),
        (E, b'{"jsonrpc": "2.0"}', None),
    ],
)
def test_infer(direction, head, role, make_conn):
    assert parser.infer(direction, head, make_conn(Role.UNKNOWN)) == role


def test_content_length_body_is_skipped_not_read(client):
    head = b"POST /up HTTP/1.1\r\nContent-Length: 1000000\r\n\r\n"
    result, frame, consumed = parser.parse(E, memoryview(head + b"x" * 100), client)
    assert (result, consumed) == (FRAME, len(head) + 1_000_000)
    assert isinstance(frame, HTTPRequest) and (frame.size, frame.body_size) == (consumed, 1_000_000)


def test_pipelined_requests_one_per_call(client):
    buf = b"GET /1 HTTP/1.1\r\n\r\nGET /2 HTTP/1.1\r\n\r\n"
    result, frame, consumed = parser.parse(E, memoryview(buf), client)
    assert (result, frame.target, consumed) == (FRAME, "/1", 19)
    result, frame, consumed = parser.parse(E, memoryview(buf[19:]), client)
    assert (result, frame.target, consumed) == (FRAME, "/2", 19)
    assert [s.index for s in client.sent] == [0, 1]


def test_incomplete_head_waits(client):
    assert parser.parse(E, memoryview(b"GET / HTTP/1.1\r\nHost: x\r\n"), client) == (NEED, None, 0)
    assert parser.parse(I, memoryview(b"HTTP/1.1 200 OK\r\nServer"), client) == (NEED, None, 0)
    assert parser.parse(E, memoryview(b"\r\n\r"), client) == (NEED, None, 0)  # empty lines first


@pytest.mark.parametrize(
    ("direction", "buf"),
    [
        (E, b"\x00\x01\x02"),
        (E, b"hello world"),
        (E, b"GET / HTTP/1.1 extra\r\n"),
        (E, b"GET / HTTP/1.1\r\nBad Header\r\n\r\n"),
        (E, b"GET / HTTP/1.1\r\nContent-Length: 5\r\nContent-Length: 6\r\n\r\n"),
        (E, b"POST / HTTP/1.1\r\nTransfer-Encoding: gzip\r\n\r\n"),  # a request body never ends at close
        (E, b"GET / HTTP/2.0\r\n\r\n"),
        (E, b"GET /" + b"a" * MAX_HEAD),
        (E, b"GET / HTTP/1.1\r\nX: " + b"a" * MAX_HEAD),
        (I, b"HTTP/1.1 2OO OK\r\n\r\n"),
        (I, b"HTTP/2.0 200 OK\r\n\r\n"),
        (I, b"SSH-2.0-OpenSSH_9.6\r\n"),
    ],
)
def test_invalid(direction, buf, client):
    assert parser.parse(direction, memoryview(buf), client) == (INVALID, None, 0)


def test_bad_chunk_size_is_invalid(client):
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    assert parser.parse(I, memoryview(head), client) == (NEED, None, len(head))
    assert parser.parse(I, memoryview(b"zz\r\n"), client) == (INVALID, None, 0)
    assert parser.resync(I, memoryview(b"zz\r\nHTTP/1.1 200 OK\r\n"), client) == 4
    assert client.streams[I].frame is None  # the partial answer was dropped


def test_chunk_data_skipped_beyond_the_buffer(client):
    head = b"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
    parser.parse(I, memoryview(head), client)
    assert parser.parse(I, memoryview(b"ffff;x=y\r\nabc"), client) == (NEED, None, 10 + 0xFFFF + 2)
    assert parser.parse(I, memoryview(b"0\r\n"), client) == (NEED, None, 3)
    assert parser.parse(I, memoryview(b"\r"), client) == (NEED, None, 0)
    result, frame, consumed = parser.parse(I, memoryview(b"\r\n"), client)
    assert (result, consumed, frame.chunks, frame.body_size) == (FRAME, 2, 1, 0xFFFF)
    assert frame.size == len(head) + 10 + 0xFFFF + 2 + 3 + 2


def test_tunnel_swallows_everything(client):
    parser.parse(E, memoryview(b"GET / HTTP/1.1\r\nUpgrade: h2c\r\nConnection: Upgrade\r\n\r\n"), client)
    result, frame, _ = parser.parse(I, memoryview(b"HTTP/1.1 101 Switching\r\nUpgrade: h2c\r\n\r\n"), client)
    assert result is FRAME and isinstance(frame, HTTPResponse) and frame.upgraded
    for direction in Direction:
        junk = memoryview(b"\x00\x00\x12\x04\x00\x00\x00\x00\x00GET / HTTP/1.1\r\n\r\n")
        assert parser.parse(direction, junk, client) == (NEED, None, UNTIL_CLOSE)
        assert parser.resync(direction, junk, client) == 0
        assert parser.finish(direction, client) is None


def test_response_to_unknown_request_assumes_get(client):
    result, frame, consumed = parser.parse(I, memoryview(b"HTTP/1.1 200 OK\r\nContent-Length: 3\r\n\r\nabc"), client)
    assert (result, frame.index, frame.body_size, consumed) == (FRAME, -1, 3, 41)


@pytest.mark.parametrize(
    ("direction", "buf", "offset"),
    [
        (E, b"tail of a body\r\nPOST /x HTTP/1.1\r\nHost: h\r\n\r\n", 16),
        (E, b"...GET /cut-by-the-end", 3),
        (E, b"FORGET IT\r\nPUT /p HTTP/1.1\r\n", 11),
        (E, b"no request here, only GET words", None),
        (E, b"HTTP/1.1 200 OK\r\n", None),  # a status line is no request
        (I, b"xxHTTP/1.1 404 Not Found\r\n", 2),
        (I, b"\x00\x01HTTP/1.0 200", 2),
        (I, b"see HTTP/1.1 for details\r\n", None),
        (I, b"", None),
    ],
)
def test_resync(direction, buf, offset, client):
    assert parser.resync(direction, memoryview(buf), client) == offset


def test_finish_ends_a_close_delimited_body(client):
    parser.parse(E, memoryview(b"GET / HTTP/1.1\r\n\r\n"), client)
    head = b"HTTP/1.0 200 OK\r\n\r\n"
    assert parser.parse(I, memoryview(head), client) == (NEED, None, len(head))
    assert parser.parse(I, memoryview(b"abcdef"), client) == (NEED, None, UNTIL_CLOSE)
    assert parser.finish(E, client) is None
    frame = parser.finish(I, client)
    # only the tracker knows where the close came: it sets size, which gives the body's
    assert (frame.status, frame.body_size, frame.close_head) == (200, None, len(head))
    frame.size = len(head) + 6
    assert frame.body_bytes == 6
    assert parser.finish(I, client) is None


def test_finish_without_body_in_progress(client):
    assert parser.finish(E, client) is None and parser.finish(I, client) is None


def test_stitch_pairs_by_index_and_drops_orphans(client):
    requests, responses = client.frames
    for i in range(3):
        requests.append(HTTPRequest(index=i, target=f"/{i}", start_ns=10 * i, end_ns=10 * i + 1))
    responses.extend(HTTPResponse(index=i, status=200, start_ns=100, end_ns=100) for i in (-1, 1, 2))
    records = parser.stitch(client, now_ns=200)
    assert [(r.request.target, r.response and r.response.index, r.error) for r in records] == [
        ("/0", None, None),  # its answer was lost: the answer to /1 came
        ("/1", 1, None),
        ("/2", 2, None),
    ]
    assert client.orphan_responses == 1 and not requests and not responses
