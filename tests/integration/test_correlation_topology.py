"""The correlation benchmark's topology, small, in CI: gateway (asyncio) -> rag (thread
pool) -> embedder / vectordb / llm (SSE), gateway -> legacy (gunicorn sync). Parents must
never be wrong; at concurrency 1 every one must be found, and under concurrency the
asyncio and thread-pool calls are still found (Context evidence). Also with the services on
the distribution's stripped python3 (no .symtab: only exported symbols to probe)."""

from __future__ import annotations

import os
import subprocess
import sys
import sysconfig
from pathlib import Path

import pytest

from bench.correlation.run import run_level
from tests.support.python_symbols import missing_symbols

from .conftest import REQUIRE_BPF, require_kernel

pytestmark = pytest.mark.kernel


@pytest.mark.parametrize("concurrency", [1, 8])
def test_parents_against_ground_truth(tmp_path, concurrency):
    require_kernel()
    # the services run on this interpreter: a stripped build gives no task or Context
    # evidence, and the asyncio and thread-pool rows below could not be checked
    missing = missing_symbols()
    if missing and REQUIRE_BPF:  # fail before the load: the test cannot do its job here
        pytest.fail(f"{sys.executable} lacks " + "; ".join(missing) + ": build .venv from a "
                    "CPython with symbols (Makefile, PYTHON)")
    result = run_level(concurrency, requests=24, workdir=tmp_path, deadline_s=60,
                       legacy_every=3)
    assert result.agent_exit == 0
    assert result.load["ok"] == result.load["sent"] == 24
    report = result.report
    total = report.total
    assert total.set > 0 and total.right == total.set, "a parent was wrong"
    assert report.rows["cross-process"].found == report.rows["cross-process"].edges
    assert report.rows["thread"].found == report.rows["thread"].edges
    found = {k: (r.found, r.edges) for k, r in report.rows.items()}
    if concurrency == 1:
        assert total.found == total.edges, found
        assert report.traces_right == report.traces
    if missing:  # said, not passed over: the rest was checked, these rows were not
        pytest.skip("asyncio and thread-pool rows not checked: " + "; ".join(missing))
    for shape in ("asyncio", "threadpool"):  # task and Context evidence (CPython uprobes)
        row = report.rows[shape]
        assert row.found >= 0.9 * row.edges, found


def _stripped_python() -> str | None:
    """The distribution's CPython of this venv's minor version, when it has no symbol table
    (Debian's /usr/bin/python3.11): the venv's packages import there (same ABI)."""
    exe = Path(f"/usr/bin/python3.{sys.version_info.minor}")
    if not exe.is_file() or Path(exe).resolve() == Path(sys.executable).resolve():
        return None
    out = subprocess.run(["readelf", "-S", "-W", str(exe)], capture_output=True, text=True,
                         timeout=60).stdout
    return None if ".symtab" in out else str(exe)


@pytest.mark.parametrize("concurrency", [8, 64])
def test_stripped_interpreter_finds_asyncio_and_thread_pool_parents(tmp_path, monkeypatch,
                                                                     concurrency):
    require_kernel()
    exe = _stripped_python()
    if exe is None:
        message = (f"no stripped /usr/bin/python3.{sys.version_info.minor} here: the Context "
                   "evidence on a stripped interpreter is not checked")
        if REQUIRE_BPF:
            pytest.fail(message)
        pytest.skip(message)
    repo = Path(__file__).resolve().parents[2]
    monkeypatch.setenv("BENCH_SERVICE_PYTHON", exe)
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(
        [str(repo), sysconfig.get_paths()["purelib"], sysconfig.get_paths()["platlib"]]))
    result = run_level(concurrency, requests=40, workdir=tmp_path, deadline_s=60,
                       legacy_every=3)
    assert result.agent_exit == 0
    assert result.load["ok"] == result.load["sent"] == 40
    report = result.report
    found = {k: (r.found, r.edges) for k, r in report.rows.items()}
    assert report.total.set > 0 and report.total.right == report.total.set, found
    for shape in ("asyncio", "threadpool"):
        row = report.rows[shape]
        assert row.edges > 0 and row.found >= 0.9 * row.edges, found
        assert row.evidence.get("task", 0) >= 0.9 * row.edges, found
