"""The command line as a user meets it: bad config, missing privileges, `check`."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from pathlib import Path

import pytest

from .conftest import REPO, VENV_BIN, require_kernel

OTEL_EBPF = str(VENV_BIN / "otel-ebpf")


def run(*args: str, env: dict | None = None, prefix: list[str] | None = None,
        timeout: float = 60) -> subprocess.CompletedProcess:
    return subprocess.run([*(prefix or []), OTEL_EBPF, *args], capture_output=True, text=True,
                          timeout=timeout, env={**os.environ, **(env or {})})


def test_invalid_config_exits_2_naming_the_key(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("receivers:\n  ebpf:\n    capture:\n      max_bytes: lots\n")
    proc = run("run", "-c", str(cfg))
    assert proc.returncode == 2
    assert "receivers.ebpf.capture.max_bytes" in proc.stderr
    assert "integer" in proc.stderr


def test_unknown_key_exits_2(tmp_path):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("receivers:\n  ebpf:\n    targets:\n      portz: [80]\n")
    proc = run("run", "-c", str(cfg))
    assert proc.returncode == 2
    assert "receivers.ebpf.targets" in proc.stderr and "portz" in proc.stderr


def test_bad_env_override_exits_2_naming_the_variable():
    proc = run("run", env={"OTEL_EBPF_RECEIVERS_EBPF_TARGETS_PORTS": "http"})
    assert proc.returncode == 2
    assert "OTEL_EBPF_RECEIVERS_EBPF_TARGETS_PORTS" in proc.stderr


@pytest.mark.parametrize(("yaml_text", "named"), [
    ("llm:\n        provider: 7\n", "receivers.ebpf.protocols.llm"),
    ("llm:\n        extra_paths: [3]\n", "receivers.ebpf.protocols.llm"),
    ("llm:\n        capture_content: maybe\n", "receivers.ebpf.protocols.llm.capture_content"),
    ("vectordb:\n        system: mongo\n", "receivers.ebpf.protocols.vectordb"),
])
def test_bad_layer_options_exit_2_naming_the_layer(tmp_path, yaml_text, named):
    cfg = tmp_path / "bad.yaml"
    cfg.write_text("receivers:\n  ebpf:\n    protocols:\n      " + yaml_text)
    proc = run("run", "-c", str(cfg))
    assert proc.returncode == 2, proc.stderr
    assert named in proc.stderr
    assert "Traceback" not in proc.stderr


def test_missing_config_file_exits_2(tmp_path):
    proc = run("run", "-c", str(tmp_path / "nope.yaml"))
    assert proc.returncode == 2
    assert "nope.yaml" in proc.stderr


def test_without_privileges_names_what_is_missing(tmp_path):
    """Root with CAP_BPF, CAP_PERFMON and CAP_SYS_ADMIN taken away (setpriv)."""
    setpriv = shutil.which("setpriv")
    if setpriv is None:
        pytest.fail("setpriv (util-linux) is needed for this test")
    prefix = [setpriv, "--inh-caps=-all", "--bounding-set=-bpf,-perfmon,-sys_admin"] \
        if os.geteuid() == 0 else []
    proc = run("run", "-c", str(REPO / "config/default.yaml"), prefix=prefix)
    assert proc.returncode == 1, proc.stderr
    assert "CAP_BPF" in proc.stderr and "CAP_PERFMON" in proc.stderr
    assert "otel-ebpf ready" not in proc.stderr


def test_check_reports_every_feature():
    require_kernel()
    proc = run("check", timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for feature in ("privileges", "BTF", "tracefs", "ring buffer", "uprobes",
                    "socket capture program"):
        assert feature in proc.stdout, feature


def test_check_probes_the_helpers_each_feature_needs():
    """bpf_loop (Linux 5.17) for CPU profiles and GPU memory, probed for real (6.x here)."""
    require_kernel()
    proc = run("check", env={"COLUMNS": "400"}, timeout=120)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    rows = {line.split("│")[1].strip(): line for line in proc.stdout.splitlines()
            if line.startswith("│ kernel: ")}
    assert list(rows) == ["kernel: socket capture (traces, metrics)",
                          "kernel: TLS (OpenSSL uprobes)", "kernel: CPU profiles",
                          "kernel: GPU memory (CUDA uprobes)", "kernel: RDMA and NCCL (uprobes)",
                          "kernel: trace context TCP option (sock_ops)"]
    assert "bpf_loop in perf_event programs (Linux 5.17+): yes" in rows["kernel: CPU profiles"]
    assert "bpf_reserve_hdr_opt in sock_ops programs (Linux 5.10+): yes" in rows[
        "kernel: trace context TCP option (sock_ops)"]
    assert "bpf_loop in uprobe programs (Linux 5.17+): yes" in rows[
        "kernel: GPU memory (CUDA uprobes)"]
    assert "bpf_ringbuf_reserve in tracepoint programs (Linux 5.8+): yes" in rows[
        "kernel: socket capture (traces, metrics)"]
    for row in rows.values():
        assert "│ ok " in row, row


def test_helper_probe_tells_a_helper_the_kernel_lacks():
    """The probe can say no: a helper id no kernel has is refused by this one's verifier."""
    require_kernel()
    from otel_ebpf.kernel.features import FEATURE_NEEDS, Need, probe

    assert probe(Need("unknown#4000", 4000, "perf_event", 7, "never")) is False
    assert all(probe(n) is True for needs in FEATURE_NEEDS.values() for n in needs)


def test_check_lists_the_installed_parsers_and_layers():
    """The names receivers.ebpf.protocols.enabled takes, as config/default.yaml says."""
    proc = run("check", env={"COLUMNS": "400"}, timeout=120)
    rows = {line.split("│")[1].strip(): line for line in proc.stdout.splitlines()
            if line.count("│") >= 3}
    assert all(name in rows["protocol parsers"] for name in ("http1", "http2", "rtps")), proc.stdout
    assert all(name in rows["layers over HTTP"] for name in ("llm", "vectordb")), proc.stdout


def test_check_without_privileges_fails():
    if os.geteuid() != 0:
        pytest.skip("needs root to drop capabilities from")
    proc = run("check", prefix=["setpriv", "--inh-caps=-all",
                                "--bounding-set=-bpf,-perfmon,-sys_admin"], timeout=120)
    assert proc.returncode == 1
    assert "privileges" in proc.stderr


NOBODY = ["setpriv", "--reuid=65534", "--regid=65534", "--clear-groups", "--inh-caps=-all"]


def _as_nobody() -> list[str]:
    if os.geteuid() != 0:
        pytest.skip("needs root to become another user")
    if shutil.which("setpriv") is None:
        pytest.fail("setpriv (util-linux) is needed for this test")
    return NOBODY


def test_unprivileged_user_run_exits_1_naming_each_capability():
    """A plain user (uid 65534, no capabilities): `run` stops before touching the kernel."""
    proc = run("run", "-c", str(REPO / "config/default.yaml"), prefix=_as_nobody(),
               env={"HOME": "/tmp"})
    assert proc.returncode == 1, proc.stderr
    for cap in ("CAP_BPF", "CAP_PERFMON"):
        assert cap in proc.stderr
    assert "Traceback" not in proc.stderr and "otel-ebpf ready" not in proc.stderr


def test_unprivileged_user_check_names_what_is_missing():
    proc = run("check", prefix=_as_nobody(), env={"HOME": "/tmp", "COLUMNS": "400"},
               timeout=120)
    assert proc.returncode == 1, proc.stdout + proc.stderr
    assert "otel-ebpf cannot run here: privileges" in proc.stderr
    row = next(line for line in proc.stdout.splitlines() if "privileges" in line)
    assert "MISSING" in row and "CAP_BPF" in row and "CAP_PERFMON" in row
    assert "Traceback" not in proc.stderr


def test_unreadable_config_file_exits_2(tmp_path):
    cfg = tmp_path / "secret.yaml"
    cfg.write_text("receivers: {ebpf: {}}\n")
    cfg.chmod(0o600)  # root's: the unprivileged user cannot read it
    tmp_path.chmod(0o755)
    proc = run("run", "-c", str(cfg), prefix=_as_nobody(), env={"HOME": "/tmp"})
    assert proc.returncode == 2, proc.stderr
    flat = " ".join(proc.stderr.split())  # the console wraps long lines
    assert str(cfg) in flat and "expected a readable UTF-8 config file" in flat
    assert "Permission denied" in flat


@pytest.mark.parametrize(("body", "path", "expected"), [
    (b"receivers: {ebpf: {capture: {max_bytes: \xff}}}\n", "bad.yaml", "UTF-8"),
    (b"exporters: {otlp: {endpoint: 'http://collector:99999'}}\n",
     "exporters.otlp.endpoint", "host:port"),
    (b"exporters: {otlphttp: {endpoint: 'collector:4318'}}\n",
     "exporters.otlphttp.endpoint", "http(s)://"),
    (b"receivers: {ebpf: {connections: {max: many}}}\n",
     "receivers.ebpf.connections.max", "an integer from 64 to 4194304"),
    (b"receivers: {ebpf: {redaction: {query_params: session}}}\n",
     "receivers.ebpf.redaction.query_params", "a list of query parameter names"),
    (b"receivers: {ebpf: {redaction: {query: [a]}}}\n",
     "receivers.ebpf.redaction.query", "query_params"),
])
def test_invalid_config_exits_2_with_path_and_expected_form(tmp_path, body, path, expected):
    cfg = tmp_path / "bad.yaml"
    cfg.write_bytes(body)
    proc = run("run", "-c", str(cfg))
    assert proc.returncode == 2, proc.stderr
    flat = " ".join(proc.stderr.split())  # the console wraps long lines
    assert path in flat and expected in flat, proc.stderr
    assert "Traceback" not in proc.stderr


BAD_VALUES = [
    ("receivers: {ebpf: {protocols: {enabled: [http1, grpc]}}}\n",
     "receivers.ebpf.protocols.enabled[1]",
     "expected an installed protocol: http1, http2, llm, mcp, mcp_stdio, postgres, redis, rtps, "
     "vectordb, got 'grpc'"),
    ("receivers: {ebpf: {protocols: {llm: {provider: 7}}}}\n",
     "receivers.ebpf.protocols.llm.provider", "expected a non-empty string, got 7"),
    ("receivers: {ebpf: {protocols: {vectordb: {system: mongo}}}}\n",
     "receivers.ebpf.protocols.vectordb.system",
     "expected one of ['chroma', 'qdrant', 'weaviate', 'milvus'], got 'mongo'"),
    ("exporters: {otlp: {endpoint: 'c:4317', tls: {ca_file: /nonexistent/ca.pem}}}\n"
     "service: {pipelines: {traces: {receivers: [ebpf], exporters: [otlp]}}}\n",
     "exporters.otlp.tls.ca_file",
     "expected a readable file, got '/nonexistent/ca.pem' (No such file or directory)"),
]


@pytest.mark.parametrize("user", ["root", "nobody"])
@pytest.mark.parametrize(("body", "path", "message"), BAD_VALUES,
                         ids=["unknown-protocol", "layer-option", "layer-choice", "tls-file"])
def test_invalid_values_exit_2_before_the_privilege_check(user, body, path, message):
    """Config errors that only the agent used to find (after the privilege check: exit 1
    unprivileged, a quoted KeyError for an unknown protocol) are found at load time."""
    prefix = _as_nobody() if user == "nobody" else []
    with tempfile.TemporaryDirectory(prefix="otel-ebpf-cli-") as where:  # pytest's is 0700
        cfg = Path(where) / "bad.yaml"
        cfg.write_text(body)
        os.chmod(where, 0o755)
        cfg.chmod(0o644)
        proc = run("run", "-c", str(cfg), prefix=prefix, env={"HOME": "/tmp", "COLUMNS": "400"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"otel-ebpf: config error at {path}: {message}"


@pytest.mark.parametrize("user", ["root", "nobody"])
def test_bad_protocol_option_from_the_environment_exits_2_naming_it(user):
    var = "OTEL_EBPF_RECEIVERS_EBPF_PROTOCOLS_RTPS_MAX_WAITING"
    prefix = _as_nobody() if user == "nobody" else []
    proc = run("run", prefix=prefix, env={"HOME": "/tmp", "COLUMNS": "400", var: "0"})
    assert proc.returncode == 2, proc.stderr
    assert proc.stderr.strip() == f"otel-ebpf: config error at {var}: expected at least 1, got 0"
