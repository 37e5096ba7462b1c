"""The OTLP backend (rotel) goes away for 30 s while traffic goes on, then comes back on
the same port: the agent keeps running, its export queue stays bounded (what does not fit
is dropped, counted in otel_ebpf.spans.dropped and said in a log line), and spans made
after the restart arrive."""

from __future__ import annotations

import re
import time
import uuid

import pytest

from tests.support.rotel import Rotel

from .conftest import read_metrics, run_client

pytestmark = pytest.mark.kernel

OUTAGE_S = 30.0
MAX_QUEUE, BATCH = 200, 50
RECOVERY_LIMIT_S = 90.0  # gRPC's reconnect backoff after 30 s of failures can reach ~25 s


def test_backend_outage_is_survived_and_counted(start_agent, uvicorn_server, tmp_path):
    port = uvicorn_server
    collector = Rotel(tmp_path)
    grpc_port, http_port = collector.grpc_port, collector.http_port
    agent = start_agent(
        [port],
        exporters={"otlp": {"endpoint": f"127.0.0.1:{grpc_port}", "tls": {"insecure": True},
                            "timeout": "2s"}},
        overrides={"processors": {"batch": {"send_batch_size": BATCH,
                                            "max_queue_size": MAX_QUEUE}}},
    )
    tag = uuid.uuid4().hex[:8]
    try:
        run_client("requests", port, [f"/items/before-{tag}"])
        collector.wait_for(f"/items/before-{tag}")
        collector.stop()

        # the outage: bounded traffic for OUTAGE_S, far more spans than the queue holds
        start = time.monotonic()
        sent, n = 0, 0
        while time.monotonic() - start < OUTAGE_S and n < 60:
            paths = [f"/items/outage-{tag}-{n}-{i}" for i in range(40)]
            assert len(run_client("requests", port, paths)) == len(paths)
            sent, n = sent + len(paths), n + 1
            assert agent.proc.poll() is None, agent.stderr[-3000:]
            time.sleep(max(0.0, start + n - time.monotonic()))  # one round a second
        outage_s = time.monotonic() - start
        assert sent * 2 > 3 * MAX_QUEUE  # client and server spans: the queue must overflow

        collector = Rotel(tmp_path, grpc_port=grpc_port, http_port=http_port)
        restarted = time.monotonic()
        after = f"/items/after-{tag}"
        arrived = None
        while time.monotonic() - restarted < RECOVERY_LIMIT_S:
            run_client("requests", port, [after])
            if after in collector.output():
                arrived = time.monotonic() - restarted
                break
            time.sleep(2.0)
        assert arrived is not None, f"no span reached the restarted receiver:\n{agent.stderr[-3000:]}"
        assert agent.proc.poll() is None
        time.sleep(2.5)  # one more metrics interval (1 s) after the last export
        assert agent.stop() == 0
        out = collector.output()
    finally:
        collector.stop()

    metrics = read_metrics(agent.traces)
    produced_in_outage = sent * 2
    delivered_from_outage = len(set(re.findall(rf"/items/outage-{tag}-\d+-\d+", out)))
    print(f"outage {outage_s:.0f} s: {produced_in_outage} spans made, {metrics['otel_ebpf.spans.dropped']} "
          f"dropped, {metrics.get('otel_ebpf.spans.failed', 0)} failed, "
          f"{delivered_from_outage} outage requests delivered later, "
          f"first span after restart in {arrived:.1f} s")
    # bounded: at most the queue plus batches in flight survive; the rest is dropped, counted
    assert delivered_from_outage <= MAX_QUEUE + 2 * BATCH
    # ... and every span made in the outage is accounted for: delivered later, or counted
    # as failed (its export gave up) or dropped (no room in the queue)
    lost = metrics["otel_ebpf.spans.dropped"] + metrics["otel_ebpf.spans.failed"]
    assert lost >= produced_in_outage - 2 * (MAX_QUEUE + 2 * BATCH)
    assert metrics["otel_ebpf.spans.dropped"] > 0 and metrics["otel_ebpf.spans.failed"] > 0
    assert re.search(r"exporter otlp: queue full \(200 spans\), dropped \d+ spans", agent.stderr)
    assert "Traceback" not in agent.stderr
