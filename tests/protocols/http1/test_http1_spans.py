"""HTTP/1 records -> neutral spans: names, kinds, times and semconv attributes."""

from __future__ import annotations

import pytest
from otel_ebpf.protocols.base import Direction, Role, SpanKind, StatusCode
from otel_ebpf.protocols.http1 import HTTP1Parser


@pytest.fixture
def exchange(tracker_cls, make_conn):
    """exchange(request, response, role=..., **conn) -> the spans of one connection."""

    def exchange(req: bytes, resp: bytes | None, *, role=Role.CLIENT, options=None, **conn_kw):
        conn = make_conn(role, **conn_kw)
        tracker = tracker_cls(HTTP1Parser(options), conn)
        requests = Direction.EGRESS if role == Role.CLIENT else Direction.INGRESS
        tracker.feed(requests, req)
        if resp is not None:
            tracker.feed(requests.opposite, resp)
        tracker.close()
        return tracker.spans()

    return exchange


GET = b"GET /v1/models?limit=2 HTTP/1.1\r\nHost: api.example.com:8080\r\nUser-Agent: curl/8\r\n\r\n"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"


def test_client_span(exchange, tracker_cls, make_conn):
    (span,) = exchange(GET, OK)
    assert (span.name, span.kind, span.status, span.protocol) == ("GET", SpanKind.CLIENT, StatusCode.UNSET, "http1")
    assert span.attributes == {
        "http.request.method": "GET",
        "network.protocol.name": "http",
        "network.protocol.version": "1.1",
        "network.transport": "tcp",
        "network.type": "ipv4",
        "network.peer.address": "10.0.0.2",
        "network.peer.port": 8080,
        "url.scheme": "http",
        "url.path": "/v1/models",
        "url.query": "limit=2",
        "url.full": "http://api.example.com:8080/v1/models?limit=2",
        "server.address": "api.example.com",
        "server.port": 8080,
        "user_agent.original": "curl/8",
        "http.response.status_code": 200,
        "http.response.body.size": 2,
    }


def test_span_times_and_sequence_numbers(tracker_cls, make_conn):
    conn = make_conn(Role.CLIENT)
    t = tracker_cls(HTTP1Parser(), conn)
    t.feed(Direction.EGRESS, GET, at=100)
    t.feed(Direction.INGRESS, OK[:10], at=250)
    t.feed(Direction.INGRESS, OK[10:], at=300)
    (span,) = t.spans()
    (record,) = t.records
    assert (span.start_ns, span.end_ns) == (100, 300)
    assert (span.request_seq, span.response_seq) == (record.request.tcp_seq, record.response.tcp_seq)
    assert span.request_seq is not None and span.conn is conn


def test_server_span(exchange):
    (span,) = exchange(GET, OK, role=Role.SERVER)
    a = span.attributes
    assert (span.name, span.kind) == ("GET", SpanKind.SERVER)
    assert (a["server.address"], a["server.port"]) == ("api.example.com", 8080)
    assert (a["client.address"], a["client.port"]) == ("10.0.0.2", 40000)
    assert (a["url.path"], a["url.query"], a["url.scheme"]) == ("/v1/models", "limit=2", "http")
    assert "url.full" not in a


def test_post_body_sizes(exchange):
    req = b"POST /v1/chat HTTP/1.1\r\nHost: h\r\nContent-Length: 11\r\n\r\n{\"a\": \"b\"}\n"
    (span,) = exchange(req, b"HTTP/1.1 201 Created\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n")
    assert span.attributes["http.request.body.size"] == 11
    assert span.attributes["http.response.body.size"] == 3
    assert "url.query" not in span.attributes


@pytest.mark.parametrize("method", [b"PROPFIND", b"MKCOL"])
def test_nonstandard_method(exchange, method):
    (span,) = exchange(method + b" /dav HTTP/1.1\r\nHost: h\r\n\r\n", OK)
    assert span.name == "HTTP"
    assert span.attributes["http.request.method"] == "_OTHER"
    assert span.attributes["http.request.method_original"] == method.decode()


def test_query_secrets_redacted(exchange):
    req = b"GET /s3/o?X-Goog-Signature=abc&sig=def&access_token=t0k&q=cats HTTP/1.1\r\nHost: h\r\n\r\n"
    (span,) = exchange(req, OK)
    query = "X-Goog-Signature=REDACTED&sig=REDACTED&access_token=REDACTED&q=cats"
    assert span.attributes["url.query"] == query
    assert span.attributes["url.full"] == f"http://h/s3/o?{query}"


def test_absolute_form_target(exchange):
    req = b"GET http://user:pw@origin.example/x/y?api_key=k&z=1 HTTP/1.1\r\nHost: origin.example\r\n\r\n"
    (span,) = exchange(req, OK)
    a = span.attributes
    assert a["url.full"] == "http://REDACTED:REDACTED@origin.example/x/y?api_key=REDACTED&z=1"
    assert (a["url.path"], a["url.query"], a["server.address"]) == ("/x/y", "api_key=REDACTED&z=1", "origin.example")


def test_no_host_header_uses_the_peer(exchange):
    req = b"GET /old HTTP/1.0\r\n\r\n"
    (span,) = exchange(req, b"HTTP/1.0 200 OK\r\n\r\nbody", family="ipv6", remote_addr="fd00::2", remote_port=8081)
    a = span.attributes
    assert (a["server.address"], a["url.full"], a["network.type"]) == ("fd00::2", "http://[fd00::2]:8081/old", "ipv6")
    assert (a["network.protocol.version"], a["http.response.body.size"]) == ("1.0", 4)


def test_unix_socket(exchange):
    (span,) = exchange(GET, OK, family="unix", remote_addr="", remote_port=0, local_port=0)
    a = span.attributes
    assert a["network.transport"] == "unix"
    assert not {"network.type", "network.peer.address", "network.peer.port", "server.port"} & set(a)


def test_options_capture_headers(exchange):
    req = b"GET / HTTP/1.1\r\nHost: h\r\nAccept: a/b\r\nAccept: c/d\r\nAuthorization: no\r\n\r\n"
    (span,) = exchange(req, OK, options={"capture_headers": True})
    assert span.attributes["http.request.header.accept"] == ["a/b", "c/d"]
    assert span.attributes["http.request.header.host"] == ["h"]
    assert span.attributes["http.response.header.content-length"] == ["2"]
    assert "http.request.header.authorization" not in span.attributes


@pytest.mark.parametrize("bad", [{"response_timeout": 0}, {"response_timeout": "soon"}])
def test_bad_options(bad):
    with pytest.raises(ValueError):
        HTTP1Parser(bad)


def test_default_options():
    parser = HTTP1Parser()
    assert (parser.response_timeout_ns, parser.capture_headers, parser.name) == (30 * 10**9, False, "http1")


@pytest.mark.parametrize(("value", "expected"), [("false", False), ("True", True), ("on", True), (None, False)])
def test_capture_headers_flag(value, expected):
    assert HTTP1Parser({"capture_headers": value}).capture_headers is expected


def test_client_through_a_service_names_the_pod_behind_it(exchange):
    """A client connection through NAT (conn.nat, from conntrack): server.address is the
    name asked for, network.peer.* the socket's peer (the Service's VIP), and the server
    behind the Service, and this end as it saw it (SNAT), under otel_ebpf.nat.*."""
    svc = ("10.96.0.10", 80)
    (span,) = exchange(GET, OK, remote_addr=svc[0], remote_port=svc[1],
                       nat=("10.0.0.1", 61000, "10.244.2.7", 8080))
    a = span.attributes
    assert (a["server.address"], a["network.peer.address"], a["network.peer.port"]) == (
        "api.example.com", *svc)
    assert (a["otel_ebpf.nat.peer.address"], a["otel_ebpf.nat.peer.port"]) == ("10.244.2.7", 8080)
    assert (a["otel_ebpf.nat.local.address"], a["otel_ebpf.nat.local.port"]) == ("10.0.0.1", 61000)
    (span,) = exchange(GET, OK, remote_addr=svc[0], remote_port=svc[1],
                       nat=("10.0.0.1", 40000, "10.244.2.7", 8080))  # DNAT alone
    assert "otel_ebpf.nat.local.address" not in span.attributes
    assert span.attributes["otel_ebpf.nat.peer.address"] == "10.244.2.7"
