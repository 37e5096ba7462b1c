/* SPDX-License-Identifier: GPL-2.0 */
/* The CPython 3.11+ frame walk of the CPU profiler (profile.bpf.c; docs/decisions.md, "CPU
 * profiles: Python frames walked in BPF at the sample"), as a header any uprobe or
 * perf-event program can include: the calling thread's Python
 * frames as code object addresses, innermost first (PY_F_ENTRY in the low bit of each
 * evaluator call's last frame). It defines its maps (`py_procs`: pid -> interpreter, filled
 * by user space with kernel/cpu_sampler.py's pack_py_proc; `py_scratch`), so each object
 * that includes it has its own. cuda.bpf.c uses it for allocation sites. */
#ifndef OTEL_EBPF_PY_WALK_BPF_H
#define OTEL_EBPF_PY_WALK_BPF_H

#include "profile_abi.h"

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct py_proc);
} py_procs SEC(".maps");

struct py_walk_scratch {
	__u64 py[PROF_MAX_PY_FRAMES];
};

/* bpf_loop callbacks see map values, not their caller's stack or ring reservations */
struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_walk_scratch);
} py_walk_scratch SEC(".maps");

struct py_walk_state {
	struct py_offsets o;
	__u64 ts;        /* thread state being looked at, then the one found */
	__u64 frame;     /* next _PyInterpreterFrame */
	__u32 tid;
	__u32 n;         /* frames in py_walk_scratch */
	__u16 status;
	bool found;
};

static __always_inline __u64 py_read_ptr(__u64 addr)
{
	__u64 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr) != 0)
		return 0;
	return v;
}

/* bpf_loop bodies: the verifier checks each once, whatever the depth */
static long py_thread_step(__u64 i, struct py_walk_state *w)
{
	if (!w->ts)
		return 1;
	__u64 ntid = py_read_ptr(w->ts + w->o.tstate_native_tid);
	if ((__u32)ntid == w->tid) {
		w->found = true;
		return 1;
	}
	w->ts = py_read_ptr(w->ts + w->o.tstate_next);
	return 0;
}

static long py_frame_step(__u64 i, struct py_walk_state *w)
{
	__u32 zero = 0;
	struct py_walk_scratch *sc = bpf_map_lookup_elem(&py_walk_scratch, &zero);
	if (!sc || !w->frame)
		return 1;
	__u8 owner = 0, is_entry = 0;
	bpf_probe_read_user(&owner, 1, (void *)(w->frame + w->o.frame_owner));
	if (owner == 3) {
		/* a shim the evaluator pushes when C calls it (3.12+): the frames before it were
		 * run by one _PyEval_EvalFrameDefault */
		__u32 last = w->n - 1;
		if (last < PROF_MAX_PY_FRAMES)
			sc->py[last] |= PY_F_ENTRY;
	} else {
		__u32 k = w->n;
		if (k >= PROF_MAX_PY_FRAMES) {
			w->status = PY_TRUNCATED;
			return 1;
		}
		__u64 code = py_read_ptr(w->frame + w->o.frame_code);
		if (w->o.frame_is_entry != PROF_NO_FIELD)
			bpf_probe_read_user(&is_entry, 1, (void *)(w->frame + w->o.frame_is_entry));
		sc->py[k] = (code & ~7ull) | (is_entry ? PY_F_ENTRY : 0);
		w->n = k + 1;
	}
	w->frame = py_read_ptr(w->frame + w->o.frame_previous);
	return 0;
}

/* w->ts := the thread state of w->tid: PY_OK, PY_NO_THREAD or PY_READ_ERROR */
static __always_inline __u16 py_find_thread(struct py_proc *p, struct py_walk_state *w)
{
	__u64 interp = py_read_ptr(p->runtime + w->o.interp_head);
	w->ts = interp ? py_read_ptr(interp + w->o.threads_head) : 0;
	if (!w->ts)
		return PY_READ_ERROR;
	/* searched by thread id: a thread without the GIL still has its frames */
	bpf_loop(PROF_MAX_PY_THREADS, py_thread_step, w, 0);
	return w->found ? PY_OK : PY_NO_THREAD;
}

/* Whether thread `tid` of the current process has a thread state: an enum py_status as
 * py_walk_thread's, without the frames. */
static __always_inline __u16 py_thread_status(__u32 tid)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	struct py_proc *p = bpf_map_lookup_elem(&py_procs, &pid);
	if (!p)
		return PY_NONE;
	struct py_walk_state w = {.o = p->o, .tid = tid, .status = PY_OK};
	return py_find_thread(p, &w);
}

/* The Python frames of thread `tid` of the current process into out[PROF_MAX_PY_FRAMES];
 * *n frames, *status an enum py_status (PY_NONE when the process is not a registered Python
 * process). `tid` may be another thread than the current one: the walk reads the process's
 * memory, which all its threads share (the profiler walks a worker's dispatcher so). */
static __always_inline void py_walk_thread(__u32 tid, __u64 *out, __u16 *n, __u16 *status)
{
	__u32 pid = bpf_get_current_pid_tgid() >> 32;
	*n = 0;
	*status = PY_NONE;
	struct py_proc *p = bpf_map_lookup_elem(&py_procs, &pid);
	if (!p)
		return;
	struct py_walk_state w = {.o = p->o, .tid = tid, .status = PY_OK};
	*status = py_find_thread(p, &w);
	if (*status != PY_OK)
		return;
	w.frame = py_read_ptr(w.ts + w.o.tstate_frame);
	if (w.frame && w.o.cframe_current != PROF_NO_FIELD)
		w.frame = py_read_ptr(w.frame + w.o.cframe_current);
	bpf_loop(PROF_MAX_PY_FRAMES + 8, py_frame_step, &w, 0);
	__u32 zero = 0;
	struct py_walk_scratch *sc = bpf_map_lookup_elem(&py_walk_scratch, &zero);
	if (!sc)
		return;
	bpf_probe_read_kernel(out, sizeof(sc->py), sc->py);
	*n = w.n < PROF_MAX_PY_FRAMES ? w.n : PROF_MAX_PY_FRAMES;
	*status = w.status;
}

/* The current thread's Python frames (see py_walk_thread). */
static __always_inline void py_walk_current(__u64 *out, __u16 *n, __u16 *status)
{
	py_walk_thread((__u32)bpf_get_current_pid_tgid(), out, n, status);
}

#endif
