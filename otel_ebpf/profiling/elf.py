"""ELF files for symbolization: function symbols (.symtab, else .dynsym), build id, load
segments, and initialized data by virtual address. Parsed once per build id (pyelftools for
the structure; symbol tables unpacked in bulk, names read when asked for)."""

from __future__ import annotations

import bisect
import os
import struct
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
            funcs: dict[int, tuple[int, int, int]] = {}  # start -> (size, table, name at)
            objects: dict[int, tuple[int, int, int]] = {}
            self._strtabs: list[bytes] = []
            # .symtab has static functions too; .dynsym is what a stripped file keeps
            for name in (".dynsym", ".symtab"):
                sec = elf.get_section_by_name(name)
                if not isinstance(sec, SymbolTableSection):
                    continue
                self._strtabs.append(elf.get_section(sec["sh_link"]).data())
                table = len(self._strtabs) - 1
                for name_at, info, value, size in raw_symbols(elf, sec.data()):
                    if not value or not name_at:
                        continue
                    kind = info & 0xF
                    if kind in FUNC_TYPES:
                        funcs[value] = (size, table, name_at)
                    elif kind in _OBJECT_TYPES:
                        objects[value] = (size, table, name_at)
        self._starts = sorted(funcs)
        self._funcs = [funcs[a] for a in self._starts]
        self._object_syms = objects
        self._objects: dict[str, tuple[int, int]] | None = None
        self.min_vaddr = min((s.vaddr & ~0xFFF for s in self.segments), default=0)

    def _name(self, table: int, at: int) -> str:
        strtab = self._strtabs[table]
        end = strtab.find(b"\0", at)
        return strtab[at:end if end >= 0 else len(strtab)].decode(errors="replace")

    @property
    def objects(self) -> dict[str, tuple[int, int]]:
        """Data symbols by name: (address, size). Named on first use (the interpreter's
        _PyRuntime and Py_Version are what is looked up; most files never are)."""
        if self._objects is None:
            self._objects = {self._name(t, at): (value, size)
                             for value, (size, t, at) in self._object_syms.items()}
        return self._objects

    def symbol(self, vaddr: int) -> tuple[str, int] | None:
        """(function name, offset in it) for an address in the file's own address space."""
        i = bisect.bisect_right(self._starts, vaddr) - 1
        if i < 0:
            return None
        size, table, at = self._funcs[i]
        off = vaddr - self._starts[i]
        # a size of 0 (hand-written assembly) is taken as reaching the next symbol
        if size and off >= size:
            return None
        return self._name(table, at), off

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


# st_info's low nibble: STT_FUNC, STT_GNU_IFUNC; STT_OBJECT, STT_TLS
FUNC_TYPES = (2, 10)
_OBJECT_TYPES = (1, 6)


def raw_symbols(elf: ELFFile, data: bytes):
    """(name offset, st_info, st_value, st_size) of each Elf32/64_Sym, unpacked in C: a
    library like libtorch_cuda has millions of symbols, which pyelftools' symbol objects
    took minutes to go through."""
    order = "<" if elf.little_endian else ">"
    if elf.elfclass == 64:  # st_name, st_info, st_other, st_shndx, st_value, st_size
        for name_at, info, _, _, value, size in struct.iter_unpack(order + "IBBHQQ", data):
            yield name_at, info, value, size
    else:  # st_name, st_value, st_size, st_info, st_other, st_shndx
        for name_at, value, size, info, _, _ in struct.iter_unpack(order + "IIIBBH", data):
            yield name_at, info, value, size


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

    def get(self, path: str) -> ElfInfo | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (st.st_dev, st.st_ino, st.st_mtime_ns)
        with self._lock:
            if key in self._by_file:
                return _reached(self._by_file[key], path)
        try:
            info = ElfInfo(path)
        except (OSError, ELFError, ValueError):
            info = None
        with self._lock:
            if len(self._by_file) >= self.max_files:
                self._by_file.clear()
                self._by_build_id.clear()
            if info is not None and info.build_id:
                info = _reached(self._by_build_id.setdefault(info.build_id, info), path)
            self._by_file[key] = info
        return info


def _reached(info: ElfInfo | None, path: str) -> ElfInfo | None:
    """The file as reached now: a path through /proc/PID/root lasts only as long as that
    process, and the file's bytes are read again later (ElfInfo.read), by whoever asks
    next. The path just stat'ed is the one known to work."""
    if info is not None:
        info.path = path
    return info
