"""Finds CPython in running processes and attaches the task uprobes (socket_trace.bpf.c),
entry-only: from the `_asyncio` extension, the asyncio task each thread steps and each
task's creation; from the interpreter (libpython or the executable), the contextvars.Context
each thread enters, which follows a task's work onto thread pool workers. Together they tie
an asyncio service's outbound calls to the request they serve. No return probes: a step
lasts while its task's Context is entered, a Context run while it is entered (the BPF
side reads the flag)."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from .loader import BPFObject
from .uprobes import LibraryProbes

log = logging.getLogger(__name__)

_ASYNCIO_SO = re.compile(r"/_asyncio\.cpython-3(\d+)[^/]*\.so$")
_LIBPYTHON = re.compile(r"/libpython3\.\d+[^/]*\.so[.\d]*$")
TASK_STEP = "task_step_impl"
TASK_INIT = "_asyncio_Task___init__"
CONTEXT_RUN = "context_run"
CONTEXT_DEALLOC = "context_tp_dealloc"
# The task step program for each CPython minor version: where the task argument is, and
# TaskObj.task_context (the macros in socket_trace.bpf.c; tests/unit/test_asyncio_layout.py
# checks them against live interpreters).
TASK_STEP_PROGRAMS = {11: "task_step_enter_311", 12: "task_step_enter_312",
                      13: "task_step_enter_313"}
TASK_CONTEXT_OFFSETS = {11: 152, 12: 152, 13: 136}


@dataclass(frozen=True)
class AsyncioLibrary:
    path: str
    minor: int  # CPython 3.<minor>
    task_step: int  # file offsets of the functions
    task_init: int


def asyncio_libraries_of(pid: int | str, proc_root: str = "/proc") -> set[tuple[str, int]]:
    """(path, CPython minor version) of each _asyncio extension process `pid` maps."""
    found: set[tuple[str, int]] = set()
    try:
        maps = Path(proc_root, str(pid), "maps").read_text()
    except OSError:
        return found
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        m = _ASYNCIO_SO.search(path)
        if m:
            found.add((path, int(m.group(1))))
    return found


def interpreters_of(pid: int | str, proc_root: str = "/proc") -> set[str]:
    """Files that may hold the interpreter's own functions: a mapped libpython, else the
    executable (static builds: python-build-standalone, many distributions' python3)."""
    try:
        maps = Path(proc_root, str(pid), "maps").read_text()
    except OSError:
        return set()
    found = {line.split(maxsplit=5)[-1] for line in maps.splitlines()
             if line.count(" ") >= 5 and _LIBPYTHON.search(line)}
    if not found:
        try:
            found.add(str(Path(proc_root, str(pid), "exe").resolve(strict=True)))
        except OSError:
            pass
    return found


class AsyncioProbes(LibraryProbes):
    """Attaches the task uprobes once per library file (every process using it)."""

    def __init__(self, obj: BPFObject) -> None:
        super().__init__(obj)
        self.attached: dict[str, AsyncioLibrary] = {}
        self.interpreters: set[str] = set()

    def scan(self, pids: list[int | str]) -> int:
        """Attach to the libraries these processes map; returns how many were new."""
        new = 0
        for pid in pids:
            libraries = asyncio_libraries_of(pid)
            for path, minor in libraries:
                if path in self.attached or path in self.uncovered:
                    continue
                new += self._attach(path, minor)
            if not libraries:
                continue  # no asyncio here: its contexts do not matter
            for path in interpreters_of(pid):
                if path not in self.interpreters and path not in self.uncovered:
                    new += self._attach_interpreter(path)
        return new

    def scan_all(self, proc_root: str = "/proc") -> int:
        return self.scan([p.name for p in Path(proc_root).iterdir() if p.name.isdigit()])

    def _attach(self, path: str, minor: int) -> int:
        """The task probes on an _asyncio library (3.11 passes the task first, 3.12+ after
        the module state; the task's Context sits where the version puts it)."""
        step = TASK_STEP_PROGRAMS.get(minor)
        if step is None:
            log.info("asyncio tasks in %s not covered: CPython 3.%d (3.11 to 3.13 are)",
                     path, minor)
            self.uncovered.add(path)
            return 0
        offsets = self.probe(path, "asyncio tasks", [
            (step, TASK_STEP, False), ("task_init", TASK_INIT, False)])
        if offsets is None:
            return 0
        self.attached[path] = AsyncioLibrary(path, minor, offsets[TASK_STEP], offsets[TASK_INIT])
        return 1

    def _attach_interpreter(self, path: str) -> int:
        offsets = self.probe(path, "contexts", [
            ("context_run_enter", CONTEXT_RUN, False),
            ("context_dealloc", CONTEXT_DEALLOC, False)])
        if offsets is None:
            return 0
        self.interpreters.add(path)
        return 1
