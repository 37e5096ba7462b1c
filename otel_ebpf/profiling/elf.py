"""ELF files for symbolization: function symbols (.symtab, else .dynsym), build id, load
segments, and initialized data by virtual address. Parsed once per build id (pyelftools)."""

from __future__ import annotations

import bisect
import os
import threading
from dataclasses import dataclass

from elftools.common.exceptions import ELFError
from elftools.elf.elffile import ELFFile
from elftools.elf.sections import NoteSection, SymbolTableSection


@dataclass(frozen=True, slots=True)
class Segment:
    vaddr: int
    offset: int
    filesz: int
    memsz: int


class ElfInfo:
    """One parsed ELF file: sorted function symbols, data symbols, PT_LOAD segments."""

    def __init__(self, path: str) -> None:
        self.path = path
        with open(path, "rb") as f:
            elf = ELFFile(f)
            self.build_id = _build_id(elf)
            self.is_pie_or_dso = elf.header["e_type"] == "ET_DYN"
            self.segments = [Segment(s["p_vaddr"], s["p_offset"], s["p_filesz"], s["p_memsz"])
                             for s in elf.iter_segments() if s["p_type"] == "PT_LOAD"]
            funcs: dict[int, tuple[int, str]] = {}
            self.objects: dict[str, tuple[int, int]] = {}
            # .symtab has static functions too; .dynsym is what a stripped file keeps
            for name in (".dynsym", ".symtab"):
                sec = elf.get_section_by_name(name)
                if not isinstance(sec, SymbolTableSection):
                    continue
                for sym in sec.iter_symbols():
                    kind, value = sym["st_info"]["type"], sym["st_value"]
                    if not value or not sym.name:
                        continue
                    if kind in ("STT_FUNC", "STT_GNU_IFUNC"):
                        funcs[value] = (sym["st_size"], sym.name)
                    elif kind in ("STT_OBJECT", "STT_TLS"):
                        self.objects[sym.name] = (value, sym["st_size"])
        self._starts = sorted(funcs)
        self._funcs = [funcs[a] for a in self._starts]
        self.min_vaddr = min((s.vaddr & ~0xFFF for s in self.segments), default=0)

    def symbol(self, vaddr: int) -> tuple[str, int] | None:
        """(function name, offset in it) for an address in the file's own address space."""
        i = bisect.bisect_right(self._starts, vaddr) - 1
        if i < 0:
            return None
        size, name = self._funcs[i]
        off = vaddr - self._starts[i]
        # a size of 0 (hand-written assembly) is taken as reaching the next symbol
        if size and off >= size:
            return None
        return name, off

    def function_range(self, name: str) -> tuple[int, int] | None:
        for start, (size, fname) in zip(self._starts, self._funcs, strict=True):
            if fname == name:
                return start, start + max(size, 1)
        return None

    def vaddr_of_offset(self, file_offset: int) -> int | None:
        for s in self.segments:
            if s.offset <= file_offset < s.offset + max(s.filesz, 1):
                return file_offset - s.offset + s.vaddr
        return None

    def read(self, vaddr: int, size: int) -> bytes | None:
        """Initialized bytes at a virtual address, from the file (not a running process)."""
        for s in self.segments:
            if s.vaddr <= vaddr and vaddr + size <= s.vaddr + s.filesz:
                with open(self.path, "rb") as f:
                    f.seek(s.offset + vaddr - s.vaddr)
                    return f.read(size)
        return None


def read_file(path: str, offset: int, size: int) -> bytes:
    try:
        with open(path, "rb") as f:
            f.seek(max(offset, 0))
            return f.read(size)
    except OSError:
        return b""


def follows_call(code: bytes, machine: str) -> bool:
    """Do these bytes (those just before a return address) end with a call instruction?
    A frame-pointer walk through code built without frame pointers reads garbage as return
    addresses; a real one always follows a call."""
    if machine == "aarch64":
        if len(code) < 4:
            return False
        insn = int.from_bytes(code[-4:], "little")
        return insn >> 26 == 0b100101 or insn & 0xFFFFFC1F == 0xD63F0000  # BL, BLR
    n = len(code)
    if n >= 5 and code[-5] == 0xE8:  # call rel32
        return True
    # call r/m64: FF /2, 2 to 7 bytes long (ModRM, optional SIB, displacement)
    for back in (2, 3, 4, 6, 7):
        if n >= back and code[-back] == 0xFF and (code[-back + 1] >> 3) & 7 == 2:
            return True
    return False


def _build_id(elf: ELFFile) -> str | None:
    for sec in elf.iter_sections():
        if isinstance(sec, NoteSection):
            for note in sec.iter_notes():
                if note["n_type"] == "NT_GNU_BUILD_ID":
                    return str(note["n_desc"])
    return None


class ElfCache:
    """ElfInfo per file, shared by build id: the same libc in a hundred processes (or seen
    through a hundred /proc/PID/root paths) is parsed once. Bounded."""

    def __init__(self, max_files: int = 512) -> None:
        self.max_files = max_files
        self._by_build_id: dict[str, ElfInfo] = {}
        self._by_file: dict[tuple[int, int, int], ElfInfo | None] = {}
        self._lock = threading.Lock()
        self.parsed = 0

    def get(self, path: str) -> ElfInfo | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (st.st_dev, st.st_ino, st.st_mtime_ns)
        with self._lock:
            if key in self._by_file:
                return self._by_file[key]
        try:
            info = ElfInfo(path)
        except (OSError, ELFError, ValueError):
            info = None
        with self._lock:
            if len(self._by_file) >= self.max_files:
                self._by_file.clear()
                self._by_build_id.clear()
            if info is not None:
                self.parsed += 1
                if info.build_id:
                    info = self._by_build_id.setdefault(info.build_id, info)
            self._by_file[key] = info
        return info
