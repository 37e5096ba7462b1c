"""A Python program that allocates through the stand-in libcuda (ctypes), in functions of
its own, after a line on stdin: its allocation sites must come with these Python frames."""

import ctypes
import sys

lib = ctypes.CDLL(sys.argv[1])
MiB = 1 << 20


def load_weights() -> int:
    p = ctypes.c_ulonglong()
    assert lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(256 * MiB)) == 0
    return p.value


def make_activations() -> int:
    p = ctypes.c_ulonglong()
    assert lib.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(1024 * MiB)) == 0
    return p.value


assert lib.cuInit(0) == 0
print("ready", flush=True)
sys.stdin.readline()
print(hex(load_weights()), hex(make_activations()), flush=True)
sys.stdin.readline()
