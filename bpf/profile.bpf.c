// SPDX-License-Identifier: GPL-2.0
/* CPU profiling: a perf-event program run by cpu-clock sampling on every CPU. For a
 * selected process it sends the kernel and user stacks of the interrupted thread and, when
 * the process runs CPython 3.11+, the code objects of that thread's Python frames, read by
 * walking the interpreter's frame chain here, at the sample, so Python and native frames
 * describe the same instant (docs/decisions.md, "CPU profiles: Python frames walked in BPF
 * at the sample"). */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>
#include "profile_abi.h"
#include "ancestry.bpf.h"
#include "py_walk.bpf.h" /* py_procs, and the CPython frame walk */
#include "unwind.bpf.h"  /* unwind tables: user stacks of code without frame pointers */

char LICENSE[] SEC("license") = "GPL";

const volatile struct profile_config cfg = {};

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 4 << 20); /* the agent sets the real size */
} samples SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PROF_MAX_TARGETS);
	__type(key, __u32);
	__type(value, __u8);
} target_pids SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, PROF_MAX_TARGETS);
	__type(key, char[PROF_COMM_LEN]);
	__type(value, __u8);
} target_comms SEC(".maps");


struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PCNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} prof_counters SEC(".maps");

/* tid -> its dispatcher, and whether it runs Python (struct waker) */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PROF_MAX_WAKERS);
	__type(key, __u32);
	__type(value, struct waker);
} wakers SEC(".maps");

/* The record of thread `tid` of process `pid`, made when missing. */
static __always_inline struct waker *waker_of(__u32 pid, __u32 tid, bool make)
{
	struct waker *w = bpf_map_lookup_elem(&wakers, &tid);
	if (w && w->pid == pid)
		return w;
	if (!make)
		return 0;
	struct waker v = {.pid = pid}; /* a new thread, or a tid used again by another process */
	bpf_map_update_elem(&wakers, &tid, &v, BPF_ANY);
	w = bpf_map_lookup_elem(&wakers, &tid);
	return w && w->pid == pid ? w : 0;
}

/* what a sample of the thread showed (written only when it changes) */
static __always_inline struct waker *note_python(__u32 pid, __u32 tid, __u8 python)
{
	struct waker *w = waker_of(pid, tid, true);
	if (w && w->python != python)
		w->python = python;
	return w;
}

/* Whether a raw tracepoint runs on the current task's own kernel stack, that is not in
 * an interrupt (x86-64 and arm64 run hard and soft interrupts on stacks of their own): a
 * wake-up then is the task's doing, not a timer's that interrupted it. The tracepoint's
 * arguments (ctx) are an array the kernel builds on the stack it runs on (bpf_trace_runN);
 * the BPF program's own stack may be a per-CPU one (private stacks, 6.13+). The preempt
 * count would say so directly, but it is a per-CPU variable the kernel names only with
 * CONFIG_KALLSYMS_ALL. */
#define TASK_STACK_MAX (64 << 10) /* THREAD_SIZE: 16 KiB, 32 KiB with KASAN */
static __always_inline bool on_task_stack(void *ctx)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	__u64 base = (__u64)BPF_CORE_READ(task, stack);
	__u64 at = 0;
	/* the address as a number (the verifier keeps a copy a pointer) */
	bpf_probe_read_kernel(&at, sizeof(at), &ctx);
	return base && at - base < TASK_STACK_MAX;
}

static __always_inline void add(__u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&prof_counters, &idx);
	if (v)
		*v += n;
}

static __always_inline void count(__u32 idx)
{
	add(idx, 1);
}

/* The process or one of its ancestors selected (workers forked by a selected server). */
static __always_inline bool selected(struct task_struct *task)
{
	if (!cfg.filter_pids && !cfg.filter_comms)
		return true;
	if (cfg.filter_comms) {
		char comm[PROF_COMM_LEN] = {};
		BPF_CORE_READ_STR_INTO(&comm, task, group_leader, comm);
		if (bpf_map_lookup_elem(&target_comms, comm))
			return true;
	}
	return process_or_ancestor_in(&target_pids, task);
}

/* A thread without a Python thread state (a worker of OpenMP, a BLAS or a C++ pool): the
 * Python frames, at this instant, of the thread that handed it work, found by following
 * who woke it, through other such threads. No waker known: PY_NO_THREAD stays. */
static __always_inline bool try_dispatcher(struct profile_sample *s, __u32 tid, __u8 hops)
{
	__u16 n = 0, status = PY_NONE;
	py_walk_thread(tid, s->py, &n, &status);
	if (status != PY_OK && status != PY_TRUNCATED)
		return false;
	s->py_frames = n;
	s->py_status = status;
	s->py_tid = tid;
	s->py_hops = hops;
	count(PCNT_WORKER);
	return true;
}

static __always_inline void dispatcher_frames(struct profile_sample *s, struct waker *w,
					       __u32 pid)
{
	__u32 tid = w ? w->root : 0;
	if (!tid)
		return; /* nothing of the process woke or created it: PY_NO_THREAD */
	/* the root, else the root's own (a root that proved to run no Python) */
	for (int hop = 1; hop <= PROF_MAX_WAKER_HOPS; hop++) {
		if (!tid || tid == s->tid)
			break;
		if (try_dispatcher(s, tid, hop))
			return;
		w = waker_of(pid, tid, false);
		tid = w ? w->root : 0;
	}
	s->py_status = PY_NO_DISPATCHER;
}

/* Remember `wakee`'s waker when both are threads of one Python process and the wake-up is
 * the waker's own doing (a futex or condition-variable hand-off), not an interrupt's that
 * happened to land on it. */
static __always_inline void remember_waker(void *ctx, struct task_struct *wakee)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 pid = id >> 32;
	if (!bpf_map_lookup_elem(&py_procs, &pid))
		return; /* the common case, every other process's wake-ups: one lookup */
	if (!on_task_stack(ctx))
		return;
	if ((__u32)BPF_CORE_READ(wakee, tgid) != pid)
		return;
	__u32 tid = BPF_CORE_READ(wakee, pid);
	if (tid == (__u32)id)
		return;
	__u32 me = (__u32)id, root = me;
	struct waker *up = waker_of(pid, me, false);
	if (up && up->root && up->root != tid) {
		/* a thread without Python state woke it: the dispatcher is its dispatcher */
		if (up->python == TP_UNKNOWN) {
			__u16 st = py_thread_status(me);
			if (st == PY_OK)
				up->python = TP_PYTHON;
			else if (st == PY_NO_THREAD)
				up->python = TP_NATIVE;
		}
		if (up->python == TP_NATIVE)
			root = up->root;
	}
	struct waker *w = waker_of(pid, tid, true);
	if (!w || w->root == root)
		return; /* as known: no write */
	w->root = root;
	count(PCNT_WAKERS);
}

SEC("raw_tp/sched_waking")
int profile_waking(struct bpf_raw_tracepoint_args *ctx)
{
	remember_waker(ctx, (struct task_struct *)ctx->args[0]);
	return 0;
}

/* a new thread: its creator, until something wakes it (a pool's threads that never sleep
 * between parallel regions, spinning instead, are never woken) */
SEC("raw_tp/sched_wakeup_new")
int profile_wakeup_new(struct bpf_raw_tracepoint_args *ctx)
{
	remember_waker(ctx, (struct task_struct *)ctx->args[0]);
	return 0;
}

SEC("perf_event")
int profile_cpu(struct bpf_perf_event_data *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 pid = id >> 32;
	if (pid == 0 || pid == cfg.agent_pid)
		return 0; /* idle, or ourselves */
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	if (!selected(task))
		return 0;
	struct profile_sample *s = bpf_ringbuf_reserve(&samples, sizeof(*s), 0);
	if (!s) {
		count(PCNT_DROPS);
		return 0;
	}
	s->ts_ns = bpf_ktime_get_ns();
	s->pid = pid;
	s->tid = (__u32)id;
	s->cpu = bpf_get_smp_processor_id();
	s->py_frames = 0;
	s->py_status = PY_NONE;
	bpf_get_current_comm(&s->comm, sizeof(s->comm));
	s->kstack_bytes = bpf_get_stack(ctx, s->kstack, sizeof(s->kstack), 0);
	int n = -1;
	if (cfg.unwind_tables) {
		struct uw_counts c = {};
		n = unwind_user(pid, s->ustack, &c);
		if (n >= 0) {
			s->ustack_bytes = n * 8;
			count(PCNT_UW_SAMPLES);
			add(PCNT_UW_TABLE, c.by_table);
			add(PCNT_UW_FP, c.by_fp);
			add(PCNT_UW_SCAN, c.by_scan);
			if (c.stopped)
				count(PCNT_UW_STOPPED);
		}
	}
	if (n < 0) /* no tables for this process (yet): frame pointers, as perf walks them */
		s->ustack_bytes = bpf_get_stack(ctx, s->ustack, sizeof(s->ustack), BPF_F_USER_STACK);
	/* the sampled thread is the current one: its Python frames, when it runs CPython */
	py_walk_current(s->py, &s->py_frames, &s->py_status);
	s->py_tid = s->tid;
	s->py_hops = 0;
	if (s->py_status == PY_NO_THREAD)
		dispatcher_frames(s, note_python(pid, s->tid, TP_NATIVE), pid);
	else if (s->py_status == PY_OK || s->py_status == PY_TRUNCATED)
		note_python(pid, s->tid, TP_PYTHON);
	if (s->py_status != PY_OK && s->py_status != PY_TRUNCATED && s->py_status != PY_NONE)
		count(PCNT_PY_ERRORS);
	count(PCNT_SAMPLES);
	/* no wake-up: the agent drains on its own timer (waking a waiting reader costs the
	 * sampled program more than taking the sample) */
	bpf_ringbuf_submit(s, BPF_RB_NO_WAKEUP);
	return 0;
}
