/* SPDX-License-Identifier: GPL-2.0 */
/* What cuda.bpf.c (CUDA driver uprobes) shares with user space (otel_ebpf/kernel/cuda_abi.py);
 * apart from abi.h so the GPU side versions on its own. tests/unit/test_cuda_abi.py compiles
 * this with the host compiler and checks every size and offset against the Python mirror. */
#ifndef OTEL_EBPF_CUDA_ABI_H
#define OTEL_EBPF_CUDA_ABI_H

#define CUDA_ABI_VERSION 3
/* user frames kept per allocation (the first is the return site): as deep as a CPU
 * sample's (PROF_MAX_USTACK), since with unwind tables the walk crosses libtorch whole */
#define GPU_MAX_STACK 127
#define GPU_MAX_LAUNCH_STACK 64 /* frames per launch stack (`gpu_stacks`, frame pointers) */
#define GPU_MAX_PY_FRAMES 96 /* Python frames kept per allocation (= PROF_MAX_PY_FRAMES) */
/* Python frames in a launch, copy or synchronization key, innermost first: the frames
 * nearest the call say where it is made; deeper ones are cut (py_n says how many) */
#define GPU_SITE_PY_FRAMES 32
#define GPU_MAX_NAME 256 /* bytes of a kernel's (mangled) name kept, NUL included */

/* The driver calls we probe; one value per entry point, so user space can tell them apart. */
enum gpu_api {
	GPU_API_MEM_ALLOC = 1,   /* cuMemAlloc_v2(CUdeviceptr *dptr, size_t bytesize) */
	GPU_API_MEM_ALLOC_ASYNC, /* cuMemAllocAsync(CUdeviceptr *dptr, size_t bytesize, CUstream) */
	GPU_API_MEM_ALLOC_MANAGED, /* cuMemAllocManaged(CUdeviceptr *dptr, size_t, unsigned int) */
	GPU_API_MEM_ALLOC_PITCH, /* cuMemAllocPitch_v2(CUdeviceptr *, size_t *pitch, size_t w, size_t h, unsigned) */
	GPU_API_MEM_FREE,        /* cuMemFree_v2(CUdeviceptr dptr) */
	GPU_API_MEM_FREE_ASYNC,  /* cuMemFreeAsync(CUdeviceptr dptr, CUstream) */
	GPU_API_MEMCPY_HTOD,     /* cuMemcpyHtoD_v2(CUdeviceptr dst, const void *src, size_t n) */
	GPU_API_MEMCPY_DTOH,     /* cuMemcpyDtoH_v2(void *dst, CUdeviceptr src, size_t n) */
	GPU_API_MEMCPY_HTOD_ASYNC, /* cuMemcpyHtoDAsync_v2(..., size_t n, CUstream) */
	GPU_API_MEMCPY_DTOH_ASYNC, /* cuMemcpyDtoHAsync_v2(..., size_t n, CUstream) */
	GPU_API_MEMCPY,          /* cuMemcpy(CUdeviceptr dst, CUdeviceptr src, size_t n): unified */
	GPU_API_MEMCPY_ASYNC,    /* cuMemcpyAsync(dst, src, size_t n, CUstream): unified */
	GPU_API_LAUNCH_KERNEL,   /* cuLaunchKernel(CUfunction, grid xyz, block xyz, ...) */
	GPU_API_STREAM_SYNC,     /* cuStreamSynchronize(CUstream) */
	GPU_API_CTX_SYNC,        /* cuCtxSynchronize(void) */
	GPU_API_EVENT_SYNC,      /* cuEventSynchronize(CUevent) */
	GPU_API_MODULE_GET_FUNCTION, /* cuModuleGetFunction(CUfunction *, CUmodule, const char *name) */
	GPU_API_LIBRARY_GET_KERNEL,  /* cuLibraryGetKernel(CUkernel *, CUlibrary, const char *name) */
	GPU_API_KERNEL_GET_FUNCTION, /* cuKernelGetFunction(CUfunction *, CUkernel) */
	GPU_API_MEM_CREATE,      /* cuMemCreate(CUmemGenericAllocationHandle *, size_t, prop *, flags) */
	GPU_API_MEM_RELEASE,     /* cuMemRelease(CUmemGenericAllocationHandle) */
	GPU_API_MEM_MAP,         /* cuMemMap(CUdeviceptr, size_t size, size_t offset, handle, flags) */
	GPU_API_MEM_UNMAP,       /* cuMemUnmap(CUdeviceptr, size_t size) */
	GPU_API_MAX,
};

enum gpu_event_type {
	GPU_EV_ALLOC = 1, /* a successful allocation: pointer, size, device, stack */
	GPU_EV_FREE = 2,  /* a successful free: pointer */
	GPU_EV_INIT = 3,  /* cuInit: a process starts using CUDA */
	GPU_EV_NAME = 4,  /* a kernel handle got its name, or a function its kernel (struct gpu_name_event) */
	GPU_EV_MAP = 5,   /* cuMemMap: `size` bytes of a physical allocation mapped at `dptr` */
	GPU_EV_UNMAP = 6, /* cuMemUnmap: `size` bytes at `dptr` unmapped */
};

/* One allocation or free, sent through the `gpu_events` ring buffer. A free is sent
 * without its stacks (offsetof(struct gpu_mem_event, stack) bytes). */
struct gpu_mem_event {
	__u8 type;        /* gpu_event_type */
	__u8 api;         /* gpu_api */
	__s16 device;     /* CUDA device ordinal of the thread's current context; -1 unknown */
	__u32 pid;        /* tgid */
	__u32 tid;
	__u32 stack_len;  /* bytes of stack used (8 per frame) */
	__u64 ts_ns;      /* CLOCK_MONOTONIC at return */
	__u64 dptr;       /* device pointer */
	__u64 size;       /* bytes (pitch * height for cuMemAllocPitch) */
	__u64 duration_ns; /* entry to return */
	__u16 py_frames;  /* entries used in py[] */
	__u16 py_status;  /* enum py_status (profile_abi.h); 0: not a registered Python process */
	__u32 _pad;
	__u64 stack[GPU_MAX_STACK]; /* user return addresses, innermost first */
	/* the thread's Python frames, innermost first, as the CPU profiler walks them
	 * (profile_abi.h: code object addresses, PY_F_ENTRY in the low bit); an allocation
	 * is sent up to py[py_frames] */
	__u64 py[GPU_MAX_PY_FRAMES];
};

/* Per process, call (launch, copy, synchronization), calling stack and, for launches, the
 * kernel: totals since the process's first call (`gpu_sites`). */
struct gpu_site_key {
	__u32 pid;
	__s32 stack_id;   /* in the `gpu_stacks` stack-trace map; <0 when none was taken */
	/* launches: the return address at entry, the direct caller, which the frame-pointer
	 * walk of a stack taken at a function's first instruction skips; 0 for the others,
	 * whose stack is taken at return */
	__u64 caller;
	__u64 func;       /* launches: the CUfunction (or CUkernel) launched; 0 for the others */
	__s16 device;
	__u16 api;        /* GPU_API_LAUNCH_KERNEL, a GPU_API_MEMCPY_*, a GPU_API_*_SYNC */
	__u16 py_n;       /* entries used in py[] */
	__u16 py_status;  /* enum py_status of the Python walk (0: not a registered process) */
	__u64 py[GPU_SITE_PY_FRAMES]; /* Python frames as in gpu_mem_event.py, zero past py_n */
};

struct gpu_site_totals {
	__u64 count;
	__u64 bytes;      /* copies: bytes copied; 0 for the others */
	__u64 ns;         /* copies and synchronizations: entry to return (the async copies'
			   * time to enqueue); launches: 0, they are counted at entry only */
};

/* A kernel's name as the runtime looked it up (cuModuleGetFunction, cuLibraryGetKernel:
 * `handle` is the CUfunction or CUkernel made, `name` its mangled name), or a function
 * made from a kernel (cuKernelGetFunction: `handle` the CUfunction, `kernel` the CUkernel,
 * no name). Sent through `gpu_events`. */
struct gpu_name_event {
	__u8 type;        /* GPU_EV_NAME */
	__u8 api;         /* GPU_API_MODULE_GET_FUNCTION, _LIBRARY_GET_KERNEL, _KERNEL_GET_FUNCTION */
	__u16 _pad;
	__u32 pid;
	__u64 handle;
	__u64 kernel;
	char name[GPU_MAX_NAME];
};

enum gpu_counter_idx {
	GPU_CNT_RINGBUF_DROPS = 0, /* events lost: ring buffer full */
	GPU_CNT_INFLIGHT_LOST,     /* a return without its entry (table full, or attached mid-call) */
	GPU_CNT_FAILED_CALLS,      /* calls that returned a CUresult other than CUDA_SUCCESS */
	GPU_CNT_STACK_MISSES,      /* launch stacks that could not be taken (collision, no frames) */
	GPU_CNT_UW_STACKS,         /* allocation stacks walked with unwind tables */
	GPU_CNT_UW_TABLE,          /* frames of those stepped over by a table row */
	GPU_CNT_UW_FP,             /* ... by frame pointer (no row there) */
	GPU_CNT_UW_SCAN,           /* ... by a stack scan (a leaf without rules) */
	GPU_CNT_UW_STOPPED,        /* walks ended by a row saying stop */
	GPU_CNT_SITE_MISSES,       /* launch/copy/sync totals lost: `gpu_sites` full */
	GPU_CNT_MAX = 16,
};

/* Settings written into .rodata before load. */
struct gpu_config {
	__u32 abi_version;
	__u32 agent_pid;  /* never trace this tgid */
	__u32 wakeup_bytes; /* force a wake-up when the ring holds more than this */
	__u32 unwind_tables; /* walk allocation stacks with the unwind tables (unwind.bpf.h) */
};

#endif
