"""GPU programs with one planted inefficiency each, on the stand-in libcuda (ctypes), for
`otel-ebpf advise` to find: after `ready` (cuInit made) it waits for a line, runs its
workload, prints `done` and waits for another line (so the agent reads its totals while
it lives).

    python planted.py LIBCUDA copy_loop|launch_storm|sync_step NAME

(NAME: the process name it sets first, so an agent can select it.)

- copy_loop: `upload_rows()` copies 4 KiB rows to the device one cuMemcpyHtoD_v2 each
  (2,000 copies), beside one 16 MiB copy of the weights in `upload_weights()`;
- launch_storm: `tiny_kernels()` launches a looked-up kernel 3,000 times, then one
  synchronize;
- sync_step: each of 40 steps launches 3 kernels (of STANDIN_KERNEL_US each) from
  `train_step()` and then reads the loss in `loss_value()`, which synchronizes the stream
  (what `.item()` does), so the CPU waits for the GPU every step.
"""

import ctypes
import sys

ctypes.CDLL(None).prctl(15, sys.argv[3].encode()[:15], 0, 0, 0)  # PR_SET_NAME
cuda = ctypes.CDLL(sys.argv[1])
MODE = sys.argv[2]
KiB, MiB = 1 << 10, 1 << 20
cuda.cuMemcpyHtoD_v2.argtypes = [ctypes.c_ulonglong, ctypes.c_void_p, ctypes.c_size_t]
cuda.cuLaunchKernel.argtypes = [ctypes.c_void_p] + [ctypes.c_uint] * 7 + [ctypes.c_void_p] * 3
cuda.cuStreamSynchronize.argtypes = [ctypes.c_void_p]


def device_buffer(size: int) -> int:
    p = ctypes.c_ulonglong()
    assert cuda.cuMemAlloc_v2(ctypes.byref(p), ctypes.c_size_t(size)) == 0
    return p.value


def kernel(name: bytes) -> ctypes.c_void_p:
    f = ctypes.c_void_p()
    assert cuda.cuModuleGetFunction(ctypes.byref(f), None, name) == 0
    return f


def upload_weights(dst: int, host: ctypes.Array) -> None:
    assert cuda.cuMemcpyHtoD_v2(dst, host, len(host)) == 0


def upload_rows(dst: int, host: ctypes.Array, rows: int) -> None:
    for i in range(rows):  # the planted inefficiency: one copy per row
        assert cuda.cuMemcpyHtoD_v2(dst + i * 4 * KiB, ctypes.byref(host, i * 4 * KiB),
                                    4 * KiB) == 0


def tiny_kernels(f: ctypes.c_void_p, n: int) -> None:
    for _ in range(n):  # the planted inefficiency: a launch per element
        assert cuda.cuLaunchKernel(f, 1, 1, 1, 256, 1, 1, 0, None, None, None) == 0


def loss_value() -> int:
    return cuda.cuStreamSynchronize(None)  # the CPU waits for the step's kernels


def train_step(kernels: list) -> int:
    for f in kernels:
        assert cuda.cuLaunchKernel(f, 64, 1, 1, 256, 1, 1, 0, None, None, None) == 0
    return loss_value()  # the planted inefficiency: a sync per step


def main() -> None:
    if MODE == "copy_loop":
        dst = device_buffer(16 * MiB)
        host = (ctypes.c_char * (16 * MiB))()
        upload_weights(dst, host)
        upload_rows(dst, host, 2000)
    elif MODE == "launch_storm":
        f = kernel(b"_Z9scale_addPfS_fi")
        tiny_kernels(f, 3000)
        loss_value()
    elif MODE == "sync_step":
        device_buffer(64 * MiB)
        kernels = [kernel(name) for name in (b"_Z7forwardPKfPfi", b"_Z8backwardPKfPfi",
                                             b"_Z4sgdPfPKff")]
        for _ in range(40):
            train_step(kernels)
    else:
        raise SystemExit(f"unknown mode {MODE!r}")


assert cuda.cuInit(0) == 0
print("ready", flush=True)
sys.stdin.readline()
main()
print("done", flush=True)
sys.stdin.readline()
