"""The bench/fuzz atheris targets, briefly (a few thousand inputs each, seconds): no parser
lets an exception escape, and the inputs reach past framing into records and spans."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
from otel_ebpf.protocols.fuzz_targets import load_fuzz_target

from bench.fuzz import REFS, TARGETS

REPO = Path(__file__).resolve().parents[2]
CI_RUNS = 4000  # the 1M-input budget is bench/fuzz/run.py's (docs/reliability.md)
# http1_fast feeds one script to two connections and needs a request and its answer in
# the right directions to make a record: at 4000 inputs whether the coverage-guided search
# has reached one depends on the code's layout (2 records then, 0 after a change of the
# tracker's code, 429 at 20000); mcp drives two connections, so its inputs must grow longer
# before an exchange completes on one of them (0 records at 4000, 274 at 20000)
RUNS = {"http1_fast": 20000, "mcp": 20000}


@pytest.mark.parametrize("target", TARGETS)
def test_fuzz_target_runs_clean(target, tmp_path):
    # atheris is a declared test dependency (pyproject's `test` extra): missing, it fails
    import atheris  # noqa: F401
    stats = tmp_path / "stats.json"
    # a protocol's own target says how many inputs reach its records (FuzzTarget.ci_runs)
    runs = RUNS.get(target) or (load_fuzz_target(REFS[target]).ci_runs if target in REFS
                                else CI_RUNS)
    proc = subprocess.run(
        [sys.executable, "-m", "bench.fuzz.targets", target, f"-runs={runs}",
         "-max_len=4096", "-seed=1", f"-artifact_prefix={tmp_path}/"],
        cwd=REPO, capture_output=True, text=True, timeout=120,
        env={"FUZZ_STATS": str(stats), "PATH": "/usr/bin:/bin"},
    )
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out[-4000:]
    assert "Uncaught Python exception" not in out
    seen = json.loads(stats.read_text())
    assert seen["inputs"] == runs
    # malformed input is counted, not raised; and some inputs still make whole exchanges
    assert seen["parse_errors"] > 0
    assert seen["records"] > 0 and seen["spans"] > 0
