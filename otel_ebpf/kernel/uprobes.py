"""Uprobes on library files: function offsets from ELF symbols, and attaching a set of
probes once per file (a uprobe on a file covers every process that maps it)."""

from __future__ import annotations

import logging
import os
import re
import struct
import subprocess
from pathlib import Path

from elftools.elf.elffile import ELFFile

from otel_ebpf.profiling.elf import FUNC_TYPES, raw_symbols

from .loader import BPFError, BPFObject

log = logging.getLogger(__name__)


_VERSYM_HIDDEN = 0x8000


def file_offsets(path: str, names: tuple[str, ...], tables: tuple[str, ...] = (".symtab",)
                 ) -> dict[str, int]:
    """File offsets of the functions `names`, from the symbol tables `tables` in order:
    `.symtab` holds static functions too (a stripped build has none), `.dynsym` the
    exported ones (what a shared library such as libssl always keeps)."""
    out: dict[str, int] = {}
    with open(path, "rb") as f:
        elf = ELFFile(f)
        for table in tables:
            section = elf.get_section_by_name(table)
            if section is None:
                continue
            # a versioned library (libibverbs) exports a name twice: the default version
            # and hidden compat ones (ibv_create_qp@IBVERBS_1.0), which programs built
            # today never call; the compat entry may come first in .dynsym
            versions = elf.get_section_by_name(".gnu.version") if table == ".dynsym" else None
            strtab = elf.get_section(section["sh_link"])
            for name, vaddr in _functions(elf, section.data(), strtab.data(),
                                          versions.data() if versions is not None else None,
                                          [n for n in names if n not in out]).items():
                out.setdefault(name, vaddr)
        # uprobes take file offsets: vaddr -> offset through the segment that maps it
        for name, vaddr in list(out.items()):
            for seg in elf.iter_segments():
                if seg["p_type"] == "PT_LOAD" and seg["p_vaddr"] <= vaddr < seg["p_vaddr"] + seg["p_memsz"]:
                    out[name] = vaddr - seg["p_vaddr"] + seg["p_offset"]
                    break
    return out


def _functions(elf: ELFFile, symbols: bytes, strings: bytes, versym: bytes | None,
               names: list[str]) -> dict[str, int]:
    """The first defined function symbol of each name in one symbol table, read straight
    from the table's bytes: an interpreter's .symtab has tens of thousands of entries, and
    decoding each one (pyelftools' iter_symbols) took 0.2-0.5 s for libpython, during
    which a fresh service's first requests ran without the Context probes. A name is found by where its string sits
    in the string table (a string table may end one name inside another: every place the
    name ends a string counts)."""
    by_offset: dict[int, str] = {}
    for name in names:
        needle = name.encode() + b"\0"
        at = strings.find(needle)
        while at >= 0:
            by_offset[at] = name
            at = strings.find(needle, at + 1)
    if not by_offset:
        return {}
    endian = "<" if elf.little_endian else ">"
    size = 24 if elf.elfclass == 64 else 16  # Elf64_Sym, Elf32_Sym
    found: dict[str, int] = {}
    whole = symbols[: len(symbols) // size * size]
    for index, (name_at, info, value, _) in enumerate(raw_symbols(elf, whole)):
        name = by_offset.get(name_at)
        if name is None or name in found or not value or info & 0xF not in FUNC_TYPES:
            continue
        if versym is not None and struct.unpack_from(endian + "H", versym, 2 * index)[0] \
                & _VERSYM_HIDDEN:
            continue
        found[name] = value
    return found


def linker_libraries(*patterns: re.Pattern[str]) -> set[str]:
    """Files the dynamic linker knows (`ldconfig -p`) whose path matches one of `patterns`,
    resolved (one file once, whatever its name), so processes started later are covered
    from their first call."""
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10,
                             check=False).stdout
    except (OSError, subprocess.SubprocessError):
        return set()
    paths = {line.rpartition("=>")[2].strip() for line in out.splitlines() if "=>" in line}
    return {os.path.realpath(p) for p in paths
            if any(pattern.search(p) for pattern in patterns) and os.path.exists(p)}


def mapped_files(pid: int | str, proc_root: str = "/proc") -> set[str]:
    """Paths of the files process `pid` maps (its executable and libraries)."""
    try:
        maps = Path(proc_root, str(pid), "maps").read_text()
    except OSError:
        return set()
    return {line.split(maxsplit=5)[-1] for line in maps.splitlines()
            if line.count(" ") >= 5 and "/" in line}


class LibraryProbes:
    """Attaches sets of (program, symbol, retprobe) uprobes to files, once per file;
    remembers the files that could not be covered (and says why, once)."""

    def __init__(self, obj: BPFObject) -> None:
        self.obj = obj
        self.uncovered: set[str] = set()

    def probe(self, path: str, what: str, probes: list[tuple[str, str, bool]],
              tables: tuple[str, ...] = (".symtab",), required: int | None = None
              ) -> dict[str, int] | None:
        """Attach the probes whose symbol `path` has; None, logged, when fewer than
        `required` symbols (all, by default) are there or attaching fails."""
        symbols = tuple(dict.fromkeys(symbol for _, symbol, _ in probes))
        try:
            offsets = file_offsets(path, symbols, tables)
        except (OSError, ValueError) as exc:
            offsets, why = {}, str(exc)
        else:
            why = "no symbol " + ", ".join(s for s in symbols if s not in offsets)
        if len(offsets) < (len(symbols) if required is None else required):
            log.info("%s in %s not covered (%s)", what, path, why)
            self.uncovered.add(path)
            return None
        placed = [(program, offsets[symbol], retprobe) for program, symbol, retprobe in probes
                  if symbol in offsets]
        return offsets if self.attach_at(path, what, placed) else None

    def attach_at(self, path: str, what: str, probes: list[tuple[str, int, bool]]) -> bool:
        """Attach (program, file offset, retprobe) probes on `path`; False, logged, when
        attaching fails."""
        try:
            for program, offset, retprobe in probes:
                self.obj.attach_uprobe(program, path, offset, retprobe=retprobe)
        except BPFError as exc:
            log.warning("%s probes on %s failed: %s", what, path, exc)
            self.uncovered.add(path)
            return False
        log.info("%s probes attached to %s", what, path)
        return True
