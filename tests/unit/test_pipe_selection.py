"""Which running processes get their pipes captured (receivers.ebpf.pipes), read from a
/proc tree: configured pids, names (command name or argv basename) and their descendants."""

from __future__ import annotations

from pathlib import Path

from otel_ebpf.kernel.socket_tracer import pipe_selection


def proc(root: Path, pid: int, ppid: int, comm: str, argv: list[str]) -> None:
    d = root / str(pid)
    d.mkdir()
    # comm may hold spaces and parentheses: the stat line is split at its last ")"
    (d / "stat").write_text(f"{pid} ({comm}) S {ppid} {pid} {pid} 0 -1\n")
    (d / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")


def test_names_pids_and_descendants_are_selected(tmp_path):
    proc(tmp_path, 1, 0, "systemd", ["/sbin/init"])
    proc(tmp_path, 10, 1, "claude", ["claude"])  # by its command name
    proc(tmp_path, 11, 10, "python3", ["python3", "-m", "server"])  # its MCP server
    proc(tmp_path, 12, 11, "node", ["node", "tool.js"])  # and what that runs
    proc(tmp_path, 20, 1, "python3", ["/usr/bin/python3", "/venv/bin/my-agent"])  # by argv[1]
    proc(tmp_path, 30, 1, "x (y) z", ["x"])
    proc(tmp_path, 31, 30, "sh", ["sh"])  # child of a pid given
    proc(tmp_path, 40, 1, "bash", ["bash"])  # nothing to do with any of them
    proc(tmp_path, 41, 40, "python3", ["python3"])
    (tmp_path / "self").mkdir()  # not a pid
    assert pipe_selection([30], ["claude", "my-agent"], str(tmp_path)) == {10, 11, 12, 20, 30, 31}
    assert pipe_selection([], [], str(tmp_path)) == set()


def test_a_long_name_matches_the_kernels_fifteen_bytes(tmp_path):
    proc(tmp_path, 5, 1, "a-very-long-com", ["/opt/a-very-long-command-name"])
    assert pipe_selection([], ["a-very-long-command"], str(tmp_path)) == {5}
