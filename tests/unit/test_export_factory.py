"""Exporters from Collector-style config, and the OTEL_EXPORTER_OTLP_* fallbacks."""

import grpc
import pytest
from opentelemetry.exporter.otlp.proto.grpc.metric_exporter import OTLPMetricExporter as GrpcMetrics
from opentelemetry.exporter.otlp.proto.grpc.trace_exporter import OTLPSpanExporter as GrpcSpans
from opentelemetry.exporter.otlp.proto.http.metric_exporter import OTLPMetricExporter as HttpMetrics
from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter as HttpSpans

from otel_ebpf.export.debug import DebugMetricExporter, DebugSpanExporter
from otel_ebpf.export.factory import (
    DisabledExporter,
    ExporterConfigError,
    build_metric_exporters,
    build_span_exporters,
)
from otel_ebpf.export.file import FileExporterError, FileMetricExporter, FileSpanExporter

OTLP_ENV = [
    "OTEL_EXPORTER_OTLP_ENDPOINT",
    "OTEL_EXPORTER_OTLP_TRACES_ENDPOINT",
    "OTEL_EXPORTER_OTLP_METRICS_ENDPOINT",
    "OTEL_EXPORTER_OTLP_HEADERS",
    "OTEL_EXPORTER_OTLP_TRACES_HEADERS",
    "OTEL_EXPORTER_OTLP_COMPRESSION",
    "OTEL_EXPORTER_OTLP_TRACES_COMPRESSION",
    "OTEL_EXPORTER_OTLP_TIMEOUT",
    "OTEL_EXPORTER_OTLP_TRACES_TIMEOUT",
    "OTEL_EXPORTER_OTLP_INSECURE",
    "OTEL_EXPORTER_OTLP_TRACES_INSECURE",
    "OTEL_EXPORTER_OTLP_CERTIFICATE",
    "OTEL_EXPORTER_OTLP_TRACES_CERTIFICATE",
]


@pytest.fixture(autouse=True)
def clean_env(monkeypatch):
    for name in OTLP_ENV:
        monkeypatch.delenv(name, raising=False)


def shutdown_all(*groups):
    for group in groups:
        for exporter in group.values():
            exporter.shutdown()


def test_otlp_grpc_explicit():
    spans = build_span_exporters(
        {
            "otlp/tempo": {
                "endpoint": "tempo:4317",
                "tls": {"insecure": True},
                "headers": {"X-Scope-OrgID": "acme"},
                "compression": "gzip",
                "timeout": 2.5,
            }
        }
    )
    exporter = spans["otlp/tempo"]
    assert isinstance(exporter, GrpcSpans)
    assert exporter._endpoint == "tempo:4317"
    assert exporter._insecure is True
    assert exporter._headers == (("x-scope-orgid", "acme"),)  # gRPC metadata keys: lower-case
    assert exporter._compression is grpc.Compression.Gzip
    assert exporter._timeout == 2.5
    shutdown_all(spans)


def test_otlp_grpc_url_endpoint_and_tls_files(tmp_path):
    ca = tmp_path / "ca.pem"
    ca.write_bytes(b"-----BEGIN CERTIFICATE-----\n-----END CERTIFICATE-----\n")
    metrics = build_metric_exporters({"otlp": {"endpoint": "https://collector:4317", "tls": {"ca_file": str(ca)}}})
    exporter = metrics["otlp"]
    assert isinstance(exporter, GrpcMetrics)
    assert exporter._endpoint == "collector:4317"
    assert exporter._insecure is False and exporter._credentials is not None
    shutdown_all(metrics)


def test_otlp_grpc_plain_host_port_defaults_to_tls_like_the_collector():
    spans = build_span_exporters({"otlp": {"endpoint": "collector:4317"}})
    assert spans["otlp"]._insecure is False
    shutdown_all(spans)


def test_otlp_without_endpoint_reads_the_standard_env(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4317")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_HEADERS", "api-key=s3cret")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TIMEOUT", "7")
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_COMPRESSION", "gzip")
    spans = build_span_exporters({"otlp": {}, "otlp/none": None})
    for exporter in spans.values():
        assert exporter._endpoint == "collector:4317"
        assert exporter._insecure is True  # http:// scheme
        assert exporter._headers == (("api-key", "s3cret"),)
        assert exporter._timeout == 7.0
        assert exporter._compression is grpc.Compression.Gzip
    shutdown_all(spans)


def test_otlphttp_appends_signal_paths():
    config = {"otlphttp": {"endpoint": "https://otlp.example.com:4318/", "headers": {"Authorization": "Bearer t"}}}
    spans, metrics = build_span_exporters(config), build_metric_exporters(config)
    assert isinstance(spans["otlphttp"], HttpSpans) and isinstance(metrics["otlphttp"], HttpMetrics)
    assert spans["otlphttp"]._endpoint == "https://otlp.example.com:4318/v1/traces"
    assert metrics["otlphttp"]._endpoint == "https://otlp.example.com:4318/v1/metrics"
    assert spans["otlphttp"]._client._headers["authorization"] == "Bearer t"
    shutdown_all(spans, metrics)


def test_otlphttp_signal_endpoint_override_and_options():
    config = {
        "otlphttp/x": {
            "endpoint": "http://c:4318",
            "traces_endpoint": "http://c:9999/custom",
            "compression": "gzip",
            "timeout": 3,
        }
    }
    spans, metrics = build_span_exporters(config), build_metric_exporters(config)
    assert spans["otlphttp/x"]._endpoint == "http://c:9999/custom"
    assert metrics["otlphttp/x"]._endpoint == "http://c:4318/v1/metrics"
    assert spans["otlphttp/x"]._compression.value == "gzip"
    assert spans["otlphttp/x"]._client._timeout == 3.0
    shutdown_all(spans, metrics)


def test_otlphttp_without_endpoint_reads_the_standard_env(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_ENDPOINT", "http://collector:4318")
    spans = build_span_exporters({"otlphttp": {}})
    assert spans["otlphttp"]._endpoint == "http://collector:4318/v1/traces"
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_TRACES_ENDPOINT", "http://other:4318/t")
    again = build_span_exporters({"otlphttp": {}})
    assert again["otlphttp"]._endpoint == "http://other:4318/t"
    shutdown_all(spans, again)


@pytest.mark.parametrize("kind", ["otlp", "otlphttp", "otlp/2"])
def test_empty_endpoint_disables(kind, monkeypatch):
    # the default config's `endpoint: ${env:OTEL_EXPORTER_OTLP_ENDPOINT}` with the variable unset
    for build in (build_span_exporters, build_metric_exporters):
        exporter = build({kind: {"endpoint": ""}})[kind]
        assert isinstance(exporter, DisabledExporter)
        assert kind in exporter.reason


def test_file_and_debug(tmp_path):
    config = {"file": {"path": str(tmp_path / "out.jsonl")}, "debug/verbose": {"verbosity": "detailed"}, "debug": {}}
    spans, metrics = build_span_exporters(config), build_metric_exporters(config)
    assert isinstance(spans["file"], FileSpanExporter) and isinstance(metrics["file"], FileMetricExporter)
    assert isinstance(spans["debug/verbose"], DebugSpanExporter) and spans["debug/verbose"].verbosity == "detailed"
    assert isinstance(metrics["debug"], DebugMetricExporter) and metrics["debug"].verbosity == "normal"
    shutdown_all(spans, metrics)


@pytest.mark.parametrize(
    "config, message",
    [
        ({"kafka": {}}, "unknown exporter type 'kafka'"),
        ({"otlp": {"endpoint": "c:4317", "compression": "zstd"}}, "exporters.otlp.compression"),
        ({"file": {}}, "exporters.file.path"),
        ({"otlp": {"endpoint": "c:4317", "tls": {"ca_file": "/nonexistent/ca.pem"}}}, "/nonexistent/ca.pem"),
        ({"debug": {"verbosity": "loud"}}, "verbosity"),
    ],
)
def test_bad_config(config, message):
    with pytest.raises(ValueError, match=message):
        build_span_exporters(config)


def test_unwritable_file_path_names_the_path(tmp_path):
    (tmp_path / "f").write_text("")
    with pytest.raises(FileExporterError, match="f/x.jsonl"):
        build_span_exporters({"file": {"path": str(tmp_path / "f" / "x.jsonl")}})
    assert issubclass(ExporterConfigError, ValueError)


def test_insecure_false_does_not_force_tls_on_http_endpoints():
    spans = build_span_exporters({"otlp": {"endpoint": "http://collector:4317", "tls": {"insecure": False}}})
    assert spans["otlp"]._insecure is True  # the http:// scheme decides
    shutdown_all(spans)


def test_insecure_env_applies_when_config_leaves_it_out(monkeypatch):
    monkeypatch.setenv("OTEL_EXPORTER_OTLP_INSECURE", "true")
    spans = build_span_exporters({"otlp": {"endpoint": "collector:4317"}})
    assert spans["otlp"]._insecure is True
    shutdown_all(spans)


def test_export_ports_are_the_otlp_endpoints():
    from otel_ebpf.export.factory import export_ports

    cfg = {"otlp": {"endpoint": "collector:14317"}, "otlphttp/b": {"endpoint": "http://h:14318"},
           "otlp/off": {"endpoint": ""}, "file": {"path": "x"}}
    assert export_ports(cfg, {}) == {14317, 14318}
    # no endpoint in the config: the SDK's environment variables, else the OTLP defaults
    assert export_ports({"otlp": {}}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "http://c:9999"}) == {9999}
    assert export_ports({"otlp": {}, "otlphttp": {}}, {}) == {4317, 4318}


def test_otlp_span_exporters_take_several_requests_at_once():
    spans = build_span_exporters({
        "otlp": {"endpoint": "collector:4317", "sending_queue": {"num_consumers": 8}},
        "otlphttp": {"endpoint": "http://collector:4318"},
        "file": {"path": "/dev/null"},
    })
    assert spans["otlp"].num_consumers == 8
    assert spans["otlphttp"].num_consumers == 4  # the default
    assert not hasattr(spans["file"], "num_consumers")  # one request at a time
    shutdown_all(spans)
