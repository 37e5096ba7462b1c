"""The stand-in CUDA driver (libcuda.c) and the native library without frame pointers
(nofp_alloc.c), compiled on demand for the GPU tests and benches."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

SRC = Path(__file__).parent
# how distributions and wheels build (libtorch, libcudart): no frame pointers, .eh_frame
NOFP_FLAGS = ["-O2", "-fomit-frame-pointer", "-fasynchronous-unwind-tables"]


def compiler() -> str | None:
    return shutil.which("cc") or shutil.which("gcc") or shutil.which("clang")


def build_libcuda(out: Path) -> Path:
    """`out`/libcuda.so.1: the stand-in driver (frame pointers kept, as before)."""
    lib = out / "libcuda.so.1"
    subprocess.run([compiler(), "-shared", "-fPIC", "-O1", "-fno-omit-frame-pointer",
                    "-Wl,-soname,libcuda.so.1", "-o", str(lib), str(SRC / "libcuda.c")],
                   check=True)
    return lib


def build_nofp_alloc(out: Path) -> Path:
    """`out`/libnofpalloc.so, linked against `out`/libcuda.so.1 (build that first)."""
    lib = out / "libnofpalloc.so"
    subprocess.run([compiler(), "-shared", "-fPIC", *NOFP_FLAGS, "-o", str(lib),
                    str(SRC / "nofp_alloc.c"), f"-L{out}", "-l:libcuda.so.1",
                    f"-Wl,-rpath,{out}"], check=True)
    return lib
