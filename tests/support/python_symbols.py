"""Whether a CPython keeps the symbols that the agent's task and context uprobes need, so
that the kernel tests can check asyncio and thread-pool correlation on it.

    python3 tests/support/python_symbols.py    # exit 0: usable; 1: says why and what to do

Standard library and binutils' `nm` only: `make` runs it with the interpreter it is about
to build .venv from, before anything is installed. The agent reads the static symbol
table (.symtab) of the `_asyncio` extension and of the interpreter (libpython, else the
executable); a stripped build (Debian's /usr/bin/python3.11) has none, and its asyncio
calls correlate without task evidence.
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
ASYNCIO_SYMBOLS = ("task_step_impl", "_asyncio_Task___init__")
INTERPRETER_SYMBOLS = ("context_run", "context_tp_dealloc")
_LIBPYTHON = re.compile(r"/libpython3\.\d+[^/]*\.so[.\d]*$")


def _mapped(pattern: re.Pattern[str]) -> set[str]:
    with open("/proc/self/maps") as f:
        return {line.split(maxsplit=5)[-1].strip() for line in f
                if line.count(" ") >= 5 and pattern.search(line.rstrip())}


def _functions(path: str) -> set[str]:
    """Names of the functions defined in `path`'s .symtab (nm without -D reads only it)."""
    out = subprocess.run(["nm", "--defined-only", path], capture_output=True, text=True,
                         timeout=60)
    return {fields[2] for fields in (line.split() for line in out.stdout.splitlines())
            if len(fields) == 3 and fields[1] in "tTi"}


def missing_symbols() -> list[str]:
    """'symbols in file' for each file that lacks some; empty when this interpreter has
    them all."""
    import _asyncio  # noqa: F401 (mapped from here on)

    asyncio_files = _mapped(re.compile(r"/_asyncio\.cpython-3\d+[^/]*\.so$"))
    if not asyncio_files:  # built into the executable
        asyncio_files = {os.path.realpath("/proc/self/exe")}
    interpreter_files = _mapped(_LIBPYTHON) or {os.path.realpath("/proc/self/exe")}
    missing = []
    for files, names in ((asyncio_files, ASYNCIO_SYMBOLS),
                         (interpreter_files, INTERPRETER_SYMBOLS)):
        have = set().union(*(_functions(f) for f in files))
        if lacking := [name for name in names if name not in have]:
            missing.append(f"{', '.join(lacking)} in {' or '.join(sorted(files))}")
    return missing


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
            print(f"{sys.executable} (Python {sys.version.split()[0]}) has the symbols "
                  "the asyncio and context probes need")
        return 0
    if quiet:
        return 1
    usable = [exe for exe in _candidates() if _usable(exe)]
    print(f"{sys.executable} (Python {sys.version.split()[0]}) is stripped: no "
          + "; no ".join(missing) + ".\nThe kernel tests check asyncio and thread-pool "
          "correlation through uprobes on these functions; build .venv from a CPython that "
          "keeps its symbol table (pyenv's and source builds do; Debian's /usr/bin/python3.x "
          "does not).", file=sys.stderr)
    if usable:
        print("This machine has: " + ", ".join(usable) + f"\n  make clean && make "
              f"PYTHON={usable[0]} test", file=sys.stderr)
    else:
        print("None found here; install one, e.g. `pyenv install 3.11` "
              "(https://github.com/pyenv/pyenv), then\n  make clean && make "
              "PYTHON=$(pyenv root)/versions/3.11.<x>/bin/python3 test", file=sys.stderr)
    return 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
