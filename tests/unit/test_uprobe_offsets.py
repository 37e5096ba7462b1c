"""file_offsets (the symbol lookup every uprobe set uses) against binutils' readelf, on a
library built here and on the interpreters the Context probes go on."""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess

import pytest

from otel_ebpf.kernel.asyncio_probes import CONTEXT_COPY, interpreters_of
from otel_ebpf.kernel.uprobes import file_offsets

# `run` has no string of its own in the string tables: the linker ends it inside
# `context_run` (and `step_run`), so a name is found wherever a string ends with it
SOURCE = """
int run(int x) { return x + 1; }
int context_run(int x) { return x * 3; }
static int __attribute__((noinline)) step_run(int x) { return x - 7; }
int counter;
int use(int x) { counter++; return step_run(x) + run(x) + context_run(x); }
"""


def _readelf(*args: str) -> str:
    if shutil.which("readelf") is None:
        pytest.fail("binutils' readelf is needed (make install brings binutils)")
    return subprocess.run(["readelf", "-W", *args], capture_output=True, text=True,
                          check=True, timeout=60).stdout


def _expected(path: str, names: tuple[str, ...], table: str) -> dict[str, int]:
    """File offsets of the first defined function of each name in `table`, by readelf."""
    symbols = _readelf("--syms" if table == ".symtab" else "--dyn-syms", path)
    section = re.compile(r"^Symbol table '(\S+)'")
    entry = re.compile(r"^\s*\d+:\s+([0-9a-f]+)\s+\d+\s+(FUNC|IFUNC)\s+\S+\s+\S+\s+\S+\s+(\S+)$")
    found: dict[str, int] = {}
    current = None
    for line in symbols.splitlines():
        if m := section.match(line):
            current = m.group(1)
        elif current == table and (m := entry.match(line)):
            name, value = m.group(3).split("@")[0], int(m.group(1), 16)
            if name in names and value and name not in found:
                found[name] = value
    loads = [tuple(int(x, 16) for x in m.groups()) for m in re.finditer(
        r"^\s*LOAD\s+(0x[0-9a-f]+)\s+(0x[0-9a-f]+)\s+0x[0-9a-f]+\s+0x[0-9a-f]+\s+(0x[0-9a-f]+)",
        _readelf("--segments", path), re.M)]
    for name, vaddr in found.items():
        offset, start, size = next(seg for seg in loads if seg[1] <= vaddr < seg[1] + seg[2])
        found[name] = vaddr - start + offset
    return found


def test_names_that_end_inside_other_names_and_static_functions(tmp_path):
    lib = tmp_path / "libnames.so"
    src = tmp_path / "names.c"
    src.write_text(SOURCE)
    cc = shutil.which("cc") or shutil.which("clang")
    if cc is None:
        pytest.fail("a C compiler is needed (make install brings clang)")
    subprocess.run([cc, "-shared", "-fPIC", "-O1", "-o", str(lib), str(src)], check=True,
                   capture_output=True, timeout=120)
    names = ("run", "context_run", "step_run", "use", "counter", "missing")
    got = file_offsets(str(lib), names)
    assert got == _expected(str(lib), names, ".symtab")
    assert set(got) == {"run", "context_run", "step_run", "use"}  # a variable is no function
    assert len(set(got.values())) == 4
    exported = file_offsets(str(lib), names, (".dynsym",))
    assert exported == _expected(str(lib), names, ".dynsym")
    assert "step_run" not in exported  # static: only in .symtab


def test_interpreter_functions_where_readelf_finds_them():
    """This interpreter's files, those of the other CPythons pyenv has here (each version's
    own layout of libpython) and the distribution's (stripped: .dynsym only)."""
    paths = interpreters_of(os.getpid())
    paths |= {*glob.glob(os.path.expanduser("~/.pyenv/versions/3.1[1-9]*/lib/libpython3.*.so.1.0")),
              *glob.glob("/usr/bin/python3.1[1-9]")}
    names = (CONTEXT_COPY, "PyObject_Free", "PyContext_Copy")
    for path in sorted(os.path.realpath(p) for p in paths):
        expected = _expected(path, names, ".dynsym")
        if not expected:
            continue  # an executable linked to libpython exports none of them
        assert file_offsets(path, names, (".dynsym",)) == expected, path
        symtab = _expected(path, names, ".symtab")
        if symtab:
            assert file_offsets(path, names) == symtab, path
