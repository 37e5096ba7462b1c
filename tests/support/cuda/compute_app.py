"""A Python program exercising the CUDA driver's compute calls on the stand-in libcuda
(ctypes), after a line on stdin, each from a function of its own:

- launch_fill(): 5 launches of a kernel looked up with cuLibraryGetKernel, launched
  through the function cuKernelGetFunction made from it (what cudart does);
- launch_reduce_ex(): 3 cuLaunchKernelEx of a kernel from cuModuleGetFunction;
- wait_stream() / wait_all() / wait_event(): cuStreamSynchronize x4, cuCtxSynchronize x2,
  cuEventSynchronize x1 (each after 5 ms of device work queued);
- expandable_segment(): cuMemCreate of 2 MiB on device 0, cuMemMap at a fixed address,
  then (after a second line) cuMemUnmap and cuMemRelease.

It prints `ready` after cuInit, `done` after the calls, and exits after a third line."""

import ctypes
import sys

cuda = ctypes.CDLL(sys.argv[1])
MiB = 1 << 20
VA = 0x7E0000000000
cuda.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
cuda.cuLaunchKernelEx.argtypes = [ctypes.c_void_p] * 4
cuda.cuStreamSynchronize.argtypes = [ctypes.c_void_p]
cuda.cuEventSynchronize.argtypes = [ctypes.c_void_p]
cuda.cuMemMap.argtypes = [ctypes.c_ulonglong, ctypes.c_size_t, ctypes.c_size_t,
                          ctypes.c_ulonglong, ctypes.c_ulonglong]
cuda.cuMemUnmap.argtypes = [ctypes.c_ulonglong, ctypes.c_size_t]
cuda.cuMemRelease.argtypes = [ctypes.c_ulonglong]


class Prop(ctypes.Structure):  # CUmemAllocationProp, as far as the agent reads it
    _fields_ = [("type", ctypes.c_int), ("handle_types", ctypes.c_int),
                ("loc_type", ctypes.c_int), ("loc_id", ctypes.c_int),
                ("meta", ctypes.c_void_p), ("flags", ctypes.c_ubyte * 8)]


def launch_fill() -> None:
    kern, func = ctypes.c_void_p(), ctypes.c_void_p()
    assert cuda.cuLibraryGetKernel(ctypes.byref(kern), None, b"_Z4fillPfif") == 0
    assert cuda.cuKernelGetFunction(ctypes.byref(func), kern) == 0
    for _ in range(5):
        assert cuda.cuLaunchKernel(func, 1, 1, 1, 32, 1, 1, 0, None, None, None) == 0


def launch_reduce_ex() -> None:
    func = ctypes.c_void_p()
    assert cuda.cuModuleGetFunction(ctypes.byref(func), None, b"_Z6reducePKfPfi") == 0
    for _ in range(3):
        assert cuda.cuLaunchKernelEx(None, func, None, None) == 0


def wait_stream() -> None:
    for _ in range(4):
        assert cuda.cuStreamSynchronize(None) == 0


def wait_all() -> None:
    for _ in range(2):
        assert cuda.cuCtxSynchronize() == 0


def wait_event() -> None:
    assert cuda.cuEventSynchronize(None) == 0


def expandable_segment() -> int:
    handle = ctypes.c_ulonglong()
    prop = Prop(1, 0, 1, 0)  # pinned device memory on device 0
    assert cuda.cuMemCreate(ctypes.byref(handle), ctypes.c_size_t(2 * MiB), ctypes.byref(prop),
                            ctypes.c_ulonglong(0)) == 0
    assert cuda.cuMemMap(VA, 2 * MiB, 0, handle.value, 0) == 0
    return handle.value


assert cuda.cuInit(0) == 0
print("ready", flush=True)
sys.stdin.readline()
launch_fill()
launch_reduce_ex()
wait_stream()
wait_all()
wait_event()
handle = expandable_segment()
print("done", hex(handle), flush=True)
sys.stdin.readline()
assert cuda.cuMemUnmap(VA, 2 * MiB) == 0
assert cuda.cuMemRelease(handle) == 0
print("released", flush=True)
sys.stdin.readline()
