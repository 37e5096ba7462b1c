"""CPU samples taken while a thread serves a traced request carry that request's SERVER
span (trace and span ids), through the real agent: a slow span opens its flame graph."""

from __future__ import annotations

import gzip
import subprocess
import sys
from pathlib import Path

import requests

from otel_ebpf.export.pprof import PprofProfile
from tests.integration.conftest import free_port, require_kernel
from tests.support.processes import stop_process

REPO = Path(__file__).resolve().parents[2]
PEER = REPO / "tests/integration/peers/cpu_http_server.py"
REQUESTS = 6
BURN_S = 0.3
SERVER = 2  # OTLP SpanKind


def _pprof_samples(folder: Path) -> list[tuple[list[str], dict[str, str], int]]:
    """(function names innermost first, string labels, count) of every pprof sample."""
    out = []
    for path in sorted(folder.iterdir()):
        p = PprofProfile()
        p.ParseFromString(gzip.decompress(path.read_bytes()))
        st = p.string_table
        funcs = {f.id: st[f.name] for f in p.function}
        locs = {loc.id: funcs[loc.line[0].function_id] for loc in p.location}
        for sample in p.sample:
            labels = {st[lb.key]: st[lb.str] for lb in sample.label if lb.str}
            out.append(([locs[i] for i in sample.location_id], labels, sample.value[0]))
    return out


def test_samples_link_to_the_span_their_thread_served(start_agent, tmp_path):
    require_kernel()
    port = free_port()
    server = subprocess.Popen([sys.executable, str(PEER), str(port), str(BURN_S)],
                              stdout=subprocess.PIPE, text=True)
    try:
        assert server.stdout.readline().strip() == "READY"
        agent = start_agent([port], targets={"pids": [server.pid]}, overrides={
            "receivers": {"ebpf": {"profiling": {"frequency": 99, "interval": "1s"},
                                   "correlation": {"window": "500ms"}}},
            "exporters": {"pprof": {"path": str(tmp_path / "pprof")}},
            "service": {"pipelines": {"profiles": {"receivers": ["ebpf"],
                                                   "exporters": ["pprof"]}}},
        })
        with requests.Session() as session:  # one keep-alive connection, one at a time
            for i in range(REQUESTS):
                assert session.get(f"http://127.0.0.1:{port}/work/{i}", timeout=10).ok
        spans = agent.wait_for(lambda s: sum(x.kind == SERVER for x in s) >= REQUESTS)
        assert agent.stop() == 0
    finally:
        stop_process(server)

    served = {(s.trace_id, s.span_id): s for s in spans if s.kind == SERVER}
    assert len(served) == REQUESTS, [s.name for s in spans]
    samples = _pprof_samples(tmp_path / "pprof")
    burning = [(labels, n) for names, labels, n in samples if "burn_for_request" in names]
    total = sum(n for _, n in burning)
    # cpu-clock samples count CPU time: on a busy machine the server gets less of it
    assert total >= 4 * REQUESTS, f"only {total} samples in the request work"
    linked = [(labels["trace_id"], labels["span_id"], n) for labels, n in burning
              if "span_id" in labels]
    # every link names a real SERVER span, and nearly all of the work is linked
    assert {(t, s) for t, s, _ in linked} <= set(served)
    assert sum(n for *_, n in linked) >= 0.9 * total
    # each request's work went to its own span: all six show up (their shares vary with
    # the CPU the server got on a busy machine)
    per_span = {}
    for t, s, n in linked:
        per_span[(t, s)] = per_span.get((t, s), 0) + n
    assert len(per_span) == REQUESTS
    # samples outside any request (the server waiting) carry no link
    idle = [labels for names, labels, _ in samples
            if "burn_for_request" not in names and "span_id" in labels]
    assert len(idle) <= 0.1 * len(samples)
