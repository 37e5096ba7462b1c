"""The bench/fuzz atheris targets, briefly (a few thousand inputs each, seconds): no parser
lets an exception escape, and the inputs reach past framing into records and spans."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

from bench.fuzz import TARGETS

REPO = Path(__file__).resolve().parents[2]
CI_RUNS = 4000  # the 1M-input budget is bench/fuzz/run.py's (docs/reliability.md)


@pytest.mark.parametrize("target", TARGETS)
def test_fuzz_target_runs_clean(target, tmp_path):
    # atheris is a declared test dependency (pyproject's `test` extra): missing, it fails
    import atheris  # noqa: F401
    stats = tmp_path / "stats.json"
    proc = subprocess.run(
        [sys.executable, "-m", "bench.fuzz.targets", target, f"-runs={CI_RUNS}",
         "-max_len=4096", "-seed=1", f"-artifact_prefix={tmp_path}/"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={"FUZZ_STATS": str(stats), "PATH": "/usr/bin:/bin"},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Uncaught Python exception" not in out
    seen = json.loads(stats.read_text())
    assert seen["inputs"] == CI_RUNS
    # malformed input is counted, not raised; and some inputs still make whole exchanges
    assert seen["parse_errors"] > 0
    assert seen["records"] > 0 and seen["spans"] > 0
