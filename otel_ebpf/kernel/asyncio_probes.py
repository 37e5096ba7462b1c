"""Finds CPython interpreters in running processes and attaches the Context hand-off probes
(socket_trace.bpf.c): one uprobe pair on `PyContext_CopyCurrent`, an exported function,
so stripped builds have it too. Every socket event carries the contextvars.Context its
thread ran in (read from the thread state in the kernel); a copy says which Context a new
one came from: an asyncio task's, or the one a thread-pool call runs (to_thread, anyio,
Starlette). Each interpreter file gets a record (by the probe's cookie) that lets a process
register itself at its first copy: where `_PyRuntime` is from the probe's address, and the
thread state offsets of its CPython version."""

from __future__ import annotations

import logging
import re
import struct
from pathlib import Path

from otel_ebpf.profiling.elf import ElfInfo
from otel_ebpf.profiling.python_offsets import (
    DEBUG_OFFSETS_SIZE,
    UnsupportedPython,
    for_version,
)

from .loader import BPFError, BPFObject
from .uprobes import LibraryProbes, file_offsets

log = logging.getLogger(__name__)

_LIBPYTHON = re.compile(r"/libpython3\.\d+[^/]*\.so[.\d]*$")
_EXECUTABLE = re.compile(r"/python3?(\.\d+)?[^/]*$")
CONTEXT_COPY = "PyContext_CopyCurrent"
# PyThreadState.context by CPython minor version: not among 3.13's _Py_DebugOffsets, so a
# table (tests/unit/test_asyncio_layout.py checks it against every live interpreter found)
TSTATE_CONTEXT = {(3, 11): 224, (3, 12): 208, (3, 13): 208}
MAX_FILES = 64  # PY_CTX_FILES in bpf/include/py_context.bpf.h
# struct py_ctx_proc: runtime (here: _PyRuntime minus PyContext_CopyCurrent), offsets
PY_CTX_RECORD = struct.Struct("<qIIIIII")


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
            exe = str(Path(proc_root, str(pid), "exe").resolve(strict=True))
        except OSError:
            return set()
        if _EXECUTABLE.search(exe):
            found.add(exe)
    return found


# x86-64: `mov 0x18(%rax),%rdi` (the current Context's ctx_vars), an optional pop, then
# `jmp rel32`: PyContext_CopyCurrent tail-calling context_new_from_vars
_TAIL_CALL = re.compile(rb"\x48\x8b\x78\x18(?:[\x58-\x5f]|\x41[\x58-\x5f])?\xe9(.{4})", re.S)
_EM_X86_64 = 62


def copy_site(path: str, elf: ElfInfo, offset: int) -> int:
    """Where every copy of a Context passes: PyContext_CopyCurrent's file offset, or, where
    it tail-calls the static context_new_from_vars, that function's. A build that links the
    interpreter into its executable with link-time optimization (Debian's python3.11)
    inlines PyContext_CopyCurrent into `contextvars.copy_context()`, so thread-pool
    hand-offs (anyio, asyncio.to_thread) never call the exported function there; all of them
    reach context_new_from_vars."""
    with open(path, "rb") as f:
        head = f.read(20)
        if len(head) < 20 or struct.unpack_from("<H", head, 18)[0] != _EM_X86_64:
            return offset
        f.seek(offset)
        code = f.read(48)
    m = _TAIL_CALL.search(code)
    if m is None:
        return offset
    target = offset + m.end() + struct.unpack("<i", m.group(1))[0]
    # the target must lie in the same executable segment
    start, end = elf.vaddr_of_offset(offset), elf.vaddr_of_offset(target)
    if start is None or end is None or end - start != target - offset:
        return offset
    return target


def interpreter_record(path: str) -> tuple[int, bytes]:
    """(file offset of the copy site, the file's py_ctx_proc record); ValueError
    (UnsupportedPython) when `path` is no CPython 3.11-3.13 or lacks what is needed."""
    offset = file_offsets(path, (CONTEXT_COPY,), (".dynsym", ".symtab")).get(CONTEXT_COPY)
    if offset is None:
        raise UnsupportedPython(f"no {CONTEXT_COPY}")
    elf = ElfInfo(path)
    offset = copy_site(path, elf, offset)
    runtime = elf.objects.get("_PyRuntime")
    version_sym = elf.objects.get("Py_Version")
    raw = elf.read(version_sym[0], 4) if version_sym else None
    copy_vaddr = elf.vaddr_of_offset(offset)
    if runtime is None or raw is None or copy_vaddr is None:
        raise UnsupportedPython("no _PyRuntime or Py_Version")
    hexv = struct.unpack("<I", raw)[0]
    version = (hexv >> 24, hexv >> 16 & 0xFF)
    if version not in TSTATE_CONTEXT:
        raise UnsupportedPython(f"CPython {version[0]}.{version[1]} (3.11 to 3.13 are known)")
    o = for_version(version, elf.read(runtime[0], DEBUG_OFFSETS_SIZE))
    record = PY_CTX_RECORD.pack(runtime[0] - copy_vaddr, o.interp_head, o.threads_head,
                                o.tstate_next, o.tstate_native_tid, TSTATE_CONTEXT[version], 0)
    return offset, record


class AsyncioProbes(LibraryProbes):
    """Attaches the Context probes once per interpreter file (every process using it)."""

    def __init__(self, obj: BPFObject) -> None:
        super().__init__(obj)
        self.interpreters: dict[str, int] = {}  # path -> its record's index (the cookie)

    def scan(self, pids: list[int | str]) -> int:
        """Attach to the interpreters these processes run; returns how many were new."""
        new = 0
        for pid in pids:
            for path in interpreters_of(pid):
                if path not in self.interpreters and path not in self.uncovered:
                    new += self._attach(path)
        return new

    def scan_all(self, proc_root: str = "/proc") -> int:
        return self.scan([p.name for p in Path(proc_root).iterdir() if p.name.isdigit()])

    def _attach(self, path: str) -> int:
        index = len(self.interpreters)
        try:
            if index >= MAX_FILES:
                raise UnsupportedPython(f"more than {MAX_FILES} interpreter files")
            offset, record = interpreter_record(path)
        except (OSError, ValueError) as exc:
            log.info("contexts in %s not covered (%s)", path, exc)
            self.uncovered.add(path)
            return 0
        self.obj.map("py_ctx_files").update(index.to_bytes(4, "little"), record)
        try:
            self.obj.attach_uprobe("context_copy_enter", path, offset, cookie=index)
            self.obj.attach_uprobe("context_copy_return", path, offset, retprobe=True,
                                   cookie=index)
        except BPFError as exc:
            log.warning("context probes on %s failed: %s", path, exc)
            self.uncovered.add(path)
            return 0
        self.interpreters[path] = index
        log.info("context probes attached to %s", path)
        return 1
