"""Console exporters, like the OTel Collector's `debug` exporter: basic, normal or detailed.

They print to stderr, like every log line of the agent: stdout stays free for the output
a command is asked for (`otel-ebpf check --json`, say) and can be piped.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from datetime import UTC, datetime
from typing import Any

from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult
from rich.console import Console
from rich.text import Text

VERBOSITIES = ("basic", "normal", "detailed")
_SHORT_ATTRS = 100  # characters of attributes on a `normal` line


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
    return f"{ns / 1e6:.3f}ms" if ns < 10**9 else f"{ns / 1e9:.3f}s"


def _check_verbosity(verbosity: str) -> str:
    if verbosity not in VERBOSITIES:
        raise ValueError(f"debug exporter verbosity must be one of {VERBOSITIES}, not {verbosity!r}")
    return verbosity


class DebugSpanExporter(SpanExporter):
    def __init__(self, verbosity: str = "basic", console: Console | None = None) -> None:
        self.verbosity = _check_verbosity(verbosity)
        self.console = console or _stderr_console()

    def export(self, spans: Sequence[ReadableSpan]) -> SpanExportResult:
        self.console.print(Text(f"Traces: {len(spans)} spans", style="bold"))
        if self.verbosity != "basic":
            for span in spans:
                self._print_span(span)
        return SpanExportResult.SUCCESS

    def _print_span(self, span: ReadableSpan) -> None:
        service = span.resource.attributes.get("service.name", "") if span.resource else ""
        line = Text.assemble(
            (str(service), "cyan"),
            " ",
            (span.name, "bold"),
            " ",
            span.kind.name,
            " ",
            (span.status.status_code.name, "red" if not span.status.is_ok else "green"),
            " ",
            _duration(span),
        )
        if self.verbosity == "normal":
            line.append(" " + _attrs(span.attributes, _SHORT_ATTRS), "dim")
            self.console.print(line)
            return
        ctx, parent = span.context, span.parent
        self.console.print(line)
        details = [
            ("trace id", f"{ctx.trace_id:032x}"),
            ("span id", f"{ctx.span_id:016x}"),
            ("parent id", f"{parent.span_id:016x}" if parent else ""),
            ("start", _time(span.start_time)),
            ("end", _time(span.end_time)),
            ("status message", span.status.description or ""),
        ]
        for key, value in details:
            self.console.print(Text(f"    {key:<15}: {value}"))
        self._print_map("resource", span.resource.attributes if span.resource else {})
        self._print_map("attributes", span.attributes)
        for event in span.events:
            self.console.print(Text(f"    event {event.name} at {_time(event.timestamp)}"))
            self._print_map(None, event.attributes, indent=8)

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
    def __init__(self, verbosity: str = "basic", console: Console | None = None) -> None:
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
