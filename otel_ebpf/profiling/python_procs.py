"""CPython inside a running process: which interpreter (3.11+), where its `_PyRuntime` is,
the offsets to walk it (python_offsets), and the names of code objects the kernel saw,
read from /proc/PID/mem while the sample is fresh (a code object can be freed later).
Every address read here came from another process and may be stale or garbage: a read
that cannot succeed is counted by reason and answered with None, never raised."""

from __future__ import annotations

import logging
import os
import re
import struct
import time
from collections.abc import Callable
from dataclasses import dataclass

from .elf import ElfCache, ElfInfo
from .frames import PYTHON, Frame
from .procmaps import ProcessMaps
from .python_offsets import DEBUG_OFFSETS_SIZE, PyOffsets, UnsupportedPython, for_version

log = logging.getLogger(__name__)

_NAME = re.compile(r"(?:lib)?python(\d)\.(\d+)")
MAX_STRING = 1024
# pread's offset is a signed 64-bit off_t: an address from a stale pointer can be larger
# (the kernel walk sent it, or a freed object's memory gave it); no user mapping is there
MAX_ADDRESS = (1 << 63) - 1
# a code object that could not be named is asked again after this long: its address can
# hold a live code object later (memory freed during `import` is reused by the functions
# that run afterwards), and caching the failure would leave those unnamed for good
RETRY_UNNAMED_S = 1.0
OB_TYPE = 8  # PyObject: ob_refcnt, then ob_type (GIL builds, 3.11-3.13)

# reason -> count; called by whoever owns the counters (the profiler's self-metrics)
OnFailure = Callable[[str], None]


@dataclass(frozen=True, slots=True)
class Interpreter:
    pid: int
    version: tuple[int, int]
    runtime: int        # address of _PyRuntime in the process
    offsets: PyOffsets
    path: str           # the ELF that holds _PyRuntime (libpython or the executable)
    # addresses of PyCode_Type and PyUnicode_Type in the process (0: not found): what is
    # read at a code object's address is checked to be one before it is named
    code_type: int = 0
    str_type: int = 0


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
        types = [elf.objects.get(name) for name in ("PyCode_Type", "PyUnicode_Type")]
        code_type, str_type = (t[0] + bias if t else 0 for t in types)
        return Interpreter(pid, version, vaddr + bias, offsets, m.path, code_type, str_type)
    return None


class ProcessMemory:
    """Reads another process's memory (/proc/PID/mem, kept open). A read that fails is
    None, counted by `on_failure(reason)`: `address_out_of_range` (negative, or beyond
    what pread can address: >= 2**63), `unreadable` (nothing mapped there, or the process
    is gone), `short_read`."""

    def __init__(self, pid: int, on_failure: OnFailure | None = None) -> None:
        self.pid = pid
        self.on_failure = on_failure
        self.fd = os.open(f"/proc/{pid}/mem", os.O_RDONLY)

    def read(self, addr: int, size: int) -> bytes | None:
        if not 0 <= addr <= MAX_ADDRESS - size or size <= 0:
            return self._fail("address_out_of_range")
        try:
            data = os.pread(self.fd, size, addr)
        except (OSError, OverflowError, ValueError):
            return self._fail("unreadable")
        return data if len(data) == size else self._fail("short_read")

    def _fail(self, reason: str) -> None:
        if self.on_failure is not None:
            self.on_failure(reason)
        return None

    def u64(self, addr: int) -> int | None:
        raw = self.read(addr, 8)
        return None if raw is None else struct.unpack("<Q", raw)[0]

    def close(self) -> None:
        os.close(self.fd)


def read_str(mem: ProcessMemory, addr: int, o: PyOffsets, str_type: int = 0) -> str | None:
    """A compact str object (every identifier and file name CPython makes is compact);
    None when what is there is not one (checked against `str_type`, PyUnicode_Type, when
    known)."""
    head = mem.read(addr, o.unicode_state + 4)
    if head is None:
        return None
    if str_type and struct.unpack_from("<Q", head, OB_TYPE)[0] != str_type:
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
    """Code object address -> Frame, per process, cached (bounded). Only names read from a
    live code object are cached; an address that could not be named is retried after
    RETRY_UNNAMED_S. `on_failure(reason)` counts what went wrong: the memory reads'
    reasons, `not_code` (the address holds no code object now: it was freed since the
    sample), `bad_name` (its qualname is not a readable str)."""

    def __init__(self, interp: Interpreter, max_entries: int = 65536,
                 on_failure: OnFailure | None = None) -> None:
        self.interp = interp
        self.on_failure = on_failure
        self.mem = ProcessMemory(interp.pid, on_failure)
        self.max_entries = max_entries
        self._cache: dict[int, Frame] = {}
        self._unnamed: dict[int, float] = {}  # address -> when it may be tried again
        self.failures = 0

    def frame(self, code: int) -> Frame:
        f = self._cache.get(code)
        if f is not None:
            return f
        now = time.monotonic()
        if self._unnamed.get(code, 0.0) > now:
            return _unnamed(code)
        f = self._read(code)
        if f is None:
            self.failures += 1
            if len(self._unnamed) >= self.max_entries:
                self._unnamed.clear()
            self._unnamed[code] = now + RETRY_UNNAMED_S
            return _unnamed(code)
        self._unnamed.pop(code, None)
        if len(self._cache) >= self.max_entries:
            self._cache.clear()
        self._cache[code] = f
        return f

    def _read(self, code: int) -> Frame | None:
        o, interp = self.interp.offsets, self.interp
        raw = self.mem.read(code, o.code_qualname + 8)
        if raw is None:
            return None
        if interp.code_type and struct.unpack_from("<Q", raw, OB_TYPE)[0] != interp.code_type:
            return self._fail("not_code")
        (fname_p,) = struct.unpack_from("<Q", raw, o.code_filename)
        (qual_p,) = struct.unpack_from("<Q", raw, o.code_qualname)
        (first,) = struct.unpack_from("<i", raw, o.code_firstlineno)
        qual = read_str(self.mem, qual_p, o, interp.str_type)
        if qual is None:
            return self._fail("bad_name")
        fname = read_str(self.mem, fname_p, o, interp.str_type)
        return Frame(qual, fname or "<unknown>", PYTHON, 0, max(first, 0))

    def _fail(self, reason: str) -> None:
        if self.on_failure is not None:
            self.on_failure(reason)
        return None

    def close(self) -> None:
        self.mem.close()


def _unnamed(code: int) -> Frame:
    return Frame(f"<python code {code:#x}>", "<unknown>", PYTHON)
