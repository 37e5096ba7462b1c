"""The compiled HTTP/1 span step (protocols/http1/_parse.c span) against its reference,
spans.to_spans: on drawn records, the same span field for field and the same attributes
in the same order, or None exactly where the reference's uncommon cases begin."""

from __future__ import annotations

import dataclasses
import random

import pytest
from otel_ebpf.protocols.base import ConnInfo, Role
from otel_ebpf.protocols.http1 import HTTP1Parser
from otel_ebpf.protocols.http1 import parse as http1_parse
from otel_ebpf.protocols.http1 import spans as http1_spans
from otel_ebpf.protocols.http1.parse import HTTPRequest, HTTPResponse
from otel_ebpf.protocols.http1.stitch import HTTPRecord


pytestmark = pytest.mark.skipif(http1_parse.compiled is None, reason="http1._parse is not built")

METHODS = ["GET", "POST", "HEAD", "DELETE", "PROPFIND", "get"]
TARGETS = ["/", "/a", "/a/b?x=1", "/p?", "/q?sig=abc&x=2&AWSAccessKeyId=k", "/s?token=t",
           "/?", "http://h:8/x?y=1", "http://u:p@h/x", "*", "h:443", ""]
HOSTS = ["", "h", "h:8080", "[::1]:80", "[::1]", "h:abc", "example.com:443"]
ADDRS = [("127.0.0.1", "ipv4"), ("::1", "ipv6"), ("", "ipv4"), ("10.0.0.2", "ipv4")]
PORTS = [0, 80, 443, 8000, 40000]


def _draw(rng: random.Random) -> tuple[HTTPRecord, ConnInfo]:
    addr, family = rng.choice(ADDRS)
    conn = ConnInfo(rng.randrange(1, 9), 3, 7, rng.choice([Role.SERVER, Role.CLIENT]),
                    "stream", family, "127.0.0.1", rng.choice(PORTS), addr, rng.choice(PORTS),
                    "app", rng.random() < 0.3)
    req = HTTPRequest(method=rng.choice(METHODS), target=rng.choice(TARGETS),
                      host=rng.choice(HOSTS), user_agent=rng.choice(["", "curl/8"]),
                      version=rng.choice(["1.1", "1.0"]),
                      body_size=rng.choice([None, 0, 12]), upgrade=rng.choice(["", "websocket"]),
                      start_ns=rng.randrange(10**9), end_ns=rng.randrange(10**9, 2 * 10**9),
                      stream_pos=rng.randrange(10**6), tcp_seq=rng.choice([None, 77]))
    if rng.random() < 0.2:
        return HTTPRecord(request=req, error=rng.choice([None, "timeout", "connection_closed"])
                          ), conn
    resp = HTTPResponse(status=rng.choice([101, 200, 204, 301, 404, 418, 500, 503]),
                        body_size=rng.choice([None, 0, 20]), incomplete=rng.random() < 0.1,
                        upgraded=rng.random() < 0.2, upgrade=rng.choice(["", "h2c"]),
                        close_head=rng.choice([-1, -1, -1, 40]), end_ns=rng.randrange(3 * 10**9),
                        tcp_seq=rng.choice([None, 99]))
    resp.size = 100
    return HTTPRecord(request=req, response=resp), conn


def _common(record: HTTPRecord) -> bool:
    req, resp = record.request, record.response
    return (req.method in http1_spans.KNOWN_METHODS and req.target.startswith("/")
            and req.layer is None and (resp is None or resp.close_head < 0))


def _fields(span) -> list:  # noqa: ANN001
    return [(f.name, getattr(span, f.name)) for f in dataclasses.fields(span)] + \
        [("attribute order", list(span.attributes.items()))]


def test_compiled_span_is_the_reference():
    fast = http1_parse.compiled
    http1_spans.compiled_setup(fast)
    rng = random.Random(18)
    taken = 0
    for _ in range(5000):
        record, conn = _draw(rng)
        made = fast.span(record, conn)
        reference = http1_spans.to_spans(record, conn)
        if made is None:
            assert not _common(record), record
            continue
        assert _common(record), record
        taken += 1
        assert len(made) == len(reference) == 1
        assert _fields(made[0]) == _fields(reference[0])
    assert taken > 1000  # the drawn records reach the compiled step, not only its refusals


def test_parser_uses_it_and_falls_back():
    parser = HTTP1Parser({})
    rng = random.Random(7)
    for _ in range(500):
        record, conn = _draw(rng)
        assert [_fields(s) for s in parser.to_spans(record, conn)] == \
            [_fields(s) for s in http1_spans.to_spans(record, conn)]


def test_other_objects_take_the_python_path():
    fast = http1_parse.compiled
    http1_spans.compiled_setup(fast)
    record, conn = _draw(random.Random(1))

    @dataclasses.dataclass(slots=True, kw_only=True)
    class Record2(HTTPRecord):
        pass

    assert fast.span(Record2(request=record.request, response=record.response), conn) is None
    assert fast.span(object(), conn) is None
    assert fast.span(record, object()) is None
