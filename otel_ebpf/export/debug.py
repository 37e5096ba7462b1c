"""Console exporters, like the OTel Collector's `debug` exporter: basic (counts), normal
(one aligned line per span) or detailed (everything a span or metric holds).

They print to stderr, like every log line of the agent: stdout stays free for the output
a command is asked for (`otel-ebpf check`'s table, say) and can be piped. On a terminal
the columns are coloured; written to a file or a pipe they are plain text.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from opentelemetry.trace import StatusCode
from rich.console import Console
from rich.text import Span, Text

VERBOSITIES = ("basic", "normal", "detailed")
DEFAULT_VERBOSITY = "normal"
_SHORT_ATTRS = 100  # characters of attributes on a metric's `normal` line

# The `normal` line's columns: (title, width, style). Fixed widths, not fitted to each
# batch, so that the columns stay put from one batch to the next; a longer value is cut
# with "…". The last column (the request's target) is not padded.
_COLUMNS = (
    ("KIND", 8, "magenta"),
    ("SERVICE", 20, "cyan"),
    ("NAME", 28, "bold"),
    ("STATUS", 13, ""),
    ("DURATION", 10, ""),
    ("PEER", 22, ""),
    ("TRACE", 8, "dim"),
    ("TARGET", 0, "dim"),
)
# attributes that say how a call ended, in the order they are looked for
_OUTCOME_KEYS = ("http.response.status_code", "rpc.response.status_code", "error.type")
# attributes that say what was asked for, for the last column
_TARGET_KEYS = ("url.path", "rpc.method", "messaging.destination.name", "db.collection.name")


def _stderr_console() -> Console:
    return Console(stderr=True, highlight=False, soft_wrap=True)


def _attrs(attributes: Mapping[str, Any] | None, limit: int | None = None) -> str:
    text = " ".join(f"{k}={v}" for k, v in (attributes or {}).items())
    if limit is not None and len(text) > limit:
        text = text[: limit - 1] + "…"
    return text


def _time(ns: int | None) -> str:
    if not ns:
        return "-"
    return datetime.fromtimestamp(ns / 1e9, UTC).isoformat(timespec="microseconds")


def _duration(span: ReadableSpan) -> str:
    ns = (span.end_time or 0) - (span.start_time or 0)
    if ns < 10**6:
        return f"{ns / 1e3:.1f}µs"
    return f"{ns / 1e6:.3f}ms" if ns < 10**9 else f"{ns / 1e9:.3f}s"


# values come from the wire: a control character (an escape sequence, a newline) in a
# topic or a path must neither reach a terminal nor break the one-line-per-span shape
_CONTROLS = {c: "?" for c in (*range(0x20), 0x7F)}


def _fit(value: str, width: int) -> str:
    """`value`, control characters replaced, padded or cut to exactly `width` characters
    (0: as long as it is)."""
    if not value.isprintable():  # rare: the check is cheaper than the translation
        value = value.translate(_CONTROLS)
    if not width:
        return value
    return value.ljust(width) if len(value) <= width else value[: width - 1] + "…"


def _address(host: Any, port: Any) -> str:
    host = str(host)
    if ":" in host:  # IPv6: [::1]:8000
        host = f"[{host}]"
    return f"{host}:{port}" if port else host


def _peer(span: ReadableSpan) -> str:
    """Who the span's process talked to: the server a CLIENT called (by the name it used),
    else the address at the other end of the socket."""
    attrs = span.attributes or {}
    if span.kind.name == "CLIENT" and attrs.get("server.address"):
        return _address(attrs["server.address"], attrs.get("server.port"))
    for host, port in (("network.peer.address", "network.peer.port"),
                       ("client.address", "client.port")):
        if attrs.get(host):
            return _address(attrs[host], attrs.get(port))
    return str(attrs.get("network.transport", "-"))


def _status(span: ReadableSpan) -> tuple[str, str]:
    """(text, style): the protocol's own outcome (200, NOT_FOUND, timeout) and whether the
    span failed."""
    attrs = span.attributes or {}
    outcome = next((str(attrs[k]) for k in _OUTCOME_KEYS if k in attrs), "")
    code = span.status.status_code
    if code is StatusCode.ERROR:
        return (f"ERROR {outcome}".rstrip(), "bold red")
    return (outcome or code.name, "green" if code is StatusCode.OK or outcome else "")


def _target(span: ReadableSpan) -> str:
    attrs = span.attributes or {}
    return next((str(attrs[k]) for k in _TARGET_KEYS if attrs.get(k)), "")


def _cells(span: ReadableSpan) -> list[tuple[str, str]]:
    """The `normal` line's values, each fitted to its column, with its style."""
    service = span.resource.attributes.get("service.name", "") if span.resource else ""
    status, status_style = _status(span)
    values = (
        (span.kind.name, ""),
        (str(service), ""),
        (span.name, ""),
        (status, status_style),
        (_duration(span).rjust(10), ""),
        (_peer(span), ""),
        (f"{span.context.trace_id:032x}"[:8] if span.context else "-", ""),
        (_target(span), ""),
    )
    return [(_fit(value, width), style or column_style)
            for (value, style), (_, width, column_style) in zip(values, _COLUMNS)]


def span_row(span: ReadableSpan) -> str:
    """The `normal` line of one span as plain text: kind, service, name, status, duration,
    peer, the trace ID's first 8 hex digits and the target, in fixed-width columns."""
    return " ".join(text for text, _ in _cells(span)).rstrip()


# SGR codes of the styles above: `normal` lines are coloured by hand, for rich's rendering
# costs ten times what the rest of the line does (docs/decisions.md, "What a first run
# shows")
_SGR = {"magenta": "35", "cyan": "36", "bold": "1", "dim": "2", "green": "32",
        "bold red": "1;31"}


def span_row_coloured(span: ReadableSpan) -> str:
    """span_row with ANSI colours, for a terminal."""
    return " ".join(f"\x1b[{_SGR[style]}m{text}\x1b[0m" if style else text
                    for text, style in _cells(span)).rstrip()


def span_line(span: ReadableSpan) -> Text:
    """span_row with each column's style, for a terminal."""
    cells = _cells(span)
    plain = " ".join(text for text, _ in cells).rstrip()
    styles, at = [], 0
    for text, style in cells:
        if style and at < len(plain):
            styles.append(Span(at, min(at + len(text), len(plain)), style))
        at += len(text) + 1
    return Text(plain, spans=styles)


def header_line() -> Text:
    """The column titles, printed above the first `normal` batch."""
    titles = [_fit(title, width) if title != "DURATION" else title.rjust(width)
              for title, width, _ in _COLUMNS]
    return Text(" ".join(titles).rstrip(), style="bold")


def _check_verbosity(verbosity: str) -> str:
    if verbosity not in VERBOSITIES:
        raise ValueError(f"debug exporter verbosity must be one of {VERBOSITIES}, not {verbosity!r}")
    return verbosity


class DebugSpanExporter(SpanExporter):
    def __init__(self, verbosity: str = DEFAULT_VERBOSITY, console: Console | None = None) -> None:
        self.verbosity = _check_verbosity(verbosity)
        self.console = console or _stderr_console()
        self._header_printed = False

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        if self.verbosity == "basic":
            self.console.print(Text(f"Traces: {len(spans)} spans", style="bold"))
        elif self.verbosity == "normal":
            self._print_lines(spans)
        else:
            self.console.print(Text(f"Traces: {len(spans)} spans", style="bold"))
            for span in spans:
                self._print_span(span)
        return SpanExportResult.SUCCESS

    def _print_lines(self, spans: Sequence[ReadableSpan]) -> None:
        if not spans:
            return
        # plain text to a file or a pipe (or with NO_COLOR), colours on a terminal; written
        # at once, without rich's rendering, which would cost more than everything else the
        # agent does for a span
        console = self.console
        coloured = console.is_terminal and console.color_system is not None \
            and not console.no_color
        row = span_row_coloured if coloured else span_row
        rows = [row(span) for span in spans]
        if not self._header_printed:
            self._header_printed = True
            title = header_line().plain
            rows.insert(0, f"\x1b[1m{title}\x1b[0m" if coloured else title)
        console.file.write("\n".join(rows) + "\n")
        console.file.flush()

    def _print_span(self, span: ReadableSpan) -> None:
        self.console.print(span_line(span))
        ctx, parent = span.context, span.parent
        details = [
            ("trace id", f"{ctx.trace_id:032x}"),
            ("span id", f"{ctx.span_id:016x}"),
            ("parent id", f"{parent.span_id:016x}" if parent else ""),
            ("kind", span.kind.name),
            ("start", _time(span.start_time)),
            ("end", _time(span.end_time)),
            ("status", span.status.status_code.name),
            ("status message", span.status.description or ""),
            ("scope", f"{span.instrumentation_scope.name} {span.instrumentation_scope.version}"
                      if span.instrumentation_scope else ""),
        ]
        for key, value in details:
            self.console.print(Text(f"    {key:<15}: {value}"))
        self._print_map("resource", span.resource.attributes if span.resource else {})
        self._print_map("attributes", span.attributes)
        for event in span.events:
            self.console.print(Text(f"    event {event.name} at {_time(event.timestamp)}"))
            self._print_map(None, event.attributes, indent=8)
        for link in span.links:
            self.console.print(Text(f"    link to trace {link.context.trace_id:032x} "
                                    f"span {link.context.span_id:016x}"))
            self._print_map(None, link.attributes, indent=8)

    def _print_map(self, title: str | None, attributes: Mapping[str, Any] | None, indent: int = 4) -> None:
        pad = " " * indent
        if title:
            self.console.print(Text(f"{pad}{title}:"))
        for key, value in (attributes or {}).items():
            self.console.print(Text(f"{pad}  -> {key}: {value!r}"))

    def shutdown(self) -> None:
        pass

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True


def _points(data: Any) -> Iterable[Any]:
    return getattr(data, "data_points", ()) or ()


def _point_value(point: Any) -> str:
    if hasattr(point, "value"):
        return str(point.value)
    return f"count={getattr(point, 'count', '?')} sum={getattr(point, 'sum', '?')}"  # histograms


class DebugMetricExporter(MetricExporter):
    def __init__(self, verbosity: str = DEFAULT_VERBOSITY, console: Console | None = None) -> None:
        super().__init__()
        self.verbosity = _check_verbosity(verbosity)
        self.console = console or _stderr_console()

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        metrics = [
            metric
            for rm in metrics_data.resource_metrics
            for sm in rm.scope_metrics
            for metric in sm.metrics
        ]
        points = sum(len(list(_points(m.data))) for m in metrics)
        self.console.print(Text(f"Metrics: {len(metrics)} metrics, {points} data points", style="bold"))
        for metric in metrics if self.verbosity != "basic" else ():
            if self.verbosity == "normal":
                values = ", ".join(_point_value(p) for p in _points(metric.data))
                self.console.print(Text(f"{metric.name} ({metric.unit}) {values}"))
                continue
            self.console.print(Text(f"{metric.name} ({metric.unit}): {metric.description}", style="bold"))
            for point in _points(metric.data):
                attrs = _attrs(point.attributes)
                self.console.print(
                    Text(f"    {_time(point.time_unix_nano)} {{{attrs}}} {_point_value(point)}")
                )
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        pass
