"""Compiles a small C program against bpf/include with the host compiler and reads the
"name value" lines it prints: how the ABI tests check Python's struct layouts against the
C headers the BPF programs are built from."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]


def c_layout(source: str, workdir: Path) -> dict[str, str]:
    """{name: value} printed by the C program `source` (built with -I bpf/include)."""
    cc = shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")
    if cc is None:
        pytest.fail("a C compiler is needed to check the ABI (make install brings clang)")
    (workdir / "probe.c").write_text(source)
    subprocess.run([cc, "-I", str(REPO / "bpf/include"), "-o", str(workdir / "probe"),
                    str(workdir / "probe.c")], check=True)
    out = subprocess.run([str(workdir / "probe")], capture_output=True, text=True, check=True)
    return dict(line.split(" ", 1) for line in out.stdout.splitlines())
