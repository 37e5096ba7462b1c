"""Exporting: OTLP (gRPC, HTTP), OTLP/JSON files and the console, behind per-exporter queues."""

from otel_ebpf.export.factory import (
    DisabledExporter,
    ExporterConfigError,
    build_metric_exporters,
    build_span_exporters,
)
from otel_ebpf.export.file import FileExporterError
from otel_ebpf.export.pipeline import MetricsPipeline, TracePipeline
from otel_ebpf.export.queue import ExportQueue

__all__ = [
    "DisabledExporter",
    "ExportQueue",
    "ExporterConfigError",
    "FileExporterError",
    "MetricsPipeline",
    "TracePipeline",
    "build_metric_exporters",
    "build_span_exporters",
]
