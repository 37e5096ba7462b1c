"""Finds CPython in running processes and attaches the task uprobes (socket_trace.bpf.c):
from the `_asyncio` extension, the asyncio task running at each syscall and each task's
creation; from the interpreter (libpython or the executable), the contextvars.Context
each thread runs, which follows a task's work onto thread pool workers. Together they tie
an asyncio service's outbound calls to the request they serve."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.elffile import ELFFile

from .loader import BPFError, BPFObject

log = logging.getLogger(__name__)

_ASYNCIO_SO = re.compile(r"/_asyncio\.cpython-3(\d+)[^/]*\.so$")
_LIBPYTHON = re.compile(r"/libpython3\.\d+[^/]*\.so[.\d]*$")
TASK_STEP = "task_step_impl"
TASK_INIT = "_asyncio_Task___init__"
CONTEXT_RUN = "context_run"
CONTEXT_DEALLOC = "context_tp_dealloc"


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


def file_offsets(path: str, names: tuple[str, ...]) -> dict[str, int]:
    """File offsets of local or global functions, from .symtab (static functions are only
    there: a stripped build, like Debian's, has none and is reported as not covered)."""
    out: dict[str, int] = {}
    with open(path, "rb") as f:
        elf = ELFFile(f)
        symtab = elf.get_section_by_name(".symtab")
        if symtab is None:
            return out
        wanted = set(names)
        for sym in symtab.iter_symbols():
            if sym.name in wanted and sym["st_info"]["type"] == "STT_FUNC" and sym["st_value"]:
                out[sym.name] = sym["st_value"]
        # uprobes take file offsets: vaddr -> offset through the segment that maps it
        for name, vaddr in list(out.items()):
            for seg in elf.iter_segments():
                if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= vaddr < seg["p_vaddr"] + seg["p_memsz"]:
                    out[name] = vaddr - seg["p_vaddr"] + seg["p_offset"]
                    break
    return out


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


class AsyncioProbes:
    """Attaches the task uprobes once per library file (every process using it)."""

    def __init__(self, obj: BPFObject) -> None:
        self.obj = obj
        self.attached: dict[str, AsyncioLibrary] = {}
        self.interpreters: set[str] = set()
        self.uncovered: set[str] = set()

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

    def _attach_interpreter(self, path: str) -> int:
        try:
            offsets = file_offsets(path, (CONTEXT_RUN, CONTEXT_DEALLOC))
        except (OSError, ValueError):
            offsets = {}
        if len(offsets) < 2:
            log.info("contexts in %s not covered (no symbols): thread pool work is "
                     "correlated without them", path)
            self.uncovered.add(path)
            return 0
        try:
            self.obj.attach_uprobe("context_run_enter", path, offsets[CONTEXT_RUN])
            self.obj.attach_uprobe("context_run_exit", path, offsets[CONTEXT_RUN], retprobe=True)
            self.obj.attach_uprobe("context_dealloc", path, offsets[CONTEXT_DEALLOC])
        except BPFError as exc:
            log.warning("context probes on %s failed: %s", path, exc)
            self.uncovered.add(path)
            return 0
        self.interpreters.add(path)
        log.info("context probes attached to %s", path)
        return 1

    def scan_all(self, proc_root: str = "/proc") -> int:
        return self.scan([p.name for p in Path(proc_root).iterdir() if p.name.isdigit()])

    def _attach(self, path: str, minor: int) -> int:
        try:
            offsets = file_offsets(path, (TASK_STEP, TASK_INIT))
        except (OSError, ValueError) as exc:
            log.info("asyncio tasks in %s not covered: %s", path, exc)
            self.uncovered.add(path)
            return 0
        if len(offsets) < 2 or minor < 11:
            log.info("asyncio tasks in %s not covered (no symbols for %s): its calls are "
                     "correlated without task evidence", path, ", ".join(
                         n for n in (TASK_STEP, TASK_INIT) if n not in offsets) or "3.<11")
            self.uncovered.add(path)
            return 0
        step = "task_step_enter_arg0" if minor == 11 else "task_step_enter_arg1"
        try:
            self.obj.attach_uprobe(step, path, offsets[TASK_STEP])
            self.obj.attach_uprobe("task_step_exit", path, offsets[TASK_STEP], retprobe=True)
            self.obj.attach_uprobe("task_init", path, offsets[TASK_INIT])
        except BPFError as exc:
            log.warning("asyncio task probes on %s failed: %s", path, exc)
            self.uncovered.add(path)
            return 0
        self.attached[path] = AsyncioLibrary(path, minor, offsets[TASK_STEP], offsets[TASK_INIT])
        log.info("asyncio task probes attached to %s", path)
        return 1
