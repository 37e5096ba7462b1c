"""Finds CPython's `_asyncio` extension in running processes and attaches the task uprobes
(socket_trace.bpf.c): the asyncio task running at each syscall, and each task's creation,
which is what ties an asyncio service's outbound calls to the request they serve."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass
from pathlib import Path

from elftools.elf.elffile import ELFFile

from .loader import BPFError, BPFObject

log = logging.getLogger(__name__)

_ASYNCIO_SO = re.compile(r"/_asyncio\.cpython-3(\d+)[^/]*\.so$")
TASK_STEP = "task_step_impl"
TASK_INIT = "_asyncio_Task___init__"


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


class AsyncioProbes:
    """Attaches the task uprobes once per _asyncio library file (every process using it)."""

    def __init__(self, obj: BPFObject) -> None:
        self.obj = obj
        self.attached: dict[str, AsyncioLibrary] = {}
        self.uncovered: set[str] = set()

    def scan(self, pids: list[int | str]) -> int:
        """Attach to the libraries these processes map; returns how many were new."""
        new = 0
        for pid in pids:
            for path, minor in asyncio_libraries_of(pid):
                if path in self.attached or path in self.uncovered:
                    continue
                new += self._attach(path, minor)
        return new

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
