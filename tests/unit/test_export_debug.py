"""The console exporter's three verbosities, on spans the real HTTP/1 parser made from
bytes (client and server side, a 200 and a 500) and on hand-built edge cases."""

import io

from opentelemetry.sdk.metrics import MeterProvider
from opentelemetry.sdk.metrics.export import InMemoryMetricReader
from otel_ebpf.protocols.base import (
    ConnInfo,
    Direction,
    NeutralSpan,
    Role,
    SpanEvent,
    SpanKind,
    StatusCode,
)
from otel_ebpf.protocols.http1 import HTTP1Parser
from rich.console import Console

from otel_ebpf.correlate import assign_ids
from otel_ebpf.export.debug import DebugMetricExporter, DebugSpanExporter, header_line, span_line
from otel_ebpf.spans.clock import KernelClock
from otel_ebpf.spans.convert import ready, resource_for, to_readable
from otel_ebpf.protocols.testing import ConnectionDriver, conn_info

CONN = ConnInfo(pid=5, fd=3, generation=1, role=Role.SERVER, transport="stream", family="ipv4")
GET = b"GET /items/42?x=1 HTTP/1.1\r\nHost: shop.internal:8080\r\n\r\n"
OK = b"HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\n{}"
FAIL = b"HTTP/1.1 500 Internal Server Error\r\nContent-Length: 0\r\n\r\n"


def console():
    # as the agent's: no wrapping of long lines
    return Console(file=io.StringIO(), width=120, color_system=None, soft_wrap=True)


def http_spans(response: bytes, role: Role, service: str, duration_ns: int):
    """The spans the HTTP/1 parser makes of one exchange, as the exporters get them."""
    conn = conn_info(role)
    driver = ConnectionDriver(HTTP1Parser(), conn, step_ns=duration_ns)
    requests = Direction.EGRESS if role == Role.CLIENT else Direction.INGRESS
    driver.feed(requests, GET)
    driver.feed(requests.opposite, response)
    driver.close()
    neutral = driver.spans()
    assign_ids(neutral)
    resource = resource_for({"service.name": service})
    return neutral, [to_readable(ready(s, resource, KernelClock())) for s in neutral]


def hand_built():
    neutral = [
        NeutralSpan(
            name="GET [/items]",  # brackets: must not be read as rich markup
            kind=SpanKind.SERVER,
            start_ns=1_000_000,
            end_ns=3_500_000,
            conn=CONN,
            attributes={"http.request.method": "GET", "url.path": "/items/" + "x" * 200},
            status=StatusCode.ERROR,
            status_message="500",
            events=[SpanEvent("first byte", 2_000_000, {"n": 1})],
        )
    ]
    assign_ids(neutral)
    return neutral, [to_readable(ready(s, resource_for({"service.name": "shop"}), KernelClock())) for s in neutral]


def test_basic_counts_only():
    out = console()
    DebugSpanExporter("basic", out).export(hand_built()[1] * 3)
    assert out.file.getvalue() == "Traces: 3 spans\n"


def test_normal_is_the_default():
    assert DebugSpanExporter().verbosity == "normal"
    assert DebugMetricExporter().verbosity == "normal"


def test_normal_one_readable_line_per_span():
    client_neutral, client = http_spans(OK, Role.CLIENT, "checkout", 2_500_000)
    server_neutral, server = http_spans(FAIL, Role.SERVER, "inventory-service", 40_000)
    out = console()
    DebugSpanExporter("normal", out).export(client + server)
    header, client_line, server_line = out.file.getvalue().splitlines()
    assert header.split() == ["KIND", "SERVICE", "NAME", "STATUS", "DURATION", "PEER", "TRACE",
                              "TARGET"]
    assert client_line.split() == [
        "CLIENT", "checkout", "GET", "200", "2.500ms", "shop.internal:8080",
        client_neutral[0].trace_id.hex()[:8], "/items/42",
    ]
    assert server_line.split() == [
        "SERVER", "inventory-service", "GET", "ERROR", "500", "40.0µs", "10.0.0.2:40000",
        server_neutral[0].trace_id.hex()[:8], "/items/42",
    ]
    # each value starts under its column's title, whatever the values' lengths; the
    # duration is right-aligned, ending where its title ends
    for line, values in ((client_line, ("checkout", "shop.internal:8080")),
                         (server_line, ("inventory-service", "10.0.0.2:40000"))):
        for title, value in zip(("SERVICE", "PEER"), values):
            assert line.index(value) == header.index(title), (title, line)
        for title in ("NAME", "STATUS", "TRACE", "TARGET"):
            assert line[header.index(title) - 1] == " " != line[header.index(title)], (title, line)
        end = header.index("DURATION") + len("DURATION")
        assert line[end - 2:end] in ("ms", "µs") and line[end] == " "


def test_normal_header_once_and_long_values_cut_in_their_column():
    out = console()
    exporter = DebugSpanExporter("normal", out)
    _, spans = hand_built()
    exporter.export(spans)
    exporter.export(spans)
    lines = out.file.getvalue().splitlines()
    assert [line.startswith("KIND") for line in lines] == [True, False, False]
    assert lines[1] == lines[2]
    assert "GET [/items]" in lines[1]  # markup-looking text printed as it is
    # a target longer than the line allows is not cut (last column); the status column
    # says ERROR even without a protocol code
    assert lines[1].endswith("/items/" + "x" * 200)
    assert lines[1].split()[4] == "ERROR"


def test_normal_cuts_a_long_service_name_keeping_columns():
    _, (span,) = http_spans(OK, Role.CLIENT, "a-very-long-service-name-indeed", 1_000_000)
    line = span_line(span).plain
    header = header_line().plain
    assert "a-very-long-service…" in line
    assert line.index("GET") == header.index("NAME")


def test_plain_without_a_terminal_coloured_on_one():
    _, spans = http_spans(FAIL, Role.SERVER, "inventory", 1_000_000)
    plain = Console(file=io.StringIO(), width=300)  # a file: not a terminal
    DebugSpanExporter("normal", plain).export(spans)
    assert "\x1b[" not in plain.file.getvalue()
    tty = Console(file=io.StringIO(), width=300, force_terminal=True, color_system="standard")
    DebugSpanExporter("normal", tty).export(spans)
    assert "\x1b[" in tty.file.getvalue()  # ERROR in red, and so on


def test_detailed_every_field():
    out = console()
    neutral, readable = hand_built()
    DebugSpanExporter("detailed", out).export(readable)
    text = out.file.getvalue()
    assert text.startswith("Traces: 1 spans\n")
    assert neutral[0].trace_id.hex() in text and neutral[0].span_id.hex() in text
    assert "-> url.path: '/items/" + "x" * 200 + "'" in text
    assert "-> service.name: 'shop'" in text
    assert "event first byte" in text and "-> n: 1" in text
    assert "status message : 500" in text
    assert "kind           : SERVER" in text and "scope          : otel-ebpf" in text


def test_metrics():
    reader = InMemoryMetricReader()
    provider = MeterProvider(metric_readers=[reader])
    counter = provider.get_meter("m").create_counter("otel_ebpf.events", unit="{event}")
    counter.add(5, {"cpu": "0"})
    counter.add(2, {"cpu": "1"})
    data = reader.get_metrics_data()
    basic, detailed = console(), console()
    DebugMetricExporter("basic", basic).export(data)
    DebugMetricExporter("detailed", detailed).export(data)
    provider.shutdown()
    assert basic.file.getvalue() == "Metrics: 1 metrics, 2 data points\n"
    text = detailed.file.getvalue()
    assert "otel_ebpf.events ({event})" in text
    assert "{cpu=0} 5" in text and "{cpu=1} 2" in text


def test_default_console_is_stderr():
    assert DebugSpanExporter().console.stderr


def test_control_characters_from_the_wire_stay_out_of_the_console():
    neutral = [NeutralSpan(name="publish /chat\x1b[2J\nter", kind=SpanKind.PRODUCER,
                           start_ns=1_000, end_ns=2_000, conn=CONN,
                           attributes={"messaging.destination.name": "/chat\x1b[2J\nter"})]
    assign_ids(neutral)
    spans = [to_readable(ready(s, resource_for({"service.name": "talker"}), KernelClock())) for s in neutral]
    for tty in (False, True):
        out = Console(file=io.StringIO(), width=200, soft_wrap=True, force_terminal=tty,
                      color_system="standard" if tty else None)
        DebugSpanExporter("normal", out).export(spans)
        header, line = out.file.getvalue().splitlines()  # one line for the span
        assert "\x1b[2J" not in line and line.count("/chat?[2J?ter") == 2  # name, target
