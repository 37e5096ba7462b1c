"""bpf/include/cuda_abi.h in Python: GPU record layouts, and decoding into frozen events.

tests/unit/test_cuda_abi.py compiles the header with the host compiler and checks every
size and offset here against it.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass
from enum import IntEnum

CUDA_ABI_VERSION = 3
GPU_MAX_STACK = 127
GPU_MAX_LAUNCH_STACK = 64
GPU_MAX_PY_FRAMES = 96
GPU_SITE_PY_FRAMES = 32
GPU_MAX_NAME = 256


class Api(IntEnum):
    """enum gpu_api: which driver entry point a record or a total comes from."""

    MEM_ALLOC = 1
    MEM_ALLOC_ASYNC = 2
    MEM_ALLOC_MANAGED = 3
    MEM_ALLOC_PITCH = 4
    MEM_FREE = 5
    MEM_FREE_ASYNC = 6
    MEMCPY_HTOD = 7
    MEMCPY_DTOH = 8
    MEMCPY_HTOD_ASYNC = 9
    MEMCPY_DTOH_ASYNC = 10
    MEMCPY = 11
    MEMCPY_ASYNC = 12
    LAUNCH_KERNEL = 13
    STREAM_SYNC = 14
    CTX_SYNC = 15
    EVENT_SYNC = 16
    MODULE_GET_FUNCTION = 17
    LIBRARY_GET_KERNEL = 18
    KERNEL_GET_FUNCTION = 19
    MEM_CREATE = 20
    MEM_RELEASE = 21
    MEM_MAP = 22
    MEM_UNMAP = 23


COPY_APIS = frozenset({Api.MEMCPY_HTOD, Api.MEMCPY_DTOH, Api.MEMCPY_HTOD_ASYNC,
                       Api.MEMCPY_DTOH_ASYNC, Api.MEMCPY, Api.MEMCPY_ASYNC})
SYNC_APIS = frozenset({Api.STREAM_SYNC, Api.CTX_SYNC, Api.EVENT_SYNC})


GPU_EV_ALLOC, GPU_EV_FREE, GPU_EV_INIT, GPU_EV_NAME, GPU_EV_MAP, GPU_EV_UNMAP = 1, 2, 3, 4, 5, 6

# enum gpu_counter_idx
COUNTER_NAMES = {0: "ringbuf_drops", 1: "inflight_lost", 2: "failed_calls", 3: "stack_misses",
                 4: "unwind_stacks", 5: "unwind_table_frames", 6: "unwind_fp_frames",
                 7: "unwind_scanned", 8: "unwind_stopped", 9: "site_misses"}
GPU_CNT_MAX = 16

MEM_EVENT = struct.Struct("<BBhIIIQQQQHHI")  # struct gpu_mem_event up to `stack`
SITE_KEY = struct.Struct(f"<IiQQhHHH{GPU_SITE_PY_FRAMES}Q")  # struct gpu_site_key
SITE_TOTALS = struct.Struct("<QQQ")  # struct gpu_site_totals
NAME_EVENT = struct.Struct(f"<BBHIQQ{GPU_MAX_NAME}s")  # struct gpu_name_event
GPU_CONFIG = struct.Struct("<IIII")  # struct gpu_config
STACK_BYTES = GPU_MAX_STACK * 8
PY_OFFSET = MEM_EVENT.size + STACK_BYTES  # offsetof(struct gpu_mem_event, py)


class BadRecord(ValueError):
    pass


@dataclass(frozen=True, slots=True)
class GpuAlloc:
    """A successful allocation: `size` bytes at device pointer `dptr`, from `stack`."""

    pid: int
    tid: int
    ts_ns: int
    api: Api
    device: int  # CUDA device ordinal; -1 when the thread's context was not seen created
    dptr: int
    size: int
    duration_ns: int
    stack: tuple[int, ...]  # user return addresses, innermost (the call's return site) first
    # the thread's Python frames (code object addresses, PY_F_ENTRY in the low bit),
    # innermost first, and the walk's status (profile_abi.h enum py_status; 0: none)
    py: tuple[int, ...] = ()
    py_status: int = 0


@dataclass(frozen=True, slots=True)
class GpuFree:
    """A successful free of device pointer `dptr`."""

    pid: int
    tid: int
    ts_ns: int
    api: Api
    device: int
    dptr: int
    duration_ns: int


@dataclass(frozen=True, slots=True)
class GpuInit:
    """cuInit: the process starts using CUDA (its allocations follow)."""

    pid: int
    tid: int
    ts_ns: int


@dataclass(frozen=True, slots=True)
class GpuName:
    """A kernel handle named: `handle` (a CUfunction or CUkernel) is the kernel `name`
    (mangled); from cuKernelGetFunction, `handle` is a CUfunction made from CUkernel
    `kernel` and `name` is empty."""

    pid: int
    api: Api
    handle: int
    kernel: int
    name: str


@dataclass(frozen=True, slots=True)
class GpuMap:
    """cuMemMap (`mapped`) or cuMemUnmap of `size` bytes at device address `dptr`."""

    pid: int
    tid: int
    ts_ns: int
    dptr: int
    size: int
    mapped: bool


def _stack(raw: bytes) -> tuple[int, ...]:
    n = len(raw) // 8
    return tuple(a for a in struct.unpack(f"<{n}Q", raw[: n * 8]) if a)


GpuEvent = GpuAlloc | GpuFree | GpuInit | GpuName | GpuMap


def decode(record: bytes) -> GpuEvent:
    if record[:1] == bytes([GPU_EV_NAME]):
        if len(record) < NAME_EVENT.size:
            raise BadRecord(f"GPU name record of {len(record)} bytes")
        _, api, _, pid, handle, kernel, name = NAME_EVENT.unpack_from(record)
        try:
            api = Api(api)
        except ValueError as exc:
            raise BadRecord(f"unknown GPU api {api}") from exc
        return GpuName(pid, api, handle, kernel,
                       name.partition(b"\0")[0].decode(errors="replace"))
    if len(record) < MEM_EVENT.size:
        raise BadRecord(f"GPU record of {len(record)} bytes, shorter than its header")
    (type_, api, device, pid, tid, stack_len, ts, dptr, size, duration, py_frames, py_status,
     _) = MEM_EVENT.unpack_from(record)
    if type_ == GPU_EV_INIT:
        return GpuInit(pid, tid, ts)
    try:
        api = Api(api)
    except ValueError as exc:
        raise BadRecord(f"unknown GPU api {api}") from exc
    if type_ == GPU_EV_ALLOC:
        end = MEM_EVENT.size + min(stack_len, STACK_BYTES, len(record) - MEM_EVENT.size)
        py_end = PY_OFFSET + 8 * min(py_frames, GPU_MAX_PY_FRAMES, max(
            0, (len(record) - PY_OFFSET) // 8))
        py = struct.unpack(f"<{(py_end - PY_OFFSET) // 8}Q", record[PY_OFFSET:py_end])
        return GpuAlloc(pid, tid, ts, api, device, dptr, size, duration,
                        _stack(record[MEM_EVENT.size:end]), py, py_status)
    if type_ == GPU_EV_FREE:
        return GpuFree(pid, tid, ts, api, device, dptr, duration)
    if type_ in (GPU_EV_MAP, GPU_EV_UNMAP):
        return GpuMap(pid, tid, ts, dptr, size, type_ == GPU_EV_MAP)
    raise BadRecord(f"unknown GPU record type {type_}")


def pack_config(agent_pid: int, wakeup_bytes: int, unwind_tables: bool = False) -> bytes:
    return GPU_CONFIG.pack(CUDA_ABI_VERSION, agent_pid, wakeup_bytes, int(unwind_tables))


def stack_from_map(raw: bytes) -> tuple[int, ...]:
    """A `gpu_stacks` value (GPU_MAX_LAUNCH_STACK u64, zero-filled past the last frame)."""
    return _stack(raw)
