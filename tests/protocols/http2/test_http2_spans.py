"""HTTP/2 records -> neutral spans: gRPC after the RPC conventions, the rest after HTTP's."""

from __future__ import annotations

import pytest
from otel_ebpf.protocols.base import Direction, Role, SpanKind, StatusCode

from .wire import (
    CANCEL,
    INTERNAL_ERROR,
    PREFACE,
    TRACEPARENT,
    Peer,
    data,
    grpc_message,
    grpc_request,
    http_request,
    rst_stream,
    settings,
)

OK = [(":status", "200"), ("content-type", "application/grpc")]


def exchange(driver, role, request: bytes, response: bytes, options=None, midstream=False):
    t = driver(role=role, options=options, midstream=midstream)
    out = Direction.EGRESS if role == Role.CLIENT else Direction.INGRESS
    start = b"" if midstream else PREFACE + settings()
    t.feed(out, start + request)
    t.feed(out.opposite, (b"" if midstream else settings()) + response)
    t.close()
    spans = t.spans()
    assert len(spans) == 1
    return spans[0]


def grpc_call(path="/pkg.Store/Get", status="0", message=None, extra=()):
    client, server = Peer(), Peer()
    trailers = [("grpc-status", status)] + ([("grpc-message", message)] if message else [])
    request = client.headers(1, grpc_request(path, extra=extra)) \
        + data(1, grpc_message(b"k" * 3), end_stream=True)
    response = server.headers(1, OK + [("x-served-by", "a")]) \
        + data(1, grpc_message(b"v" * 7) + grpc_message(b"w")) \
        + server.headers(1, trailers, end_stream=True)
    return request, response


@pytest.mark.parametrize("role", [Role.CLIENT, Role.SERVER])
def test_grpc_ok(driver, role):
    span = exchange(driver, role, *grpc_call())
    a = span.attributes
    assert span.name == "pkg.Store/Get" and span.protocol == "http2"
    assert span.kind == (SpanKind.CLIENT if role == Role.CLIENT else SpanKind.SERVER)
    assert (a["rpc.system.name"], a["rpc.method"], a["rpc.response.status_code"]) == (
        "grpc", "pkg.Store/Get", "OK")
    assert (a["network.protocol.name"], a["network.protocol.version"]) == ("http", "2")
    assert (a["rpc.request.message.count"], a["rpc.request.size"]) == (1, 3)
    assert (a["rpc.response.message.count"], a["rpc.response.size"]) == (2, 8)
    assert a["server.address"] == "svc" and span.status == StatusCode.UNSET
    assert "error.type" not in a and "http.request.method" not in a
    assert span.request_pos == len(PREFACE + settings()) and span.request_seq is not None
    if role == Role.SERVER:
        assert (a["server.port"], a["client.address"], a["client.port"]) == (8080, "10.0.0.2", 40000)
    else:
        assert (a["server.port"], a["network.peer.port"]) == (8080, 8080)


@pytest.mark.parametrize(("code", "client_error", "server_error"), [
    ("5", True, False),  # NOT_FOUND: the caller's problem
    ("13", True, True),  # INTERNAL
    ("4", True, True),  # DEADLINE_EXCEEDED
    ("16", True, False),  # UNAUTHENTICATED
])
def test_grpc_error_status_by_side(driver, code, client_error, server_error):
    from otel_ebpf.protocols.http2.grpc import code_name
    for role, error in ((Role.CLIENT, client_error), (Role.SERVER, server_error)):
        span = exchange(driver, role, *grpc_call(status=code, message="bad%20key%3A%20%E2%9C%93"))
        a = span.attributes
        assert a["rpc.response.status_code"] == code_name(int(code))
        assert a["rpc.grpc.status_message"] == "bad key: ✓"
        assert (span.status == StatusCode.ERROR) == error
        assert (a.get("error.type") == code_name(int(code))) == error
        assert span.status_message == ("bad key: ✓" if error else "")


def test_grpc_resets_and_http_fallback_status(driver):
    client, server = Peer(), Peer()
    request = client.headers(1, grpc_request("/pkg.S/M")) + data(1, grpc_message(b"q"),
                                                                 end_stream=True)
    refused = exchange(driver, Role.CLIENT, request, rst_stream(1, 0x7))
    assert refused.attributes["rpc.response.status_code"] == "UNAVAILABLE"
    client, server = Peer(), Peer()
    request = client.headers(1, grpc_request("/pkg.S/M")) + data(1, grpc_message(b"q"),
                                                                 end_stream=True)
    proxy = exchange(driver, Role.CLIENT, request, server.headers(1, [(":status", "404")],
                                                                  end_stream=True))
    assert proxy.attributes["rpc.response.status_code"] == "UNIMPLEMENTED"
    assert proxy.status == StatusCode.ERROR


def test_client_cancel(driver):
    client, server = Peer(), Peer()
    t = driver(role=Role.SERVER)
    t.feed(Direction.INGRESS, PREFACE + settings() + client.headers(1, grpc_request("/pkg.F/W")))
    t.feed(Direction.EGRESS, settings() + server.headers(1, OK))
    t.feed(Direction.INGRESS, rst_stream(1, CANCEL))
    span = t.spans()[0]
    assert span.attributes["rpc.response.status_code"] == "CANCELLED"
    assert span.status == StatusCode.UNSET  # a cancelled call is no server error


def test_unknown_method_is_left_out_never_guessed(driver):
    client, server = Peer(), Peer()
    # a first call before capture began: the encoders insert its fields into their tables
    client.headers(1, grpc_request("/pkg.Store/Get"))
    server.headers(1, OK)
    server.headers(1, [("grpc-status", "0")])
    # the same call again: every field but the static ones now refers to those tables
    request = client.headers(3, grpc_request("/pkg.Store/Get")) \
        + data(3, grpc_message(b"k"), end_stream=True)
    response = server.headers(3, OK) + data(3, grpc_message(b"v")) \
        + server.headers(3, [("grpc-status", "0")], end_stream=True)
    span = exchange(driver, Role.CLIENT, request, response, midstream=True)
    a = span.attributes
    # content-type unknown too, but both bodies are whole gRPC messages
    assert a["rpc.system.name"] == "grpc" and span.name == "grpc"
    assert "rpc.method" not in a and "rpc.response.status_code" not in a
    assert span.status == StatusCode.UNSET


def test_plain_http(driver):
    client, server = Peer(), Peer()
    request = client.headers(1, http_request("GET", "/v1/items?id=7&api_key=s3cret",
                                             authority="api.test:8443",
                                             extra=[("traceparent", TRACEPARENT)]),
                             end_stream=True)
    response = server.headers(1, [(":status", "200"), ("content-type", "application/json")]) \
        + data(1, b'{"ok": true}', end_stream=True)
    span = exchange(driver, Role.CLIENT, request, response)
    a = span.attributes
    assert span.name == "GET" and a["http.request.method"] == "GET"
    assert (a["url.path"], a["url.query"], a["url.scheme"]) == (
        "/v1/items", "id=7&api_key=REDACTED", "http")
    assert a["url.full"] == "http://api.test:8443/v1/items?id=7&api_key=REDACTED"
    assert (a["server.address"], a["http.response.status_code"]) == ("api.test", 200)
    assert (a["network.protocol.version"], a["http.response.body.size"]) == ("2", 12)
    assert a["user_agent.original"] == "test-client/1" and "rpc.system.name" not in a


@pytest.mark.parametrize(("status", "client_error", "server_error"),
                         [(201, False, False), (404, True, False), (503, True, True)])
def test_http_status_rules(driver, status, client_error, server_error):
    for role, error in ((Role.CLIENT, client_error), (Role.SERVER, server_error)):
        client, server = Peer(), Peer()
        span = exchange(driver, role,
                        client.headers(1, http_request("POST", "/x")) + data(1, b"{}", True),
                        server.headers(1, [(":status", str(status))], end_stream=True))
        assert (span.status == StatusCode.ERROR) == error
        assert span.attributes["http.request.body.size"] == 2


def test_http_reset_and_capture_headers(driver):
    client, server = Peer(), Peer()
    request = client.headers(1, http_request("GET", "/", extra=[("x-trace", "t"),
                                                                ("authorization", "x")]),
                             end_stream=True)
    response = server.headers(1, [(":status", "200"), ("x-cache", "hit")]) \
        + rst_stream(1, INTERNAL_ERROR)
    span = exchange(driver, Role.CLIENT, request, response, options={"capture_headers": True})
    a = span.attributes
    assert span.status == StatusCode.ERROR and a["error.type"] == "INTERNAL_ERROR"
    assert a["http.request.header.x-trace"] == ["t"]
    assert a["http.response.header.x-cache"] == ["hit"]
    assert not any("authorization" in k for k in a)


def test_grpc_metadata_when_asked(driver):
    span = exchange(driver, Role.SERVER,
                    *grpc_call(extra=[("x-tenant", "acme"), ("x-api-key", "k")]),
                    options={"capture_headers": True})
    a = span.attributes
    assert a["rpc.request.metadata.x-tenant"] == ["acme"]
    assert a["rpc.response.metadata.x-served-by"] == ["a"]
    assert not any("api-key" in k for k in a)
