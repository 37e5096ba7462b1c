"""The parser contract: the types every protocol parser under protocols/ speaks (sans-IO).

A parser turns the bytes of one connection into frames (parse), pairs frames into records
(stitch) and records into neutral spans (to_spans). It is pure: no sockets, no clocks, no
OpenTelemetry imports, no logging of payloads. Times come from the kernel through the
connection tracker, which stamps each frame with the time of its first and last byte.
"""

from __future__ import annotations

import dataclasses
import enum
from abc import ABC, abstractmethod
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any, ClassVar, Literal

from .options import Schema
from .options import resolve as resolve_options

if TYPE_CHECKING:
    from .layers import HTTPLayer

AttributeValue = str | bool | int | float | list[str] | list[int] | list[float]

# `consumed` meaning "every byte of this direction from here to the close is mine" (a body
# delimited by the close, a tunnel after an upgrade): nothing more is parsed or resynced.
UNTIL_CLOSE = 1 << 62


class Direction(enum.IntEnum):
    """Which way bytes moved, seen from the traced process."""

    EGRESS = 0  # the process wrote them (send, write...)
    INGRESS = 1  # the process read them (recv, read...)

    @property
    def opposite(self) -> Direction:
        return _OPPOSITE[self]


_OPPOSITE = (Direction.INGRESS, Direction.EGRESS)


class Role(enum.IntEnum):
    """The traced process's side of a connection."""

    UNKNOWN = 0
    CLIENT = 1  # it connected, or it sends the requests
    SERVER = 2  # it accepted, or it answers the requests


class ParseResult(enum.Enum):
    FRAME = "frame"  # a whole frame ended at `consumed`
    NEED_MORE = "need_more"  # `consumed` bytes belong to a frame not yet complete
    INVALID = "invalid"  # the bytes at the start of buf are not this protocol


class SpanKind(enum.IntEnum):
    """Values of opentelemetry.proto.trace.v1.Span.SpanKind."""

    INTERNAL = 1
    SERVER = 2
    CLIENT = 3
    PRODUCER = 4
    CONSUMER = 5


class StatusCode(enum.IntEnum):
    """Values of opentelemetry.proto.trace.v1.Status.StatusCode."""

    UNSET = 0
    OK = 1
    ERROR = 2


@dataclass(frozen=True, slots=True)
class ConnInfo:
    """What is known about one connection (one socket of one process)."""

    pid: int
    fd: int
    generation: int  # kernel time the agent first saw this socket: fd reuse never merges two
    role: Role
    transport: Literal["stream", "datagram"]
    family: str  # "ipv4", "ipv6", "unix", or "pipe" (local_addr "pipe:[<inode>]")
    local_addr: str = ""
    local_port: int = 0
    remote_addr: str = ""
    remote_port: int = 0
    comm: str = ""  # kernel command name (15 chars) of the process at open
    tls: bool = False  # the bytes parsed are TLS plaintext (OpenSSL uprobes)
    # a client connection that NAT between here and its server changed (a Kubernetes
    # Service's DNAT, an SNAT): (client address, client port, server address, server port)
    # as the server sees them, read from conntrack (otel_ebpf/conntrack/nat.py); None when
    # nothing translated it, or nobody looked
    nat: tuple[str, int, str, int] | None = None

    @property
    def key(self) -> tuple[int, int, int]:
        return (self.pid, self.fd, self.generation)


@dataclass(slots=True, kw_only=True)
class Frame:
    """One protocol message. Parsers subclass it; the connection tracker fills the timing."""

    direction: Direction = Direction.EGRESS
    start_ns: int = 0  # kernel monotonic time of the first byte
    end_ns: int = 0  # kernel monotonic time of the last byte
    stream_pos: int = 0  # byte position of the first byte in its direction's stream
    tcp_seq: int | None = None  # TCP sequence number of the first byte, when known
    tid: int = 0  # thread that moved the first byte
    task: int = 0  # asyncio task that moved the first byte (its address), or 0
    # which request/response exchange of a multiplexed connection this frame belongs to
    # (an HTTP/2 stream id); -1 where exchanges follow each other in order (HTTP/1)
    exchange: int = -1
    size: int = 0  # bytes on the wire, head and body, including bytes not captured
    # trace context the message carried (traceparent, tracestate, x-request-id...), by
    # lower-case name: what correlate/ joins traces with. Set by the parser.
    carrier: dict[str, str] = field(default_factory=dict)
    # datagram transports: the peer the datagram came from or went to (address, port), when
    # the kernel saw one (an unconnected UDP socket); set by the tracker
    peer: tuple[str, int] | None = None


@dataclass(slots=True, kw_only=True)
class Record:
    """Frames a parser's stitch step joined (a request and its response, say)."""


@dataclass(frozen=True, slots=True)
class SpanEvent:
    name: str
    time_ns: int  # kernel monotonic
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class SpanLink:
    trace_id: bytes
    span_id: bytes
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Instrument:
    """A histogram a parser or layer records into (explicit bucket boundaries, semconv-advised)."""

    unit: str
    description: str
    boundaries: tuple[float, ...]


@dataclass(frozen=True, slots=True)
class Measurement:
    """One value for a declared instrument, with its attributes (low cardinality only)."""

    instrument: str
    value: float
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)


@dataclass(frozen=True, slots=True)
class Measurements:
    """Several values for one declared instrument with the same attributes, recorded as a
    Measurement each, in order (an LLM stream's gap between each two chunks): one object
    where a Measurement per value would be made, read and freed for every chunk."""

    instrument: str
    values: Sequence[float]
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)


@dataclass(slots=True, kw_only=True)
class NeutralSpan:
    """A span before OpenTelemetry: kernel times, no IDs yet (correlate/ assigns them)."""

    name: str
    kind: SpanKind
    start_ns: int  # kernel monotonic
    end_ns: int  # kernel monotonic
    conn: ConnInfo
    attributes: dict[str, AttributeValue] = field(default_factory=dict)
    status: StatusCode = StatusCode.UNSET
    status_message: str = ""
    events: list[SpanEvent] = field(default_factory=list)
    protocol: str = ""  # parser name, for self-telemetry
    # evidence for correlate/: TCP sequence numbers of the request's and response's first
    # bytes, and the request's stream position (which request frame this span is)
    request_seq: int | None = None
    response_seq: int | None = None
    request_pos: int | None = None
    # set by correlate/
    trace_id: bytes = b""
    span_id: bytes = b""
    parent_span_id: bytes = b""
    links: list[SpanLink] = field(default_factory=list)
    # a message's identity both of its ends can compute (a DDS sample: writer GUID and
    # sequence number). correlate/ derives IDs from it: a PRODUCER (or CLIENT) span gets
    # the trace and span IDs it hashes to, a CONSUMER (or SERVER) span that trace and that
    # span as its parent; on any host, with no other evidence needed.
    message_id: str = ""
    # values for the histograms the parser or layer declares (`instruments`), recorded
    # against the span's process when the span is emitted
    measurements: list[Measurement | Measurements] = field(default_factory=list)
    # set by the export pipeline (spans/convert.py: ready): the process's Resource, and the
    # start and the end as wall-clock time (spans/clock.py's one mapping); the exporters
    # encode the span from these and the rest
    resource: Any = None
    wall_ns: int = 0
    wall_end_ns: int = 0
    # W3C tracestate the span goes out with: head sampling's `ot=th:` (correlate/sampling.py)
    trace_state: str = ""

    @property
    def pid(self) -> int:
        return self.conn.pid


class SmallDeque(list):
    """A list with deque's popleft/appendleft, for the short queues kept per connection
    (frames, pending requests, chunks). An empty collections.deque holds a 64-slot block
    (~600 bytes) against a list's 56: with tens of thousands of connections tracked that
    was most of the agent's memory. Popping the head of a list of a few items is as fast."""

    __slots__ = ()

    def popleft(self):  # noqa: ANN201 (any item type)
        return self.pop(0)

    def appendleft(self, item) -> None:  # noqa: ANN001
        self.insert(0, item)


class ParserState:
    """Per-connection parser state. Parsers subclass it for their own tables.

    `frames[direction]` holds finished, timed frames in stream order: the connection
    tracker appends them, the parser's stitch step consumes them. `requests` is the
    direction requests go (a client writes them, a server reads them), `responses` the
    other; `closed` is set by the tracker when the connection ends, before the parser's
    `finish` and the last stitch.
    """

    __slots__ = ("closed", "conn", "frames", "requests", "responses", "time_at")

    def __init__(self, conn: ConnInfo) -> None:
        self.conn = conn
        self.frames: tuple[SmallDeque, SmallDeque] = (SmallDeque(), SmallDeque())
        self.requests = Direction.INGRESS if conn.role == Role.SERVER else Direction.EGRESS
        self.responses = self.requests.opposite
        self.closed = False
        # time_at(direction, offset): kernel time of the byte at `offset` in the buffer
        # `parse` is looking at (when a write handed it over, when a read returned it). The
        # tracker sets it; a parser that times parts of a message (SSE chunks) asks it.
        self.time_at: Callable[[Direction, int], int] = _no_time


def _no_time(direction: Direction, offset: int) -> int:
    return 0


class ProtocolParser(ABC):
    """A protocol: infer, parse, resync, stitch, to_spans. Registered by entry point.

    Datagram parsers (transport "datagram") get each datagram whole: parse is called once
    per datagram with its captured bytes (it may be cut at the capture size) and returns
    (FRAME, frame, len(buf)), or (INVALID, None, 0); the tracker stamps the frame (times,
    thread, `size` = the datagram's length, `peer`). No resync, no skipping.

    The connection tracker calls, for each direction of a stream connection:
      parse(direction, buf, state) while it returns FRAME, or NEED_MORE with consumed > 0.
        `buf` holds the contiguous bytes from the stream's current position. `consumed`
        may be larger than len(buf): the parser then asks to skip bytes it need not see
        (a body beyond the capture size); they are skipped by position, even across
        bytes the kernel did not capture. UNTIL_CLOSE skips everything until the close.
      resync(direction, buf, state) after bytes were lost or parse said INVALID: the parser
        drops any partial frame of that direction and returns the offset in buf where a
        frame may start, or None when there is none in buf.
      skip_lost(direction, lost, state) when bytes are missing inside the message being
        parsed: True lets the parser step over them (a body it reads, not skips), else resync.
        parse may also be called with an empty buf right after, to finish such a body.
      finish(direction, state) when the connection closes: a frame delimited by the close
        (an HTTP/1.0 body read until EOF), or None. The tracker sets its `size` to the bytes
        from its first byte to the close, which only the tracker knows.
    and then stitch(state, now_ns) to collect records, and to_spans(record, conn).
    Parsers never raise on bad bytes.

    Contract v2 (docs/protocols.md), what a parser declares instead of writing:
      option_schema: its options, each once (protocols/options.py). `self.options` is then
        the checked, typed result with every key filled; a bad value is a config error at
        load time that names the YAML path, and every key can be set from the environment.
        None (a v1 parser): the options are handed over as given, the parser checks them.
      default_enabled: on when the config does not list `protocols.enabled`.
      pair(requests, responses, closed, now_ns, state) instead of stitch: the tracker hands
        it the two frame queues (in the requests' and the responses' direction) and
        whether the connection closed.
      Records that name their frames `request` and `response` get the correlation
        evidence (NeutralSpan.request_seq, response_seq, request_pos) filled by the tracker
        on the exchange's first span when to_spans left it out.
    """

    name: ClassVar[str]
    transport: ClassVar[Literal["stream", "datagram"]] = "stream"
    # histograms this parser's spans carry Measurements for, by instrument name
    instruments: ClassVar[Mapping[str, Instrument]] = {}
    # the options it takes (None: a v1 parser, which checks its options itself)
    option_schema: ClassVar[Schema | None] = None
    # on in the agent's default `protocols.enabled`
    default_enabled: ClassVar[bool] = False
    # where it stands in that default list (lower first: asked first), then by name
    default_rank: ClassVar[int] = 100

    def __init__(self, options: Mapping[str, Any] | None = None) -> None:
        self.options: Mapping[str, Any] = typed_options(type(self), options)

    @abstractmethod
    def infer(self, direction: Direction, head: bytes, conn: ConnInfo) -> Role | None:
        """Is this connection mine, judging by its first bytes in `direction`? Return the
        traced process's role, or None when it is not."""

    def new_state(self, conn: ConnInfo) -> ParserState:
        return ParserState(conn)

    def use_layers(self, layers: tuple[HTTPLayer, ...]) -> None:  # noqa: B027 - optional
        """The enabled layers (protocols/layers.py), for parsers whose messages carry them
        (HTTP). Others ignore them."""

    @abstractmethod
    def parse(
        self, direction: Direction, buf: memoryview, state: ParserState
    ) -> tuple[ParseResult, Frame | None, int]: ...

    @abstractmethod
    def resync(self, direction: Direction, buf: memoryview, state: ParserState) -> int | None: ...

    def finish(self, direction: Direction, state: ParserState) -> Frame | None:
        return None

    def skip_lost(self, direction: Direction, lost: int, state: ParserState) -> bool:
        """`lost` bytes at the current position were not captured (a write longer than the
        capture size) or never arrived. Return True when they fall inside a part of the
        message whose length the parser knows (a body it is reading), having accounted for
        them; then parsing goes on after them. False (the default): resync."""
        return False

    def stitch(self, state: ParserState, now_ns: int) -> list[Record]:
        """Consume matched frames from state.frames; expire the ones waiting too long. By
        default: `pair` with the state's queues (a v1 parser overrides this instead)."""
        frames = state.frames
        return self.pair(frames[state.requests], frames[state.responses], state.closed,
                         now_ns, state)

    def pair(self, requests: SmallDeque, responses: SmallDeque, closed: bool, now_ns: int,
             state: ParserState) -> list[Record]:
        """Records from the frames in `requests` and `responses` (taken from their heads),
        and from the requests that waited past a timeout (or all, once `closed`)."""
        raise NotImplementedError(f"{type(self).__name__} implements neither stitch nor pair")

    @abstractmethod
    def to_spans(self, record: Record, conn: ConnInfo) -> list[NeutralSpan]: ...

    def counters(self, state: ParserState) -> Mapping[str, int]:
        """Conditions this connection's state counted that operators should see (headers
        HPACK could not resolve, responses without a request...). The tracker adds them to
        the agent's `otel_ebpf.protocol.events{protocol, event}` when the connection ends."""
        return {}


def typed_options(cls: type, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """A plugin's options checked against its `option_schema` (OptionError naming
    `<name>.<key>` when one is wrong), every key filled; as given for a v1 plugin."""
    schema = getattr(cls, "option_schema", None)
    if schema is None:
        return dict(options or {})
    return resolve_options(cls.name, schema, options)


def positional_maker(cls: type, names: tuple[str, ...],
                     post_init_sets: tuple[str, ...] = ()) -> Callable[..., Any]:
    """A function that builds a `cls` (a slots dataclass, frozen or not) from the fields
    `names`, given in that order, every other field at its default: what
    `cls(name=value, ...)` builds, about 4x faster. Calling a class with keywords goes
    through its __init__ slot with a tuple and a dict made for the call; this is a plain
    call (in C where the agent's extensions are built, otel_ebpf/_fast/maker.c, else a
    generated Python function, python_maker), and the fields are set as __init__ sets
    them, positional arguments only. The maker never calls __post_init__: a class with one
    is taken only when `post_init_sets` names every field it sets, each of them among
    `names` (the caller passes what __post_init__ would have made of the others)."""
    fields = {f.name: f for f in dataclasses.fields(cls)}
    missing = [n for n in (*names, *post_init_sets) if n not in names or n not in fields]
    if missing or (getattr(cls, "__post_init__", None) is not None and not post_init_sets):
        raise TypeError(f"positional_maker({cls.__name__}): {missing or 'not plain'}")
    # one (name, source, what) per field, in field order: an argument's position, a
    # default (1) or a default factory (2)
    plan: list[tuple[str, int, Any]] = []
    for name, f in fields.items():
        if name in names:
            plan.append((name, 0, names.index(name)))
        elif f.default is not dataclasses.MISSING:
            plan.append((name, 1, f.default))
        elif f.default_factory is not dataclasses.MISSING:
            plan.append((name, 2, f.default_factory))
        else:
            raise TypeError(f"positional_maker({cls.__name__}): {name} has no default")
    compiled = _compiled_maker()
    if compiled is not None:
        try:
            return compiled(cls, tuple(names), tuple(plan))
        except TypeError:  # a field that is not a plain slot: the Python path sets it
            pass
    return python_maker(cls, tuple(names), plan)


def python_maker(cls: type, names: tuple[str, ...],
                 plan: list[tuple[str, int, Any]]) -> Callable[..., Any]:
    """positional_maker's Python implementation, the reference of otel_ebpf/_fast/maker.c:
    a function generated from the field names, as dataclasses generates __init__."""
    env: dict[str, Any] = {"_new": object.__new__, "_cls": cls, "_set": object.__setattr__}
    frozen = cls.__dataclass_params__.frozen  # set as its own __init__ does, past __setattr__
    lines = [f"def make({', '.join(names)}):", "    o = _new(_cls)"]
    for name, source, what in plan:
        if source == 0:
            value = name
        elif source == 1:
            env[f"_d_{name}"] = what
            value = f"_d_{name}"
        else:
            env[f"_f_{name}"] = what
            value = f"_f_{name}()"
        lines.append(f"    _set(o, {name!r}, {value})" if frozen else f"    o.{name} = {value}")
    lines.append("    return o")
    exec("\n".join(lines), env)  # noqa: S102 - code made from field names, as dataclasses does
    make = env["make"]
    make.names = names  # as the compiled maker's
    return make


def _compiled_maker() -> Callable[..., Any] | None:
    """otel_ebpf._fast.maker.Maker, or None when the agent's C extensions are not built
    (or OTEL_EBPF_PURE_PYTHON is set): a plugin loaded on its own keeps the Python path."""
    try:
        from otel_ebpf import _fast
    except ImportError:
        return None
    module = _fast.maker
    return None if module is None else module.Maker
