"""The OTLP backend (rotel) goes away for 30 s while traffic goes on, then comes back on
the same port: the agent keeps running, its export queue stays bounded (what does not fit
is dropped, counted in otel_ebpf.spans.dropped and said in a log line), and spans made
after the restart arrive."""

from __future__ import annotations

import json
import re
import time
import uuid

import pytest

from tests.support.rotel import Rotel

from .conftest import run_client

pytestmark = pytest.mark.kernel

OUTAGE_S = 30.0
MAX_QUEUE, BATCH = 200, 50
# a failing export holds its sender for most of its timeout (the SDK retries until then):
# with one sender at most a batch per ~7 s drains as failed, so the outage's traffic
# overflows the queue however slowly this machine makes it (with 2 s, a slow run never
# overflowed; with the default four senders a slow client would not either)
CONSUMERS = 1
EXPORT_TIMEOUT = "10s"
RECOVERY_LIMIT_S = 90.0  # gRPC's reconnect backoff after 30 s of failures can reach ~25 s


def test_backend_outage_is_survived_and_counted(start_agent, uvicorn_server, tmp_path):
    port = uvicorn_server
    collector = Rotel(tmp_path)
    grpc_port, http_port = collector.grpc_port, collector.http_port
    agent = start_agent(
        [port],
        exporters={"otlp": {"endpoint": f"127.0.0.1:{grpc_port}", "tls": {"insecure": True},
                            "timeout": EXPORT_TIMEOUT,
                            "sending_queue": {"num_consumers": CONSUMERS}}},
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
        while (time.monotonic() - start < OUTAGE_S or sent * 2 <= 3 * MAX_QUEUE) and n < 60:
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
        # a clean stop exports what is queued and counts what is left as dropped; the last
        # metrics collection comes after that: no batch is in flight in what it says
        assert agent.stop() == 0
        counts = _counters(agent.traces)
        # rotel prints what it took a moment after answering: wait for all it acknowledged
        acknowledged = counts.get(("spans.exported", "exporter=otlp"), 0)
        deadline = time.monotonic() + 30
        while len(_span_ids(collector.output())) < acknowledged and time.monotonic() < deadline:
            time.sleep(0.2)
        out = collector.output()
    finally:
        collector.stop()

    produced = counts[("spans.produced", "")]
    unconvertible = counts.get(("spans.dropped", "reason=unconvertible"), 0)
    per_exporter = {e: {k: counts.get((f"spans.{k}", f"exporter={e}"), 0)
                        for k in ("exported", "failed", "dropped")} for e in ("file", "otlp")}
    print(f"outage {outage_s:.0f} s: {sent * 2} spans made in it, {produced} in all "
          f"({unconvertible} unconvertible); per exporter {per_exporter}; first span after "
          f"the restart in {arrived:.1f} s")
    # every span made is accounted for, by each exporter: delivered, failed, or dropped
    for exporter, c in per_exporter.items():
        assert c["exported"] + c["failed"] + c["dropped"] == produced - unconvertible, (
            exporter, produced, unconvertible, c)
    # the file exporter delivered them all, and they are the spans the traffic made
    assert per_exporter["file"] == {"exported": produced - unconvertible, "failed": 0,
                                    "dropped": 0}
    made = agent.spans()
    assert len(made) == produced - unconvertible
    outage_made = {s.span_id for s in made if s.attrs.get("url.path", "").startswith(
        f"/items/outage-{tag}-")}
    assert len(outage_made) == sent * 2  # a client and a server span per request
    # what otlp calls exported is what rotel printed: every span id it reported delivered
    # (a batch rotel took whose answer never came, rotel stopped or the exporter's timeout
    # passed, is counted failed and still there: at most one per request in flight)
    delivered = _span_ids(out)
    assert delivered <= {s.span_id for s in made}
    otlp = per_exporter["otlp"]
    in_flight = CONSUMERS * BATCH
    assert otlp["exported"] <= len(delivered) <= otlp["exported"] + in_flight, (
        otlp, len(delivered))
    # bounded: at most the queue plus the batches in flight (and one being formed) survive
    # the outage, the rest is dropped (no room in the queue) or failed (its export gave up),
    # counted
    assert len(delivered & outage_made) <= MAX_QUEUE + in_flight + BATCH
    assert otlp["dropped"] > 0 and otlp["failed"] > 0
    assert re.search(r"exporter otlp: queue full \(200 spans\), dropped \d+ spans", agent.stderr)
    assert "Traceback" not in agent.stderr


def _span_ids(rotel_output: str) -> set[str]:
    """The span ids in rotel's debug output (its `ID : ...` lines, colours removed)."""
    plain = re.sub(r"\x1b\[[0-9;]*m", "", rotel_output)
    return set(re.findall(r"^\s*ID\s*:\s*([0-9a-f]{16})\s*$", plain, re.M))


def _counters(path) -> dict[tuple[str, str], int]:
    """The last value of each otel_ebpf.* counter series the agent wrote, keyed by
    (counter, "label=value" or "")."""
    out: dict[tuple[str, str], int] = {}
    for line in path.read_text().splitlines():
        for rm in json.loads(line).get("resourceMetrics", []):
            for sm in rm.get("scopeMetrics", []):
                for m in sm.get("metrics", []):
                    for p in m.get("sum", {}).get("dataPoints", []):
                        labels = ",".join(f"{a['key']}={a['value']['stringValue']}"
                                          for a in p.get("attributes", []))
                        out[(m["name"].removeprefix("otel_ebpf."), labels)] = int(p["asInt"])
    return out
