/* SPDX-License-Identifier: GPL-2.0 */
/* The contextvars.Context a Python thread runs in, read from its PyThreadState when it
 * moves bytes on a socket: an asyncio task's step runs inside the task's own Context, a
 * thread-pool worker inside the Context its caller copied, so the Context names the work a
 * socket call is made for without a probe per task step or per Context.run (docs/decisions.md).
 * A process registers itself at its first PyContext_CopyCurrent (socket_trace.bpf.c): the
 * probe's address in the process and its file's record (by the probe's cookie, written by
 * otel_ebpf/kernel/asyncio_probes.py) give where `_PyRuntime` is. Included by capture.bpf.h
 * after its maps (CAPTURE_MAP, count). */
#ifndef OTEL_EBPF_PY_CONTEXT_BPF_H
#define OTEL_EBPF_PY_CONTEXT_BPF_H

#define PY_CTX_FILES 64       /* interpreter files probed (records by uprobe cookie) */
#define PY_CTX_MAX_THREADS 64 /* thread states searched for a thread */
#define PY_CTX_WINDOW 9       /* words read at once from native_thread_id: context among them */

/* One interpreter: where its thread states are and where a thread state keeps its Context.
 * Per file (py_ctx_files), `runtime` holds _PyRuntime's address minus
 * PyContext_CopyCurrent's; per process (py_ctx_procs), _PyRuntime's address. */
struct py_ctx_proc {
	__u64 runtime;
	__u32 interp_head;       /* _PyRuntimeState.interpreters.head */
	__u32 threads_head;      /* PyInterpreterState.threads.head */
	__u32 tstate_next;       /* PyThreadState.next */
	__u32 tstate_native_tid; /* PyThreadState.native_thread_id */
	__u32 tstate_context;    /* PyThreadState.context */
	__u32 copies;            /* per process: Contexts copied since it registered, read by
				  * user space to take the probes off a process that only serves */
	__u32 calls_out;         /* per process: 1 once it opened a traced connection out (set
				  * here, at the connection, so that user space never takes the
				  * probes off a process whose connection it has not read yet) */
	__u32 _pad;
};

CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, PY_CTX_FILES);
	__type(key, __u32);
	__type(value, struct py_ctx_proc);
} py_ctx_files SEC(".maps");

CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32); /* tgid */
	__type(value, struct py_ctx_proc);
} py_ctx_procs SEC(".maps");

/* 1 once any process has registered (py_ctx_procs), never cleared: until then a data
 * event's Context costs an array read (inlined), not a hash lookup. */
CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} py_ctx_any SEC(".maps");

static __always_inline bool py_ctx_none_yet(void)
{
	__u32 zero = 0;
	__u32 *any = bpf_map_lookup_elem(&py_ctx_any, &zero);
	return !any || !*any;
}

/* Processes whose Context probes are attached for them alone (tgid -> 1), written by user
 * space: their forked children are reported (EV_PROC_FORK), since a child's copy of the
 * probed code loses the probes at its first hit (the kernel's filter names the parent). */
CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 1024);
	__type(key, __u32);
	__type(value, __u8);
} py_ctx_probed SEC(".maps");

struct py_ctx_search {
	__u64 ts;
	__u32 next_off;
	__u32 tid_off;
	__u32 tid;
	bool found;
};

static __always_inline __u64 py_ctx_read_ptr(__u64 addr)
{
	__u64 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr))
		return 0;
	return v;
}

static long py_ctx_thread_step(__u64 i, struct py_ctx_search *s)
{
	if (!s->ts)
		return 1;
	if ((__u32)py_ctx_read_ptr(s->ts + s->tid_off) == s->tid) {
		s->found = true;
		return 1;
	}
	s->ts = py_ctx_read_ptr(s->ts + s->next_off);
	return 0;
}

/* The thread state of thread `tid` in the main interpreter, or 0. */
static __always_inline __u64 py_ctx_find_tstate(struct py_ctx_proc *p, __u32 tid)
{
	__u64 interp = py_ctx_read_ptr(p->runtime + p->interp_head);
	struct py_ctx_search s = {.next_off = p->tstate_next, .tid_off = p->tstate_native_tid,
				  .tid = tid};
	s.ts = interp ? py_ctx_read_ptr(interp + p->threads_head) : 0;
	if (!s.ts)
		return 0;
	bpf_loop(PY_CTX_MAX_THREADS, py_ctx_thread_step, &s, 0);
	return s.found ? s.ts : 0;
}

/* Bumped by user space after it takes a process's record out of py_ctx_procs (a process
 * whose probes came off: its calls stop reading Contexts). A thread's cached thread state
 * (thread_state.py_tstate) stands without a look at its process's record while the epoch
 * is the one it was found under. */
CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} py_ctx_epoch SEC(".maps");

/* The Context the calling thread runs in (its address), or 0: not a registered Python
 * process, no thread state, or no Context entered or created yet. `t`: the thread's state
 * when the caller has it. The thread state is cached in the thread's value with the two
 * offsets its Context read needs, found once by a search of the thread list and checked
 * at each use (its native thread id still says this thread, where a thread state freed and
 * reused says another): a call then costs no look at py_ctx_procs. The cache goes with the
 * thread's value at its exit (sched_process_exit) and its exec. */
static __always_inline __u64 py_current_context(struct thread_state *t)
{
	if (py_ctx_none_yet())
		return 0;
	__u32 zero = 0;
	__u32 *ep = bpf_map_lookup_elem(&py_ctx_epoch, &zero);
	__u32 epoch = ep ? *ep : 0; /* read before py_ctx_procs: user space deletes first */
	__u64 id = bpf_get_current_pid_tgid();
	if (t && t->py_tstate && t->py_epoch == epoch) {
		__u64 span = t->py_span;
		if (span) { /* both fields in one read */
			__u64 w[PY_CTX_WINDOW];
			if (bpf_probe_read_user(w, sizeof(w), (void *)(t->py_tstate + t->py_tid_off)) ||
			    (__u32)w[0] != (__u32)id)
				goto search;
			/* the bound where the verifier sees it (clang moves a plain check) */
			asm volatile("if %[i] <= %[max] goto +1; %[i] = %[max]"
				     : [i] "+r"(span) : [max] "i"(PY_CTX_WINDOW - 1));
			return w[span];
		} else if ((__u32)py_ctx_read_ptr(t->py_tstate + t->py_tid_off) == (__u32)id) {
			return py_ctx_read_ptr(t->py_tstate + t->py_ctx_off);
		}
	}
search:;
	__u32 tgid = id >> 32;
	struct py_ctx_proc *p = bpf_map_lookup_elem(&py_ctx_procs, &tgid);
	if (!p) { /* not a registered process: no thread value made for it */
		if (t)
			t->py_tstate = 0;
		return 0;
	}
	if (!t)
		t = thread_state_made(id);
	__u64 ts = py_ctx_find_tstate(p, (__u32)id);
	if (t) {
		t->py_tstate = ts;
		if (ts) {
			t->py_epoch = epoch;
			t->py_tid_off = p->tstate_native_tid;
			t->py_ctx_off = p->tstate_context;
			__u32 d = p->tstate_context - p->tstate_native_tid;
			/* one window when context lies a few words after native_thread_id (64
			 * bytes in 3.11 and 3.12, 48 in 3.13), inside the thread state */
			t->py_span = p->tstate_context > p->tstate_native_tid && !(d & 7) &&
				     d / 8 < PY_CTX_WINDOW ? d / 8 : 0;
		}
	}
	return ts ? py_ctx_read_ptr(ts + p->tstate_context) : 0;
}

/* A registered process opened a connection out: it keeps its Context probes. */
static __always_inline void py_ctx_calls_out(__u32 tgid)
{
	if (py_ctx_none_yet())
		return;
	struct py_ctx_proc *p = bpf_map_lookup_elem(&py_ctx_procs, &tgid);
	if (p && !p->calls_out)
		p->calls_out = 1;
}

#endif
