"""Consistent head sampling through two hops with the real agent: client -> relay
(thread-per-request, calls on) -> uvicorn, 2,000 requests at sampling.ratio 0.25. Every
trace is exported whole or not at all, the kept share is within 5 sigma of the binomial
expectation, each kept trace is the one its ID says, and every span not exported is
counted as sampled out (none is lost on the way)."""

from __future__ import annotations

import json
import subprocess
import sys
import time
import uuid
from collections import defaultdict

import pytest

from otel_ebpf.correlate.sampling import HeadSampler

from .conftest import REPO, read_metrics

pytestmark = pytest.mark.kernel

SERVER, CLIENT = 2, 3
REQUESTS, RATIO = 2000, 0.25
CLIENT_TIMEOUT_S = 600  # 2,000 requests through two hops on a loaded 2-core machine


def _client(port: int, paths: list[str]) -> None:
    out = subprocess.run(
        [sys.executable, "-m", "tests.integration.peers.http_client", "requests",
         f"http://127.0.0.1:{port}", *paths],
        cwd=REPO, capture_output=True, text=True, timeout=CLIENT_TIMEOUT_S)
    assert out.returncode == 0, out.stderr[-2000:]
    statuses = [json.loads(line)["status"] for line in out.stdout.splitlines()]
    assert statuses == [200] * len(paths)


@pytest.mark.timeout(900)  # 2,000 requests through two traced hops: minutes on a busy machine
def test_two_hops_sampled_alike(start_agent, relay, tmp_path):
    relay_port, app_port = relay
    agent = start_agent([relay_port, app_port],
                        overrides={"receivers": {"ebpf": {"sampling": {"ratio": RATIO}}}})
    tags = [uuid.uuid4().hex[:12] for _ in range(REQUESTS)]
    _client(relay_port, [f"/hop/{t}" for t in tags])
    # every request's 4 spans were built (kept or sampled out): then the agent may stop
    deadline = time.monotonic() + 120
    while read_metrics(agent.traces).get("otel_ebpf.spans.produced", 0) < 4 * REQUESTS:
        assert time.monotonic() < deadline, read_metrics(agent.traces)
        time.sleep(0.5)
    assert agent.stop() == 0
    metrics = read_metrics(agent.traces)

    by_tag: dict[str, list] = defaultdict(list)
    for span in agent.spans():
        path = span.attrs.get("url.path", "")
        if path.startswith("/hop/"):
            by_tag[path.removeprefix("/hop/")].append(span)
        elif path.startswith("/items/"):
            by_tag[path.removeprefix("/items/").removesuffix("-down")].append(span)
    assert set(by_tag) <= set(tags)
    sampler = HeadSampler(RATIO)
    for tag, spans in by_tag.items():
        # whole: the client's, the relay's server and client spans, the app's server span
        kinds = sorted((s.kind, s.attrs["url.path"].startswith("/hop/")) for s in spans)
        assert kinds == [(SERVER, False), (SERVER, True), (CLIENT, False), (CLIENT, True)], \
            (tag, [(s.name, s.kind, s.attrs.get("url.path")) for s in spans])
        (trace,) = {s.trace_id for s in spans}
        assert sampler.keeps(bytes.fromhex(trace))
    kept = len(by_tag)
    print(f"kept {kept} of {REQUESTS} traces at ratio {RATIO}")
    sigma = (REQUESTS * RATIO * (1 - RATIO)) ** 0.5
    assert abs(kept - REQUESTS * RATIO) < 5 * sigma, kept
    # nothing lost: the spans not exported are exactly the sampled-out traces' spans
    assert metrics["otel_ebpf.spans.produced"] == 4 * REQUESTS, metrics
    assert metrics["otel_ebpf.spans.sampled_out"] == 4 * (REQUESTS - kept), metrics
