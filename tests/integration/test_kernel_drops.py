"""A flood that overflows the kernel's ring buffer (1 MiB, drained every 2 s) is survived:
the drops are counted per CPU (otel_ebpf.kernel.drops{cpu}), reported in a log line and at
exit, and the agent traces the next request without a restart."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import time

import pytest

from tests.support.ports import free_port

from .conftest import REPO, run_client, wait_port

pytestmark = pytest.mark.kernel
PEER = [sys.executable, "-m", "tests.integration.peers.abandon"]
WRITES, SIZE = 20_000, 4096  # 80 MiB in 4 KiB messages: 80x what the ring holds


def _drops_per_cpu(path) -> dict[str, int]:
    """The latest otel_ebpf.kernel.drops data point of each CPU."""
    out: dict[str, int] = {}
    for line in path.read_text().splitlines():
        for rm in json.loads(line).get("resourceMetrics", []):
            for sm in rm.get("scopeMetrics", []):
                for m in sm.get("metrics", []):
                    if m["name"] != "otel_ebpf.kernel.drops":
                        continue
                    for p in m["sum"]["dataPoints"]:
                        cpu = {a["key"]: a["value"]["stringValue"]
                               for a in p.get("attributes", [])}.get("cpu")
                        if cpu is not None:  # before the first read: one unlabelled 0
                            out[cpu] = int(p.get("asInt", 0))
    return out


def test_ring_buffer_flood_is_counted_and_survived(start_agent, uvicorn_server, tmp_path):
    sink = free_port()
    log = tmp_path / "sink.log"
    server = subprocess.Popen([*PEER, "server", str(sink), "1"], cwd=REPO,
                              stdout=log.open("w"), stderr=subprocess.STDOUT,
                              start_new_session=True)
    try:
        wait_port(sink, server, log)
        agent = start_agent([sink, uvicorn_server], overrides={"receivers": {"ebpf": {
            "ring_buffer": {"size_mib": 1, "poll_interval": "2s", "wakeup_fill_percent": 100}}}})
        flood = subprocess.run([*PEER, "flood", str(sink), str(WRITES), str(SIZE)], cwd=REPO,
                               capture_output=True, text=True, timeout=60, check=True)
        took = json.loads(flood.stdout)["seconds"]
        # recovery: the next request, after the flood, is traced as usual
        time.sleep(2.5)
        run_client("requests", uvicorn_server, ["/items/after-flood"])
        spans = agent.wait_for(lambda s: sum(x.attrs.get("url.path") == "/items/after-flood"
                                             for x in s) >= 2, timeout_s=30)
        assert sum(s.attrs.get("url.path") == "/items/after-flood" for s in spans) >= 2
        time.sleep(2.5)  # a metrics interval after the last sweep
        assert agent.proc.poll() is None
        assert agent.stop() == 0
    finally:
        os.killpg(server.pid, signal.SIGTERM)
        server.wait(10)

    per_cpu = _drops_per_cpu(agent.traces)
    total = sum(per_cpu.values())
    print(f"flood of {WRITES} x {SIZE} B in {took:.2f} s: kernel drops per CPU {per_cpu}")
    assert total > 0 and set(per_cpu) == {str(c) for c in range(os.cpu_count())}, per_cpu
    assert "kernel ring buffer full:" in agent.stderr
    assert "otel_ebpf.kernel.drops" in agent.stderr and "Traceback" not in agent.stderr
