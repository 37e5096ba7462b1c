"""What `make run` shows: the agent with config/default.yaml as it is prints one readable
line per span on the console for a real request (a uvicorn server called by curl)."""

from __future__ import annotations

import os
import re
import subprocess
import time
import uuid

from tests.support.processes import stop_process

from .conftest import REPO, VENV_BIN, require_kernel


def test_default_config_prints_a_line_per_span(tmp_path, uvicorn_server):
    require_kernel()
    env = {k: v for k, v in os.environ.items() if not k.startswith(("OTEL_EXPORTER_OTLP", "OTEL_EBPF_"))}
    err = tmp_path / "agent.err"
    # cwd: the default config writes ./otel-ebpf-traces.jsonl
    agent = subprocess.Popen([str(VENV_BIN / "otel-ebpf"), "run", "-c", str(REPO / "config/default.yaml")],
                             stdout=subprocess.DEVNULL, stderr=err.open("w"), cwd=tmp_path, env=env)
    try:
        deadline = time.monotonic() + 90
        while "otel-ebpf ready" not in err.read_text(errors="replace"):
            assert agent.poll() is None and time.monotonic() < deadline, err.read_text()[-3000:]
            time.sleep(0.1)
        path = f"/items/{uuid.uuid4().hex[:12]}"
        url = f"http://127.0.0.1:{uvicorn_server}{path}"
        subprocess.run(["curl", "-s", "-o", "/dev/null", url], check=True, timeout=30)
        server_line = client_line = None
        deadline = time.monotonic() + 60
        while server_line is None or client_line is None:
            assert time.monotonic() < deadline, f"no span lines for {path}:\n{err.read_text()[-5000:]}"
            time.sleep(0.2)
            lines = [line for line in err.read_text(errors="replace").splitlines()
                     if line.rstrip().endswith(path)]
            server_line = next((line for line in lines if line.startswith("SERVER ")), None)
            client_line = next((line for line in lines if line.startswith("CLIENT ")), None)
    finally:
        stop_process(agent, grace_s=30)
    text = err.read_text(errors="replace")
    assert "\x1b[" not in text  # a file, not a terminal: no colour codes
    header = next(line for line in text.splitlines() if line.startswith("KIND "))
    assert header.split() == ["KIND", "SERVICE", "NAME", "STATUS", "DURATION", "PEER", "TRACE", "TARGET"]
    kind, service, name, status, duration, peer, trace, target = server_line.split()
    assert (kind, service, name, status, target) == ("SERVER", "test-http-app", "GET", "200", path)
    assert re.fullmatch(r"\d+\.\d+(µs|ms|s)", duration) and re.fullmatch(r"[0-9a-f]{8}", trace)
    assert re.fullmatch(r"127\.0\.0\.1:\d+", peer)
    kind, service, name, status, duration, peer, trace_c, target = client_line.split()
    assert (kind, name, status, peer, target) == ("CLIENT", "GET", "200",
                                                  f"127.0.0.1:{uvicorn_server}", path)
    assert service == "curl" and trace_c == trace  # one trace: curl's call, the server's answer
    # the columns line up under their titles
    for line in (server_line, client_line):
        for title in ("SERVICE", "NAME", "STATUS", "PEER", "TRACE", "TARGET"):
            at = header.index(title)
            assert line[at - 1] == " " != line[at], (title, line)
