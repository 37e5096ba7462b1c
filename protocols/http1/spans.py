"""HTTP/1.x record -> neutral span, after the stable HTTP semantic conventions."""

from __future__ import annotations

import functools
from urllib.parse import urlsplit

from ..base import (
    AttributeValue,
    ConnInfo,
    NeutralSpan,
    Role,
    SpanKind,
    StatusCode,
    positional_maker,
)
from ..common import network_attributes
from ..layers import HTTPExchange, apply_layer
from .parse import HTTPRequest, HTTPResponse, is_secret
from .stitch import HTTPRecord

PROTOCOL = "http1"
KNOWN_METHODS = frozenset({"GET", "HEAD", "POST", "PUT", "DELETE", "CONNECT", "OPTIONS", "TRACE", "PATCH"})
# semconv: values of these query keys are replaced by REDACTED by default
_REDACTED_QUERY_KEYS = frozenset({"awsaccesskeyid", "signature", "sig", "x-goog-signature"})
_DEFAULT_PORTS = {"http": 80, "https": 443}

Attributes = dict[str, AttributeValue]

# enum members as module constants: looking a member up on its class costs ~0.2 µs
_SERVER_ROLE, _SERVER_KIND, _CLIENT_KIND = Role.SERVER, SpanKind.SERVER, SpanKind.CLIENT
_ERROR, _UNSET = StatusCode.ERROR, StatusCode.UNSET


def to_spans(record: HTTPRecord, conn: ConnInfo, capture_headers: bool = False) -> list[NeutralSpan]:
    request, response = record.request, record.response
    server = conn.role == _SERVER_ROLE
    kind = _SERVER_KIND if server else _CLIENT_KIND
    # the attributes in the order the helpers below set them (_method, _connection, _url,
    # the side's, _message), each helper inlined where the common case is plain
    method = request.method
    if method in KNOWN_METHODS:
        name = method
        attrs: Attributes = {"http.request.method": method}
    else:
        name = "HTTP"
        attrs = {"http.request.method": "_OTHER", "http.request.method_original": method}
    attrs.update(_connection_attributes(conn))
    target = request.target
    scheme = "https" if conn.tls else "http"
    if target.startswith("/"):  # origin form: _url's first branch
        path, mark, query = target.partition("?")
        attrs["url.scheme"] = scheme
        if path:
            attrs["url.path"] = path
        if mark:
            attrs["url.query"] = redact_query(query)
    else:
        path = mark = query = ""
        _url(target, attrs, scheme)
    if server:
        _server_side(request, conn, attrs)
    else:
        host = _host_port(request.host)[0]
        attrs["server.address"] = host or conn.remote_addr
        if conn.remote_port:
            attrs["server.port"] = conn.remote_port
        if target.startswith("/"):  # _full_url's origin-form case
            authority = request.host or _authority(conn)
            full = f"{scheme}://{authority}{path}{mark}{redact_query(query) if mark else ''}"
        else:
            full = _full_url(request, conn)
        if full:
            attrs["url.full"] = full
    _message(request, response, attrs)
    if capture_headers:
        _headers("http.request.header.", request, attrs)
        if response is not None:
            _headers("http.response.header.", response, attrs)
    status, error = _status(record, kind)
    if error:
        attrs["error.type"] = error
    span = _new_span(name, kind, request.start_ns, (response or request).end_ns, conn, attrs,
                     status, PROTOCOL, request.tcp_seq, request.stream_pos,
                     response.tcp_seq if response is not None else None)
    if request.layer is not None:
        return apply_layer(request.layer, _exchange(record, conn, kind), span)
    return [span]


_new_span = positional_maker(NeutralSpan, (
    "name", "kind", "start_ns", "end_ns", "conn", "attributes", "status", "protocol",
    "request_seq", "request_pos", "response_seq"))
compiled_for = None  # the extension module span_setup() was last called on


def compiled_setup(fast) -> None:  # noqa: ANN001 (the extension module)
    """Give `fast.span` (parse.compiled, _parse.c) what to_spans builds with: the same span
    maker, caches, method set and enum members, so its spans are this module's. It takes
    to_spans' common case (known method, origin-form target, no layer, no body delimited
    by the close, no captured headers) and answers None for the rest."""
    global compiled_for
    fast.span_setup(HTTPRecord, HTTPRequest, HTTPResponse, ConnInfo, _new_span, redact_query,
                    _host_port, _authority, _connection_attributes, KNOWN_METHODS,
                    _SERVER_ROLE, _SERVER_KIND, _CLIENT_KIND, _ERROR, _UNSET, PROTOCOL)
    compiled_for = fast
_last_connection: tuple[ConnInfo | None, Attributes] = (None, {})


def _connection_attributes(conn: ConnInfo) -> Attributes:
    """What _connection sets, kept for the last connection asked about: a connection's
    spans are built one after the other (copy it, never change it)."""
    global _last_connection
    last = _last_connection
    if last[0] is conn:
        return last[1]
    attrs: Attributes = {}
    _connection(conn, attrs)
    _last_connection = (conn, attrs)
    return attrs


def _exchange(record: HTTPRecord, conn: ConnInfo, kind: SpanKind) -> HTTPExchange:
    request, response = record.request, record.response
    server = kind == SpanKind.SERVER
    return HTTPExchange(
        role=Role.SERVER if server else Role.CLIENT,
        method=request.method,
        target=request.target,
        host=request.host,
        scheme=scheme_of(conn),
        request_content_type=request.content_type,
        request_body=request.body,
        status=response.status if response is not None else None,
        response_content_type=response.content_type if response is not None else "",
        response_body=response.body if response is not None else None,
        start_ns=request.start_ns,
        request_end_ns=request.end_ns,
        response_start_ns=response.start_ns if response is not None else None,
        end_ns=(response or request).end_ns,
        server_address=conn.local_addr if server else conn.remote_addr,
        server_port=conn.local_port if server else conn.remote_port,
        request_headers=request.carrier,
        response_headers=response.carrier if response is not None else {},
    )


def _method(method: str, attrs: Attributes) -> str:
    """Sets the method attributes; returns the span name (no route is known: never a path)."""
    if method in KNOWN_METHODS:
        attrs["http.request.method"] = method
        return method
    attrs["http.request.method"] = "_OTHER"
    attrs["http.request.method_original"] = method
    return "HTTP"


def _connection(conn: ConnInfo, attrs: Attributes) -> None:
    network_attributes(conn, "http", attrs=attrs)


def scheme_of(conn: ConnInfo) -> str:
    """What the connection's bytes were: TLS plaintext (from the TLS library) or plain."""
    return "https" if conn.tls else "http"


def _url(target: str, attrs: Attributes, conn_scheme: str = "http") -> None:
    """url.path, url.query and url.scheme from the request target (origin or absolute form)."""
    if target.startswith("/"):
        path, mark, query = target.partition("?")
        scheme = conn_scheme
    elif "://" in target:  # absolute form, sent to proxies
        parts = urlsplit(target)
        path, mark, query, scheme = parts.path, "?" if parts.query else "", parts.query, parts.scheme
    else:  # "*" (OPTIONS) or an authority (CONNECT): no path
        path, mark, query, scheme = "", "", "", conn_scheme
    attrs["url.scheme"] = scheme or conn_scheme
    if path:
        attrs["url.path"] = path
    if mark:
        attrs["url.query"] = redact_query(query)


@functools.lru_cache(maxsize=1024)  # queries repeat (a poller's, a health check's)
def redact_query(query: str) -> str:
    """Replace the values of sensitive query parameters by REDACTED (semconv url.query)."""
    params = query.split("&")
    for i, param in enumerate(params):
        key, eq, _ = param.partition("=")
        low = key.lower()
        if eq and (low in _REDACTED_QUERY_KEYS or is_secret(low)):
            params[i] = f"{key}=REDACTED"
    return "&".join(params)


@functools.lru_cache(maxsize=1024)  # Host headers repeat: split each once
def _host_port(authority: str) -> tuple[str, int | None]:
    """Split a Host header ("h", "h:8080", "[::1]:80") into host and port."""
    if authority.startswith("["):
        host, _, rest = authority[1:].partition("]")
        port = rest[1:] if rest.startswith(":") else ""
    else:
        host, _, port = authority.partition(":")
    return host, int(port) if port.isascii() and port.isdigit() else None


def _server_side(request: HTTPRequest, conn: ConnInfo, attrs: Attributes) -> None:
    host, _ = _host_port(request.host)
    if host:
        attrs["server.address"] = host
    if conn.local_port:
        attrs["server.port"] = conn.local_port
    if conn.remote_addr:
        attrs["client.address"] = conn.remote_addr
    if conn.remote_port:
        attrs["client.port"] = conn.remote_port


def _full_url(request: HTTPRequest, conn: ConnInfo) -> str:
    target = request.target
    if "://" in target and not target.startswith("/"):
        parts = urlsplit(target)
        netloc = parts.netloc
        if "@" in netloc:  # semconv: credentials in the URL are redacted
            netloc = "REDACTED:REDACTED@" + netloc.rpartition("@")[2]
        return parts._replace(netloc=netloc, query=redact_query(parts.query)).geturl()
    if not target.startswith("/"):
        return ""
    authority = request.host or _authority(conn)
    path, mark, query = target.partition("?")
    return f"{scheme_of(conn)}://{authority}{path}{mark}{redact_query(query) if mark else ''}"


def _authority(conn: ConnInfo) -> str:
    """host[:port] of the peer, for a request that carried no Host header (HTTP/1.0)."""
    host = f"[{conn.remote_addr}]" if ":" in conn.remote_addr else conn.remote_addr
    default = _DEFAULT_PORTS[scheme_of(conn)]
    return host if conn.remote_port in (0, default) else f"{host}:{conn.remote_port}"


def _message(request: HTTPRequest, response: HTTPResponse | None, attrs: Attributes) -> None:
    attrs["network.protocol.version"] = request.version
    if request.user_agent:
        attrs["user_agent.original"] = request.user_agent
    if request.body_size is not None:
        attrs["http.request.body.size"] = request.body_size
    if response is None:
        return
    attrs["http.response.status_code"] = response.status
    if response.body_bytes is not None:
        attrs["http.response.body.size"] = response.body_bytes
    if response.incomplete:
        # ours: the connection closed before the body's end (the size is what came)
        attrs["otel_ebpf.http.response.incomplete"] = True
    protocol = response.upgrade or request.upgrade
    if response.upgraded and protocol:
        # ours, not semconv: what the connection speaks after this exchange
        attrs["http.connection.upgrade"] = protocol


def _headers(prefix: str, message: HTTPRequest | HTTPResponse, attrs: Attributes) -> None:
    for name, values in message.headers.items():
        attrs[prefix + name] = list(values)


def _status(record: HTTPRecord, kind: SpanKind) -> tuple[StatusCode, str | None]:
    """5xx fails both sides; 4xx fails only the client (semconv span status)."""
    if record.response is None:
        return (_ERROR, record.error) if record.error else (_UNSET, None)
    code = record.response.status
    if code >= 500 or (code >= 400 and kind == _CLIENT_KIND):
        return _ERROR, str(code)
    return _UNSET, None
