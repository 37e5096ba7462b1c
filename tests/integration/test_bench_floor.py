"""bench/kernel_overhead.py's `floor` mode is a real measurement: its BPF programs
(bench/kernel/floor.bpf.c, compiled by the bench with clang) load, select the loop's
process alone, and send one record per write and per read of the loop, each holding the
bytes the call moved."""

from __future__ import annotations

import pytest

from bench import kernel_overhead

from .conftest import require_kernel

pytestmark = pytest.mark.kernel


def test_the_floor_sends_a_record_per_call_of_the_loop_alone(monkeypatch):
    require_kernel()
    monkeypatch.setattr(kernel_overhead, "STATS", {})
    monkeypatch.setattr(kernel_overhead, "FLOOR_RECORDS", [0])
    iterations = 2000
    ns, drained, drops = kernel_overhead.measure_floor(kernel_overhead.free_port(), iterations,
                                                       256, stats=True)
    assert ns > 0 and drops == 0
    pairs = iterations + 1000  # the loop's warm-up included
    # one record per write and per read of the loop, plus the few of its own process
    # around them (its stdin read of "go", the import it then makes, its result's write);
    # none from any other process's writes and reads (the host's logs and pipes)
    assert 2 * pairs <= drained <= 2 * pairs + 32
    (per_program,) = kernel_overhead.STATS["floor"]
    runs = {name: round(per_pair) for name, (per_pair, _) in per_program.items()}
    # every program ran (they run for every process's calls, and return early for others)
    assert runs.keys() == {"floor_enter_write", "floor_exit_write", "floor_exit_read"}
    assert all(n >= 1 for n in runs.values())
