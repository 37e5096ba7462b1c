"""OTLP/JSON lines, as the OTel Collector's file exporter writes them: one export request a line.

The protobuf JSON mapping with two OTLP rules on top: trace and span IDs are lower-case
hex (not base64), and enums are integers. 64-bit integers stay strings, as proto3 JSON says.
"""

from __future__ import annotations

import base64
import os
import threading
from collections.abc import Sequence
from typing import Any

import orjson
from google.protobuf.json_format import MessageToDict
from google.protobuf.message import Message
from opentelemetry.exporter.otlp.proto.common.metrics_encoder import encode_metrics
from opentelemetry.sdk.metrics.export import MetricExporter, MetricExportResult, MetricsData
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_ebpf.export.otlp_json import spans_to_otlp_json
from otel_ebpf.protocols.base import NeutralSpan

# bytes fields that OTLP/JSON writes as hex: in spans, links and metric exemplars
_HEX_FIELDS = frozenset({"traceId", "spanId", "parentSpanId"})


class FileExporterError(OSError):
    """The file exporter's path cannot be written."""

    def __init__(self, path: str, reason: str) -> None:
        super().__init__(f"file exporter: cannot write {path!r}: {reason}")
        self.path = path
        self.reason = reason


def _hex_ids(node: Any) -> Any:
    """Rewrite base64 ID fields to hex, in place, anywhere in a MessageToDict tree."""
    if isinstance(node, dict):
        for key, value in node.items():
            if key in _HEX_FIELDS and isinstance(value, str):
                node[key] = base64.b64decode(value).hex()
            else:
                _hex_ids(value)
    elif isinstance(node, list):
        for item in node:
            _hex_ids(item)
    return node


def to_otlp_json(request: Message) -> bytes:
    """One OTLP/JSON line (newline included) for an export request."""
    tree = MessageToDict(request, preserving_proto_field_name=False, use_integers_for_enums=True)
    return orjson.dumps(_hex_ids(tree)) + b"\n"


class _SharedFile:
    """An append-only file shared by the span and metric exporters of one path.

    One handle and one lock per path, so lines from both never interleave.
    """

    _open: dict[str, _SharedFile] = {}
    _registry_lock = threading.Lock()

    def __init__(self, path: str) -> None:
        self.path = path
        self.lock = threading.Lock()
        self.users = 0
        try:
            if parent := os.path.dirname(path):
                os.makedirs(parent, exist_ok=True)
            self.file = open(path, "ab")  # noqa: SIM115 (closed when its last user releases it)
        except OSError as e:
            raise FileExporterError(path, e.strerror or str(e)) from e

    @classmethod
    def acquire(cls, path: str) -> _SharedFile:
        key = os.path.realpath(path)
        with cls._registry_lock:
            shared = cls._open.get(key)
            if shared is None:
                shared = cls._open[key] = cls(path)
            shared.users += 1
            return shared

    def release(self) -> None:
        with self._registry_lock:
            self.users -= 1
            if self.users == 0:
                self._open.pop(os.path.realpath(self.path), None)
                with self.lock:
                    self.file.close()

    def write(self, data: bytes) -> None:
        with self.lock:
            self.file.write(data)
            self.file.flush()  # a batch is on disk (in the page cache) once export returns


class FileSpanExporter(SpanExporter):
    """Writes each batch of ready NeutralSpans (spans/convert.py) as one
    ExportTraceServiceRequest line. Raises FileExporterError at construction when the path
    cannot be opened for appending."""

    takes_neutral_spans = True  # ExportQueue hands it the agent's spans, not the SDK's

    def __init__(self, path: str) -> None:
        self.path = path
        self._file: _SharedFile | None = _SharedFile.acquire(path)

    def export(self, spans: Sequence[NeutralSpan]) -> SpanExportResult:  # type: ignore[override]
        if self._file is None:
            return SpanExportResult.FAILURE
        try:
            self._file.write(spans_to_otlp_json(spans))
        except (OSError, ValueError):  # disk full, file closed...
            return SpanExportResult.FAILURE
        return SpanExportResult.SUCCESS

    def shutdown(self) -> None:
        if self._file is not None:
            self._file.release()
            self._file = None

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return True  # every export flushes


class FileMetricExporter(MetricExporter):
    """Writes each collection as one ExportMetricsServiceRequest line."""

    def __init__(self, path: str) -> None:
        super().__init__()
        self.path = path
        self._file: _SharedFile | None = _SharedFile.acquire(path)

    def export(
        self, metrics_data: MetricsData, timeout_millis: float = 10_000, **kwargs: Any
    ) -> MetricExportResult:
        if self._file is None:
            return MetricExportResult.FAILURE
        try:
            self._file.write(to_otlp_json(encode_metrics(metrics_data)))
        except (OSError, ValueError):
            return MetricExportResult.FAILURE
        return MetricExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, timeout_millis: float = 30_000, **kwargs: Any) -> None:
        if self._file is not None:
            self._file.release()
            self._file = None
