"""The correlation benchmark's topology, small, in CI: gateway (asyncio) -> rag (thread
pool) -> embedder / vectordb / llm (SSE), gateway -> legacy (gunicorn sync). Parents must
never be wrong; at concurrency 1 every one must be found, and under concurrency the
asyncio and thread-pool calls are still found (task and Context evidence)."""

from __future__ import annotations

import pytest

from bench.correlation.run import run_level

from .conftest import require_kernel

pytestmark = pytest.mark.kernel


@pytest.mark.parametrize("concurrency", [1, 8])
def test_parents_against_ground_truth(tmp_path, concurrency):
    require_kernel()
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
    if interpreter_has_symbols():  # task and Context evidence (CPython uprobes)
        for shape in ("asyncio", "threadpool"):
            row = report.rows[shape]
            assert row.found >= 0.9 * row.edges, found


def interpreter_has_symbols() -> bool:
    """The services run on this interpreter: a stripped build gives no task evidence."""
    import _asyncio

    from otel_ebpf.kernel.asyncio_probes import TASK_INIT, TASK_STEP
    from otel_ebpf.kernel.uprobes import file_offsets

    return len(file_offsets(_asyncio.__file__, (TASK_STEP, TASK_INIT))) == 2
