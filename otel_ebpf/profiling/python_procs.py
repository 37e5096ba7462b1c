"""CPython inside a running process: which interpreter (3.11+), where its `_PyRuntime` is,
the offsets to walk it (python_offsets), and the names of code objects the kernel saw,
read from /proc/PID/mem while the sample is fresh (a code object can be freed later)."""

from __future__ import annotations

import logging
import os
import re
import struct
from dataclasses import dataclass

from .elf import ElfCache, ElfInfo
from .frames import PYTHON, Frame
from .procmaps import ProcessMaps
from .python_offsets import DEBUG_OFFSETS_SIZE, PyOffsets, UnsupportedPython, for_version

log = logging.getLogger(__name__)

_NAME = re.compile(r"(?:lib)?python(\d)\.(\d+)")
MAX_STRING = 1024


@dataclass(frozen=True, slots=True)
class Interpreter:
    pid: int
    version: tuple[int, int]
    runtime: int        # address of _PyRuntime in the process
    offsets: PyOffsets
    path: str           # the ELF that holds _PyRuntime (libpython or the executable)


def _version(elf: ElfInfo, path: str) -> tuple[int, int] | None:
    # Py_Version (3.11+) is PY_VERSION_HEX as a const unsigned long in .rodata
    sym = elf.objects.get("Py_Version")
    if sym:
        raw = elf.read(sym[0], 4)
        if raw:
            hexv = struct.unpack("<I", raw)[0]
            return hexv >> 24, hexv >> 16 & 0xFF
    m = _NAME.search(os.path.basename(path))
    return (int(m.group(1)), int(m.group(2))) if m else None


def find_interpreter(pid: int, maps: ProcessMaps, elfs: ElfCache) -> Interpreter | None:
    """The CPython 3.11+ interpreter of `pid`, or None (not Python, or older)."""
    seen: set[str] = set()
    for m in maps.maps:
        base = os.path.basename(m.path)
        if not m.is_file or m.path in seen or not _NAME.match(base):
            continue
        seen.add(m.path)
        elf = elfs.get(maps.host_path(m))
        if elf is None or "_PyRuntime" not in elf.objects:
            continue
        version = _version(elf, m.path)
        if version is None or version < (3, 11):
            return None
        vaddr = elf.objects["_PyRuntime"][0]
        head = elf.read(vaddr, DEBUG_OFFSETS_SIZE)
        try:
            offsets = for_version(version, head)
        except UnsupportedPython as exc:
            log.info("pid %d: %s; its Python frames are not read", pid, exc)
            return None
        start = maps.base_of(m.path)
        if start is None:
            continue
        bias = start - elf.min_vaddr if elf.is_pie_or_dso else 0
        return Interpreter(pid, version, vaddr + bias, offsets, m.path)
    return None


class ProcessMemory:
    """Reads another process's memory (/proc/PID/mem, kept open)."""

    def __init__(self, pid: int) -> None:
        self.pid = pid
        self.fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)

    def read(self, addr: int, size: int) -> bytes | None:
        try:
            data = os.pread(self.fd, size, addr)
        except OSError:
            return None
        return data if len(data) == size else None

    def u64(self, addr: int) -> int | None:
        raw = self.read(addr, 8)
        return None if raw is None else struct.unpack("<Q", raw)[0]

    def close(self) -> None:
        os.close(self.fd)


def read_str(mem: ProcessMemory, addr: int, o: PyOffsets) -> str | None:
    """A compact str object (every identifier and file name CPython makes is compact)."""
    head = mem.read(addr, o.unicode_state + 4)
    if head is None:
        return None
    length = struct.unpack_from("<q", head, o.unicode_length)[0]
    state = struct.unpack_from("<I", head, o.unicode_state)[0]
    kind, compact, ascii_ = state >> 2 & 7, state >> 5 & 1, state >> 6 & 1
    if not compact or kind not in (1, 2, 4) or not 0 <= length <= MAX_STRING:
        return None
    data = mem.read(addr + (o.ascii_size if ascii_ else o.compact_size), length * kind)
    if data is None:
        return None
    codec = {1: "latin-1", 2: "utf-16-le", 4: "utf-32-le"}[kind]
    return data.decode(codec, errors="replace")


class CodeNames:
    """Code object address -> Frame, per process, cached (bounded)."""

    def __init__(self, interp: Interpreter, max_entries: int = 65536) -> None:
        self.interp = interp
        self.mem = ProcessMemory(interp.pid)
        self.max_entries = max_entries
        self._cache: dict[int, Frame] = {}
        self.failures = 0

    def frame(self, code: int) -> Frame:
        f = self._cache.get(code)
        if f is None:
            f = self._read(code)
            if len(self._cache) >= self.max_entries:
                self._cache.clear()
            self._cache[code] = f
        return f

    def _read(self, code: int) -> Frame:
        o = self.interp.offsets
        raw = self.mem.read(code, o.code_qualname + 8)
        if raw is not None:
            (fname_p,) = struct.unpack_from("<Q", raw, o.code_filename)
            (qual_p,) = struct.unpack_from("<Q", raw, o.code_qualname)
            (first,) = struct.unpack_from("<i", raw, o.code_firstlineno)
            qual = read_str(self.mem, qual_p, o)
            fname = read_str(self.mem, fname_p, o)
            if qual is not None:
                return Frame(qual, fname or "<unknown>", PYTHON, 0, max(first, 0))
        self.failures += 1
        return Frame(f"<python code {code:#x}>", "<unknown>", PYTHON)

    def close(self) -> None:
        self.mem.close()
