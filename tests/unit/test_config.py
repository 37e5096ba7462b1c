"""otel_ebpf.config: defaults, ${env:...} expansion, OTEL_EBPF_* overrides, and errors that
name the path and what was expected."""

from __future__ import annotations

import dataclasses
import logging
import textwrap
from pathlib import Path

import pytest
import yaml

from otel_ebpf import config as cfgmod
from otel_ebpf.config import (
    Config,
    ConfigError,
    EbpfReceiver,
    Processors,
    Targets,
    Telemetry,
    default_config_path,
    env_name,
    load_config,
    parse_config,
    parse_duration,
)

ROOT = Path(__file__).resolve().parents[2]
DEFAULT_YAML = ROOT / "config" / "default.yaml"
ALL_YAML = sorted((ROOT / "config").rglob("*.yaml")) + sorted((ROOT / "config").rglob("*.yml"))


def parse(text: str, environ: dict[str, str] | None = None) -> Config:
    return parse_config(textwrap.dedent(text), environ or {})


def error(text: str, environ: dict[str, str] | None = None) -> ConfigError:
    with pytest.raises(ConfigError) as info:
        parse(text, environ)
    return info.value


# --------------------------------------------------------------------------- defaults


@pytest.mark.parametrize(
    "environ",
    [{}, {"OTEL_EXPORTER_OTLP_ENDPOINT": "collector:4317"}],
    ids=["endpoint-unset", "endpoint-set"],
)
def test_builtin_defaults_equal_default_yaml(environ):
    assert load_config(None, environ) == load_config(DEFAULT_YAML, environ)


def test_default_values():
    c = load_config(None, {})
    r = c.receiver
    assert r == EbpfReceiver()
    assert r.targets == Targets() and r.targets.trace_all
    assert (r.capture_max_bytes, r.ring_buffer_size_mib, r.wakeup_fill_percent) == (4096, 16, 50)
    assert r.poll_interval_s == 0.1 and r.idle_timeout_s == 300.0
    assert r.max_connections == 65536
    assert r.protocols_enabled == ("http1", "http2", "rtps", "postgres", "redis", "mcp_stdio",
                                   "llm", "vectordb", "mcp")
    assert (r.pipe_pids, r.pipe_process_names) == ((), ())  # no pipe is captured
    assert r.protocol_options["mcp_stdio"] == {
        "capture_content": False, "max_content_bytes": 4096, "max_message_bytes": 1 << 20,
        "max_pending": 4096}
    # each default protocol's options at its schema's defaults, typed (seconds, bytes)
    assert r.protocol_options["http1"] == {"response_timeout": 30.0, "capture_headers": False}
    assert r.protocol_options["http2"] == {"response_timeout": 30.0, "capture_headers": False,
                                           "max_streams": 1024}
    assert r.protocol_options["llm"] == {
        "provider": None, "extra_paths": (), "capture_content": False,
        "max_content_bytes": 4096, "body_limit": 1 << 20}
    assert r.protocol_options["mcp"]["paths"] == ("/mcp",)
    assert set(r.protocol_options) == set(r.protocols_enabled)
    assert (r.capture_llm_max_bytes, r.capture_llm_tail_bytes) == (16384, 4096)
    assert c.processors == Processors(512, 1.0, 16384) == Processors()
    assert c.telemetry == Telemetry("info", 10.0) == Telemetry()
    assert {n: (e.type, e.settings) for n, e in c.exporters.items()} == {
        "debug": ("debug", {"verbosity": "normal"}),
        "file": ("file", {"path": "./otel-ebpf-traces.jsonl"}),
        # OTEL_EXPORTER_OTLP_ENDPOINT unset: disabled; the rest is left to the SDK
        "otlp": ("otlp", {"endpoint": ""}),
    }
    traces, metrics = c.pipelines["traces"], c.pipelines["metrics"]
    assert (traces.signal, traces.receivers, traces.processors, traces.exporters) == (
        "traces", ("ebpf",), ("batch",), ("debug", "file", "otlp"),
    )
    assert (metrics.signal, metrics.receivers, metrics.processors, metrics.exporters) == (
        "metrics", ("ebpf",), (), ("file", "otlp"),
    )
    assert load_config(None, {"OTEL_EXPORTER_OTLP_ENDPOINT": "c:4317"}).exporters["otlp"].settings[
        "endpoint"
    ] == "c:4317"


def test_default_yaml_spells_out_every_fixed_key():
    raw = yaml.safe_load(DEFAULT_YAML.read_text())
    # protocols.enabled is left out: absent, every installed protocol on by default runs
    fixed = [p for p, node in cfgmod._leaves(cfgmod._SCHEMA, {})
             if p[0] != "exporters" and node.default is not cfgmod._ABSENT]
    for path in fixed:
        node = raw
        for key in path:
            assert isinstance(node, dict) and key in node, ".".join(path)
            node = node[key]


def test_dataclasses_are_frozen():
    c = load_config(None, {})
    with pytest.raises(dataclasses.FrozenInstanceError):
        c.receiver.capture_max_bytes = 1  # type: ignore[misc]


@pytest.mark.parametrize("path", ALL_YAML, ids=lambda p: str(p.relative_to(ROOT)))
def test_every_shipped_yaml_loads(path):
    c = load_config(path, {})
    assert any(p.signal == "traces" for p in c.pipelines.values())


def test_vllm_example():
    c = load_config(ROOT / "config" / "examples" / "vllm-gateway.yaml", {})
    assert c.receiver.targets.ports == (8000, 8080)
    otlp = c.exporters_for("traces")["otlp"]
    assert otlp["endpoint"] == "localhost:4317" and otlp["tls"]["insecure"] is True


def test_partial_file_keeps_other_defaults():
    c = parse("receivers: {ebpf: {capture: {max_bytes: 100}}}")
    assert c.receiver.capture_max_bytes == 100
    assert c.receiver.ring_buffer_size_mib == 16
    assert set(c.exporters) == {"debug", "file", "otlp"}
    assert c == dataclasses.replace(
        load_config(None, {}),
        receiver=dataclasses.replace(EbpfReceiver(), capture_max_bytes=100),
    )


def test_empty_file_and_null_sections_are_defaults():
    assert parse("") == load_config(None, {})
    assert parse("receivers:\n  ebpf:\nexporters:\nservice:\n") == load_config(None, {})


@pytest.fixture
def tls_files(tmp_path, monkeypatch):
    """ca.pem, c.pem and k.pem in the working directory (named TLS files must be readable)."""
    monkeypatch.chdir(tmp_path)
    for name in ("ca.pem", "c.pem", "k.pem"):
        (tmp_path / name).write_text("not checked for PEM here, only readable\n")
    return tmp_path


def test_values_and_conversions(tls_files):
    c = parse(
        """
        receivers:
          ebpf:
            targets: {pids: [1, 42], process_names: [python3, vllm], ports: [8000]}
            pipes: {pids: [7], process_names: [claude]}
            ring_buffer: {size_mib: 64, poll_interval: 2s, wakeup_fill_percent: 10}
            connections: {max: 64, idle_timeout: 2.5}
            protocols:
              enabled: [http1, http2]
              http1: {response_timeout: 500ms, capture_headers: true}
              http2: {max_streams: 64}
        processors: {batch: {send_batch_size: 10, timeout: 250ms, max_queue_size: 10}}
        exporters:
          otlphttp/phoenix:
            endpoint: https://phoenix.local:6006/v1
            tls: {ca_file: ca.pem, cert_file: c.pem, key_file: k.pem}
            headers: {x-tenant: a, x-n: 7}
            compression: none
            timeout: 2m
          debug: {verbosity: Detailed}
        service:
          pipelines:
            traces/llm: {receivers: [ebpf], exporters: [otlphttp/phoenix, debug]}
            metrics: {receivers: [ebpf], processors: [batch], exporters: [debug]}
          telemetry: {logs: {level: WARN}, metrics: {interval: 1h}}
        """
    )
    r = c.receiver
    assert r.targets == Targets((1, 42), ("python3", "vllm"), (8000,))
    assert not r.targets.trace_all
    assert (r.pipe_pids, r.pipe_process_names) == ((7,), ("claude",))
    assert (r.ring_buffer_size_mib, r.poll_interval_s, r.wakeup_fill_percent) == (64, 2.0, 10)
    assert (r.max_connections, r.idle_timeout_s) == (64, 2.5)
    assert r.protocols_enabled == ("http1", "http2")
    assert r.protocol_options == {
        "http1": {"response_timeout": 0.5, "capture_headers": True},
        "http2": {"response_timeout": 30.0, "capture_headers": False, "max_streams": 64},
    }
    assert c.processors == Processors(10, 0.25, 10)
    phoenix = c.exporters["otlphttp/phoenix"]
    assert phoenix.type == "otlphttp"
    assert phoenix.settings == {
        "endpoint": "https://phoenix.local:6006/v1",
        "tls": {"ca_file": "ca.pem", "cert_file": "c.pem", "key_file": "k.pem"},
        "headers": {"x-tenant": "a", "x-n": "7"},
        "compression": "none",
        "timeout": 120.0,
    }
    assert c.exporters["debug"].settings == {"verbosity": "detailed"}
    assert c.pipelines["traces/llm"].signal == "traces"
    assert c.telemetry == Telemetry("warning", 3600.0)
    assert list(c.exporters_for("traces")) == ["otlphttp/phoenix", "debug"]
    assert list(c.exporters_for("metrics")) == ["debug"]
    # a copy: the caller may not change the config through it
    c.exporters_for("traces")["debug"]["verbosity"] = "x"
    assert c.exporters["debug"].settings["verbosity"] == "detailed"


def test_otlp_keys_left_out_stay_out():
    # absent keys are the SDK's to fill from OTEL_EXPORTER_OTLP_*; an explicit
    # insecure=false, say, would force TLS even on an http:// endpoint
    c = parse(
        """
        exporters: {otlp: {}, otlphttp: {endpoint: "http://c:4318", tls: {insecure: true}}}
        service: {pipelines: {traces: {receivers: [ebpf], exporters: [otlp, otlphttp]}}}
        """
    )
    assert c.exporters["otlp"].settings == {}
    assert c.exporters["otlphttp"].settings == {"endpoint": "http://c:4318", "tls": {"insecure": True}}
    c = parse(
        """
        exporters:
          otlphttp: {traces_endpoint: "https://a/t", metrics_endpoint: "https://a/m", compression: deflate}
        service: {pipelines: {traces: {receivers: [ebpf], exporters: [otlphttp]}}}
        """
    )
    assert c.exporters["otlphttp"].settings == {
        "traces_endpoint": "https://a/t", "metrics_endpoint": "https://a/m", "compression": "deflate"
    }
    assert c.exporters_for("metrics") == {}


@pytest.mark.parametrize(
    "text, seconds",
    [("100ms", 0.1), ("10s", 10.0), ("5m", 300.0), ("1h", 3600.0), ("1m30s", 90.0),
     (" 1.5s ", 1.5), ("250us", 0.00025), ("2", 2.0), (3, 3.0), (0.5, 0.5), ("0", 0.0)],
)
def test_parse_duration(text, seconds):
    assert parse_duration(text) == seconds


@pytest.mark.parametrize("text", ["", "abc", "10 s", "-1s", "1d", "s", True, -1, float("nan")])
def test_parse_duration_rejects(text):
    with pytest.raises(ValueError):
        parse_duration(text)


# --------------------------------------------------------------------------- ${env:...}


def test_env_expansion_forms():
    env = {"HOST": "collector", "PORT": "4317", "TOKEN": "s3cret", "EMPTY": ""}
    c = parse(
        """
        exporters:
          otlp:
            endpoint: ${env:HOST}:${PORT}
            headers:
              authorization: Bearer ${env:TOKEN}
              x-default: ${env:UNSET:-fallback}
              x-empty-default: ${env:EMPTY:-used}
              x-unset: "[${env:UNSET}]"
              x-dollar: cost $$5 and $${env:HOST} and $HOME
          file: {path: "${env:UNSET:-/tmp/t.jsonl}"}
        service: {pipelines: {traces: {receivers: [ebpf], exporters: [otlp, file]}}}
        """,
        env,
    )
    otlp = c.exporters["otlp"].settings
    assert otlp["endpoint"] == "collector:4317"
    assert otlp["headers"] == {
        "authorization": "Bearer s3cret",
        "x-default": "fallback",
        "x-empty-default": "used",
        "x-unset": "[]",
        "x-dollar": "cost $5 and ${env:HOST} and $HOME",
    }
    assert c.exporters["file"].settings["path"] == "/tmp/t.jsonl"
    assert type(otlp["endpoint"]) is str  # no private str subclass leaks out


def test_env_expansion_types_whole_values():
    c = parse(
        """
        receivers:
          ebpf:
            capture: {max_bytes: "${env:MAXB}"}
            ring_buffer: {size_mib: "${env:UNSET}"}   # unset: the default
            protocols:
              http1: {capture_headers: "${env:HDRS}"}
              http2: {max_streams: "${env:MAXB}"}
              llm: {provider: "n${env:MAXB}", capture_content: "${env:HDRS}"}
        """,
        {"MAXB": "8192", "HDRS": "true"},
    )
    r = c.receiver
    assert r.capture_max_bytes == 8192 and r.ring_buffer_size_mib == 16
    assert r.protocol_options["http1"]["capture_headers"] is True
    http2 = r.protocol_options["http2"]
    assert http2["max_streams"] == 8192
    llm = r.protocol_options["llm"]
    assert (llm["provider"], llm["capture_content"]) == ("n8192", True)


def test_literal_strings_are_not_numbers():
    e = error('receivers: {ebpf: {capture: {max_bytes: "8192"}}}')
    assert e.path == "receivers.ebpf.capture.max_bytes"


def test_env_expansion_errors_name_the_path():
    e = error("exporters: {file: {path: '${file:/etc/x}'}}")
    assert e.path == "exporters.file.path" and "${env:NAME}" in e.expected
    e = error("exporters: {file: {path: 'a${env:X'}}")
    assert e.path == "exporters.file.path" and "closed" in e.expected
    e = error("receivers: {ebpf: {capture: {max_bytes: '${env:M}'}}}", {"M": "big"})
    assert e.path == "receivers.ebpf.capture.max_bytes" and e.got == "'big'"


# --------------------------------------------------------------------------- OTEL_EBPF_*


def test_env_overrides_scalars_beat_the_file():
    env = {
        "OTEL_EBPF_RECEIVERS_EBPF_CAPTURE_MAX_BYTES": "8192",
        "OTEL_EBPF_RECEIVERS_EBPF_RING_BUFFER_POLL_INTERVAL": "5ms",
        "OTEL_EBPF_RECEIVERS_EBPF_RING_BUFFER_WAKEUP_FILL_PERCENT": "75",
        "OTEL_EBPF_RECEIVERS_EBPF_PROTOCOLS_HTTP1_CAPTURE_HEADERS": "yes",
        "OTEL_EBPF_PROCESSORS_BATCH_SEND_BATCH_SIZE": "100",
        "OTEL_EBPF_SERVICE_TELEMETRY_LOGS_LEVEL": "debug",
        "OTEL_EBPF_SERVICE_TELEMETRY_METRICS_INTERVAL": "2",
    }
    c = parse("receivers: {ebpf: {capture: {max_bytes: 100}}}", env)
    r = c.receiver
    assert r.capture_max_bytes == 8192
    assert r.poll_interval_s == 0.005 and r.wakeup_fill_percent == 75
    assert r.protocol_options["http1"]["capture_headers"] is True
    assert c.processors.batch_size == 100
    assert c.telemetry == Telemetry("debug", 2.0)


@pytest.mark.parametrize(
    "value, ports",
    [("8000,8001", (8000, 8001)), (" 8000 , 8001, ", (8000, 8001)), ("[8000, 8001]", (8000, 8001)),
     ("8000", (8000,)), ("", ())],
)
def test_env_override_lists(value, ports):
    c = parse("receivers: {ebpf: {targets: {ports: [1]}}}",
              {"OTEL_EBPF_RECEIVERS_EBPF_TARGETS_PORTS": value})
    assert c.receiver.targets.ports == ports


def test_empty_env_override_of_a_scalar_keeps_the_file_value():
    c = parse(
        """
        receivers: {ebpf: {capture: {max_bytes: 100}}}
        exporters: {otlp: {endpoint: "c:4317"}, file: {path: a.jsonl}}
        service: {pipelines: {traces: {receivers: [ebpf], exporters: [otlp, file]}}}
        """,
        {"OTEL_EBPF_RECEIVERS_EBPF_CAPTURE_MAX_BYTES": "",
         "OTEL_EBPF_EXPORTERS_FILE_PATH": "",
         "OTEL_EBPF_EXPORTERS_OTLP_ENDPOINT": ""},  # '' is an endpoint: it disables
    )
    assert c.receiver.capture_max_bytes == 100
    assert c.exporters["file"].settings["path"] == "a.jsonl"
    assert c.exporters["otlp"].settings["endpoint"] == ""


def test_env_override_string_lists():
    c = parse("", {"OTEL_EBPF_RECEIVERS_EBPF_TARGETS_PROCESS_NAMES": "[python3, 'my app']",
                   "OTEL_EBPF_RECEIVERS_EBPF_PROTOCOLS_ENABLED": "http1,rtps"})
    assert c.receiver.targets.process_names == ("python3", "my app")
    assert c.receiver.protocols_enabled == ("http1", "rtps")


def test_env_sets_the_pipes_to_capture():
    c = parse("", {"OTEL_EBPF_RECEIVERS_EBPF_PIPES_PROCESS_NAMES": "[mcp-host, 'my agent']",
                   "OTEL_EBPF_RECEIVERS_EBPF_PIPES_PIDS": "[12, 13]"})
    assert c.receiver.pipe_process_names == ("mcp-host", "my agent")
    assert c.receiver.pipe_pids == (12, 13)


def test_env_overrides_exporter_settings():
    env = {
        "OTEL_EBPF_EXPORTERS_FILE_PATH": "/var/log/spans.jsonl",
        "OTEL_EBPF_EXPORTERS_OTLP_ENDPOINT": "collector:4317",
        "OTEL_EBPF_EXPORTERS_OTLP_TLS_INSECURE": "true",
        "OTEL_EBPF_EXPORTERS_OTLP_HEADERS": "authorization=Bearer x, x-tenant=a",
        "OTEL_EBPF_EXPORTERS_OTLP_TIMEOUT": "3s",
        "OTEL_EBPF_EXPORTERS_OTLPHTTP_BACKUP_ENDPOINT": "http://b:4318",
        "OTEL_EBPF_SERVICE_PIPELINES_TRACES_EXPORTERS": "otlp,otlphttp/backup",
    }
    c = parse(
        """
        exporters:
          file: {path: ./a.jsonl}
          otlp: {endpoint: "", tls: {insecure: false}}
          otlphttp/backup: {}
        """,
        env,
    )
    assert c.exporters["file"].settings["path"] == "/var/log/spans.jsonl"
    otlp = c.exporters["otlp"].settings
    assert otlp["endpoint"] == "collector:4317" and otlp["tls"]["insecure"] is True
    assert otlp["headers"] == {"authorization": "Bearer x", "x-tenant": "a"}
    assert otlp["timeout"] == 3.0
    assert c.exporters["otlphttp/backup"].settings["endpoint"] == "http://b:4318"
    assert c.pipelines["traces"].exporters == ("otlp", "otlphttp/backup")


def test_env_overrides_apply_to_default_exporters():
    c = load_config(None, {"OTEL_EBPF_EXPORTERS_FILE_PATH": "/tmp/x.jsonl",
                           "OTEL_EBPF_EXPORTERS_OTLP_HEADERS": "{a: b}"})
    assert c.exporters["file"].settings["path"] == "/tmp/x.jsonl"
    assert c.exporters["otlp"].settings["headers"] == {"a": "b"}


def test_env_override_error_names_the_variable():
    e = error("", {"OTEL_EBPF_RECEIVERS_EBPF_CAPTURE_MAX_BYTES": "abc"})
    assert e.path == "OTEL_EBPF_RECEIVERS_EBPF_CAPTURE_MAX_BYTES"
    assert str(e) == (
        "config error at OTEL_EBPF_RECEIVERS_EBPF_CAPTURE_MAX_BYTES: "
        "expected an integer from 1 to 65536, got 'abc'"
    )
    e = error("", {"OTEL_EBPF_RECEIVERS_EBPF_TARGETS_PORTS": "80,http"})
    assert e.path == "OTEL_EBPF_RECEIVERS_EBPF_TARGETS_PORTS" and e.got == "'http'"
    e = error("", {"OTEL_EBPF_EXPORTERS_OTLP_HEADERS": "novalue"})
    assert e.path == "OTEL_EBPF_EXPORTERS_OTLP_HEADERS"


def test_unknown_env_variables_warn(caplog):
    env = {
        "OTEL_EBPF_RECEIVERS_EBPF_CAPTURE_MAX_BYTE": "1",  # typo
        "OTEL_EBPF_EXPORTERS_OTLPHTTP_ENDPOINT": "http://x",  # no such instance
        "OTEL_EBPF_REQUIRE_BPF": "1",
        "OTEL_EBPF_BPF_DIR": "/x",
        "OTEL_EBPF_CONFIG": "/y.yaml",
        "OTEL_SERVICE_NAME": "not ours",
    }
    with caplog.at_level(logging.WARNING, logger="otel_ebpf.config"):
        c = load_config(None, env)
    assert c.receiver.capture_max_bytes == 4096
    warned = [r.getMessage() for r in caplog.records]
    assert len(warned) == 2, warned
    assert "OTEL_EBPF_EXPORTERS_OTLPHTTP_ENDPOINT" in warned[0]
    assert "only where the config defines them" in warned[0]
    assert "OTEL_EBPF_RECEIVERS_EBPF_CAPTURE_MAX_BYTE:" in warned[1]
    assert "did you mean OTEL_EBPF_RECEIVERS_EBPF_CAPTURE_MAX_BYTES" in warned[1]


def test_env_name_and_default_config_path():
    assert env_name("receivers.ebpf.targets.ports") == "OTEL_EBPF_RECEIVERS_EBPF_TARGETS_PORTS"
    assert env_name("exporters.otlp/a-b.tls.insecure") == "OTEL_EBPF_EXPORTERS_OTLP_A_B_TLS_INSECURE"
    assert default_config_path({}) is None
    assert default_config_path({"OTEL_EBPF_CONFIG": ""}) is None
    assert default_config_path({"OTEL_EBPF_CONFIG": "/etc/otel-ebpf.yaml"}) == "/etc/otel-ebpf.yaml"


# --------------------------------------------------------------------------- errors


def test_error_message_format():
    e = error("receivers: {ebpf: {capture: {max_bytes: abc}}}")
    assert (e.path, e.expected, e.got) == (
        "receivers.ebpf.capture.max_bytes", "an integer from 1 to 65536", "'abc'"
    )
    assert str(e) == (
        "config error at receivers.ebpf.capture.max_bytes: "
        "expected an integer from 1 to 65536, got 'abc'"
    )


def test_unknown_key_lists_the_allowed_ones():
    e = error("receivers: {ebpf: {capture: {max_byte: 1}}}")
    assert e.path == "receivers.ebpf.capture.max_byte"
    assert "max_bytes" in e.expected and "did you mean max_bytes" in e.got
    e = error("extensions: {}")
    assert e.path == "extensions"
    assert e.expected == "one of the keys receivers, processors, exporters, service"


ERRORS = [
    # (yaml, path, words in `expected`)
    ("receivers: {otlp: {}}", "receivers.otlp", "ebpf"),
    ("receivers: {ebpf: {targets: {pids: [0]}}}", "receivers.ebpf.targets.pids[0]", "integer"),
    ("receivers: {ebpf: {targets: {pids: 5}}}", "receivers.ebpf.targets.pids", "list"),
    ("receivers: {ebpf: {pipes: {pids: [0]}}}", "receivers.ebpf.pipes.pids[0]", "integer"),
    ("receivers: {ebpf: {pipes: {process_names: ['']}}}", "receivers.ebpf.pipes.process_names[0]", "name"),
    ("receivers: {ebpf: {pipes: {names: [a]}}}", "receivers.ebpf.pipes.names", "pids"),
    ("receivers: {ebpf: {protocols: {mcp_stdio: {max_pending: 0}}}}", "receivers.ebpf.protocols.mcp_stdio.max_pending", "at least 1"),
    ("receivers: {ebpf: {targets: {ports: [80, 70000]}}}", "receivers.ebpf.targets.ports[1]", "65535"),
    ("receivers: {ebpf: {targets: {ports: [true]}}}", "receivers.ebpf.targets.ports[0]", "65535"),
    ("receivers: {ebpf: {targets: {ports: [" + ", ".join(["80"] * 1025) + "]}}}", "receivers.ebpf.targets.ports", "at most 1024"),
    ("receivers: {ebpf: {targets: {process_names: ['']}}}", "receivers.ebpf.targets.process_names[0]", "name"),
    ("receivers: {ebpf: {capture: {max_bytes: 0}}}", "receivers.ebpf.capture.max_bytes", "1 to 65536"),
    ("receivers: {ebpf: {capture: {max_bytes: 1.5}}}", "receivers.ebpf.capture.max_bytes", "integer"),
    ("receivers: {ebpf: {capture: 4096}}", "receivers.ebpf.capture", "mapping"),
    ("receivers: {ebpf: {ring_buffer: {size_mib: 24}}}", "receivers.ebpf.ring_buffer.size_mib", "power of two"),
    ("receivers: {ebpf: {ring_buffer: {size_mib: 2048}}}", "receivers.ebpf.ring_buffer.size_mib", "power of two"),
    ("receivers: {ebpf: {ring_buffer: {poll_interval: fast}}}", "receivers.ebpf.ring_buffer.poll_interval", "duration"),
    ("receivers: {ebpf: {ring_buffer: {poll_interval: 20s}}}", "receivers.ebpf.ring_buffer.poll_interval", "1ms to 10s"),
    ("receivers: {ebpf: {ring_buffer: {poll_interval: 0}}}", "receivers.ebpf.ring_buffer.poll_interval", "1ms to 10s"),
    ("receivers: {ebpf: {ring_buffer: {wakeup_fill_percent: 101}}}", "receivers.ebpf.ring_buffer.wakeup_fill_percent", "1 to 100"),
    ("receivers: {ebpf: {connections: {max: 10}}}", "receivers.ebpf.connections.max", "64 to 4194304"),
    ("receivers: {ebpf: {connections: {idle_timeout: -5s}}}", "receivers.ebpf.connections.idle_timeout", "duration"),
    ("receivers: {ebpf: {protocols: {enabled: http1}}}", "receivers.ebpf.protocols.enabled", "list"),
    ("receivers: {ebpf: {protocols: {enabled: [http1, 3]}}}", "receivers.ebpf.protocols.enabled[1]", "protocol name"),
    ("receivers: {ebpf: {protocols: {grpc: [1]}}}", "receivers.ebpf.protocols.grpc", "mapping"),
    ("receivers: {ebpf: {protocols: {http1: {capture_headers: maybe}}}}", "receivers.ebpf.protocols.http1.capture_headers", "true or false"),
    ("receivers: {ebpf: {protocols: {http1: {response_timeout: 2h}}}}", "receivers.ebpf.protocols.http1.response_timeout", "1ms to 1h"),
    ("processors: {batch: {send_batch_size: 0}}", "processors.batch.send_batch_size", "integer"),
    ("processors: {batch: {send_batch_size: 100, max_queue_size: 10}}", "processors.batch.max_queue_size", "at least send_batch_size (100)"),
    ("processors: {memory_limiter: {}}", "processors.memory_limiter", "batch"),
    ("exporters: {zipkin: {}}", "exporters.zipkin", "otlp, otlphttp, file, debug"),
    ("exporters: {otlp/: {}}", "exporters.otlp/", "type/name"),
    ("exporters: {'otlp/a b': {}}", "exporters.otlp/a b", "type/name"),
    ("exporters: [otlp]", "exporters", "mapping"),
    ("exporters: {file: {}}", "exporters.file.path", "file path"),
    ("exporters: {file: {path: ''}}", "exporters.file.path", "file path"),
    ("exporters: {file: {path: x, rotate: true}}", "exporters.file.rotate", "path"),
    ("exporters: {debug: {verbosity: loud}}", "exporters.debug.verbosity", "basic, normal, detailed"),
    ("exporters: {otlp: {endpoint: 'http://x:99999'}}", "exporters.otlp.endpoint", "host:port"),
    ("exporters: {otlp: {endpoint: 'a b'}}", "exporters.otlp.endpoint", "host:port"),
    ("exporters: {otlphttp: {endpoint: 'collector:4318'}}", "exporters.otlphttp.endpoint", "http(s)://"),
    ("exporters: {otlp: {compression: zstd}}", "exporters.otlp.compression", "gzip, none"),
    ("exporters: {otlp: {compression: deflate}}", "exporters.otlp.compression", "gzip, none"),
    ("exporters: {otlp: {traces_endpoint: 'http://c/v1/traces'}}", "exporters.otlp.traces_endpoint", "endpoint"),
    ("exporters: {otlphttp: {traces_endpoint: ''}}", "exporters.otlphttp.traces_endpoint", "full URL"),
    ("exporters: {otlphttp: {metrics_endpoint: 'c:4318'}}", "exporters.otlphttp.metrics_endpoint", "full URL"),
    ("exporters: {otlp: {timeout: 1h}}", "exporters.otlp.timeout", "100ms to 10m"),
    ("exporters: {otlp: {tls: {insecure: 1}}}", "exporters.otlp.tls.insecure", "true or false"),
    ("exporters: {otlp: {tls: {cert_file: c.pem}}}", "exporters.otlp.tls.key_file", "key_file together with cert_file"),
    ("exporters: {otlp: {headers: {a: [1]}}}", "exporters.otlp.headers.a", "string"),
    ("exporters: {otlp: {headers: [a]}}", "exporters.otlp.headers", "mapping"),
    ("exporters: {otlp: {insecure: true}}", "exporters.otlp.insecure", "tls"),
    ("service: {pipelines: {logs: {receivers: [ebpf], exporters: [debug]}}}", "service.pipelines.logs", "traces, metrics"),
    ("service: {pipelines: {traces: {exporters: [debug]}}}", "service.pipelines.traces.receivers", "receiver names"),
    ("service: {pipelines: {traces: {receivers: [ebpf]}}}", "service.pipelines.traces.exporters", "exporter names"),
    ("service: {pipelines: {traces: {receivers: [ebpf], exporters: [jaeger]}}}", "service.pipelines.traces.exporters[0]", "defined under exporters: debug, file, otlp"),
    ("service: {pipelines: {traces: {receivers: [ebpf], exporters: [debug, debug]}}}", "service.pipelines.traces.exporters[1]", "at most once"),
    ("service: {pipelines: {traces: {receivers: [ebpf], processors: [filter], exporters: [debug]}}}", "service.pipelines.traces.processors[0]", "defined under processors: batch"),
    ("service: {pipelines: {traces: {receivers: [otlp], exporters: [debug]}}}", "service.pipelines.traces.receivers[0]", "defined under receivers: ebpf"),
    ("service: {pipelines: {traces: {receivers: [], exporters: [debug]}}}", "service.pipelines.traces.receivers", "includes ebpf"),
    ("service: {pipelines: {metrics: {receivers: [], exporters: [debug]}}}", "service.pipelines.metrics.receivers", "at least one receiver"),
    ("service: {pipelines: {traces: {receivers: [ebpf], exporters: []}}}", "service.pipelines.traces.exporters", "at least one exporter"),
    ("service: {pipelines: {}}", "service.pipelines", "at least one pipeline"),
    ("exporters: {debug: {}}", "service.pipelines.traces.exporters[1]", "debug (service.pipelines is not set, so the default pipelines apply)"),
    ("service: {telemetry: {logs: {level: trace}}}", "service.telemetry.logs.level", "debug, info, warning, error"),
    ("service: {telemetry: {metrics: {interval: 10ms}}}", "service.telemetry.metrics.interval", "100ms to 1h"),
    ("- a list", "(top level)", "mapping"),
    ("{1: x}", "(top level)", "string keys"),
]


@pytest.mark.parametrize("text, path, words", ERRORS, ids=[f"{i}:{e[1]}" for i, e in enumerate(ERRORS)])
def test_errors_name_the_path(text, path, words):
    e = error(text)
    assert e.path == path, str(e)
    assert words in e.expected, str(e)
    assert str(e).startswith(f"config error at {path}: expected ")


def test_yaml_syntax_error_has_line_and_column(tmp_path):
    f = tmp_path / "bad.yaml"
    f.write_text("receivers:\n  ebpf:\n    capture: {max_bytes: 1\n")
    with pytest.raises(ConfigError) as info:
        load_config(f, {})
    e = info.value
    assert e.path == str(f) and e.expected == "valid YAML"
    assert e.line == 4 and e.column == 1
    assert str(e).startswith(f"config error at {f}:4:1: expected valid YAML, got ")


def test_duplicate_key_is_a_yaml_error():
    with pytest.raises(ConfigError) as info:
        parse_config("exporters:\n  debug: {}\n  debug: {}\n", {}, source="x.yaml")
    e = info.value
    assert (e.path, e.line, e.column) == ("x.yaml", 3, 3)
    assert "duplicate key 'debug'" in e.got


def test_yaml_merge_keys_may_override():
    c = parse(
        """
        exporters:
          otlp: &common {compression: none, timeout: 5s}
          otlp/b: {<<: *common, timeout: 6s}
        service: {pipelines: {traces: {receivers: [ebpf], exporters: [otlp/b]}}}
        """
    )
    assert c.exporters["otlp/b"].settings["timeout"] == 6.0
    assert c.exporters["otlp/b"].settings["compression"] == "none"


def test_missing_file_names_it(tmp_path):
    missing = tmp_path / "nope.yaml"
    with pytest.raises(ConfigError) as info:
        load_config(missing, {})
    assert info.value.path == str(missing)
    assert str(info.value) == f"config error at {missing}: expected an existing config file, got no such file"
    with pytest.raises(ConfigError) as info:
        load_config(tmp_path, {})
    assert info.value.path == str(tmp_path)


# ----------------------------------------------------------------- parser and layer options

PROTO = "OTEL_EBPF_RECEIVERS_EBPF_PROTOCOLS_"


def test_env_sets_options_of_every_parser_and_layer_typed_like_yaml():
    env = {
        PROTO + "HTTP2_MAX_STREAMS": "64",
        PROTO + "HTTP2_RESPONSE_TIMEOUT": "5s",
        PROTO + "HTTP2_CAPTURE_HEADERS": "on",
        PROTO + "RTPS_MAX_WAITING": "128",
        PROTO + "RTPS_LATENCY_WAIT_S": "0.5",
        PROTO + "LLM_PROVIDER": "vllm",
        PROTO + "LLM_EXTRA_PATHS": "[/gw, {prefix: /v2/chat, api: openai}]",
        PROTO + "VECTORDB_SYSTEM": "chroma",
        PROTO + "HTTP1_CAPTURE_HEADERS": "yes",
    }
    from_env = parse("", env).receiver.plugin_options()
    from_yaml = parse("""
        receivers:
          ebpf:
            protocols:
              http1: {capture_headers: true}
              http2: {max_streams: 64, response_timeout: 5s, capture_headers: on}
              rtps: {max_waiting: 128, latency_wait_s: 0.5}
              llm: {provider: vllm, extra_paths: [/gw, {prefix: /v2/chat, api: openai}]}
              vectordb: {system: chroma}
        """).receiver.plugin_options()
    assert from_env == from_yaml
    assert from_env["http2"]["max_streams"] == 64
    assert from_env["http2"]["response_timeout"] == 5.0  # a duration, never the text "5s"
    assert from_env["http2"]["capture_headers"] is True
    assert from_env["rtps"]["max_waiting"] == 128 and from_env["rtps"]["latency_wait_s"] == 0.5
    assert from_env["llm"]["extra_paths"] == ["/gw", {"prefix": "/v2/chat", "api": "openai"}]
    assert from_env["vectordb"]["system"] == "chroma"
    assert from_env["http1"]["capture_headers"] is True


def test_env_option_of_a_protocol_named_only_in_the_file_or_env(caplog):
    # a protocol that is not installed is refused, but its variables name config keys
    e = error("receivers: {ebpf: {protocols: {enabled: [http1, grpc]}}}",
              {PROTO + "GRPC_WINDOW": "8"})
    assert e.path == "receivers.ebpf.protocols.enabled[1]"
    assert e.expected == "an installed protocol: http1, http2, llm, mcp, mcp_stdio, postgres, redis, rtps, vectordb"
    with caplog.at_level(logging.WARNING, logger="otel_ebpf.config"):
        parse("", {PROTO + "GRPC_WINDOW": "8"})
    warned = " ".join(r.getMessage() for r in caplog.records)
    assert f"ignoring {PROTO}GRPC_WINDOW: it names no config key" in warned
    assert f"{PROTO}<NAME>_<KEY> for an installed protocol: http1, http2" in warned


@pytest.mark.parametrize(("env", "var", "expected", "got"), [
    ({PROTO + "HTTP2_RESPONSE_TIMEOUT": "soon"}, PROTO + "HTTP2_RESPONSE_TIMEOUT",
     "a duration from 1ms to 1h (like 100ms, 10s, 5m, 1h, or seconds)", "'soon'"),
    ({PROTO + "HTTP2_MAX_STREAMS": "0"}, PROTO + "HTTP2_MAX_STREAMS",
     "an integer from 1 to 65536", "0"),
    ({PROTO + "RTPS_MAX_WAITING": "lots"}, PROTO + "RTPS_MAX_WAITING", "an integer", "'lots'"),
    ({PROTO + "LLM_PROVIDER": "7"}, PROTO + "LLM_PROVIDER", "a non-empty string", "7"),
    ({PROTO + "VECTORDB_SYSTEM": "mongo"}, PROTO + "VECTORDB_SYSTEM",
     "one of ['chroma', 'qdrant', 'weaviate', 'milvus']", "'mongo'"),
])
def test_bad_env_option_names_the_variable(env, var, expected, got):
    e = error("", env)
    assert (e.path, e.expected, e.got) == (var, expected, got)


@pytest.mark.parametrize(("text", "path", "expected", "got"), [
    ("receivers: {ebpf: {protocols: {enabled: [http1, htpp2]}}}",
     "receivers.ebpf.protocols.enabled[1]",
     "an installed protocol: http1, http2, llm, mcp, mcp_stdio, postgres, redis, rtps, vectordb", "'htpp2' (did you mean http2?)"),
    ("receivers: {ebpf: {protocols: {enabled: [http1, http1]}}}",
     "receivers.ebpf.protocols.enabled[1]", "each protocol at most once", "'http1' again"),
    ("receivers: {ebpf: {protocols: {htp1: {capture_headers: true}}}}",
     "receivers.ebpf.protocols.htp1",
     "enabled or an installed protocol: http1, http2, llm, mcp, mcp_stdio, postgres, redis, rtps, vectordb",
     "unknown key 'htp1' (did you mean http1?)"),
    ("receivers: {ebpf: {protocols: {http2: {response_timeout: 5m0x}}}}",
     "receivers.ebpf.protocols.http2.response_timeout",
     "a duration from 1ms to 1h (like 100ms, 10s, 5m, 1h, or seconds)", "'5m0x'"),
    ("receivers: {ebpf: {protocols: {llm: {provider: 7}}}}",
     "receivers.ebpf.protocols.llm.provider", "a non-empty string", "7"),
    ("receivers: {ebpf: {protocols: {llm: {extra_paths: [/gw, {prefix: /x, api: soap}]}}}}",
     "receivers.ebpf.protocols.llm.extra_paths",
     "one of ['openai', 'anthropic', 'ollama']", "'soap'"),
    ("receivers: {ebpf: {protocols: {rtps: {max_waiting: 0}}}}",
     "receivers.ebpf.protocols.rtps.max_waiting", "at least 1", "0"),
    ("receivers: {ebpf: {protocols: {rtps: {max_wating: 5}}}}",
     "receivers.ebpf.protocols.rtps.max_wating",
     "an option rtps takes (discovery_max_entries, reassembly_timeout_s, pairing_timeout_s, "
     "discovery_wait_s, latency_wait_s, payload_head_bytes, max_reassemblies, max_waiting, "
     "max_tracked)", "unknown key 'max_wating'"),
    ("receivers: {ebpf: {protocols: {mcp: {body_limit: 2GiB}}}}",
     "receivers.ebpf.protocols.mcp.body_limit",
     "a size from 0 to 1073741824 bytes (like 4096, 64KiB, 1MiB)", "'2GiB'"),
])
def test_bad_protocol_names_and_options_are_config_errors_at_load(text, path, expected, got):
    e = error(text)
    assert (e.path, e.expected) == (path, expected)
    if got is not None:
        assert e.got == got
    assert str(e).startswith(f"config error at {path}: expected {expected}")


def test_options_load_config_checks_are_those_the_agent_builds_with():
    r = parse("receivers: {ebpf: {correlation: {headers: [X-Req]}, "
              "protocols: {enabled: [http2], rtps: {max_waiting: 8}}}}").receiver
    options = r.plugin_options()
    assert list(options) == ["http2", "rtps"]  # enabled, then configured
    assert options["http2"]["correlation_headers"] == ["x-req"]
    # typed by the schema, every key filled: what RTPSParser builds its limits from
    assert options["rtps"]["correlation_headers"] == ["x-req"]
    assert options["rtps"]["max_waiting"] == 8 and options["rtps"]["max_tracked"] == 65536


def test_tls_files_must_be_readable(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    (tmp_path / "ca.pem").write_text("x\n")
    pipeline = "\nservice: {pipelines: {traces: {receivers: [ebpf], exporters: [otlphttp]}}}"
    c = parse("exporters: {otlphttp: {tls: {ca_file: ca.pem}}}" + pipeline)
    assert c.exporters["otlphttp"].settings["tls"] == {"ca_file": "ca.pem"}
    for key in ("ca_file", "cert_file", "key_file"):
        other = {"cert_file": ", key_file: ca.pem", "key_file": ", cert_file: ca.pem"}.get(key, "")
        e = error(f"exporters: {{otlphttp: {{tls: {{{key}: no.pem{other}}}}}}}" + pipeline)
        assert e.path == f"exporters.otlphttp.tls.{key}"
        assert (e.expected, e.got) == ("a readable file", "'no.pem' (No such file or directory)")
    e = error("exporters: {otlphttp: {tls: {ca_file: .}}}" + pipeline)
    assert e.got == "'.' (Is a directory)"


def test_sending_queue_consumers_are_checked():
    text = ("exporters: {otlp: {endpoint: 'c:4317', sending_queue: {num_consumers: %s}}}\n"
            "service: {pipelines: {traces: {receivers: [ebpf], exporters: [otlp]}}}")
    assert parse(text % 16).exporters_for("traces")["otlp"]["sending_queue"] == {"num_consumers": 16}
    e = error(text % 0)
    assert (e.path, e.expected) == ("exporters.otlp.sending_queue.num_consumers",
                                    "an integer from 1 to 64")
