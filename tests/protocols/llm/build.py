"""Builders for layer tests: timed bodies, exchanges and the HTTP span a parser hands a layer."""

from __future__ import annotations

from collections.abc import Iterable

from hypothesis import strategies as st
from otel_ebpf.protocols.base import ConnInfo, NeutralSpan, Role, SpanKind
from otel_ebpf.protocols.layers import Body, HTTPExchange

REQ_START, REQ_END = 1_000_000, 1_200_000  # kernel ns of the request's first and last byte


class Lost(int):
    """Body bytes the kernel did not capture (a gap), as a `body` piece."""


def body(
    *pieces: bytes | tuple[bytes, int] | Lost, start_ns: int = 2_000_000, step_ns: int = 1000
) -> Body:
    """A body of pieces arriving `step_ns` apart from `start_ns`, or at the time a
    (data, ns) pair names; a `Lost(n)` piece is n bytes not captured."""
    out = Body()
    ns = start_ns
    for piece in pieces:
        if isinstance(piece, Lost):
            out.skip(piece)
            continue
        data, at = piece if isinstance(piece, tuple) else (piece, ns)
        out.add(data, at)
        ns = at + step_ns
    return out


def gapped(data: bytes, head: int, tail: int, ns: int = REQ_START) -> Body:
    """`data` captured as its first `head` and last `tail` bytes, the middle lost."""
    out = Body()
    out.add(data[:head], ns)
    out.skip(len(data) - head - tail)
    out.add(data[-tail:], ns + 10)
    return out


def conn(role: Role) -> ConnInfo:
    server = role == Role.SERVER
    return ConnInfo(
        pid=42,
        fd=7,
        generation=1,
        role=role,
        transport="stream",
        family="ipv4",
        local_addr="10.0.0.1",
        local_port=8000 if server else 40000,
        remote_addr="10.0.0.2",
        remote_port=40000 if server else 8000,
        comm="test",
    )


def exchange(
    target: str,
    request: Body | None,
    response: Body | None,
    *,
    status: int | None = 200,
    response_type: str = "application/json",
    role: Role = Role.CLIENT,
    host: str = "llm.internal:8000",
    method: str = "POST",
    end_ns: int | None = None,
) -> HTTPExchange:
    """The exchange an HTTP parser hands a layer (server address as http1/spans.py sets it)."""
    last = max((p.ns for p in response.pieces), default=REQ_END) if response else REQ_END
    server = role == Role.SERVER
    return HTTPExchange(
        role=role,
        method=method,
        target=target,
        host=host,
        scheme="http",
        request_content_type="application/json",
        request_body=request,
        status=status,
        response_content_type=response_type if status is not None else "",
        response_body=response,
        start_ns=REQ_START,
        request_end_ns=REQ_END,
        response_start_ns=REQ_END + 100 if status is not None else None,
        end_ns=end_ns if end_ns is not None else last,
        server_address="10.0.0.1" if server else "10.0.0.2",
        server_port=8000,
    )


def http_span(ex: HTTPExchange) -> NeutralSpan:
    """An HTTP span like http1/spans.py builds for the exchange (the attributes a layer keeps)."""
    kind = SpanKind.SERVER if ex.role == Role.SERVER else SpanKind.CLIENT
    host = ex.host.partition(":")[0]
    attrs = {
        "http.request.method": ex.method,
        "network.protocol.name": "http",
        "url.path": ex.target.partition("?")[0],
        "url.scheme": "http",
        "server.address": host,
        "server.port": 8000,
    }
    if ex.status is not None:
        attrs["http.response.status_code"] = ex.status
    return NeutralSpan(
        name=ex.method,
        kind=kind,
        start_ns=ex.start_ns,
        end_ns=ex.end_ns,
        conn=conn(ex.role),
        attributes=attrs,
        protocol="http1",
    )


HTTP_KEYS = frozenset(
    {
        "http.request.method",
        "network.protocol.name",
        "url.path",
        "url.scheme",
        "server.address",
        "server.port",
        "http.response.status_code",
    }
)


def layer_attributes(span: NeutralSpan) -> dict:
    """The span's attributes less the HTTP ones the builder put there."""
    return {k: v for k, v in span.attributes.items() if k not in HTTP_KEYS}


def sse(*events: bytes | str) -> list[bytes]:
    """SSE wire events, one per piece: raw bytes as given, str wrapped as `data: ...`."""
    return [e if isinstance(e, bytes) else f"data: {e}\n\n".encode() for e in events]


def timed(chunks: Iterable[bytes], times: Iterable[int]) -> Body:
    return body(*zip(chunks, times, strict=True))


# any JSON value (what a hostile or broken peer may send where we expect a field)
json_values = st.recursive(
    st.none()
    | st.booleans()
    | st.integers(-(2**63), 2**63 - 1)
    | st.floats(allow_nan=False, allow_infinity=False)
    | st.text(max_size=20),
    lambda inner: (
        st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=8), inner, max_size=4)
    ),
    max_leaves=20,
)
