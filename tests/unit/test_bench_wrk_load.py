"""bench/capacity/wrk_load.py runs the real wrk against a server on 127.0.0.1 and reports
its counts as one JSON line; bench/agent_capacity.py's --compare tables are well-formed
Markdown (as many cells in each row as in the header) for every part."""

from __future__ import annotations

import argparse
import json
import subprocess
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import pytest

from bench import agent_capacity as capacity
from bench.capacity import wrk_load

REPO = Path(__file__).resolve().parents[2]


class _Ok(BaseHTTPRequestHandler):
    protocol_version = "HTTP/1.1"

    def do_GET(self) -> None:  # noqa: N802 - http.server's name
        code = 200 if self.path == "/items/42" else 404
        self.send_response(code)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args) -> None:
        pass


@pytest.fixture
def server():
    httpd = ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    thread = threading.Thread(target=httpd.serve_forever, daemon=True)
    thread.start()
    yield httpd.server_address[1]
    httpd.shutdown()
    httpd.server_close()


def _run(port: int, path: str) -> dict:
    out = subprocess.run(
        [sys.executable, str(REPO / "bench/capacity/wrk_load.py"), str(port), "1",
         "--conns", "2", "--path", path], capture_output=True, text=True, timeout=60, check=True)
    return json.loads(out.stdout.strip().splitlines()[-1])


def test_counts_what_wrk_completed(server):
    got = _run(server, "/items/42")
    assert got["completed"] > 0 and got["rate"] > 0 and got["cpu_s"] > 0
    assert got["errors"] == 0


def test_error_answers_are_counted(server):
    got = _run(server, "/missing")
    assert got["completed"] > 0
    assert got["errors"] == got["completed"]  # every answer a 404


def test_not_a_report_is_an_error():
    with pytest.raises(ValueError, match="not a wrk report"):
        wrk_load.summary("wrk: command failed")


@pytest.mark.parametrize("part", ["http", "sse", "wrk"])
def test_compare_tables_are_well_formed(part, monkeypatch):
    args = argparse.Namespace(compare=2, base=None, max_cpu=100.0, agent_cpu=0, peer_cpu=1,
                              exporter="file", drain=5.0, conns=64, sse_conns=128, wrk_conns=16,
                              rates=[1000.0], sse_rates=[100.0], seconds=1.0)

    def step(*_, **how):
        s = capacity.Step(part, 1000.0, achieved=990.0, requests=990, chunks=3500,
                          chunk_rate=3500.0, load_cpu=50.0, agent_cpu=10.0 if how.get("pure")
                          else 5.0, others_cpu=1.0, us_per_req=50.0, spans_in_time=1980,
                          totals={"kernel.drops": 0})
        return s

    for name in ("http_step", "sse_step", "wrk_step"):
        monkeypatch.setattr(capacity, name, step)
    lines = {"http": lambda: capacity.compare_http(args, Path("httpload"), "today"),
             "sse": lambda: capacity.compare_sse(args, "today"),
             "wrk": lambda: capacity.compare_wrk(args, "today")}[part]()
    rows = [line for line in lines if line.startswith("|")]
    assert len(rows) == 2 + 2  # header, rule, a row per agent
    assert len({row.count("|") for row in rows}) == 1
    assert "pure Python" in rows[2] and "compiled" in rows[3]
    assert "| 10" in rows[2] and "| 5" in rows[3]  # each side its own agent CPU
    assert rows[2].endswith("| 0, 0 | 2 of 2 |")
