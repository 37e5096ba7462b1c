"""Finds OpenSSL (libssl 1.1 and 3.x, or an executable that carries it, such as node) in
the system's libraries and in running processes, and attaches the TLS plaintext uprobes
(ssl_trace.bpf.c) once per file. An executable with OpenSSL linked in but no symbols
(stripped) cannot be probed: it is reported as not covered, never silently missed."""

from __future__ import annotations

import functools
import logging
import os
import re
from pathlib import Path

from elftools.elf.elffile import ELFFile

from .loader import BPFObject
from .uprobes import LibraryProbes, file_offsets, linker_libraries, mapped_files

log = logging.getLogger(__name__)

# OpenSSL's libssl (not NSS's libssl3.so)
_LIBSSL = re.compile(r"/libssl\.so(?:\.[\d.]+)?$")
# OpenSSL's error reporting names its source files: libssl's own is linked into every
# program that makes a TLS connection (the version string may be left out by the linker)
_OPENSSL_MARK = re.compile(rb"ssl/ssl_lib\.c\x00")
PROBES = [
    ("ssl_write_enter", "SSL_write", False), ("ssl_exit_plain", "SSL_write", True),
    ("ssl_read_enter", "SSL_read", False), ("ssl_exit_plain", "SSL_read", True),
    ("ssl_write_ex_enter", "SSL_write_ex", False), ("ssl_exit_ex", "SSL_write_ex", True),
    ("ssl_read_ex_enter", "SSL_read_ex", False), ("ssl_exit_ex", "SSL_read_ex", True),
]
# binds a session to its socket before its first write (memory-BIO clients)
HANDSHAKE = [("ssl_handshake_enter", "SSL_do_handshake", False),
             ("ssl_exit_plain", "SSL_do_handshake", True)]
EXPORTED = tuple(dict.fromkeys(symbol for _, symbol, _ in PROBES + HANDSHAKE))
# OpenSSL 1.1.0 has no _ex functions: SSL_write and SSL_read are enough
REQUIRED = 2
_PUSH = frozenset({"push"})


@functools.cache
def _disassembler():
    import capstone  # only where the internal entries are looked for (x86-64)

    return capstone.Cs(capstone.CS_ARCH_X86, capstone.CS_MODE_64)


def _call_targets(code: bytes, offset: int, limit: int = 96) -> list[int]:
    md = _disassembler()
    return [int(insn.op_str, 16) for insn in md.disasm(code[offset:offset + limit], offset)
            if insn.mnemonic == "call" and insn.op_str.startswith("0x")]


def _first_mnemonic(code: bytes, offset: int) -> str:
    md = _disassembler()
    return next((insn.mnemonic for insn in md.disasm(code[offset:offset + 16], offset, 1)), "")


def internal_entries(path: str, offsets: dict[str, int]) -> dict[str, int]:
    """ssl_read_internal / ssl_write_internal (OpenSSL 1.1.1 and 3.x): what SSL_read and
    SSL_read_ex (SSL_write and SSL_write_ex) both call, with SSL_*_ex's arguments (ssl, buf,
    num, size_t *count; 1 on success). The exported functions begin `sub $n,%rsp`, which a
    uprobe must single-step out of line; these begin with `push`, which the kernel
    emulates: about 15 times cheaper per call here (bench/ssl_overhead.py). Found as the
    call target both exported functions share; {} when that is not clear (x86-64 only)."""
    if os.uname().machine != "x86_64" or not all(
            name in offsets for name in ("SSL_read", "SSL_read_ex", "SSL_write", "SSL_write_ex")):
        return {}
    code = Path(path).read_bytes()
    found: dict[str, int] = {}
    for kind in ("read", "write"):
        plain = set(_call_targets(code, offsets[f"SSL_{kind}"]))
        ex = _call_targets(code, offsets[f"SSL_{kind}_ex"], 16)
        shared = [target for target in ex if target in plain]
        if len(shared) != 1 or _first_mnemonic(code, shared[0]) not in _PUSH:
            return {}
        found[kind] = shared[0]
    return found


def system_libssl() -> set[str]:
    """libssl files the dynamic linker knows (`ldconfig -p`), so processes started later
    are covered from their first call."""
    return linker_libraries(_LIBSSL)


def has_openssl_inside(path: str) -> bool:
    """Whether the executable's read-only data shows libssl linked into it."""
    try:
        with open(path, "rb") as f:
            for section in ELFFile(f).iter_sections():
                if section.name in (".rodata", ".data.rel.ro") and \
                        _OPENSSL_MARK.search(section.data()):
                    return True
    except Exception:  # noqa: BLE001 - a file pyelftools cannot read is no OpenSSL of ours
        return False
    return False


class SSLProbes(LibraryProbes):
    """The TLS uprobes on every libssl (and OpenSSL-carrying executable) seen."""

    def __init__(self, obj: BPFObject) -> None:
        super().__init__(obj)
        self.attached: set[str] = set()
        self.checked: set[str] = set()  # executables looked at (with or without OpenSSL)
        self.static_uncovered: set[str] = set()  # OpenSSL linked in, no symbols

    def scan_system(self) -> int:
        return sum(self._attach(path) for path in sorted(system_libssl()))

    def scan(self, pids: list[int | str], proc_root: str = "/proc") -> int:
        """Attach to the libssl files these processes map, and to their executables when
        those carry OpenSSL themselves; returns how many files were new."""
        new = 0
        for pid in pids:
            files = {os.path.realpath(p) for p in mapped_files(pid, proc_root)}
            libssl = {p for p in files if _LIBSSL.search(p)}
            for path in libssl:
                new += self._attach(path)
            if not libssl:
                new += self._executable(pid, proc_root)
        return new

    def scan_all(self, proc_root: str = "/proc") -> int:
        pids = [p.name for p in Path(proc_root).iterdir() if p.name.isdigit()]
        return self.scan_system() + self.scan(pids, proc_root)

    def _attach(self, path: str) -> int:
        if path in self.attached or path in self.uncovered:
            return 0
        try:
            offsets = file_offsets(path, EXPORTED, (".dynsym", ".symtab"))
            internal = internal_entries(path, offsets)
        except (OSError, ValueError) as exc:
            log.info("TLS (OpenSSL) in %s not covered (%s)", path, exc)
            self.uncovered.add(path)
            return 0
        if not internal:  # the exported functions themselves
            placed = [(prog, offsets[sym], ret) for prog, sym, ret in PROBES if sym in offsets]
        else:
            placed = [(prog, internal[kind], ret) for kind in ("write", "read")
                      for prog, ret in ((f"ssl_{kind}_ex_enter", False), ("ssl_exit_ex", True))]
        placed += [(prog, offsets[sym], ret) for prog, sym, ret in HANDSHAKE if sym in offsets]
        if len({sym for _, sym, _ in PROBES if sym in offsets}) < REQUIRED:
            log.info("TLS (OpenSSL) in %s not covered (no SSL_read/SSL_write symbols)", path)
            self.uncovered.add(path)
            return 0
        if not self.attach_at(path, "TLS (OpenSSL)" + (" internal" if internal else ""),
                              placed):
            return 0
        self.attached.add(path)
        return 1

    def _executable(self, pid: int | str, proc_root: str) -> int:
        """An executable with OpenSSL inside (node, a static build): probed by its own
        symbols; reported when it has none."""
        try:
            exe = os.path.realpath(Path(proc_root, str(pid), "exe").resolve(strict=True))
        except OSError:
            return 0
        if exe in self.checked:
            return 0
        self.checked.add(exe)
        if not has_openssl_inside(exe):
            return 0
        if self._attach(exe):
            return 1
        self.uncovered.discard(exe)
        self.static_uncovered.add(exe)
        log.warning("TLS in %s not covered: OpenSSL is linked into it without symbols "
                    "(stripped); its HTTPS traffic is seen encrypted only", exe)
        return 0
