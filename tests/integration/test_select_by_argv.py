"""A process name selects a Python program started after the agent by its script: with
`targets.process_names: [cpu_http_server.py]`, `python cpu_http_server.py` (whose kernel
command name is `python`) is traced and profiled from its exec on; the same server under
another script name is neither."""

from __future__ import annotations

import http.client
import shutil
import subprocess
import sys
import time
from pathlib import Path

from tests.integration.conftest import require_kernel
from tests.support.ports import free_port
from tests.support.processes import stop_process

PEERS = Path(__file__).resolve().parent / "peers"
SERVER = PEERS / "cpu_http_server.py"
SELECTED_LOG = "pid {pid} started after the agent is selected"
SAMPLES = 20  # the named server's CPU samples in checksum looked for
DEADLINE_S = 120.0


def _start(script: Path, port: int) -> subprocess.Popen:
    proc = subprocess.Popen([sys.executable, str(script), str(port), "0"],
                            stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "READY"
    return proc


def _post(port: int, n: int) -> None:
    conn = http.client.HTTPConnection("127.0.0.1", port, timeout=60)
    body = ("lorem ipsum dolor sit amet " * 8000).encode()  # 216 kB: checksum's CPU
    for _ in range(n):
        conn.request("POST", "/sum", body)
        assert conn.getresponse().read().isdigit()
    conn.close()


def _samples(folder: Path, pid: int) -> int:
    from otel_ebpf.advise.readers import read_pprof

    return sum(s.values[0] for f in folder.glob("cpu-*.pb.gz") for s in read_pprof(f).samples
               if s.labels.get("process.pid") == pid)


def test_a_script_started_later_is_selected_by_its_name(start_agent, tmp_path):
    require_kernel()
    other_script = tmp_path / "other_server.py"
    shutil.copy(SERVER, other_script)
    out = tmp_path / "pprof"
    run = start_agent([], targets={"process_names": [SERVER.name]}, overrides={
        "receivers": {"ebpf": {"profiling": {"frequency": 49, "interval": "1s"}}},
        "exporters": {"pprof": {"path": str(out)}},
        "service": {"pipelines": {"profiles": {"receivers": ["ebpf"],
                                               "exporters": ["pprof"]}}}})
    named_port, other_port = free_port(), free_port()
    named = _start(SERVER, named_port)
    other = _start(other_script, other_port)
    try:
        run.wait_log(SELECTED_LOG.format(pid=named.pid), named, timeout_s=30)
        deadline = time.monotonic() + DEADLINE_S
        while time.monotonic() < deadline and _samples(out, named.pid) < SAMPLES:
            _post(named_port, 5)
            _post(other_port, 5)
        spans = run.wait_for(lambda s: any(x.attrs.get("server.port") == named_port
                                           for x in s))
    finally:
        stop_process(named)
        stop_process(other)
    run.stop()
    spans = run.spans()
    named_spans = [s for s in spans if s.attrs.get("server.port") == named_port]
    assert named_spans, run.stderr[-3000:]
    assert {s.attrs.get("http.request.method") for s in named_spans} == {"POST"}
    assert not [s for s in spans if s.attrs.get("server.port") == other_port]
    assert _samples(out, named.pid) >= SAMPLES, run.stderr[-3000:]
    assert _samples(out, other.pid) == 0
    assert SELECTED_LOG.format(pid=other.pid) not in run.stderr
