"""The agent does not trace its own exports: with a profiles pipeline exporting over
OTLP/gRPC to a receiver on a selected port, no span comes of those export calls."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

from tests.integration.conftest import REPO, wait_port
from tests.support.processes import stop_process
from tests.support.rotel import free_port

WORKLOAD = REPO / "tests/integration/peers/cpu_workload.py"


def _exports(count_file: Path) -> int:
    return len(count_file.read_text().splitlines()) if count_file.exists() else 0


def test_profiles_only_otlp_endpoint_is_not_traced(start_agent, uvicorn_server, tmp_path):
    receiver_port = free_port()
    count_file = tmp_path / "exports.txt"
    log = tmp_path / "receiver.log"
    receiver = subprocess.Popen(
        [sys.executable, "-m", "tests.integration.peers.profiles_receiver",
         str(receiver_port), str(count_file)],
        cwd=REPO, stdout=log.open("w"), stderr=subprocess.STDOUT)
    workload = subprocess.Popen([sys.executable, str(WORKLOAD), "120"],
                                stdout=subprocess.PIPE, text=True)
    try:
        wait_port(receiver_port, receiver, log)
        assert workload.stdout.readline().strip() == "READY"
        # the receiver's port is selected: only the exclusion of the agent's own export
        # endpoints keeps its (server side) Export calls out of the traces
        agent = start_agent(
            [receiver_port, uvicorn_server],
            targets={"pids": [workload.pid], "ports": [receiver_port, uvicorn_server]},
            exporters={},
            overrides={
                "receivers": {"ebpf": {"profiling": {"interval": "1s", "frequency": 49}}},
                "exporters": {"otlp/profiles": {"endpoint": f"127.0.0.1:{receiver_port}",
                                                "tls": {"insecure": True}}},
                "service": {"pipelines": {"profiles": {"receivers": ["ebpf"],
                                                       "exporters": ["otlp/profiles"]}}},
            })
        deadline = time.monotonic() + 90
        while _exports(count_file) < 3 and time.monotonic() < deadline:
            time.sleep(0.2)
        assert _exports(count_file) >= 3, agent.stderr
        # a request after those exports, on a selected port: its span shows capture works
        # and that the spans of what came before have been written
        subprocess.run(["curl", "-sS", "-o", "/dev/null",
                        f"http://127.0.0.1:{uvicorn_server}/items/7"], check=True, timeout=30)
        spans = agent.wait_for(lambda ss: any(s.attrs.get("url.path") == "/items/7" for s in ss),
                               timeout_s=60)
        assert any(s.attrs.get("url.path") == "/items/7" for s in spans), agent.stderr
        own = [s for s in spans if receiver_port in (s.attrs.get("server.port"),
                                                     s.attrs.get("client.port"))
               or "ProfilesService" in s.name]
        assert own == [], [(s.name, s.attrs) for s in own[:3]]
    finally:
        stop_process(workload)
        stop_process(receiver)
