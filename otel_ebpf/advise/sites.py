"""Where in the program a sample points: its process, and the frame of the user's own
code (the innermost Python frame outside installed packages and the standard library,
where a change can be made)."""

from __future__ import annotations

import os
import re
import sysconfig
from collections.abc import Mapping, Sequence
from typing import Any

from otel_ebpf.profiling.frames import PYTHON, Frame

from .model import Location

# files of installed packages and of the interpreter: not where the user's fix goes
_LIBRARY = re.compile(r"/(site|dist)-packages/|/lib/python3\.\d+/|^<frozen ")
_STDLIB = tuple(p for p in {sysconfig.get_paths().get("stdlib"),
                            sysconfig.get_paths().get("platstdlib")} if p)


def is_library(path: str) -> bool:
    return bool(_LIBRARY.search(path)) or (bool(_STDLIB) and path.startswith(_STDLIB))


def process_of(labels: Mapping[str, Any]) -> str:
    """`service (pid N)`, as far as the sample's labels say."""
    name, pid = labels.get("service.name"), labels.get("process.pid")
    if name and pid:
        return f"{name} (pid {pid})"
    return str(name or (f"pid {pid}" if pid else "unknown process"))


def process_name(labels: Mapping[str, Any]) -> str:
    """The process's name without its pid: what stays the same from one run to the next."""
    return name_of(process_of(labels))


def name_of(process: str) -> str:
    """`service` of process_of's `service (pid N)`; a process known by its pid alone
    keeps it (there is nothing else to match it by)."""
    return re.sub(r" \(pid \d+\)$", "", process)


def python_index(frames: Sequence[Frame]) -> int | None:
    """The position of the innermost Python frame."""
    return next((i for i, f in enumerate(frames) if f.kind == PYTHON), None)


def user_index(frames: Sequence[Frame]) -> int | None:
    """The innermost Python frame in the user's code; else the innermost Python frame."""
    first = None
    for i, f in enumerate(frames):
        if f.kind != PYTHON:
            continue
        if first is None:
            first = i
        if f.module and not is_library(f.module):
            return i
    return first


def location_of(frame: Frame | None) -> Location:
    if frame is None:
        return Location("(no stack)")
    return Location(frame.name, frame.module, frame.line)


def site_of(frames: Sequence[Frame]) -> Location:
    """The location a GPU call is made from: the user's innermost Python frame, else the
    innermost native frame that is not the driver's entry point."""
    i = user_index(frames)
    if i is not None:
        return location_of(frames[i])
    return location_of(frames[0] if frames else None)


def short(path: str) -> str:
    return os.path.basename(path) if path else ""
