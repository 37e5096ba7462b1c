"""The pure-Python path, end to end: the HTTP/1, HTTP/2 (gRPC) and ROS 2 kernel tests run
once more with OTEL_EBPF_PURE_PYTHON=1, which every agent they start inherits, so that a
user without a C compiler, or on an architecture without a built extension, gets the spans
those tests ask for. The compiled path's own tests compare it with this reference on the
same inputs; these run the reference against real peers and the real kernel programs."""

from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.kernel, pytest.mark.timeout(1800)]

REPO = Path(__file__).resolve().parents[2]
MODULES = ("tests/integration/test_http1_e2e.py", "tests/integration/test_http2_e2e.py",
           "tests/integration/test_ros2_e2e.py")
RUN_TIMEOUT_S = 1700  # the three modules take a few minutes; bounded below the test's own


def _pure_env() -> dict[str, str]:
    return {**os.environ, "OTEL_EBPF_PURE_PYTHON": "1"}


def test_the_agent_says_the_compiled_path_is_off():
    out = subprocess.run([str(Path(sys.executable).parent / "otel-ebpf"), "check"],
                         env={**_pure_env(), "COLUMNS": "200"}, capture_output=True,
                         text=True, timeout=120)
    row = next((line for line in out.stdout.splitlines() if "compiled path" in line), "")
    assert "OTEL_EBPF_PURE_PYTHON=1" in row, out.stdout[-3000:]


def test_http1_http2_and_ros2_end_to_end_on_the_python_path():
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", *MODULES],
        cwd=REPO, env=_pure_env(), capture_output=True, text=True, timeout=RUN_TIMEOUT_S)
    tail = proc.stdout[-6000:] + proc.stderr[-2000:]
    assert proc.returncode == 0, tail
    summary = re.search(r"(\d+) passed", proc.stdout)
    assert summary and int(summary.group(1)) > 0, tail
    assert " skipped" not in proc.stdout.splitlines()[-1], tail  # every one of them ran
