"""Unwind tables from call frame information (profiling/unwind_tables.py), checked row by
row against binutils' readelf -wF (its own CFI interpreter) on a C program built without
frame pointers (.eh_frame and .debug_frame builds) and on this machine's libc."""

from __future__ import annotations

import re
import shutil
from pathlib import Path

import pytest

from otel_ebpf.profiling.unwind_tables import (KIND_CFA_RBP, KIND_CFA_RSP, KIND_NONE,
                                               KIND_PLT, KIND_STOP, UnsupportedFile,
                                               build_table)
from tests.support import unwind

pytestmark = pytest.mark.skipif(unwind.compiler() is None or shutil.which("readelf") is None,
                                reason="needs a C compiler and binutils' readelf")


def _expected(cols: dict[str, str]) -> tuple | None:
    """What our row must say for readelf's rules; None: rules of other registers this
    walker does not use (any answer is fine for them)."""
    if any(not re.fullmatch(r"u|c-\d+", v) for k, v in cols.items() if k != "CFA"):
        return None
    if cols.get("ra") != "c-8":
        return (KIND_STOP,)
    if cols["CFA"] == "exp":
        return (KIND_PLT,)
    m = re.fullmatch(r"(rsp|rbp)\+(\d+)", cols["CFA"])
    if m is None or int(m.group(2)) % 8:
        return (KIND_STOP,)
    rbp = cols.get("rbp", "u")
    return (KIND_CFA_RSP if m.group(1) == "rsp" else KIND_CFA_RBP, int(m.group(2)) // 8,
            int(rbp[2:]) // 8 if rbp.startswith("c-") else 0)


def _check_against_readelf(path: Path) -> int:
    table = build_table(str(path))
    checked = 0
    for lo, hi, rows in unwind.readelf_rows(path):
        for k, (pc, cols) in enumerate(rows):
            end = rows[k + 1][0] if k + 1 < len(rows) else hi
            want = _expected(cols)
            if want is None:
                continue
            for addr in sorted({pc, (pc + end) // 2, end - 1}):
                row = table.lookup(addr)
                assert row is not None, f"{path.name}: no row at {addr:#x} ({lo:#x}..{hi:#x}, {rows})"
                got = (row[1],) if row[1] in (KIND_STOP, KIND_PLT) else (row[1], row[3], row[2])
                assert got == want, f"{path.name} at {addr:#x}: {got} for readelf's {cols}"
                checked += 1
    return checked


@pytest.mark.parametrize("variant", sorted(unwind.FLAGS))
def test_rows_match_readelf_on_a_program_without_frame_pointers(variant, tmp_path):
    exe = unwind.build(tmp_path, variant)
    assert _check_against_readelf(exe) > 20
    table = build_table(str(exe))
    assert ".debug_frame" in table.source if variant == "debug_frame" else ".eh_frame" in table.source


def test_the_chain_has_the_rules_it_needs(tmp_path):
    """alloca makes dyn_frame's CFA rbp-based; big_frame's is rsp + 5 KB; between the
    functions' FDEs (padding, code without CFI) rows say there is no information."""
    from elftools.elf.elffile import ELFFile
    exe = unwind.build(tmp_path)
    table = build_table(str(exe))
    with exe.open("rb") as f:
        symtab = ELFFile(f).get_section_by_name(".symtab")
        funcs = {s.name: (s["st_value"], s["st_size"]) for s in symtab.iter_symbols()
                 if s.name in unwind.CHAIN}
    kinds = {name: {table.lookup(a)[1] for a in range(start, start + size)}
             for name, (start, size) in funcs.items()}
    assert KIND_CFA_RBP in kinds["dyn_frame"]
    big_start, big_size = funcs["big_frame"]
    assert max(table.lookup(a)[3] for a in range(big_start, big_start + big_size)) * 8 > 5000
    assert all(k <= {KIND_CFA_RSP, KIND_CFA_RBP} for k in kinds.values())
    last = table.row(len(table) - 1)
    assert last[1] == KIND_NONE  # past the last FDE


def test_libc_rows_match_readelf():
    libc = next((line.split()[-1] for line in Path("/proc/self/maps").read_text().splitlines()
                 if re.search(r"/libc[.-]", line)), None)
    if libc is None:
        pytest.skip("no libc mapped")
    assert _check_against_readelf(Path(libc)) > 10_000


def test_files_without_cfi_are_refused(tmp_path):
    empty = tmp_path / "data.o"
    src = tmp_path / "data.c"
    src.write_text("int table[4] = {1, 2, 3, 4};\n")
    import subprocess
    subprocess.run([unwind.compiler(), "-c", "-fno-asynchronous-unwind-tables", "-o",
                    str(empty), str(src)], check=True)
    with pytest.raises(UnsupportedFile):
        build_table(str(empty))
