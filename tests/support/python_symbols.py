"""Whether a CPython gives the agent's Context probes what they need, so that the kernel
tests can check asyncio and thread-pool correlation on it.

    python3 tests/support/python_symbols.py    # exit 0: usable; 1: says why and what to do

Standard library and binutils' `nm` only: `make` runs it with the interpreter it is about
to build .venv from, before anything is installed. The agent reads the exported (dynamic)
symbols of the interpreter (libpython, else the executable): `PyContext_CopyCurrent`,
`_PyRuntime` and `Py_Version`, which stripped builds keep too (Debian's
/usr/bin/python3.11); and it knows the thread state layout of CPython 3.11 to 3.13.
"""

from __future__ import annotations

import glob
import os
import re
import shutil
import subprocess
import sys

# the same names as otel_ebpf/kernel/asyncio_probes.py (tests/unit/test_suite_skips.py
# checks that they stay the same)
INTERPRETER_SYMBOLS = ("PyContext_CopyCurrent", "_PyRuntime", "Py_Version")
VERSIONS = ((3, 11), (3, 12), (3, 13))
_LIBPYTHON = re.compile(r"/libpython3\.\d+[^/]*\.so[.\d]*$")


def _mapped(pattern: re.Pattern[str]) -> set[str]:
    with open("/proc/self/maps") as f:
        return {line.split(maxsplit=5)[-1].strip() for line in f
                if line.count(" ") >= 5 and pattern.search(line.rstrip())}


def _exported(path: str) -> set[str]:
    """Names the dynamic symbol table of `path` defines (nm -D)."""
    out = subprocess.run(["nm", "-D", "--defined-only", path], capture_output=True, text=True,
                         timeout=60)
    return {fields[2].split("@")[0] for fields in (line.split() for line in out.stdout.splitlines())
            if len(fields) == 3}


def missing_symbols() -> list[str]:
    """What this interpreter lacks for the Context probes; empty when it has it all."""
    if sys.version_info[:2] not in VERSIONS:
        return [f"a known thread state layout (CPython {sys.version_info[0]}."
                f"{sys.version_info[1]}; 3.11 to 3.13 are known)"]
    files = _mapped(_LIBPYTHON) or {os.path.realpath("/proc/self/exe")}
    have = set().union(*(_exported(f) for f in files))
    if lacking := [name for name in INTERPRETER_SYMBOLS if name not in have]:
        return [f"{', '.join(lacking)} in {' or '.join(sorted(files))}"]
    return []


def _candidates() -> list[str]:
    """CPython 3.11+ interpreters that this machine has in the usual places."""
    home = os.path.expanduser("~")
    found = [*sorted(glob.glob(f"{home}/.pyenv/versions/3.1[1-9]*/bin/python3")),
             *sorted(glob.glob("/usr/local/bin/python3.1[1-9]")),
             *sorted(glob.glob("/usr/bin/python3.1[1-9]"))]
    seen, out = set(), []
    for exe in found:
        real = os.path.realpath(exe)
        if real not in seen and real != os.path.realpath(sys.executable):
            seen.add(real)
            out.append(exe)
    return out


def _usable(exe: str) -> bool:
    try:
        return subprocess.run([exe, os.path.abspath(__file__), "--quiet"], timeout=60,
                              capture_output=True).returncode == 0
    except (OSError, subprocess.TimeoutExpired):
        return False


def main(argv: list[str]) -> int:
    quiet = "--quiet" in argv
    if shutil.which("nm") is None:
        print("nm (binutils) is needed to read the interpreter's symbols: "
              "apt-get install binutils (make deps)", file=sys.stderr)
        return 1
    if sys.version_info < (3, 11):
        if not quiet:
            print(f"{sys.executable} is Python {sys.version.split()[0]}; 3.11+ is needed",
                  file=sys.stderr)
        return 1
    missing = missing_symbols()
    if not missing:
        if not quiet:
            print(f"{sys.executable} (Python {sys.version.split()[0]}) has what the "
                  "context probes need")
        return 0
    if quiet:
        return 1
    usable = [exe for exe in _candidates() if _usable(exe)]
    print(f"{sys.executable} (Python {sys.version.split()[0]}) lacks " + "; ".join(missing)
          + ".\nThe kernel tests check asyncio and thread-pool correlation through uprobes "
          "on CPython's Context copies; build .venv from a CPython 3.11 to 3.13.",
          file=sys.stderr)
    if usable:
        print("This machine has: " + ", ".join(usable) + f"\n  make clean && make "
              f"PYTHON={usable[0]} test", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
