"""A Python program that allocates through a native library built without frame pointers
(nofp_alloc.c) on top of the stand-in libcuda: load_model() -> ctypes -> nofp_model_alloc
-> nofp_allocator_reserve -> nofp_segment_grow -> cuMemAlloc_v2. Its process name is set
first (argv[3]), so an agent can select it. After `ready` it waits for a line, allocates
256 MiB from load_model(), prints the pointer and waits for another line.

    python nofp_app.py LIBCUDA LIBNOFPALLOC NAME [loop N]

`loop N`: instead, N times (one line each) allocate, free and launch, for the cost bench."""

import ctypes
import sys
import time

libc = ctypes.CDLL(None)
libc.prctl(15, sys.argv[3].encode()[:15], 0, 0, 0)  # PR_SET_NAME
cuda = ctypes.CDLL(sys.argv[1])
lib = ctypes.CDLL(sys.argv[2])
lib.nofp_model_alloc.restype = ctypes.c_ulonglong
lib.nofp_model_alloc.argtypes = [ctypes.c_size_t]
MiB = 1 << 20


def load_model() -> int:
    return lib.nofp_model_alloc(256 * MiB)


def loop(n: int) -> dict:
    """n allocations (each freed) and n launches, timed per call."""
    free = cuda.cuMemFree_v2
    free.argtypes = [ctypes.c_ulonglong]
    alloc = lib.nofp_model_alloc
    t0 = time.perf_counter()
    for _ in range(n):
        free(alloc(MiB))
    t1 = time.perf_counter()
    for _ in range(n):
        lib.nofp_launch(4)
    t2 = time.perf_counter()
    return {"alloc_free_us": (t1 - t0) / n * 1e6, "app_launch_us": (t2 - t1) / n * 1e6}


assert cuda.cuInit(0) == 0
print("ready", flush=True)
sys.stdin.readline()
if len(sys.argv) > 5 and sys.argv[4] == "loop":
    import json

    print(json.dumps(loop(int(sys.argv[5]))), flush=True)
else:
    print(hex(load_model()), flush=True)
sys.stdin.readline()
