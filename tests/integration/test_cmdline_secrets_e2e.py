"""Secrets in real processes' command lines and URLs never reach an exporter.

Four real clients call a uvicorn server with secrets in their argv: a Python client given
header, option, key-shaped, DSN and random-token arguments; the same client started as
`mysql` (so `-pPASSWORD` is a mysql password); a `python -c` whose code holds a secret;
and curl with -H/-u headers. Their URLs carry secret query parameters. With
process.command_args turned on, every byte exported (OTLP/JSON file, the debug console on
stderr, stdout, a real OTLP receiver, the agent's log) is searched for each planted value;
each client's command_args is checked whole, so the search cannot pass on spans that
lack it. With the default config, process.command_args is not exported at all.
"""

from __future__ import annotations

import os
import subprocess
import sys

import pytest

from tests.support.processes import stop_process
from tests.support.rotel import Rotel

from .conftest import REPO, AgentRun

pytestmark = pytest.mark.kernel
CLIENT = "tests.integration.peers.argv_client"
R = "REDACTED"
VISIBLE = "VISIBLE-arg"  # a plain argument: it must be exported (the search means something)
QUERY_SECRETS = {name: f"PLANTED-q-{name}" for name in (
    "password", "passwd", "key", "secret", "token", "api_key", "auth", "signature",
    "access_token")}
QUERY = "q=VISIBLE-q&" + "&".join(f"{k}={v}" for k, v in QUERY_SECRETS.items())
RANDOM_TOKEN = "a8F3kLm9Qz2Xv7Rt1Bn4Wc6Yp0Hs5Dj"  # no name, no known shape: only entropy says
# argument -> what it must be exported as
ARGS = [
    ("-H", "-H"),
    ("Authorization: Bearer PLANTED-arg-bearer", f"Authorization: {R}"),
    ("-H", "-H"),
    ("Cookie: sid=PLANTED-arg-cookie; theme=dark", f"Cookie: {R}"),
    ("X-Api-Key: PLANTED-arg-xapikey", f"X-Api-Key: {R}"),
    ("--api-key", "--api-key"),
    ("PLANTED-arg-apikey", R),
    ("--x-password=PLANTED-arg-xpassword", f"--x-password={R}"),
    ("sk-PLANTEDargopenai0123456789", R),
    ("ghp_PLANTEDarggithub0123456789ab", R),
    ("xoxb-PLANTED-arg-slack-1234", R),
    ("eyJPLANTEDargjwt0.eyJzdWIiOiIxIn0.c2ln", R),
    ("postgres://bob:PLANTED-arg-dsn@db/x", f"postgres://{R}@db/x"),
    (RANDOM_TOKEN, R),
    (VISIBLE, VISIBLE),
    ("--port", "--port"),
    ("8000", "8000"),
]
CODE = ("import runpy; TOKEN = 'PLANTED-code-secret'; "
        f"runpy.run_module({CLIENT!r}, run_name='__main__')")
PLANTED = [  # every secret above, as it must never be found
    *QUERY_SECRETS.values(), RANDOM_TOKEN, "PLANTED-arg-bearer", "PLANTED-arg-cookie",
    "PLANTED-arg-xapikey", "PLANTED-arg-apikey", "PLANTED-arg-xpassword",
    "sk-PLANTEDargopenai0123456789", "ghp_PLANTEDarggithub0123456789ab",
    "xoxb-PLANTED-arg-slack-1234", "eyJPLANTEDargjwt0", "PLANTED-arg-dsn",
    "PLANTED-mysql-pw", "PLANTED-code-secret", "PLANTED-curl-bearer", "PLANTED-curl-pw",
    "PLANTED-curl-qtoken",
]
MARKER = "PLANTED"  # inside every planted value but RANDOM_TOKEN


def _url(port: int) -> str:
    return f"http://127.0.0.1:{port}/items/1?{QUERY}"


def _redacted_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/items/1?q=VISIBLE-q&" + "&".join(
        f"{k}={R}" for k in QUERY_SECRETS)


def _log(tmp_path, name: str):
    return tmp_path / f"client-{name.replace(' ', '')}.log"


def _start(argv: list[str], tmp_path, name: str, stdin=subprocess.PIPE) -> subprocess.Popen:
    log = _log(tmp_path, name).open("w")
    return subprocess.Popen(argv, cwd=REPO, stdin=stdin, stdout=log, stderr=subprocess.STDOUT,
                            env={**os.environ, "PYTHONPATH": str(REPO)})


def _clients(port: int, tmp_path) -> dict[str, tuple[subprocess.Popen, list[str]]]:
    """{name: (process, the command_args it must be exported with)}."""
    url, shown = _url(port), _redacted_url(port)
    py = [sys.executable, "-m", CLIENT, url, *(a for a, _ in ARGS)]
    # `exec -a mysql`: argv[0] is mysql, as for a mysql client, whose -pPASSWORD is secret
    mysql = ["bash", "-c", 'exec -a mysql "$0" "$@"', sys.executable, "-m", CLIENT, url,
             "-uroot", "-pPLANTED-mysql-pw", VISIBLE]
    code = [sys.executable, "-c", CODE, url, VISIBLE]
    # curl keeps its connection open across the 600 URLs of the glob, 10 a second
    curl = ["curl", "-s", "-o", "/dev/null", "--rate", "10/s",
            "-H", "Authorization: Bearer PLANTED-curl-bearer", "-u", "bob:PLANTED-curl-pw",
            f"http://127.0.0.1:{port}/items/c[1-600]?token=PLANTED-curl-qtoken&v={VISIBLE}"]
    return {
        "python": (_start(py, tmp_path, "python"),
                   [sys.executable, "-m", CLIENT, shown, *(s for _, s in ARGS)]),
        "mysql": (_start(mysql, tmp_path, "mysql"),
                  ["mysql", "-m", CLIENT, shown, "-uroot", f"-p{R}", VISIBLE]),
        "python -c": (_start(code, tmp_path, "python -c"),
                      [sys.executable, "-c", R, shown, VISIBLE]),
        "curl": (_start(curl, tmp_path, "curl", stdin=subprocess.DEVNULL),
                 ["curl", "-s", "-o", "/dev/null", "--rate", "10/s", "-H",
                  f"Authorization: {R}", "-u", R,
                  f"http://127.0.0.1:{port}/items/c[1-600]?token={R}&v={VISIBLE}"]),
    }


def _stop(clients) -> None:
    for proc, _ in clients.values():
        if proc.stdin:
            proc.stdin.close()  # the Python clients end their loop
        stop_process(proc)


def _by_pid(spans) -> dict[int, list]:
    out: dict[int, list] = {}
    for span in spans:
        out.setdefault(span.resource.get("process.pid"), []).append(span)
    return out


def _exported(agent: AgentRun, collector: Rotel | None) -> dict[str, str]:
    out = {
        "OTLP/JSON file": agent.traces.read_text(),
        "stdout": agent.extra["stdout"].read_text(errors="replace"),
        # the agent's log and the debug exporter's console: both on stderr
        "stderr (debug console, agent log)": agent.stderr,
    }
    if collector is not None:
        out["rotel (OTLP/gRPC)"] = collector.output()
    return out


def test_command_line_and_query_secrets_are_never_exported(start_agent, uvicorn_server,
                                                           tmp_path):
    collector = Rotel(tmp_path)
    clients: dict = {}
    try:
        agent = start_agent(
            [uvicorn_server],
            exporters={"otlp": {"endpoint": f"127.0.0.1:{collector.grpc_port}",
                                "tls": {"insecure": True}, "timeout": "5s"},
                       "debug": {"verbosity": "detailed"}},
            overrides={"receivers": {"ebpf": {
                "resource_attributes": {"process.command_args": {"enabled": True}}}}},
        )
        clients = _clients(uvicorn_server, tmp_path)
        # the agent read each client's command line (it reads /proc at the first connection)
        pids = {proc.pid for proc, _ in clients.values()}

        def complete(spans) -> bool:
            seen = _by_pid(spans)
            return all(any("process.command_args" in s.resource for s in seen.get(pid, []))
                       for pid in pids) and any(s.kind == 2 for s in spans)  # and the server

        spans = agent.wait_for(complete, timeout_s=60)
        collector.wait_for(VISIBLE, "/items/1")
        _stop(clients)
        assert agent.stop() == 0
    finally:
        if clients:
            _stop(clients)
        collector.stop()
    seen = _by_pid(spans)
    for name, (proc, expected) in clients.items():
        assert seen.get(proc.pid), (name, _log(tmp_path, name).read_text()[-2000:])
        args = {tuple(s.resource["process.command_args"]) for s in seen[proc.pid]
                if "process.command_args" in s.resource}
        assert args == {tuple(expected)}, (name, args)
    # query secrets: the server's url.query and the clients' url.full, by name
    server = [s for s in spans if s.kind == 2]
    assert {s.attrs.get("url.query") for s in server if s.attrs.get("url.path") == "/items/1"} \
        == {_redacted_url(uvicorn_server).partition("?")[2]}
    fulls = {s.attrs.get("url.full") for s in spans if s.kind == 3 and "url.full" in s.attrs}
    assert _redacted_url(uvicorn_server) in fulls, fulls

    exported = _exported(agent, collector)
    for where, text in exported.items():
        for secret in PLANTED:
            at = text.find(secret)
            assert at < 0, (where, secret, text[max(0, at - 300):at + 300])
        assert MARKER not in text, (where, text[max(0, text.find(MARKER) - 300):][:600])
    # ... and the places searched hold the spans, command lines and redacted queries
    for where in ("OTLP/JSON file", "stderr (debug console, agent log)", "rotel (OTLP/gRPC)"):
        text = exported[where]
        assert "process.command_args" in text and VISIBLE in text, where
        assert "password=REDACTED" in text and "/items/1" in text, where
    assert "otel-ebpf ready" in exported["stderr (debug console, agent log)"]  # the log is there


def test_command_args_are_off_by_default(start_agent, uvicorn_server, tmp_path):
    agent = start_agent([uvicorn_server], exporters={"debug": {"verbosity": "detailed"}})
    client = _start([sys.executable, "-m", CLIENT, _url(uvicorn_server), VISIBLE,
                     "--api-key", "PLANTED-default-key"], tmp_path, "default")
    try:
        spans = agent.wait_for(lambda ss: any(s.resource.get("process.pid") == client.pid
                                              for s in ss), timeout_s=60)
    finally:
        client.stdin.close()
        stop_process(client)
    assert agent.stop() == 0
    mine = [s for s in spans if s.resource.get("process.pid") == client.pid]
    assert mine, [s.resource for s in spans]
    assert all("process.command_args" not in s.resource for s in spans)
    # the resource is still complete without it: the executable and the service name say who
    assert mine[0].resource["process.executable.name"].startswith("python")
    assert mine[0].resource["service.name"] == CLIENT
    for where, text in _exported(agent, None).items():
        assert "process.command_args" not in text and MARKER not in text, where
        assert VISIBLE not in text, where
    assert "argv_client" in agent.stderr  # the debug console printed its spans
