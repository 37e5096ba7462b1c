"""The command line as a user meets it: bad config, missing privileges, `check`."""

from __future__ import annotations

import os
import shutil
import subprocess

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


def test_check_without_privileges_fails():
    if os.geteuid() != 0:
        pytest.skip("needs root to drop capabilities from")
    proc = run("check", prefix=["setpriv", "--inh-caps=-all",
                                "--bounding-set=-bpf,-perfmon,-sys_admin"], timeout=120)
    assert proc.returncode == 1
    assert "privileges" in proc.stderr
