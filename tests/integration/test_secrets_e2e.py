"""Planted secrets never reach an exporter: Authorization, Proxy-Authorization, Cookie,
Set-Cookie, *api-key* and *token* headers in HTTP/1, HTTP/2 and gRPC metadata, secret and
configured query values, and bodies. Headers are captured as attributes (the worst case),
and every byte exported (OTLP/JSON file, stdout, stderr where the debug console and the
agent's log write, a real OTLP receiver) is searched for the secrets; each place searched
is shown to hold the spans, so the search cannot pass on an empty text."""

from __future__ import annotations

import subprocess
import sys

import pytest

from tests.integration.peers.secrets_peer import GRPC_METHOD, MARKER, PATH, VISIBLE
from tests.support.processes import stop_process
from tests.support.rotel import Rotel, free_port

from .conftest import REPO, wait_port

pytestmark = pytest.mark.kernel
PEER = [sys.executable, "-m", "tests.integration.peers.secrets_peer"]


@pytest.fixture
def servers(tmp_path):
    procs, ports = [], {}
    try:
        for kind in ("http", "h2", "grpc"):
            port = free_port()
            log = tmp_path / f"{kind}-server.log"
            proc = subprocess.Popen([*PEER, f"{kind}-server", str(port)], cwd=REPO,
                                    stdout=log.open("w"), stderr=subprocess.STDOUT)
            procs.append(proc)
            wait_port(port, proc, log)
            ports[kind] = port
        yield ports
    finally:
        for proc in procs:
            stop_process(proc)


def _client(kind: str, target: str) -> str:
    out = subprocess.run([*PEER, f"{kind}-client", target], cwd=REPO, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr[-2000:]
    return out.stdout


def test_no_planted_secret_is_exported(start_agent, servers, tmp_path):
    collector = Rotel(tmp_path)
    try:
        agent = start_agent(
            list(servers.values()),
            exporters={"otlp": {"endpoint": f"127.0.0.1:{collector.grpc_port}",
                                "tls": {"insecure": True}, "timeout": "5s"},
                       "debug": {"verbosity": "detailed"}},
            overrides={"receivers": {"ebpf": {
                "protocols": {"http1": {"capture_headers": True},
                              "http2": {"capture_headers": True}},
                "redaction": {"query_params": ["session"]},
            }}},
        )
        assert '"status": 200' in _client("http", f"http://127.0.0.1:{servers['http']}")
        assert '"HTTP/2"' in _client("h2", f"http://127.0.0.1:{servers['h2']}")
        assert '"OK"' in _client("grpc", f"127.0.0.1:{servers['grpc']}")
        rpc = GRPC_METHOD.lstrip("/")

        def complete(spans) -> bool:
            names = [(s.name, s.attrs.get("network.protocol.version")) for s in spans]
            return (sum(1 for n, v in names if n == "POST" and v == "1.1") >= 4
                    and sum(1 for n, v in names if n == "POST" and v == "2") >= 4
                    and sum(1 for n, _ in names if n == rpc) >= 4)

        spans = agent.wait_for(complete, timeout_s=30)
        assert complete(spans), [(s.name, s.attrs.get("network.protocol.version")) for s in spans]
        collector.wait_for(rpc, PATH)
        assert agent.stop() == 0
    finally:
        collector.stop()

    exported = {
        "OTLP/JSON file": agent.traces.read_text(),
        "stdout": agent.extra["stdout"].read_text(errors="replace"),
        # the debug exporter prints to stderr, with the agent's log
        "stderr (debug console, agent log)": agent.stderr,
        "rotel (OTLP/gRPC)": collector.output(),
    }
    for where, text in exported.items():
        assert MARKER not in text, (where, text[max(0, text.find(MARKER) - 300):][:600])
    # the search means something: headers and queries were exported, minus their secrets,
    # to the file, the receiver and the debug console (with the log: stderr)
    for where in ("OTLP/JSON file", "stderr (debug console, agent log)", "rotel (OTLP/gRPC)"):
        text = exported[where]
        assert VISIBLE["x-visible"] in text and rpc in text and "session=REDACTED" in text, where
    assert "otel-ebpf ready" in exported["stderr (debug console, agent log)"]
    file_text = exported["OTLP/JSON file"]
    assert VISIBLE["x-visible"] in file_text
    assert "VISIBLE-query-value" in file_text
    assert "api_key=REDACTED" in file_text and "session=REDACTED" in file_text
    for proto in ("1.1", "2"):  # each protocol's headers reached the span (and no secret)
        assert any(VISIBLE["x-visible"] in str(s.attrs) for s in spans
                   if s.attrs.get("network.protocol.version") == proto and s.name == "POST")
    assert any(VISIBLE["x-visible"] in str(s.attrs) for s in spans if s.name == rpc)
    for span in spans:
        if span.attrs.get("url.path") == PATH:
            assert span.attrs["url.query"] == ("q=VISIBLE-query-value&api_key=REDACTED"
                                               "&session=REDACTED&password=REDACTED&key=REDACTED")
