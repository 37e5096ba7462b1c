"""bpf/include/cuda_abi.h and otel_ebpf/kernel/cuda_abi.py must agree on every size and
offset: compile the header with the host compiler and compare; then decode records
packed the way the kernel writes them."""

from __future__ import annotations

import struct
from pathlib import Path

import pytest

from otel_ebpf.kernel import cuda_abi
from otel_ebpf.kernel.cuda_abi import Api, GpuAlloc, GpuFree, GpuInit, GpuMap, GpuName
from tests.support.c_layout import c_layout as build_and_read

REPO = Path(__file__).resolve().parents[2]

PROBE = r"""
#include <stdio.h>
#include <stddef.h>
#include <stdbool.h>
#include <linux/types.h>
#include "cuda_abi.h"
#include "profile_abi.h"
#define S(t) printf(#t " %zu\n", sizeof(struct t))
#define O(t, f) printf(#t "." #f " %zu\n", offsetof(struct t, f))
int main(void) {
    S(gpu_mem_event); S(gpu_site_key); S(gpu_site_totals); S(gpu_name_event); S(gpu_config);
    O(gpu_mem_event, stack); O(gpu_mem_event, py); O(gpu_mem_event, py_frames);
    O(gpu_mem_event, duration_ns); O(gpu_site_key, caller); O(gpu_site_key, device);
    O(gpu_site_key, py); O(gpu_name_event, name);
    printf("GPU_SITE_PY_FRAMES %d\nGPU_MAX_NAME %d\nEV2 %d %d %d\nAPI2 %d %d\nCNT_SITE %d\n",
           GPU_SITE_PY_FRAMES, GPU_MAX_NAME, GPU_EV_NAME, GPU_EV_MAP, GPU_EV_UNMAP,
           GPU_API_STREAM_SYNC, GPU_API_MEM_UNMAP, GPU_CNT_SITE_MISSES);
    printf("CUDA_ABI_VERSION %d\nGPU_MAX_STACK %d\nGPU_MAX_PY_FRAMES %d\nPROF_MAX_PY_FRAMES %d\n",
           CUDA_ABI_VERSION, GPU_MAX_STACK, GPU_MAX_PY_FRAMES, PROF_MAX_PY_FRAMES);
    printf("GPU_MAX_LAUNCH_STACK %d\nPROF_MAX_USTACK %d\nCNT_UW %d %d\n", GPU_MAX_LAUNCH_STACK,
           PROF_MAX_USTACK, GPU_CNT_UW_STACKS, GPU_CNT_UW_STOPPED);
    printf("EV %d %d %d\nAPI %d %d %d\nCNT %d\n", GPU_EV_ALLOC, GPU_EV_FREE, GPU_EV_INIT,
           GPU_API_MEM_ALLOC, GPU_API_MEMCPY_ASYNC, GPU_API_LAUNCH_KERNEL, GPU_CNT_MAX);
    return 0;
}
"""


@pytest.fixture(scope="module")
def c_layout(tmp_path_factory) -> dict[str, str]:
    return build_and_read(PROBE, tmp_path_factory.mktemp("cuda_abi"))


def test_layouts_match_the_header(c_layout):
    assert int(c_layout["gpu_mem_event.stack"]) == cuda_abi.MEM_EVENT.size
    assert int(c_layout["gpu_mem_event.py"]) == cuda_abi.PY_OFFSET
    assert int(c_layout["gpu_mem_event"]) == cuda_abi.PY_OFFSET + 8 * cuda_abi.GPU_MAX_PY_FRAMES
    assert int(c_layout["gpu_site_key"]) == cuda_abi.SITE_KEY.size
    assert int(c_layout["gpu_site_totals"]) == cuda_abi.SITE_TOTALS.size
    assert int(c_layout["gpu_name_event"]) == cuda_abi.NAME_EVENT.size
    assert int(c_layout["gpu_site_key.caller"]) == 8
    assert int(c_layout["gpu_site_key.device"]) == struct.calcsize("<IiQQ")
    assert int(c_layout["gpu_site_key.py"]) == struct.calcsize("<IiQQhHHH")
    assert int(c_layout["gpu_name_event.name"]) == struct.calcsize("<BBHIQQ")
    assert int(c_layout["GPU_SITE_PY_FRAMES"]) == cuda_abi.GPU_SITE_PY_FRAMES
    assert int(c_layout["GPU_MAX_NAME"]) == cuda_abi.GPU_MAX_NAME
    assert c_layout["EV2"].split() == [str(cuda_abi.GPU_EV_NAME), str(cuda_abi.GPU_EV_MAP),
                                       str(cuda_abi.GPU_EV_UNMAP)]
    assert c_layout["API2"].split() == [str(Api.STREAM_SYNC.value), str(Api.MEM_UNMAP.value)]
    assert cuda_abi.COUNTER_NAMES[int(c_layout["CNT_SITE"])] == "site_misses"
    assert int(c_layout["gpu_config"]) == cuda_abi.GPU_CONFIG.size
    assert int(c_layout["CUDA_ABI_VERSION"]) == cuda_abi.CUDA_ABI_VERSION
    assert int(c_layout["GPU_MAX_STACK"]) == cuda_abi.GPU_MAX_STACK
    assert int(c_layout["GPU_MAX_LAUNCH_STACK"]) == cuda_abi.GPU_MAX_LAUNCH_STACK
    # the unwind-table walk fills at most a CPU sample's depth
    assert int(c_layout["GPU_MAX_STACK"]) <= int(c_layout["PROF_MAX_USTACK"])
    assert [cuda_abi.COUNTER_NAMES[int(i)] for i in c_layout["CNT_UW"].split()] == [
        "unwind_stacks", "unwind_stopped"]
    # the Python walk writes PROF_MAX_PY_FRAMES entries into py[]
    assert c_layout["GPU_MAX_PY_FRAMES"] == c_layout["PROF_MAX_PY_FRAMES"]
    assert c_layout["EV"].split() == [str(cuda_abi.GPU_EV_ALLOC), str(cuda_abi.GPU_EV_FREE),
                                      str(cuda_abi.GPU_EV_INIT)]
    assert c_layout["API"].split() == [str(Api.MEM_ALLOC.value), str(Api.MEMCPY_ASYNC.value),
                                       str(Api.LAUNCH_KERNEL.value)]
    assert int(c_layout["CNT"]) == cuda_abi.GPU_CNT_MAX


def _header(type_, api, device, pid, tid, stack_len, ts, dptr, size, dur, py_frames=0, status=0):
    return cuda_abi.MEM_EVENT.pack(type_, api, device, pid, tid, stack_len, ts, dptr, size, dur,
                                   py_frames, status, 0)


def test_decode_allocation_with_stacks():
    stack = [0x401000, 0x402000, 0x403000] + [0] * (cuda_abi.GPU_MAX_STACK - 3)
    py = [0x7000, 0x7101]  # the second marks its evaluator call's last frame
    record = (_header(1, Api.MEM_ALLOC_PITCH, 2, 10, 11, 24, 5, 0xABC000, 102400, 7, 2, 1)
              + struct.pack(f"<{len(stack)}Q", *stack) + struct.pack("<2Q", *py))
    ev = cuda_abi.decode(record)
    assert ev == GpuAlloc(10, 11, 5, Api.MEM_ALLOC_PITCH, 2, 0xABC000, 102400, 7,
                          (0x401000, 0x402000, 0x403000), (0x7000, 0x7101), 1)


def test_decode_names_and_maps():
    name = b"_Z6kernelPfi"
    record = cuda_abi.NAME_EVENT.pack(cuda_abi.GPU_EV_NAME, Api.LIBRARY_GET_KERNEL, 0, 5,
                                      0xAA, 0, name + b"\0junk-from-an-earlier-name")
    assert cuda_abi.decode(record) == GpuName(5, Api.LIBRARY_GET_KERNEL, 0xAA, 0,
                                              "_Z6kernelPfi")
    assert cuda_abi.decode(_header(5, Api.MEM_MAP, 0, 3, 4, 0, 9, 0x7F00, 4096, 1)) == \
        GpuMap(3, 4, 9, 0x7F00, 4096, True)
    assert cuda_abi.decode(_header(6, Api.MEM_UNMAP, 0, 3, 4, 0, 9, 0x7F00, 4096, 1)) == \
        GpuMap(3, 4, 9, 0x7F00, 4096, False)


def test_decode_free_and_init():
    assert cuda_abi.decode(_header(2, Api.MEM_FREE_ASYNC, -1, 3, 4, 0, 9, 0x10, 0, 1)) == \
        GpuFree(3, 4, 9, Api.MEM_FREE_ASYNC, -1, 0x10, 1)
    assert cuda_abi.decode(_header(3, 0, -1, 3, 4, 0, 9, 0, 0, 0)) == GpuInit(3, 4, 9)


@pytest.mark.parametrize("record", [b"\x01" * 10, _header(9, 1, 0, 1, 1, 0, 0, 0, 0, 0),
                                    _header(1, 99, 0, 1, 1, 0, 0, 0, 0, 0)])
def test_decode_rejects_bad_records(record):
    with pytest.raises(cuda_abi.BadRecord):
        cuda_abi.decode(record)
