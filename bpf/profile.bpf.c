// SPDX-License-Identifier: GPL-2.0
/* CPU profiling: a perf-event program run by cpu-clock sampling on every CPU. For a
 * selected process it sends the kernel and user stacks of the interrupted thread and, when
 * the process runs CPython 3.11+, the code objects of that thread's Python frames, read by
 * walking the interpreter's frame chain here, at the sample, so Python and native frames
 * describe the same instant (docs/decisions.md §18). */
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

/* tid -> the thread of its process that last woke or created it (struct waker) */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PROF_MAX_WAKERS);
	__type(key, __u32);
	__type(value, struct waker);
} wakers SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PROF_MAX_WAKERS);
	__type(key, __u32);
	__type(value, struct py_thread);
} py_threads SEC(".maps");

static __always_inline void note_python(__u32 pid, __u32 tid, bool python)
{
	struct py_thread *t = bpf_map_lookup_elem(&py_threads, &tid);
	if (t && t->pid == pid && t->python == python)
		return; /* as known: no write */
	struct py_thread v = {.pid = pid, .python = python};
	bpf_map_update_elem(&py_threads, &tid, &v, BPF_ANY);
}

/* Whether thread `tid` of the current process (`pid`) has a Python thread state: as last
 * seen, else searched once and remembered (a wake-up costs a thread-list search only the
 * first time a thread is seen waking another). */
static __always_inline bool is_python(__u32 pid, __u32 tid)
{
	struct py_thread *t = bpf_map_lookup_elem(&py_threads, &tid);
	if (t && t->pid == pid)
		return t->python;
	__u16 st = py_thread_status(tid);
	if (st != PY_OK && st != PY_NO_THREAD)
		return false; /* unreadable now: nothing remembered */
	note_python(pid, tid, st == PY_OK);
	return st == PY_OK;
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

static __always_inline void dispatcher_frames(struct profile_sample *s, __u32 pid)
{
	__u32 tid = s->tid;
	struct waker *w = bpf_map_lookup_elem(&wakers, &tid);
	if (!w || w->pid != pid)
		return;
	/* the root first: the Python thread the chain led to when it was made */
	if (w->root != s->tid && try_dispatcher(s, w->root, 1))
		return;
	/* else the chain as it is now */
	for (int hop = 1; hop <= PROF_MAX_WAKER_HOPS; hop++) {
		if (!w || w->pid != pid || w->tid == s->tid)
			break;
		tid = w->tid;
		if (tid != w->root && try_dispatcher(s, tid, hop))
			return;
		w = bpf_map_lookup_elem(&wakers, &tid);
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
	struct waker w = {.pid = pid, .tid = (__u32)id, .root = (__u32)id};
	struct waker *up = bpf_map_lookup_elem(&wakers, &w.tid);
	/* a thread without Python state woke it: the dispatcher is the one that woke that */
	if (up && up->pid == pid && up->root != tid && !is_python(pid, w.tid))
		w.root = up->root;
	struct waker *old = bpf_map_lookup_elem(&wakers, &tid);
	if (old && old->pid == w.pid && old->tid == w.tid && old->root == w.root)
		return; /* as known: no write */
	bpf_map_update_elem(&wakers, &tid, &w, BPF_ANY);
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
		__u32 by_table = 0, by_fp = 0, by_scan = 0;
		bool stopped = false;
		n = unwind_user(pid, s->ustack, &by_table, &by_fp, &by_scan, &stopped);
		if (n >= 0) {
			s->ustack_bytes = n * 8;
			count(PCNT_UW_SAMPLES);
			add(PCNT_UW_TABLE, by_table);
			add(PCNT_UW_FP, by_fp);
			add(PCNT_UW_SCAN, by_scan);
			if (stopped)
				count(PCNT_UW_STOPPED);
		}
	}
	if (n < 0) /* no tables for this process (yet): frame pointers, as perf walks them */
		s->ustack_bytes = bpf_get_stack(ctx, s->ustack, sizeof(s->ustack), BPF_F_USER_STACK);
	/* the sampled thread is the current one: its Python frames, when it runs CPython */
	py_walk_current(s->py, &s->py_frames, &s->py_status);
	s->py_tid = s->tid;
	s->py_hops = 0;
	if (s->py_status == PY_NO_THREAD) {
		note_python(pid, s->tid, false);
		dispatcher_frames(s, pid);
	} else if (s->py_status == PY_OK || s->py_status == PY_TRUNCATED) {
		note_python(pid, s->tid, true);
	}
	if (s->py_status != PY_OK && s->py_status != PY_TRUNCATED && s->py_status != PY_NONE)
		count(PCNT_PY_ERRORS);
	count(PCNT_SAMPLES);
	/* no wake-up: the agent drains on its own timer (waking a waiting reader costs the
	 * sampled program more than taking the sample) */
	bpf_ringbuf_submit(s, BPF_RB_NO_WAKEUP);
	return 0;
}
