"""Neutral span -> ReadableSpan, and the IDs correlate/ assigns."""

from opentelemetry import trace as trace_api
from opentelemetry.trace.status import StatusCode as ApiStatusCode
from otel_ebpf.protocols.base import ConnInfo, NeutralSpan, Role, SpanEvent, SpanKind, StatusCode

from otel_ebpf import __version__
from otel_ebpf.correlate import assign_ids
from otel_ebpf.spans.clock import KernelClock
from otel_ebpf.spans.convert import event_wall, ready, resource_for, to_readable
from tests.support.host_clock import HostClock

CONN = ConnInfo(pid=4321, fd=7, generation=1, role=Role.SERVER, transport="stream", family="ipv4", comm="uvicorn")


OFFSET = 1_700_000_000_000_000_000


def fixed_clock() -> KernelClock:
    """A clock whose wall clock never moved: wall = monotonic + OFFSET."""
    return HostClock(mono=0, offset=OFFSET).clock()


def make_span(**kw) -> NeutralSpan:
    fields = dict(name="GET /items", kind=SpanKind.SERVER, start_ns=1_000, end_ns=5_000, conn=CONN)
    fields.update(kw)
    return NeutralSpan(**fields)


def test_assign_ids_fills_only_missing():
    keep = make_span(trace_id=b"\x01" * 16, span_id=b"\x02" * 8)
    fresh = make_span()
    zero = make_span(trace_id=bytes(16), span_id=bytes(8))
    assign_ids([keep, fresh, zero])
    assert keep.trace_id == b"\x01" * 16 and keep.span_id == b"\x02" * 8
    for span in (fresh, zero):
        assert len(span.trace_id) == 16 and any(span.trace_id)
        assert len(span.span_id) == 8 and any(span.span_id)
    assert fresh.trace_id != zero.trace_id


def test_assign_ids_are_random():
    spans = [make_span() for _ in range(200)]
    assign_ids(spans)
    assert len({s.span_id for s in spans}) == 200


def test_to_readable_fields():
    span = make_span(
        attributes={"http.request.method": "GET", "http.response.status_code": 500, "tags": ["a", "b"]},
        status=StatusCode.ERROR,
        status_message="boom",
        events=[SpanEvent("first byte", 3_000, {"size": 10})],
        trace_id=bytes.fromhex("0af7651916cd43dd8448eb211c80319c"),
        span_id=bytes.fromhex("b7ad6b7169203331"),
        parent_span_id=bytes.fromhex("00f067aa0ba902b7"),
    )
    resource = resource_for({"service.name": "uvicorn", "process.pid": 4321})
    out = to_readable(ready(span, resource, fixed_clock()))
    assert out.name == "GET /items"
    assert out.kind is trace_api.SpanKind.SERVER
    assert out.context.trace_id == 0x0AF7651916CD43DD8448EB211C80319C
    assert out.context.span_id == 0xB7AD6B7169203331
    assert out.context.trace_flags.sampled and not out.context.is_remote
    assert out.parent.span_id == 0x00F067AA0BA902B7
    assert out.parent.trace_id == out.context.trace_id
    assert out.parent.is_remote  # a server span's parent is the client's, over the wire
    assert out.start_time == OFFSET + 1_000
    assert out.end_time == OFFSET + 5_000
    assert out.status.status_code is ApiStatusCode.ERROR and out.status.description == "boom"
    assert out.attributes["tags"] == ["a", "b"]
    assert out.events[0].name == "first byte" and out.events[0].timestamp == OFFSET + 3_000
    assert dict(out.events[0].attributes) == {"size": 10}
    assert out.resource.attributes["service.name"] == "uvicorn"
    assert out.instrumentation_scope.name == "otel-ebpf"
    assert out.instrumentation_scope.version == __version__


def test_start_and_end_are_mapped_and_events_lie_between_them():
    """While the clock absorbs a step the mapping is no plain shift: the end is the
    mapping's own value, not the start plus the kernel duration."""
    host = HostClock()
    clock = host.clock()
    host.offset += 100_000_000  # the host steps its wall clock 100 ms forward
    host.mono += 10_000_000
    clock.refresh()
    start, end = host.mono + 1_000_000, host.mono + 9_000_000
    times = [start - 5, start, start + 1, (start + end) // 2, end - 1, end, end + 5]
    span = make_span(start_ns=start, end_ns=end, events=[SpanEvent("e", t) for t in times])
    ready(span, resource_for({}), clock)
    assert (span.wall_ns, span.wall_end_ns) == (clock.to_wall(start), clock.to_wall(end))
    assert span.wall_end_ns - span.wall_ns == 9 * (end - start) // 8  # the offset climbing
    walls = [event_wall(span, t) for t in times]
    assert walls[:2] == [span.wall_ns] * 2 and walls[-2:] == [span.wall_end_ns] * 2
    assert walls == sorted(walls) and len(set(walls)) == 5
    assert walls[3] == span.wall_ns + (span.wall_end_ns - span.wall_ns) // 2
    out = to_readable(span)
    assert (out.start_time, out.end_time) == (span.wall_ns, span.wall_end_ns)
    assert [e.timestamp for e in out.events] == walls


def test_an_event_of_an_instant_span_is_at_its_start():
    span = ready(make_span(start_ns=7_000, end_ns=7_000, events=[SpanEvent("e", 7_100)]),
                 resource_for({}), fixed_clock())
    assert event_wall(span, 7_100) == span.wall_ns == span.wall_end_ns == OFFSET + 7_000


def test_kinds_map_by_meaning():
    assign = [make_span(kind=k) for k in SpanKind]
    assign_ids(assign)
    kinds = [to_readable(ready(s, resource_for({}), fixed_clock())).kind.name for s in assign]
    assert kinds == [k.name for k in SpanKind]


def test_no_parent_and_client_parent_is_local():
    root, child = make_span(kind=SpanKind.CLIENT), make_span(kind=SpanKind.CLIENT)
    assign_ids([root, child])
    child.parent_span_id = root.span_id
    assert to_readable(ready(root, resource_for({}), fixed_clock())).parent is None
    assert not to_readable(ready(child, resource_for({}), fixed_clock())).parent.is_remote


def test_status_message_only_on_error():
    span = make_span(status=StatusCode.OK, status_message="fine")
    assign_ids([span])
    out = to_readable(ready(span, resource_for({}), fixed_clock()))
    assert out.status.status_code is ApiStatusCode.OK and out.status.description is None


def test_resources_are_shared_per_attribute_set():
    a = resource_for({"service.name": "x", "process.command_args": ["a", "b"]})
    b = resource_for({"process.command_args": ["a", "b"], "service.name": "x"})
    c = resource_for({"service.name": "y"})
    assert a is b and a is not c
