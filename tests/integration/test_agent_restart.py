"""`kill -9` of the agent leaves no BPF state behind (no pinned object, no program or map
still held), and a new agent parses a keep-alive connection that was open all along, from
its next request on."""

from __future__ import annotations

import json
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

from tests.support.processes import stop_process

from .conftest import REPO

pytestmark = pytest.mark.kernel

SERVER, CLIENT = 2, 3


def _on(spans, path: str) -> list:
    return [s for s in spans if s.attrs.get("url.path") == path]


def _bpf_objects_of(pid: int) -> dict[str, set[int]]:
    """IDs of the BPF programs and maps a process holds, from its files' fdinfo."""
    out: dict[str, set[int]] = {"prog": set(), "map": set()}
    for info in Path(f"/proc/{pid}/fdinfo").iterdir():
        try:
            text = info.read_text()
        except OSError:  # closed meanwhile
            continue
        for line in text.splitlines():
            key, _, value = line.partition(":")
            if key in ("prog_id", "map_id"):
                out[key[:-3]].add(int(value))
    return out


def _pinned() -> set[str]:
    """Every file under every mounted bpf filesystem (pinned programs, maps, links)."""
    mounts = [line.split()[1] for line in Path("/proc/mounts").read_text().splitlines()
              if line.split()[2] == "bpf"]
    return {str(p) for m in mounts for p in Path(m).rglob("*")}


def test_kill_9_leaves_nothing_and_a_new_agent_resyncs(start_agent, uvicorn_server):
    port = uvicorn_server
    pinned_before = _pinned()
    client = subprocess.Popen([sys.executable, "-m", "tests.integration.peers.keepalive_client",
                               str(port)], cwd=REPO, stdin=subprocess.PIPE,
                              stdout=subprocess.PIPE, text=True)
    try:
        local_port = json.loads(client.stdout.readline())["local_port"]

        def get(path: str) -> None:
            client.stdin.write(path + "\n")
            client.stdin.flush()
            answer = json.loads(client.stdout.readline())
            assert answer == {"path": path, "status": 200, "local_port": local_port}

        first = start_agent([port])
        get("/items/first-agent")
        spans = first.wait_for(lambda s: len(_on(s, "/items/first-agent")) >= 2)
        assert sorted(s.kind for s in _on(spans, "/items/first-agent")) == [SERVER, CLIENT]
        held = _bpf_objects_of(first.proc.pid)
        assert held["prog"] and held["map"], held

        first.proc.send_signal(signal.SIGKILL)
        first.proc.wait(10)
        first.stopped = True
        # the kernel frees what only the dead process held, right after its files close
        deadline = time.monotonic() + 10
        while time.monotonic() < deadline:
            listing = {k: v & held[k] for k, v in _bpf_programs_and_maps().items()}
            if not listing["prog"] and not listing["map"]:
                break
            time.sleep(0.5)
        assert not listing["prog"] and not listing["map"], f"still loaded: {listing}"
        assert _pinned() == pinned_before

        get("/items/no-agent")  # the connection goes on while nobody watches

        second = start_agent([port])
        get("/items/second-agent")
        spans = second.wait_for(lambda s: {x.kind for x in _on(s, "/items/second-agent")}
                                == {SERVER, CLIENT})
        mine = _on(spans, "/items/second-agent")
        assert sorted(s.kind for s in mine) == [SERVER, CLIENT], [
            (s.name, s.kind, s.attrs) for s in spans]
        # the same connection the first agent saw: the client's port did not change
        (client_side,) = [s for s in mine if s.kind == CLIENT]
        (server_side,) = [s for s in mine if s.kind == SERVER]
        assert server_side.attrs["client.port"] == local_port
        assert client_side.attrs["server.port"] == port
        assert second.stop() == 0
        assert "Traceback" not in second.stderr
        # the request made while no agent ran was seen by neither
        assert not _on(first.spans() + second.spans(), "/items/no-agent")
    finally:
        client.stdin.close()
        stop_process(client)


def _bpf_programs_and_maps() -> dict[str, set[int]]:
    out = {}
    for kind in ("prog", "map"):
        listing = subprocess.run(["bpftool", "-j", kind, "show"], capture_output=True,
                                 text=True, timeout=60, check=True).stdout
        out[kind] = {o["id"] for o in json.loads(listing or "[]")}
    return out
