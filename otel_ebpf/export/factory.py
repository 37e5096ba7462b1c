"""Exporters from Collector-style config: `otlp` (gRPC), `otlphttp`, `file`, `debug`.

Instance names follow the Collector: `type` or `type/name` (`otlp/tempo`). For the OTLP
exporters, absent keys are left to the SDK, which then reads the standard
OTEL_EXPORTER_OTLP_* variables exactly as any OTel SDK would; an `endpoint` that is
present but empty disables the exporter (the default config writes
`endpoint: ${env:OTEL_EXPORTER_OTLP_ENDPOINT}`, so OTLP is on only when that is set).
"""

from __future__ import annotations

import os
from collections.abc import Callable, Mapping
from typing import Any
from urllib.parse import urlsplit

from opentelemetry.sdk.metrics.export import MetricExporter
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_ebpf.config.schema import DEFAULT_NUM_CONSUMERS
from otel_ebpf.export.debug import DEFAULT_VERBOSITY, DebugMetricExporter, DebugSpanExporter
from otel_ebpf.export.file import FileMetricExporter, FileSpanExporter

Config = Mapping[str, Any]

# The OTLP exporters (grpc, protobuf, the SDK's exporters: ~20 MB resident) are imported
# when a config names one, not by every agent: the file and debug exporters need none.


def _grpc_compression() -> dict[str, Any]:
    import grpc  # noqa: PLC0415 (see above)
    return {"gzip": grpc.Compression.Gzip, "none": grpc.Compression.NoCompression}


def _http_compression() -> dict[str, Any]:
    from opentelemetry.exporter.otlp.proto.http import Compression  # noqa: PLC0415
    return {"gzip": Compression.Gzip, "deflate": Compression.Deflate,
            "none": Compression.NoCompression}


class ExporterConfigError(ValueError):
    """An exporter's config cannot be used (unknown type, unreadable TLS file...)."""


class DisabledExporter(SpanExporter, MetricExporter):
    """Stands in for an exporter switched off by an empty endpoint; pipelines skip it.

    `reason` is the one info line the caller logs.
    """

    def __init__(self, name: str, reason: str) -> None:
        MetricExporter.__init__(self)
        self.name = name
        self.reason = reason

    def export(self, *args: Any, **kwargs: Any) -> Any:
        return SpanExportResult.SUCCESS

    def force_flush(self, timeout_millis: float = 10_000) -> bool:
        return True

    def shutdown(self, *args: Any, **kwargs: Any) -> None:
        pass


def exporter_type(name: str) -> str:
    """`otlp/tempo` -> `otlp`."""
    return name.partition("/")[0]


def _read(path: str | None, what: str, name: str) -> bytes | None:
    if not path:
        return None
    try:
        with open(path, "rb") as f:
            return f.read()
    except OSError as e:
        raise ExporterConfigError(f"exporters.{name}.tls.{what}: cannot read {path!r}: {e.strerror}") from e


def _compression(cfg: Config, table: dict[str, Any], name: str) -> Any:
    value = cfg.get("compression")
    if value is None:
        return None  # the SDK reads OTEL_EXPORTER_OTLP_*COMPRESSION
    try:
        return table[str(value).lower()]
    except KeyError:
        raise ExporterConfigError(
            f"exporters.{name}.compression: expected one of {sorted(table)}, got {value!r}"
        ) from None


def _timeout(cfg: Config) -> float | None:
    value = cfg.get("timeout")
    return None if value is None else float(value)


def _grpc_kwargs(cfg: Config, name: str) -> dict[str, Any]:
    tls = cfg.get("tls") or {}
    kwargs: dict[str, Any] = {
        "endpoint": cfg.get("endpoint"),
        # only a true `insecure` is passed: an explicit False would make the SDK use TLS
        # even for an http:// endpoint; left out, the scheme decides, then
        # OTEL_EXPORTER_OTLP_INSECURE, then TLS by default, as the OTel spec says
        "insecure": True if tls.get("insecure") else None,
        "timeout": _timeout(cfg),
        "compression": _compression(cfg, _grpc_compression(), name),
    }
    if headers := cfg.get("headers"):
        # gRPC metadata keys must be lower-case: grpcio rejects the call otherwise
        kwargs["headers"] = {str(k).lower(): str(v) for k, v in headers.items()}
    if not tls.get("insecure") and any(tls.get(k) for k in ("ca_file", "cert_file", "key_file")):
        import grpc  # noqa: PLC0415 (imported when used)
        kwargs["credentials"] = grpc.ssl_channel_credentials(
            root_certificates=_read(tls.get("ca_file"), "ca_file", name),
            private_key=_read(tls.get("key_file"), "key_file", name),
            certificate_chain=_read(tls.get("cert_file"), "cert_file", name),
        )
    return kwargs


def _http_kwargs(cfg: Config, name: str, signal: str) -> dict[str, Any]:
    tls = cfg.get("tls") or {}
    # like the Collector: <endpoint>/v1/<signal>, unless traces_endpoint/metrics_endpoint says
    endpoint = cfg.get(f"{signal}_endpoint")
    if not endpoint and cfg.get("endpoint"):
        endpoint = f"{str(cfg['endpoint']).rstrip('/')}/v1/{signal}"
    kwargs: dict[str, Any] = {
        "endpoint": endpoint,
        "certificate_file": tls.get("ca_file"),
        "client_certificate_file": tls.get("cert_file"),
        "client_key_file": tls.get("key_file"),
        "timeout": _timeout(cfg),
        "compression": _compression(cfg, _http_compression(), name),
    }
    if headers := cfg.get("headers"):
        kwargs["headers"] = {str(k): str(v) for k, v in headers.items()}
    return kwargs


def _drop_none(kwargs: dict[str, Any]) -> dict[str, Any]:
    # an argument left out, not passed as None, is what makes the SDK consult the environment
    return {k: v for k, v in kwargs.items() if v is not None}


def _consumers(exporter: SpanExporter, cfg: Config) -> SpanExporter:
    """How many export requests the span queue may have in flight to it (ExportQueue
    reads `num_consumers`): the OTLP exporters take several at once (a gRPC channel and the
    HTTP exporter's connection pool are shared by threads)."""
    exporter.num_consumers = (cfg.get("sending_queue") or {}).get(  # type: ignore[attr-defined]
        "num_consumers", DEFAULT_NUM_CONSUMERS)
    return exporter


def _grpc_spans(cfg: Config, name: str) -> SpanExporter:
    from otel_ebpf.export.otlp_grpc import GrpcSpanExporter  # noqa: PLC0415
    return _consumers(GrpcSpanExporter(**_drop_none(_grpc_kwargs(cfg, name))), cfg)


def _http_spans(cfg: Config, name: str) -> SpanExporter:
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import (  # noqa: PLC0415
        OTLPSpanExporter,
    )
    return _consumers(OTLPSpanExporter(**_drop_none(_http_kwargs(cfg, name, "traces"))), cfg)


def _grpc_metrics(cfg: Config, name: str) -> MetricExporter:
    from otel_ebpf.export.otlp_grpc import GrpcMetricExporter  # noqa: PLC0415
    return GrpcMetricExporter(name=name, **_drop_none(_grpc_kwargs(cfg, name)))


def _http_metrics(cfg: Config, name: str) -> MetricExporter:
    from opentelemetry.exporter.otlp.proto.http.metric_exporter import (  # noqa: PLC0415
        OTLPMetricExporter,
    )
    return OTLPMetricExporter(**_drop_none(_http_kwargs(cfg, name, "metrics")))


_SPAN_BUILDERS: dict[str, Callable[[Config, str], SpanExporter]] = {
    "otlp": _grpc_spans,
    "otlphttp": _http_spans,
    "file": lambda cfg, name: FileSpanExporter(_path(cfg, name)),
    "debug": lambda cfg, name: DebugSpanExporter(cfg.get("verbosity", DEFAULT_VERBOSITY)),
}
_METRIC_BUILDERS: dict[str, Callable[[Config, str], MetricExporter]] = {
    "otlp": _grpc_metrics,
    "otlphttp": _http_metrics,
    "file": lambda cfg, name: FileMetricExporter(_path(cfg, name)),
    "debug": lambda cfg, name: DebugMetricExporter(cfg.get("verbosity", DEFAULT_VERBOSITY)),
}


def _path(cfg: Config, name: str) -> str:
    if not cfg.get("path"):
        raise ExporterConfigError(f"exporters.{name}.path: a file path is required")
    return str(cfg["path"])


def _is_empty(endpoint: Any) -> bool:
    return isinstance(endpoint, str) and not endpoint.strip()


def _build(exporters_config: Mapping[str, Config | None], builders: dict[str, Callable]) -> dict:
    out = {}
    for name, cfg in exporters_config.items():
        cfg = cfg or {}
        kind = exporter_type(name)
        if kind not in builders:
            raise ExporterConfigError(
                f"exporters.{name}: unknown exporter type {kind!r}, expected one of {sorted(builders)}"
            )
        if kind in ("otlp", "otlphttp") and _is_empty(cfg.get("endpoint")):
            out[name] = DisabledExporter(name, f"exporter {name} is off: its endpoint is empty")
        else:
            out[name] = builders[kind](cfg, name)
    return out


def build_span_exporters(exporters_config: Mapping[str, Config | None]) -> dict[str, SpanExporter]:
    """One SpanExporter per configured instance; a DisabledExporter for an empty endpoint.

    Raises ExporterConfigError, or FileExporterError for an unwritable file path.
    """
    return _build(exporters_config, _SPAN_BUILDERS)


def build_metric_exporters(exporters_config: Mapping[str, Config | None]) -> dict[str, MetricExporter]:
    """As build_span_exporters, for metrics."""
    return _build(exporters_config, _METRIC_BUILDERS)


__all__ = [
    "DisabledExporter",
    "ExporterConfigError",
    "build_metric_exporters",
    "build_span_exporters",
    "exporter_type",
]


# Where the SDK exporters send when nothing names an endpoint (OTLP specification defaults).
_DEFAULT_PORTS = {"otlp": 4317, "otlphttp": 4318}
_ENV_ENDPOINTS = ("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
                  "OTEL_EXPORTER_OTLP_ENDPOINT")


def _port_of(endpoint: str, default: int) -> int | None:
    try:
        url = urlsplit(endpoint if "//" in endpoint else f"//{endpoint}")
        return url.port or default
    except ValueError:
        return None


def export_ports(
    exporters_config: Mapping[str, Config | None], environ: Mapping[str, str] = os.environ
) -> set[int]:
    """Ports of the OTLP endpoints the agent sends to. The receiving side of its own
    exports must not be traced: each exported batch would make spans of its own."""
    ports: set[int] = set()
    for name, cfg in exporters_config.items():
        kind = exporter_type(name)
        if kind not in _DEFAULT_PORTS:
            continue
        cfg = cfg or {}
        endpoint = cfg.get("endpoint")
        if _is_empty(endpoint):
            continue  # disabled
        candidates = [endpoint] if endpoint else [environ.get(v, "") for v in _ENV_ENDPOINTS]
        found = {_port_of(e, _DEFAULT_PORTS[kind]) for e in candidates if e}
        ports |= {p for p in found if p} or {_DEFAULT_PORTS[kind]}
    return ports
