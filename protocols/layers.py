"""Layers: APIs carried inside HTTP messages (an LLM API, a vector DB's REST API).

A layer never sees bytes of a connection. The HTTP/1 and HTTP/2 parsers ask every enabled
layer whether it `wants` a request (by method and path); for the first that does they keep
the request's and the response's bodies (as timed pieces, see `Body`) and, once the exchange
is stitched, build the HTTP span and hand it to `layer.enrich` with an `HTTPExchange`. The
layer turns it into its own span (name, attributes, events) and adds `Measurement`s for the
histograms it declares in `instruments`. A layer whose HTTP messages carry several messages
of its own (an MCP event stream) returns their spans from `enrich`, besides the one it
rewrote. Layers are pure like parsers: no clocks, no I/O.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, ClassVar

from .base import Instrument, NeutralSpan, Role, typed_options
from .options import Schema

LAYER_ENTRY_POINT_GROUP = "otel_ebpf.layers"
DEFAULT_BODY_LIMIT = 1 << 20  # body bytes kept per message unless a layer asks otherwise
MAX_PIECES = 65_536  # timed pieces kept per body (one per SSE chunk, say); later ones dropped


@dataclass(frozen=True, slots=True)
class BodyPiece:
    """Captured body bytes that arrived together, and when."""

    offset: int  # position of data[0] in the body (payload bytes; chunked framing excluded)
    ns: int  # kernel time the piece's first byte crossed the syscall (write entry, read return)
    data: bytes  # may be b"" past the keep limit: then only the piece's time and place count


@dataclass(slots=True)
class Body:
    """A message body as captured: pieces in arrival order, and what was not captured.

    `size` counts every body byte that went over the wire (captured or not). Bytes the
    kernel did not capture (a write longer than the capture size) or lost are `lost`; they
    leave a gap between pieces (piece.offset jumps). A long prompt may so yield its first
    and last kilobytes with a gap between: read fields from either end.
    """

    pieces: list[BodyPiece] = field(default_factory=list)
    size: int = 0
    lost: int = 0
    kept: int = 0  # bytes held in pieces' data
    limit: int = DEFAULT_BODY_LIMIT

    def add(self, data: bytes, ns: int) -> None:
        """Append the next `len(data)` body bytes, captured, arriving at `ns`."""
        if data and len(self.pieces) < MAX_PIECES:
            room = max(self.limit - self.kept, 0)
            kept = bytes(data[:room])
            self.kept += len(kept)
            self.pieces.append(BodyPiece(self.size, ns, kept))
        self.size += len(data)

    def skip(self, n: int) -> None:
        """The next `n` body bytes were not captured."""
        self.size += n
        self.lost += n

    @property
    def complete(self) -> bool:
        """Every byte of the body is in `pieces`."""
        return self.lost == 0 and self.kept == self.size

    def contiguous(self) -> bytes:
        """The body's bytes from offset 0 up to the first gap (all of it when complete)."""
        pieces = self.pieces
        if len(pieces) == 1 and pieces[0].offset == 0 and type(pieces[0].data) is bytes:
            return pieces[0].data  # a body in one piece (most requests): no copy
        out = bytearray()
        for piece in self.pieces:
            if piece.offset != len(out):
                break
            out += piece.data
        return bytes(out)

    def tail(self) -> bytes:
        """The body's last bytes after the last gap (b"" when its end was not captured)."""
        out: list[bytes] = []
        end = self.size
        for piece in reversed(self.pieces):
            if piece.offset + len(piece.data) != end:
                break
            out.append(piece.data)
            end = piece.offset
        return b"".join(reversed(out))


@dataclass(frozen=True, slots=True)
class HTTPExchange:
    """One HTTP request and its response as a layer sees them (HTTP/1 or HTTP/2)."""

    role: Role  # CLIENT: the traced process sent the request; SERVER: it answered
    method: str
    target: str  # path and query as sent (HTTP/1 request target, HTTP/2 :path)
    host: str  # Host header or :authority ("" when absent)
    scheme: str  # "http" or "https"
    request_content_type: str
    request_body: Body | None
    status: int | None  # None: no response seen
    response_content_type: str
    response_body: Body | None
    start_ns: int  # first byte of the request (kernel monotonic)
    request_end_ns: int  # last byte of the request
    response_start_ns: int | None  # first byte of the response head
    end_ns: int  # last byte of the response (or of the request when none came)
    server_address: str = ""  # peer (client role) or local (server role) address
    server_port: int = 0
    # the headers the layer named in `headers` (lower-case names), as each message carried
    # them; other headers are not kept
    request_headers: Mapping[str, str] = field(default_factory=dict)
    response_headers: Mapping[str, str] = field(default_factory=dict)


class HTTPLayer(ABC):
    """An API over HTTP. Registered under the entry-point group `otel_ebpf.layers` and
    enabled like a parser (`receivers.ebpf.protocols.enabled`), with options from
    `receivers.ebpf.protocols.<name>`."""

    name: ClassVar[str]
    # histograms this layer's Measurements name, by instrument name
    instruments: ClassVar[Mapping[str, Instrument]] = {}
    # request-path prefixes whose messages the kernel should capture more of (see
    # `capture_prefixes`); the agent gives them to the kernel at start
    body_limit: int = DEFAULT_BODY_LIMIT
    # lower-case names of headers the layer reads (a session id): the HTTP parsers keep
    # them, as they keep trace headers, and hand them over in HTTPExchange
    headers: ClassVar[frozenset[str]] = frozenset()
    # the options it takes, as a parser's (protocols/options.py; None: checked by the layer)
    option_schema: ClassVar[Schema | None] = None
    # on in the agent's default `protocols.enabled`
    default_enabled: ClassVar[bool] = False
    # where it stands in that default list (lower first: asked first), then by name
    default_rank: ClassVar[int] = 100

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options: Mapping[str, Any] = typed_options(type(self), options)

    @abstractmethod
    def wants(self, method: str, target: str) -> bool:
        """Whether to keep this request's and its response's bodies and enrich its span.
        Answered from the method and target alone, the same each time: the core remembers
        the answer for a (method, target) it has seen."""

    @abstractmethod
    def enrich(self, exchange: HTTPExchange, span: NeutralSpan) -> list[NeutralSpan] | None:
        """Make the exchange's HTTP span this layer's span: rename it, add attributes and
        events, append measurements to `span.measurements`. Return the spans of further
        operations the exchange carried (messages of an event stream), or None. Never
        raises on bad bodies."""

    def capture_prefixes(self) -> tuple[str, ...]:
        """Request-path prefixes of requests whose bodies are large and matter (a prompt):
        the kernel raises the capture size of connections that send them."""
        return ()


def apply_layer(layer: HTTPLayer, exchange: HTTPExchange, span: NeutralSpan) -> list[NeutralSpan]:
    """layer.enrich, guarded: a layer's bug must cost its attributes, not the HTTP span.
    Returns `span` and the further spans the layer made."""
    try:
        more = layer.enrich(exchange, span)
    except Exception as exc:  # noqa: BLE001 - whatever a layer raises, the span goes out
        span.attributes["otel_ebpf.layer.error"] = f"{layer.name}: {type(exc).__name__}"
        return [span]
    return [span, *more] if more else [span]


def layer_headers(layers: tuple[HTTPLayer, ...]) -> frozenset[str]:
    """The header names any of the layers reads."""
    return frozenset(name.lower() for layer in layers for name in layer.headers)


# first_wanting's answers by (layers, method, target): a service's requests repeat their
# targets, and each layer's `wants` is a few Python calls (~1.5 µs for three layers on a
# request none of them wants, at each end of every HTTP exchange). Emptied when full, so
# targets that never repeat (ids in the path) cost a miss and stay bounded.
_WANTED: dict[tuple[tuple[HTTPLayer, ...], str, str], HTTPLayer | None] = {}
_WANTED_MAX = 4096


def first_wanting(layers: tuple[HTTPLayer, ...], method: str, target: str) -> HTTPLayer | None:
    """The first layer that wants this request, or None (remembered: `wants` answers from
    the method and target alone)."""
    key = (layers, method, target)
    found = _WANTED.get(key, _WANTED)
    if found is not _WANTED:
        return found  # type: ignore[return-value]
    found = None
    for layer in layers:
        if layer.wants(method, target):
            found = layer
            break
    if len(_WANTED) >= _WANTED_MAX:
        _WANTED.clear()
    _WANTED[key] = found
    return found
