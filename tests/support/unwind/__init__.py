"""The C test program without frame pointers (nofp.c), compiled on demand, and the rows
binutils' readelf derives from its call frame information (an implementation apart from
ours, to check the unwind tables against)."""

from __future__ import annotations

import re
import shutil
import subprocess
from pathlib import Path

SOURCE = Path(__file__).with_name("nofp.c")
CHAIN = ["main", "outer", "middle", "dyn_frame", "big_frame", "leaf_spin"]  # root first
FLAGS = {
    # .eh_frame, as distributions build
    "eh_frame": ["-O2", "-fomit-frame-pointer", "-fasynchronous-unwind-tables"],
    # .debug_frame only (-g without unwind tables)
    "debug_frame": ["-O2", "-fomit-frame-pointer", "-g", "-fno-asynchronous-unwind-tables",
                    "-fno-unwind-tables"],
}


def compiler() -> str | None:
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def build(out_dir: Path, variant: str = "eh_frame") -> Path:
    out = out_dir / f"nofp-{variant}"
    subprocess.run([compiler(), *FLAGS[variant], "-o", str(out), str(SOURCE)], check=True)
    return out


def readelf_rows(path: Path) -> list[tuple[int, int, list[tuple[int, dict[str, str]]]]]:
    """(start, end, [(pc, {column: rule})]) per FDE, from `readelf -wF` (both sections)."""
    # readelf exits 1 on warnings of its own (a missing separate debug file): its output
    # is still complete
    text = subprocess.run(["readelf", "-wF", str(path)], capture_output=True, text=True).stdout
    fdes: list = []
    cur = None
    cols: list[str] = []
    for line in text.splitlines():
        m = re.match(r"\S+ \S+ \S+ FDE cie=\S+ pc=([0-9a-f]+)\.\.([0-9a-f]+)", line)
        if m:
            cur = (int(m.group(1), 16), int(m.group(2), 16), [])
            fdes.append(cur)
            continue
        if " CIE " in line or line.startswith("Contents of") or "ZERO terminator" in line:
            cur = None
            continue
        parts = line.split()
        if cur is None or not parts:
            continue
        if parts[0] == "LOC":
            cols = parts[1:]
        elif re.fullmatch(r"[0-9a-f]{8,16}", parts[0]):
            cur[2].append((int(parts[0], 16), dict(zip(cols, parts[1:]))))
    return fdes
