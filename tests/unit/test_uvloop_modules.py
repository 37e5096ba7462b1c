"""Where the agent finds uvloop's loop module for a process: mapped already, or in the
virtualenv its command runs from (before the program imports it), on a /proc-shaped tree."""

from __future__ import annotations

import os
from pathlib import Path

from otel_ebpf.kernel.asyncio_probes import loop_modules

MODULE = "lib/python3.11/site-packages/uvloop/loop.cpython-311-x86_64-linux-gnu.so"


def _process(root: Path, pid: int, argv: list[str], cwd: Path, maps: str = "") -> None:
    proc = root / str(pid)
    proc.mkdir(parents=True)
    (proc / "maps").write_text(maps)
    (proc / "cmdline").write_bytes(b"\0".join(a.encode() for a in argv) + b"\0")
    os.symlink(cwd, proc / "cwd")


def _venv(path: Path) -> Path:
    (path / "bin").mkdir(parents=True)
    (path / "pyvenv.cfg").write_text("home = /usr/bin\n")
    module = path / MODULE
    module.parent.mkdir(parents=True)
    module.write_bytes(b"\x7fELF")
    return module


def test_a_mapped_module_is_found_first(tmp_path):
    mapped = "/srv/app/site-packages/uvloop/loop.cpython-312-x86_64-linux-gnu.so"
    maps = (f"7f00-7f10 r-xp 00001000 08:01 42 {mapped}\n"
            "7f20-7f30 r-xp 00001000 08:01 43 /usr/lib/libc.so.6\n")
    _process(tmp_path / "proc", 10, ["/usr/bin/python3", "app.py"], tmp_path, maps)
    assert loop_modules(10, str(tmp_path / "proc")) == {mapped}


def test_before_its_import_the_venv_of_the_script_or_interpreter_names_it(tmp_path):
    module = _venv(tmp_path / "venv")
    # `venv/bin/uvicorn app:app`: the shebang's interpreter first, the script second
    _process(tmp_path / "proc", 11, ["/usr/bin/python3.11", str(tmp_path / "venv/bin/uvicorn")],
             tmp_path)
    # `venv/bin/python -m app`, started from the venv's folder with a relative path
    _process(tmp_path / "proc", 12, ["bin/python", "-m", "app"], tmp_path / "venv")
    assert loop_modules(11, str(tmp_path / "proc")) == {str(module)}
    assert loop_modules(12, str(tmp_path / "proc")) == {str(module)}


def test_no_uvloop_no_venv_or_no_process_gives_nothing(tmp_path):
    (tmp_path / "plain/bin").mkdir(parents=True)  # no pyvenv.cfg: not a venv
    _process(tmp_path / "proc", 13, [str(tmp_path / "plain/bin/python")], tmp_path)
    venv = tmp_path / "bare"
    (venv / "bin").mkdir(parents=True)
    (venv / "pyvenv.cfg").write_text("home = /usr/bin\n")  # a venv without uvloop
    _process(tmp_path / "proc", 14, [str(venv / "bin/python")], tmp_path)
    root = str(tmp_path / "proc")
    assert loop_modules(13, root) == loop_modules(14, root) == loop_modules(99, root) == set()
