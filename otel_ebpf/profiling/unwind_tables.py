"""Unwind tables for code built without frame pointers: the call frame information of an
x86-64 ELF file (.eh_frame, else .debug_frame) evaluated into one compact row per address
range where the rules change: how to find the CFA (rsp or rbp plus an offset, or the PLT
expression), where rbp was saved (CFA - 8k), the return address at CFA - 8. The BPF
walker (bpf/include/unwind.bpf.h) looks rows up by address at the sample.

Parsed here rather than by pyelftools' CallFrameInfo: libtorch_cpu has ~335k FDEs, which
pyelftools' per-instruction objects take minutes over; this loop takes seconds. Rows are
8 bytes (struct unwind_row in bpf/include/profile_abi.h)."""

from __future__ import annotations

import struct
from dataclasses import dataclass

from elftools.elf.elffile import ELFFile

# struct unwind_row: u32 pc (the file's virtual address), u8 kind, u8 rbp (saved at
# CFA - 8 * rbp; 0: rbp unchanged), u16 cfa offset in 8-byte units (stack frames of up to
# 512 KiB: CPython's has 64 KiB ones)
ROW = struct.Struct("<IBBH")
ROW_SIZE = ROW.size
KIND_CFA_RSP, KIND_CFA_RBP, KIND_PLT, KIND_STOP, KIND_NONE = 0, 1, 2, 3, 4
# KIND_STOP: rules this walker cannot follow (an expression, a register other than
# rsp/rbp as the CFA, an outermost frame); KIND_NONE: no FDE covers the address

_RSP, _RBP, _RA = 7, 6, 16  # DWARF register numbers on x86-64
MAX_CFA_OFFSET = 0xFFFF * 8
MAX_PC = 0xFFFFFFFF


class UnsupportedFile(ValueError):
    pass


@dataclass
class UnwindTable:
    """Rows sorted by pc; each holds until the next row's pc."""

    build_id: str | None
    rows: bytes        # ROW_SIZE-byte rows
    fdes: int
    source: str        # ".eh_frame" or ".debug_frame"

    def __len__(self) -> int:
        return len(self.rows) // ROW_SIZE

    def row(self, i: int) -> tuple[int, int, int, int]:
        return ROW.unpack_from(self.rows, i * ROW_SIZE)

    def lookup(self, pc: int) -> tuple[int, int, int, int] | None:
        """The row covering `pc` (a file virtual address), as the BPF walker finds it."""
        lo, hi = 0, len(self) - 1
        if hi < 0 or pc < self.row(0)[0]:
            return None
        while lo < hi:
            mid = (lo + hi + 1) // 2
            if self.row(mid)[0] <= pc:
                lo = mid
            else:
                hi = mid - 1
        return self.row(lo)


def build_table(path: str) -> UnwindTable:
    """The unwind table of one ELF file (x86-64). Raises UnsupportedFile."""
    with open(path, "rb") as f:
        elf = ELFFile(f)
        if elf["e_machine"] != "EM_X86_64":
            raise UnsupportedFile(f"{path}: {elf['e_machine']} (only x86-64 tables)")
        from .elf import _build_id  # noqa: PLC0415 (one reader of build ids)
        build_id = _build_id(elf)
        # both when both are there: a file built with -g and without unwind tables has
        # .debug_frame for its code and .eh_frame only for the C runtime's start files
        spans: list[tuple[int, int, bytes]] = []
        sources = []
        for name, is_eh in ((".eh_frame", True), (".debug_frame", False)):
            sec = elf.get_section_by_name(name)
            if sec is None or sec["sh_type"] == "SHT_NOBITS" or not sec["sh_size"]:
                continue
            found = _parse(sec.data(), sec["sh_addr"], is_eh)
            if found:
                spans += found
                sources.append(name)
    if not spans:
        raise UnsupportedFile(f"{path}: no call frame information")
    return UnwindTable(build_id, _rows(spans), len(spans), "+".join(sources))


# ---------------------------------------------------------------- CFI parsing

def _uleb(d: bytes, i: int) -> tuple[int, int]:
    b = d[i]
    if b < 0x80:
        return b, i + 1
    v, shift = 0, 0
    while True:
        b = d[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            return v, i


def _sleb(d: bytes, i: int) -> tuple[int, int]:
    v, shift = 0, 0
    while True:
        b = d[i]
        i += 1
        v |= (b & 0x7F) << shift
        shift += 7
        if b < 0x80:
            if b & 0x40:
                v -= 1 << shift
            return v, i


_U16, _U32, _U64 = struct.Struct("<H"), struct.Struct("<I"), struct.Struct("<Q")
_S16, _S32, _S64 = struct.Struct("<h"), struct.Struct("<i"), struct.Struct("<q")
# DW_EH_PE value formats of a fixed size (absptr and udata8 are both 8 bytes on x86-64)
_FIXED_POINTERS = {0x00: _U64, 0x02: _U16, 0x03: _U32, 0x04: _U64,
                   0x0A: _S16, 0x0B: _S32, 0x0C: _S64}


def _pointer(d: bytes, i: int, enc: int, sec_addr: int) -> tuple[int, int]:
    """A DW_EH_PE-encoded pointer at d[i]; pc-relative ones against the section's
    address (the only base .eh_frame pointers use here)."""
    at = i
    fmt = enc & 0x0F
    fixed = _FIXED_POINTERS.get(fmt)
    if fixed is not None:
        v = fixed.unpack_from(d, i)[0]
        i += fixed.size
    elif fmt == 0x01:
        v, i = _uleb(d, i)
    elif fmt == 0x09:
        v, i = _sleb(d, i)
    else:
        raise UnsupportedFile(f"pointer encoding {enc:#x}")
    if enc & 0x70 == 0x10:
        v += sec_addr + at
    return v & 0xFFFFFFFFFFFFFFFF, i


@dataclass
class _Cie:
    code_align: int
    data_align: int
    ra: int
    fde_enc: int
    has_z: bool
    insns: bytes
    signal: bool


def _parse_cie(d: bytes, i: int, end: int, is_eh: bool, sec_addr: int) -> _Cie:
    version = d[i]
    i += 1
    aug_end = d.index(b"\0", i)
    aug = d[i:aug_end].decode("ascii", "replace")
    i = aug_end + 1
    if "eh" in aug:
        i += 8
    if not is_eh and version >= 4:
        i += 2  # address_size, segment_size
    code_align, i = _uleb(d, i)
    data_align, i = _sleb(d, i)
    if version == 1:
        ra = d[i]
        i += 1
    else:
        ra, i = _uleb(d, i)
    fde_enc = 0x00  # absptr
    has_z = aug.startswith("z")
    if has_z:
        alen, i = _uleb(d, i)
        aug_data_end = i + alen
        for ch in aug[1:]:
            if ch == "R":
                fde_enc = d[i]
                i += 1
            elif ch == "P":
                penc = d[i]
                _, i = _pointer(d, i + 1, penc & 0x7F, sec_addr)
            elif ch == "L":
                i += 1
            elif ch in "SB":
                continue
            else:
                break
        i = aug_data_end
    return _Cie(code_align, data_align, ra, fde_enc, has_z, d[i:end], "S" in aug)


def _parse(d: bytes, sec_addr: int, is_eh: bool) -> list[tuple[int, int, bytes]]:
    """(start, end, packed rows) of each FDE of a .eh_frame/.debug_frame section."""
    cies: dict[int, _Cie] = {}
    # (start, end, packed rows) per FDE: packed at once, a list of tuples per FDE held
    # libtorch's build at ~450 MB
    spans: list[tuple[int, int, bytes]] = []
    i, n = 0, len(d)
    u32 = _U32.unpack_from
    while i + 4 <= n:
        length = u32(d, i)[0]
        start = i
        i += 4
        if length == 0:
            if is_eh:
                break  # the terminator
            continue
        if length == 0xFFFFFFFF:
            length = _U64.unpack_from(d, i)[0]
            i += 8
            id_size = 8
        else:
            id_size = 4
        end = i + length
        id_at = i
        cie_id = u32(d, i)[0] if id_size == 4 else _U64.unpack_from(d, i)[0]
        i += id_size
        is_cie = cie_id == 0 if is_eh else cie_id in (0xFFFFFFFF, 0xFFFFFFFFFFFFFFFF)
        try:
            if is_cie:
                cies[start] = _parse_cie(d, i, end, is_eh, sec_addr)
            else:
                cie_at = id_at - cie_id if is_eh else cie_id
                cie = cies.get(cie_at)
                if cie is None:
                    cie = cies[cie_at] = _parse_cie_at(d, cie_at, is_eh, sec_addr)
                pc, i = _pointer(d, i, cie.fde_enc, sec_addr)
                rng, i = _pointer(d, i, cie.fde_enc & 0x0F, sec_addr)
                if cie.has_z:
                    alen, i = _uleb(d, i)
                    i += alen
                if pc and rng and pc + rng <= MAX_PC:
                    rows = _run(cie, d[i:end], pc)
                    spans.append((pc, pc + rng, b"".join(ROW.pack(*r) for r in rows)))
        except (IndexError, struct.error, UnsupportedFile):
            pass  # one malformed entry: its range stays without rows (frame pointers)
        i = end
    return spans


def _rows(spans: list[tuple[int, int, bytes]]) -> bytes:
    """One sorted table from the FDEs' rows: a KIND_NONE row closes each gap."""
    spans.sort(key=lambda s: s[0])
    out = bytearray()
    last_end = 0
    last_rules = b""
    for lo, hi, packed in spans:
        if lo < last_end:  # overlapping FDEs (rare): the first one wins
            continue
        if out and lo > last_end:
            out += ROW.pack(last_end, KIND_NONE, 0, 0)
            last_rules = b""
        for at in range(0, len(packed), ROW_SIZE):
            rules = packed[at + 4:at + ROW_SIZE]
            if rules != last_rules:  # the same rules as the row before: no new row
                out += packed[at:at + ROW_SIZE]
                last_rules = rules
        last_end = hi
    if spans:
        out += ROW.pack(last_end, KIND_NONE, 0, 0)
    return bytes(out)


def _parse_cie_at(d: bytes, at: int, is_eh: bool, sec_addr: int) -> _Cie:
    length = _U32.unpack_from(d, at)[0]
    i = at + 4
    id_size = 4
    if length == 0xFFFFFFFF:
        length = _U64.unpack_from(d, i)[0]
        i += 8
        id_size = 8
    return _parse_cie(d, i + id_size, i + length, is_eh, sec_addr)


def _run(cie: _Cie, fde_insns: bytes, pc: int) -> list[tuple[int, int, int, int]]:
    """Execute the CIE's then the FDE's CFA instructions; a row at each address where the
    rules change: (pc, kind, rbp slot, cfa offset)."""
    # state: cfa register, cfa offset, rbp slot (offset from CFA / -8, 0 unchanged),
    # ok (False once a rule this walker cannot follow is set)
    state = [_RSP, 8, 0, True]
    initial = _exec(cie, cie.insns, state, None, pc, None)
    rows: list[tuple[int, int, int, int]] = []
    _exec(cie, fde_insns, state, rows, pc, initial)
    return rows


def _kind(state: list) -> tuple[int, int, int]:
    reg, off, rbp, ok = state
    if not ok:
        return KIND_STOP, 0, 0
    if reg == -1:
        return KIND_PLT, 0, 0
    if not 0 <= off <= MAX_CFA_OFFSET or off % 8 or reg not in (_RSP, _RBP):
        return KIND_STOP, 0, 0
    return (KIND_CFA_RSP if reg == _RSP else KIND_CFA_RBP), rbp, off // 8


def _exec(cie: _Cie, ins: bytes, state: list, rows: list | None, pc: int,
          initial: list | None) -> list:
    """Runs CFA instructions over `state`; with `rows`, the rules at each location are
    appended when the location advances (instructions apply to the current location). Returns a copy of the state at the end (the CIE's initial
    rules, for DW_CFA_restore)."""
    i, n = 0, len(ins)
    ca, da = cie.code_align, cie.data_align
    stack: list[list] = []
    cur = pc

    def emit() -> None:
        if rows is not None:
            k, rbp, off = _kind(state)
            if rows and rows[-1][0] == cur:
                rows[-1] = (cur, k, rbp, off)
            else:
                rows.append((cur, k, rbp, off))

    while i < n:
        op = ins[i]
        i += 1
        hi = op & 0xC0
        if hi == 0x40:  # advance_loc
            emit()
            cur += (op & 0x3F) * ca
            continue
        if hi == 0x80:  # offset(reg, uleb * data_align)
            v, i = _uleb(ins, i)
            _set_offset(state, op & 0x3F, v * da, cie)
            continue
        if hi == 0xC0:  # restore(reg)
            _restore(state, op & 0x3F, initial)
            continue
        if op == 0x0C:  # def_cfa
            r, i = _uleb(ins, i)
            o, i = _uleb(ins, i)
            state[0], state[1] = r, o
        elif op == 0x0E:  # def_cfa_offset
            state[1], i = _uleb(ins, i)
        elif op == 0x0D:  # def_cfa_register
            state[0], i = _uleb(ins, i)
        elif op == 0x02:  # advance_loc1
            emit()
            cur += ins[i] * ca
            i += 1
        elif op == 0x03:
            emit()
            cur += _U16.unpack_from(ins, i)[0] * ca
            i += 2
        elif op == 0x04:
            emit()
            cur += _U32.unpack_from(ins, i)[0] * ca
            i += 4
        elif op == 0x00:  # nop
            pass
        elif op == 0x0A:  # remember_state
            stack.append(list(state))
        elif op == 0x0B:  # restore_state
            if stack:
                state[:] = stack.pop()
        elif op == 0x2E:  # GNU_args_size
            _, i = _uleb(ins, i)
        elif op == 0x05:  # offset_extended
            r, i = _uleb(ins, i)
            v, i = _uleb(ins, i)
            _set_offset(state, r, v * da, cie)
        elif op == 0x11:  # offset_extended_sf
            r, i = _uleb(ins, i)
            v, i = _sleb(ins, i)
            _set_offset(state, r, v * da, cie)
        elif op == 0x06:  # restore_extended
            r, i = _uleb(ins, i)
            _restore(state, r, initial)
        elif op in (0x07, 0x08):  # undefined, same_value
            r, i = _uleb(ins, i)
            if r == _RBP:
                state[2] = 0
            elif r == cie.ra and op == 0x07:
                state[3] = False  # no return address: the outermost frame
        elif op == 0x09:  # register(reg, reg)
            r, i = _uleb(ins, i)
            _, i = _uleb(ins, i)
            if r in (_RBP, cie.ra):
                state[3] = False
        elif op == 0x12:  # def_cfa_sf
            r, i = _uleb(ins, i)
            o, i = _sleb(ins, i)
            state[0], state[1] = r, o * da
        elif op == 0x13:  # def_cfa_offset_sf
            o, i = _sleb(ins, i)
            state[1] = o * da
        elif op == 0x0F:  # def_cfa_expression
            ln, i = _uleb(ins, i)
            state[0] = -1 if _is_plt_expression(ins[i:i + ln]) else -2
            i += ln
        elif op in (0x10, 0x16):  # expression, val_expression (reg, block)
            r, i = _uleb(ins, i)
            ln, i = _uleb(ins, i)
            i += ln
            if r in (_RBP, cie.ra):
                state[3] = False
        elif op in (0x14, 0x15):  # val_offset(_sf)
            r, i = _uleb(ins, i)
            _, i = (_uleb if op == 0x14 else _sleb)(ins, i)
            if r in (_RBP, cie.ra):
                state[3] = False
        elif op == 0x01:  # set_loc
            emit()
            cur = _U64.unpack_from(ins, i)[0]
            i += 8
        else:
            state[3] = False  # unknown: stop here rather than unwind wrongly
            break
    emit()
    return list(state)


def _set_offset(state: list, reg: int, off: int, cie: _Cie) -> None:
    if reg == _RBP:
        if off < 0 and -off % 8 == 0 and -off // 8 <= 255:
            state[2] = -off // 8
        else:
            state[3] = False
    elif reg == cie.ra and off != -8:
        state[3] = False  # the return address elsewhere than CFA - 8


def _restore(state: list, reg: int, initial: list | None) -> None:
    if reg == _RBP:
        state[2] = initial[2] if initial else 0


# DW_OP_breg7 (rsp) 8; DW_OP_breg16 (rip) 0; DW_OP_lit15; DW_OP_and; DW_OP_lit11 (or 10);
# DW_OP_ge; DW_OP_lit3; DW_OP_shl; DW_OP_plus: the CFA of a PLT entry, as GNU ld writes it
_PLT_PREFIX = bytes([0x77, 0x08, 0x80, 0x00, 0x3F, 0x1A])


def _is_plt_expression(expr: bytes) -> bool:
    return expr.startswith(_PLT_PREFIX) and expr[-4:] == bytes([0x2A, 0x33, 0x24, 0x22])
