"""The agent's C extensions (otel_ebpf/_fast/*.c and protocols/*/_*.c, as setup.py lists
them) built again with clang under AddressSanitizer and UndefinedBehaviorSanitizer, into a
directory of their own
(build/asan/otel_ebpf/**/*.so by default), never over the in-place .so files the agent
and `make test` load; plus bench/fuzz/strictbuf.c, the fuzz targets' exact-size buffer.

    python -m bench.fuzz.asan_build [--out build/asan] [--force]

The sources, include directories and libraries are read from setup.py itself (its
setuptools.setup call is caught, nothing is built by it), so a new extension there is built
here too. Flags: -fsanitize=address,undefined -fno-sanitize-recover=undefined (the first
UB report stops the process: a report is a failure), -fsanitize=fuzzer-no-link (the
coverage atheris' libFuzzer reads, so the fuzzer is guided by the C code's branches too),
-fno-omit-frame-pointer -g -O1. The modules are loaded by bench/fuzz/sanitized.py from that
directory, with a sanitizer runtime preloaded (bench.fuzz.sanitize.runtime_env).

A build is redone when a source, a header it depends on, this file or the compiler
changes (a stamp beside the modules records them).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import runpy
import shutil
import subprocess
import sys
import sysconfig
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from unittest import mock

REPO = Path(__file__).resolve().parents[2]
DEFAULT_OUT = REPO / "build" / "asan"
SANITIZE = ["-fsanitize=address,undefined", "-fno-sanitize-recover=undefined",
            "-fsanitize=fuzzer-no-link", "-fno-omit-frame-pointer", "-g", "-O1"]
WARN = ["-Wall", "-Wextra", "-Wno-unused-parameter", "-Wno-missing-field-initializers"]
STRICTBUF = "bench/fuzz/strictbuf.c"


class BuildError(RuntimeError):
    pass


def clang() -> str:
    """The clang to build with ($CLANG, else clang on PATH); a clear error without one."""
    cc = os.environ.get("CLANG") or shutil.which("clang")
    if not cc:
        raise BuildError("clang not found: the sanitizer fuzzing of otel_ebpf/_fast needs clang "
                         "and its sanitizer runtimes (Debian: apt-get install clang "
                         "libclang-rt-14-dev, or `make deps`), or CLANG=/path/to/clang")
    return cc


def extensions() -> list[dict]:
    """setup.py's ext_modules as {name, sources, include_dirs, libraries, depends}."""
    seen: dict = {}
    with mock.patch("setuptools.setup", lambda **kw: seen.update(kw)):
        cwd = os.getcwd()
        os.chdir(REPO)
        try:
            runpy.run_path(str(REPO / "setup.py"), run_name="__main__")
        finally:
            os.chdir(cwd)
    return [{"name": e.name, "sources": list(e.sources), "include_dirs": list(e.include_dirs),
             "libraries": list(e.libraries), "depends": list(e.depends)}
            for e in seen.get("ext_modules", [])]


def _target(out: Path, name: str) -> Path:
    return out.joinpath(*name.split(".")).with_name(
        name.rsplit(".", 1)[-1] + sysconfig.get_config_var("EXT_SUFFIX"))


def _stamp(cc: str, exts: list[dict]) -> str:
    h = hashlib.sha256()
    version = subprocess.run([cc, "--version"], capture_output=True, text=True).stdout
    h.update(json.dumps([version, SANITIZE, WARN, sys.version, exts]).encode())
    files = {Path(__file__)} | {REPO / STRICTBUF} | {
        REPO / f for e in exts for f in e["sources"] + e["depends"]}
    for f in sorted(files):
        h.update(str(f).encode())
        h.update(f.read_bytes() if f.exists() else b"-")
    return h.hexdigest()


def build(out: Path = DEFAULT_OUT, force: bool = False, quiet: bool = False) -> Path:
    """Build (when out of date) and return the directory to put first on the import path."""
    cc = clang()
    exts = extensions()
    if not exts:
        raise BuildError("setup.py lists no ext_modules")
    out = Path(out)
    stamp_file = out / ".stamp"
    stamp = _stamp(cc, exts)
    targets = [_target(out, e["name"]) for e in exts] + [_target(out, "strictbuf")]
    if not force and stamp_file.exists() and stamp_file.read_text() == stamp and all(
            t.exists() for t in targets):
        return out
    includes = [f"-I{sysconfig.get_paths()['include']}"]
    jobs = []
    for ext, target in zip(exts + [{"name": "strictbuf", "sources": [STRICTBUF],
                                    "include_dirs": [], "libraries": []}], targets, strict=True):
        target.parent.mkdir(parents=True, exist_ok=True)
        cmd = [cc, *SANITIZE, *WARN, "-fPIC", "-shared", *includes,
               *[f"-I{REPO / d}" for d in ext["include_dirs"]],
               *[str(REPO / s) for s in ext["sources"]], "-o", str(target),
               *[f"-l{lib}" for lib in ext["libraries"]]]
        jobs.append((ext["name"], target, cmd))
    # two at a time: the machines this runs on have two cores
    def one(job: tuple) -> tuple:
        name, target, cmd = job
        if not quiet:
            print(f"asan_build: {name} -> {target}", file=sys.stderr, flush=True)
        p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
        return name, p.returncode, p.stdout

    with ThreadPoolExecutor(max_workers=2) as pool:
        results = list(pool.map(one, jobs))
    failed = [(n, o) for n, rc, o in results if rc != 0]
    for n, rc, o in results:
        if rc == 0 and o.strip() and not quiet:
            print(o, end="", file=sys.stderr)
    if failed:
        raise BuildError("sanitizer build failed:\n" + "\n".join(f"--- {n}\n{o}" for n, o in failed))
    stamp_file.write_text(stamp)
    return out


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--out", type=Path, default=DEFAULT_OUT)
    ap.add_argument("--force", action="store_true", help="rebuild even when up to date")
    args = ap.parse_args()
    try:
        print(build(args.out, args.force))
    except BuildError as e:
        print(f"asan_build: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
