"""The correlation benchmark's topology with its uvicorn services on uvloop (what
`uvicorn[standard]`, LiteLLM and vLLM run), every service or mixed with asyncio's loop, the
gateway calling out with httpx or aiohttp: parents never wrong, and the asyncio and
thread-pool calls found from the Context uvloop enters after each read (a probe on its
loop module), at concurrency 1, 8 and 64. The services run in .venv-gateway (make test)."""

from __future__ import annotations

from pathlib import Path

import pytest

from bench.correlation.run import run_level
from otel_ebpf.kernel.asyncio_probes import LOOP_ENTRIES
from otel_ebpf.kernel.uprobes import file_offsets

from .conftest import REPO, require_kernel, require_peer

pytestmark = pytest.mark.kernel

GATEWAY_PYTHON = REPO / ".venv-gateway" / "bin" / "python"
REQUESTS = 24


def _gateway_venv() -> Path:
    require_peer(None if GATEWAY_PYTHON.is_file() else
                 f"{GATEWAY_PYTHON} missing: `make test` builds .venv-gateway (uvloop, aiohttp)")
    return GATEWAY_PYTHON


def test_uvloop_module_names_its_context_entries():
    """The probe's places: uvloop's wheel keeps its symbol table, with both helpers."""
    _gateway_venv()
    modules = sorted((REPO / ".venv-gateway").glob(
        "lib/python3*/site-packages/uvloop/loop.cpython-*.so"))
    assert modules, "uvloop's loop module not found in .venv-gateway"
    assert set(file_offsets(str(modules[0]), LOOP_ENTRIES)) == set(LOOP_ENTRIES)


@pytest.mark.parametrize("concurrency", [1, 8, 64])
@pytest.mark.parametrize("client", ["httpx", "aiohttp"])
@pytest.mark.parametrize("loop", ["uvloop", "mixed"])
def test_parents_on_uvloop_against_ground_truth(tmp_path, monkeypatch, loop, client,
                                                concurrency):
    require_kernel()
    monkeypatch.setenv("BENCH_SERVICE_PYTHON", str(_gateway_venv()))
    monkeypatch.setenv("BENCH_LOOP", loop)
    monkeypatch.setenv("BENCH_GATEWAY_CLIENT", client)
    result = run_level(concurrency, requests=REQUESTS, workdir=tmp_path, deadline_s=60,
                       legacy_every=3)
    assert result.agent_exit == 0
    assert result.load["ok"] == result.load["sent"] == REQUESTS
    report = result.report
    found = {k: (r.found, r.edges, dict(r.evidence)) for k, r in report.rows.items()}
    assert report.total.set > 0 and report.total.right == report.total.set, found
    assert report.rows["cross-process"].found == report.rows["cross-process"].edges, found
    if concurrency == 1:
        assert report.total.found == report.total.edges, found
        assert report.traces_right == report.traces, found
    for shape in ("asyncio", "threadpool"):
        row = report.rows[shape]
        # found from the Context evidence, not by the thread or the sole open request (at
        # concurrency 1 those decide as well: either is right there)
        assert row.edges > 0 and row.found >= 0.95 * row.edges, found
        if concurrency > 1:
            assert row.evidence.get("task", 0) >= 0.95 * row.edges, found
