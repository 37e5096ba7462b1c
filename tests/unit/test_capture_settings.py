"""What the agent tells the kernel to leave out: the endpoints of its own exports, for
every signal (traces, metrics and profiles), so that no export is traced."""

from __future__ import annotations

import textwrap

from otel_ebpf.agent import capture_settings
from otel_ebpf.config import parse_config


def _settings(text: str):
    return capture_settings(parse_config(textwrap.dedent(text), {}))


def test_a_profiles_only_exporter_endpoint_is_not_captured():
    s = _settings("""
        exporters:
          file: {path: t.jsonl}
          otlp/profiles: {endpoint: "127.0.0.1:14999", tls: {insecure: true}}
        service:
          pipelines:
            traces: {receivers: [ebpf], exporters: [file]}
            profiles: {receivers: [ebpf], exporters: [otlp/profiles]}
        """)
    assert s.ignored_ports == (14999,)


def test_every_signals_export_ports_are_left_out_once_each():
    s = _settings("""
        exporters:
          otlp/traces: {endpoint: "127.0.0.1:4317"}
          otlphttp/metrics: {endpoint: "http://127.0.0.1:14318"}
          otlp/profiles: {endpoint: "https://profiles.example:14317"}
          otlp/off: {endpoint: ""}
        service:
          pipelines:
            traces: {receivers: [ebpf], exporters: [otlp/traces]}
            metrics: {receivers: [ebpf], exporters: [otlphttp/metrics]}
            profiles: {receivers: [ebpf], exporters: [otlp/profiles, otlp/off]}
        """)
    assert s.ignored_ports == (4317, 14317, 14318)


def test_exporters_no_pipeline_uses_are_not_left_out():
    s = _settings("""
        exporters:
          file: {path: t.jsonl}
          otlp/unused: {endpoint: "127.0.0.1:14998"}
        service:
          pipelines:
            traces: {receivers: [ebpf], exporters: [file]}
        """)
    assert s.ignored_ports == ()
