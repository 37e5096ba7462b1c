// SPDX-License-Identifier: GPL-2.0
/* GPU memory from the CUDA driver (libcuda.so.1), by uprobes: allocations and frees with
 * their device pointers (the pointer an allocation returns through its out-parameter is
 * read at return, when the call succeeded), the allocating user stack, host<->device copies
 * (count, bytes, time by stack), kernel launches (count by launching stack and kernel, the
 * kernels named from the runtime's lookups), time spent waiting in the synchronize calls
 * by stack, and the virtual memory calls (cuMemCreate/cuMemMap) of expandable segments.
 *
 * Allocations and frees are rare (caching allocators keep segments) and go to user space
 * one by one; copies and launches can be hot, so they are only counted here, in maps that
 * user space reads each interval. Every program is attached per library file by user space
 * (otel_ebpf/kernel/cuda_tracer.py), which names the symbol each one goes on. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "cuda_abi.h"
#include "py_walk.bpf.h"
#include "unwind.bpf.h" /* the CPU profiler's table walk; its maps reused from the agent's */

char LICENSE[] SEC("license") = "GPL";

#define CUDA_SUCCESS 0
#define BPF_F_USER_STACK (1ULL << 8)
#define BPF_RB_NO_WAKEUP 1
#define BPF_RB_FORCE_WAKEUP 2
#define BPF_RB_AVAIL_DATA 0

/* calls whose return only teaches us which device a context is on */
#define CALL_CTX_RETAIN 200 /* cuDevicePrimaryCtxRetain(CUcontext *pctx, CUdevice dev) */
#define CALL_CTX_CREATE 201 /* cuCtxCreate_v2(CUcontext *pctx, unsigned flags, CUdevice dev) */
/* a call "in flight" this long lost its return (a thread that died inside the driver) */
#define STALE_NS (60ull * 1000000000ull)

const volatile struct gpu_config gcfg = {};

/* A driver call in progress on a thread, from entry to return. */
struct gpu_call {
	__u64 out;      /* where the call writes its result (CUdeviceptr *, CUcontext *, CUfunction *) */
	__u64 pitch;    /* cuMemAllocPitch: size_t *pPitch; name lookups: const char *name */
	__u64 size;     /* bytes (for the pitch form: the height) */
	__u64 dptr;     /* frees, maps: the pointer (cuMemRelease: the handle; cuKernelGetFunction: the kernel) */
	__u64 enter_ns;
	__u32 api;
	__s32 device;   /* context creation: the device */
	__u32 depth;    /* probed calls made inside this one (a driver calling its own API) */
	__u32 _pad;
};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); /* set by user space */
} gpu_events SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH); /* LRU: a thread that dies mid-call leaks nothing */
	__uint(max_entries, 16384);
	__type(key, __u64); /* pid_tgid */
	__type(value, struct gpu_call);
} gpu_inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 4096);
	__type(key, __u64); /* CUcontext */
	__type(value, __s32); /* device ordinal */
} ctx_device SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, __u32); /* tid */
	__type(value, __u64); /* the thread's current CUcontext */
} thread_ctx SEC(".maps");

/* launches, copies and synchronizations by calling stack (and kernel): the hot calls are
 * only counted here; user space reads the totals each interval */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, struct gpu_site_key);
	__type(value, struct gpu_site_totals);
} gpu_sites SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_STACK_TRACE);
	__uint(max_entries, 16384);
	__uint(key_size, sizeof(__u32));
	__uint(value_size, GPU_MAX_LAUNCH_STACK * sizeof(__u64));
} gpu_stacks SEC(".maps");

/* A site key is assembled here (with the Python walk's 96 frames, it is larger than the
 * BPF stack); py[] receives the whole walk, the key keeps its innermost frames. */
struct site_scratch {
	struct gpu_site_key key;
	__u64 py[PROF_MAX_PY_FRAMES];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct site_scratch);
} site_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gpu_name_event);
} name_scratch SEC(".maps");

/* An event is assembled here (it is larger than the BPF stack) and sent at its real size. */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct gpu_mem_event);
} gpu_scratch SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, GPU_CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} gpu_counters SEC(".maps");

static __always_inline void add(__u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&gpu_counters, &idx);
	if (v)
		*v += n; /* per-CPU: no atomic needed */
}

static __always_inline void count(__u32 idx)
{
	add(idx, 1);
}

static __always_inline bool ignored(__u64 id)
{
	return (id >> 32) == gcfg.agent_pid;
}

/* The device of the thread's current context, as its creation or retain told us. */
static __always_inline __s16 current_device(__u32 tid)
{
	__u64 *ctx = bpf_map_lookup_elem(&thread_ctx, &tid);
	if (!ctx)
		return -1;
	__s32 *dev = bpf_map_lookup_elem(&ctx_device, ctx);
	return dev ? (__s16)*dev : -1;
}

static __always_inline int enter(__u32 api, __u64 out, __u64 pitch, __u64 size, __u64 dptr,
				 __s32 device)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (ignored(id))
		return 0;
	/* a probed call inside a probed call (cuMemAllocAsync implemented with cuMemAlloc_v2):
	 * the outer one is what the program asked for; the inner return is skipped */
	__u64 now = bpf_ktime_get_ns();
	struct gpu_call *outer = bpf_map_lookup_elem(&gpu_inflight, &id);
	if (outer && now - outer->enter_ns < STALE_NS) {
		outer->depth++;
		return 0;
	}
	struct gpu_call call = {
		.out = out, .pitch = pitch, .size = size, .dptr = dptr,
		.enter_ns = now, .api = api, .device = device,
	};
	bpf_map_update_elem(&gpu_inflight, &id, &call, BPF_ANY);
	return 0;
}

static __always_inline void emit(void *ctx, struct gpu_call *call, __u64 id, __u8 type,
				 __u64 dptr, __u64 size, __u64 now)
{
	__u32 zero = 0;
	struct gpu_mem_event *ev = bpf_map_lookup_elem(&gpu_scratch, &zero);
	if (!ev)
		return;
	ev->type = type;
	ev->api = call->api;
	/* cuMemCreate says its device in its properties; the others use the current context's */
	ev->device = call->device >= 0 ? (__s16)call->device : current_device((__u32)id);
	ev->pid = id >> 32;
	ev->tid = (__u32)id;
	ev->ts_ns = now;
	ev->dptr = dptr;
	ev->size = size;
	ev->duration_ns = now - call->enter_ns;
	ev->stack_len = 0;
	ev->py_frames = 0;
	ev->py_status = 0;
	__u64 len = offsetof(struct gpu_mem_event, stack);
	if (type == GPU_EV_ALLOC) {
		/* At a uretprobe the registers are the caller's at the return site: the first
		 * frame is the call's return address, then its callers. With unwind tables
		 * (docs/decisions.md, "GPU allocation stacks with the unwind tables") the walk
		 * starts from those registers and crosses code without frame pointers
		 * (libtorch, libcudart); where no row covers an address, and for processes
		 * without tables, the frame-pointer chain. */
		long n = -1;
		if (gcfg.unwind_tables) {
			struct uw_counts c = {};
			n = unwind_from(ev->pid, PT_REGS_IP((struct pt_regs *)ctx),
					PT_REGS_SP((struct pt_regs *)ctx),
					PT_REGS_FP((struct pt_regs *)ctx), ev->stack, GPU_MAX_STACK, &c);
			if (n >= 0) {
				n *= 8;
				count(GPU_CNT_UW_STACKS);
				add(GPU_CNT_UW_TABLE, c.by_table);
				add(GPU_CNT_UW_FP, c.by_fp);
				add(GPU_CNT_UW_SCAN, c.by_scan);
				if (c.stopped)
					count(GPU_CNT_UW_STOPPED);
			}
		}
		if (n < 0)
			n = bpf_get_stack(ctx, ev->stack, sizeof(ev->stack), BPF_F_USER_STACK);
		if (n > 0)
			ev->stack_len = n;
		/* the Python frames of this thread, when it runs a registered interpreter */
		py_walk_current(ev->py, &ev->py_frames, &ev->py_status);
		__u32 py = ev->py_frames;
		len = offsetof(struct gpu_mem_event, py) + (py < GPU_MAX_PY_FRAMES ? py : GPU_MAX_PY_FRAMES) * 8;
	}
	__u64 flags = bpf_ringbuf_query(&gpu_events, BPF_RB_AVAIL_DATA) > gcfg.wakeup_bytes
		? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
	if (bpf_ringbuf_output(&gpu_events, ev, len, flags))
		count(GPU_CNT_RINGBUF_DROPS);
}

/* The key of a launch, copy or synchronization made by the current thread: process,
 * device, user stack (at entry for launches, at the return site for the others) and the
 * thread's innermost Python frames. */
static __always_inline struct gpu_site_key *site_key(void *ctx, __u64 id, __u16 api,
						     __u64 caller, __u64 func)
{
	__u32 zero = 0;
	struct site_scratch *sc = bpf_map_lookup_elem(&site_scratch, &zero);
	if (!sc)
		return NULL;
	struct gpu_site_key *k = &sc->key;
	k->pid = id >> 32;
	k->api = api;
	k->device = current_device((__u32)id);
	k->caller = caller;
	k->func = func;
	long sid = bpf_get_stackid(ctx, &gpu_stacks, BPF_F_USER_STACK);
	if (sid < 0)
		count(GPU_CNT_STACK_MISSES);
	k->stack_id = sid < 0 ? -1 : (__s32)sid;
	__u16 n = 0, status = 0;
	py_walk_current(sc->py, &n, &status);
	k->py_status = status;
	k->py_n = n < GPU_SITE_PY_FRAMES ? n : GPU_SITE_PY_FRAMES;
	/* the walk's buffer holds an earlier walk's frames past n: zeroed, or keys differ */
	for (int i = 0; i < GPU_SITE_PY_FRAMES; i++)
		k->py[i] = i < k->py_n ? sc->py[i] : 0;
	return k;
}

static __always_inline void add_site(struct gpu_site_key *k, __u64 bytes, __u64 ns)
{
	struct gpu_site_totals *t = bpf_map_lookup_elem(&gpu_sites, k);
	if (!t) {
		struct gpu_site_totals zero = {};
		bpf_map_update_elem(&gpu_sites, k, &zero, BPF_NOEXIST);
		t = bpf_map_lookup_elem(&gpu_sites, k); /* ours, or another CPU's made first */
		if (!t) {
			count(GPU_CNT_SITE_MISSES);
			return;
		}
	}
	__sync_fetch_and_add(&t->count, 1);
	if (bytes)
		__sync_fetch_and_add(&t->bytes, bytes);
	if (ns)
		__sync_fetch_and_add(&t->ns, ns);
}

/* A name lookup returned: the handle it made, with the kernel's name (or, for
 * cuKernelGetFunction, the kernel the function is made from) */
static __always_inline void emit_name(struct gpu_call *call, __u64 id, __u64 handle)
{
	__u32 zero = 0;
	struct gpu_name_event *ev = bpf_map_lookup_elem(&name_scratch, &zero);
	if (!ev)
		return;
	ev->type = GPU_EV_NAME;
	ev->api = call->api;
	ev->pid = id >> 32;
	ev->handle = handle;
	ev->kernel = call->api == GPU_API_KERNEL_GET_FUNCTION ? call->dptr : 0;
	ev->name[0] = 0;
	if (call->pitch)
		bpf_probe_read_user_str(ev->name, sizeof(ev->name), (void *)call->pitch);
	if (bpf_ringbuf_output(&gpu_events, ev, sizeof(*ev), BPF_RB_NO_WAKEUP))
		count(GPU_CNT_RINGBUF_DROPS);
}

/* ---- entries ---- */

SEC("uprobe")
int BPF_KPROBE(cu_mem_alloc, __u64 *dptr, __u64 bytesize)
{ return enter(GPU_API_MEM_ALLOC, (__u64)dptr, 0, bytesize, 0, -1); }

SEC("uprobe")
int BPF_KPROBE(cu_mem_alloc_async, __u64 *dptr, __u64 bytesize)
{ return enter(GPU_API_MEM_ALLOC_ASYNC, (__u64)dptr, 0, bytesize, 0, -1); }

SEC("uprobe")
int BPF_KPROBE(cu_mem_alloc_managed, __u64 *dptr, __u64 bytesize)
{ return enter(GPU_API_MEM_ALLOC_MANAGED, (__u64)dptr, 0, bytesize, 0, -1); }

SEC("uprobe")
int BPF_KPROBE(cu_mem_alloc_pitch, __u64 *dptr, __u64 *pitch, __u64 width, __u64 height)
{ return enter(GPU_API_MEM_ALLOC_PITCH, (__u64)dptr, (__u64)pitch, height, 0, -1); }

SEC("uprobe")
int BPF_KPROBE(cu_mem_free, __u64 dptr)
{ return enter(GPU_API_MEM_FREE, 0, 0, 0, dptr, -1); }

SEC("uprobe")
int BPF_KPROBE(cu_mem_free_async, __u64 dptr)
{ return enter(GPU_API_MEM_FREE_ASYNC, 0, 0, 0, dptr, -1); }

/* every cuMemcpy form we probe has the byte count third */
#define COPY_ENTRY(name, api)                                                  \
	SEC("uprobe")                                                          \
	int BPF_KPROBE(name, __u64 dst, __u64 src, __u64 n)                    \
	{ return enter(api, 0, 0, n, 0, -1); }

COPY_ENTRY(cu_memcpy_htod, GPU_API_MEMCPY_HTOD)
COPY_ENTRY(cu_memcpy_dtoh, GPU_API_MEMCPY_DTOH)
COPY_ENTRY(cu_memcpy_htod_async, GPU_API_MEMCPY_HTOD_ASYNC)
COPY_ENTRY(cu_memcpy_dtoh_async, GPU_API_MEMCPY_DTOH_ASYNC)
COPY_ENTRY(cu_memcpy, GPU_API_MEMCPY)
COPY_ENTRY(cu_memcpy_async, GPU_API_MEMCPY_ASYNC)

/* Launches are the hottest call: counted at entry, no return probe. The stack is taken at
 * entry: its first frame is cuLaunchKernel itself, and the frame-pointer walk skips the
 * direct caller, whose return address is on top of the stack: kept in the key, with the
 * function launched (its name comes from the lookup that made it). */
static __always_inline int launch(void *ctx, __u64 func)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (ignored(id))
		return 0;
	__u64 caller = 0;
	bpf_probe_read_user(&caller, sizeof(caller), (void *)PT_REGS_SP((struct pt_regs *)ctx));
	struct gpu_site_key *k = site_key(ctx, id, GPU_API_LAUNCH_KERNEL, caller, func);
	if (k)
		add_site(k, 0, 0);
	return 0;
}

/* cuLaunchKernel(CUfunction f, ...) */
SEC("uprobe")
int BPF_KPROBE(cu_launch_kernel, __u64 f)
{ return launch(ctx, f); }

/* cuLaunchKernelEx(const CUlaunchConfig *config, CUfunction f, ...) */
SEC("uprobe")
int BPF_KPROBE(cu_launch_kernel_ex, void *config, __u64 f)
{ return launch(ctx, f); }

/* where the CPU waits for the GPU: timed entry to return, by stack */
SEC("uprobe")
int BPF_KPROBE(cu_stream_sync)
{ return enter(GPU_API_STREAM_SYNC, 0, 0, 0, 0, -1); }

SEC("uprobe")
int BPF_KPROBE(cu_ctx_sync)
{ return enter(GPU_API_CTX_SYNC, 0, 0, 0, 0, -1); }

SEC("uprobe")
int BPF_KPROBE(cu_event_sync)
{ return enter(GPU_API_EVENT_SYNC, 0, 0, 0, 0, -1); }

/* kernels' names: the runtime looks each function up once (cudart with lazy loading at
 * its first launch), so these are rare */
SEC("uprobe")
int BPF_KPROBE(cu_module_get_function, __u64 *hfunc, void *hmod, const char *name)
{ return enter(GPU_API_MODULE_GET_FUNCTION, (__u64)hfunc, (__u64)name, 0, 0, -1); }

SEC("uprobe")
int BPF_KPROBE(cu_library_get_kernel, __u64 *pkernel, void *library, const char *name)
{ return enter(GPU_API_LIBRARY_GET_KERNEL, (__u64)pkernel, (__u64)name, 0, 0, -1); }

SEC("uprobe")
int BPF_KPROBE(cu_kernel_get_function, __u64 *pfunc, __u64 kernel)
{ return enter(GPU_API_KERNEL_GET_FUNCTION, (__u64)pfunc, 0, 0, kernel, -1); }

/* virtual memory management (PyTorch's expandable segments): physical allocations made
 * and released, and their mappings */
SEC("uprobe")
int BPF_KPROBE(cu_mem_create, __u64 *handle, __u64 size, void *prop)
{
	/* CUmemAllocationProp: type, requestedHandleTypes, then CUmemLocation {type, id} */
	__s32 dev = -1;
	if (prop)
		bpf_probe_read_user(&dev, sizeof(dev), prop + 12);
	return enter(GPU_API_MEM_CREATE, (__u64)handle, 0, size, 0, dev);
}

SEC("uprobe")
int BPF_KPROBE(cu_mem_release, __u64 handle)
{ return enter(GPU_API_MEM_RELEASE, 0, 0, 0, handle, -1); }

SEC("uprobe")
int BPF_KPROBE(cu_mem_map, __u64 ptr, __u64 size)
{ return enter(GPU_API_MEM_MAP, 0, 0, size, ptr, -1); }

SEC("uprobe")
int BPF_KPROBE(cu_mem_unmap, __u64 ptr, __u64 size)
{ return enter(GPU_API_MEM_UNMAP, 0, 0, size, ptr, -1); }

/* cuInit: the process starts using CUDA (before its first allocation): user space looks
 * at it now (its interpreter, for Python allocation sites) rather than at the next scan */
SEC("uprobe")
int BPF_KPROBE(cu_init)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (ignored(id))
		return 0;
	__u32 zero = 0;
	struct gpu_mem_event *ev = bpf_map_lookup_elem(&gpu_scratch, &zero);
	if (!ev)
		return 0;
	__builtin_memset(ev, 0, offsetof(struct gpu_mem_event, stack));
	ev->type = GPU_EV_INIT;
	ev->pid = id >> 32;
	ev->tid = (__u32)id;
	ev->ts_ns = bpf_ktime_get_ns();
	ev->device = -1;
	if (bpf_ringbuf_output(&gpu_events, ev, offsetof(struct gpu_mem_event, stack),
			       BPF_RB_FORCE_WAKEUP))
		count(GPU_CNT_RINGBUF_DROPS);
	return 0;
}

/* ---- which device: contexts ---- */

SEC("uprobe")
int BPF_KPROBE(cu_ctx_retain, __u64 *pctx, int dev)
{ return enter(CALL_CTX_RETAIN, (__u64)pctx, 0, 0, 0, dev); }

SEC("uprobe")
int BPF_KPROBE(cu_ctx_create, __u64 *pctx, unsigned int flags, int dev)
{ return enter(CALL_CTX_CREATE, (__u64)pctx, 0, 0, 0, dev); }

/* cuCtxCreate_v4(CUcontext *pctx, CUctxCreateParams *params, unsigned flags, CUdevice dev):
 * what cuda.h 13 names cuCtxCreate */
SEC("uprobe")
int BPF_KPROBE(cu_ctx_create_v4, __u64 *pctx, void *params, unsigned int flags, int dev)
{ return enter(CALL_CTX_CREATE, (__u64)pctx, 0, 0, 0, dev); }

/* cuCtxSetCurrent(CUcontext) and cuCtxPushCurrent_v2(CUcontext) */
SEC("uprobe")
int BPF_KPROBE(cu_ctx_set_current, __u64 cuctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tid = (__u32)id;
	if (ignored(id))
		return 0;
	if (cuctx)
		bpf_map_update_elem(&thread_ctx, &tid, &cuctx, BPF_ANY);
	else
		bpf_map_delete_elem(&thread_ctx, &tid);
	return 0;
}

/* cuCtxPopCurrent_v2: the context below is one we may not know; forget the thread's */
SEC("uprobe")
int BPF_KPROBE(cu_ctx_pop)
{
	__u32 tid = (__u32)bpf_get_current_pid_tgid();
	bpf_map_delete_elem(&thread_ctx, &tid);
	return 0;
}

/* ---- one return probe for every call above that has one ---- */

SEC("uretprobe")
int BPF_KRETPROBE(cu_return, __u32 rc)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct gpu_call *cp = bpf_map_lookup_elem(&gpu_inflight, &id);
	if (!cp) {
		if (!ignored(id))
			count(GPU_CNT_INFLIGHT_LOST);
		return 0;
	}
	if (cp->depth) {
		cp->depth--;
		return 0;
	}
	struct gpu_call call = *cp;
	bpf_map_delete_elem(&gpu_inflight, &id);
	if (rc != CUDA_SUCCESS) {
		count(GPU_CNT_FAILED_CALLS);
		return 0;
	}
	__u64 now = bpf_ktime_get_ns();
	__u64 out = 0;
	switch (call.api) {
	case GPU_API_MEM_ALLOC:
	case GPU_API_MEM_ALLOC_ASYNC:
	case GPU_API_MEM_ALLOC_MANAGED:
	case GPU_API_MEM_ALLOC_PITCH:
	case GPU_API_MEM_CREATE: /* its "pointer" is the allocation's handle */
		/* the out-parameter holds the pointer now that the call succeeded */
		if (!call.out || bpf_probe_read_user(&out, sizeof(out), (void *)call.out))
			return 0;
		if (call.api == GPU_API_MEM_ALLOC_PITCH) {
			__u64 pitch = 0;
			if (!call.pitch ||
			    bpf_probe_read_user(&pitch, sizeof(pitch), (void *)call.pitch))
				return 0;
			call.size *= pitch; /* height * pitch */
		}
		emit(ctx, &call, id, GPU_EV_ALLOC, out, call.size, now);
		return 0;
	case GPU_API_MEM_FREE:
	case GPU_API_MEM_FREE_ASYNC:
	case GPU_API_MEM_RELEASE:
		if (call.dptr) /* freeing NULL is a successful no-op */
			emit(ctx, &call, id, GPU_EV_FREE, call.dptr, 0, now);
		return 0;
	case GPU_API_MEMCPY_HTOD:
	case GPU_API_MEMCPY_DTOH:
	case GPU_API_MEMCPY_HTOD_ASYNC:
	case GPU_API_MEMCPY_DTOH_ASYNC:
	case GPU_API_MEMCPY:
	case GPU_API_MEMCPY_ASYNC: {
		struct gpu_site_key *k = site_key(ctx, id, call.api, 0, 0);
		if (k)
			add_site(k, call.size, now - call.enter_ns);
		return 0;
	}
	case GPU_API_STREAM_SYNC:
	case GPU_API_CTX_SYNC:
	case GPU_API_EVENT_SYNC: {
		struct gpu_site_key *k = site_key(ctx, id, call.api, 0, 0);
		if (k)
			add_site(k, 0, now - call.enter_ns);
		return 0;
	}
	case GPU_API_MEM_MAP:
	case GPU_API_MEM_UNMAP:
		emit(ctx, &call, id, call.api == GPU_API_MEM_MAP ? GPU_EV_MAP : GPU_EV_UNMAP,
		     call.dptr, call.size, now);
		return 0;
	case GPU_API_MODULE_GET_FUNCTION:
	case GPU_API_LIBRARY_GET_KERNEL:
	case GPU_API_KERNEL_GET_FUNCTION:
		if (!call.out || bpf_probe_read_user(&out, sizeof(out), (void *)call.out) || !out)
			return 0;
		emit_name(&call, id, out);
		return 0;
	case CALL_CTX_RETAIN:
	case CALL_CTX_CREATE:
		if (!call.out || bpf_probe_read_user(&out, sizeof(out), (void *)call.out) || !out)
			return 0;
		bpf_map_update_elem(&ctx_device, &out, &call.device, BPF_ANY);
		if (call.api == CALL_CTX_CREATE) { /* a created context is made current */
			__u32 tid = (__u32)id;
			bpf_map_update_elem(&thread_ctx, &tid, &out, BPF_ANY);
		}
		return 0;
	}
	return 0;
}
