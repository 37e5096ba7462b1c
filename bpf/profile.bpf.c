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

/* pid -> where its interpreter is; the agent fills it when it finds CPython in a process */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 4096);
	__type(key, __u32);
	__type(value, struct py_proc);
} py_procs SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, PCNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} prof_counters SEC(".maps");

static __always_inline void count(__u32 idx)
{
	__u64 *v = bpf_map_lookup_elem(&prof_counters, &idx);
	if (v)
		*v += 1;
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
#pragma unroll
	for (int i = 0; i < 4; i++) {
		__u32 tgid = BPF_CORE_READ(task, tgid);
		if (bpf_map_lookup_elem(&target_pids, &tgid))
			return true;
		task = BPF_CORE_READ(task, real_parent);
		if (!task)
			break;
	}
	return false;
}

static __always_inline __u64 read_ptr(__u64 addr)
{
	__u64 v = 0;
	if (bpf_probe_read_user(&v, sizeof(v), (void *)addr) != 0)
		return 0;
	return v;
}

/* Python frames are gathered here, then copied into the sample: bpf_loop callbacks see
 * map values, not the caller's ring-buffer reservation. */
struct py_scratch {
	__u64 py[PROF_MAX_PY_FRAMES];
};

struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct py_scratch);
} py_scratch SEC(".maps");

struct walk {
	struct py_offsets o;
	__u64 ts;        /* thread state being looked at, then the one found */
	__u64 frame;     /* next _PyInterpreterFrame */
	__u32 tid;
	__u32 n;         /* frames in py_scratch */
	__u16 status;
	bool found;
};

/* bpf_loop bodies: the verifier checks each once, whatever the depth (an unrolled walk of
 * 96 frames with data-dependent branches exceeds its 1M-instruction budget). */
static long thread_step(__u64 i, struct walk *w)
{
	if (!w->ts)
		return 1;
	__u64 ntid = read_ptr(w->ts + w->o.tstate_native_tid);
	if ((__u32)ntid == w->tid) {
		w->found = true;
		return 1;
	}
	w->ts = read_ptr(w->ts + w->o.tstate_next);
	return 0;
}

static long frame_step(__u64 i, struct walk *w)
{
	__u32 zero = 0;
	struct py_scratch *sc = bpf_map_lookup_elem(&py_scratch, &zero);
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
		__u64 code = read_ptr(w->frame + w->o.frame_code);
		if (w->o.frame_is_entry != PROF_NO_FIELD)
			bpf_probe_read_user(&is_entry, 1, (void *)(w->frame + w->o.frame_is_entry));
		sc->py[k] = (code & ~7ull) | (is_entry ? PY_F_ENTRY : 0);
		w->n = k + 1;
	}
	w->frame = read_ptr(w->frame + w->o.frame_previous);
	return 0;
}

/* The thread's Python frames, innermost first, into s->py. */
static __always_inline void walk_python(struct profile_sample *s, struct py_proc *p)
{
	struct walk w = {.o = p->o, .tid = s->tid, .status = PY_OK};
	__u64 interp = read_ptr(p->runtime + w.o.interp_head);
	w.ts = interp ? read_ptr(interp + w.o.threads_head) : 0;
	if (!w.ts) {
		s->py_status = PY_READ_ERROR;
		return;
	}
	/* the sampled thread's state: without the GIL (in zlib, NumPy...) its frames still
	 * hang from it, so it is searched by thread id rather than taken from the GIL holder */
	bpf_loop(PROF_MAX_PY_THREADS, thread_step, &w, 0);
	if (!w.found) {
		s->py_status = PY_NO_THREAD;
		return;
	}
	w.frame = read_ptr(w.ts + w.o.tstate_frame);
	if (w.frame && w.o.cframe_current != PROF_NO_FIELD)
		w.frame = read_ptr(w.frame + w.o.cframe_current);
	bpf_loop(PROF_MAX_PY_FRAMES + 8, frame_step, &w, 0);
	__u32 zero = 0;
	struct py_scratch *sc = bpf_map_lookup_elem(&py_scratch, &zero);
	if (!sc)
		return;
	__u32 n = w.n < PROF_MAX_PY_FRAMES ? w.n : PROF_MAX_PY_FRAMES;
	bpf_probe_read_kernel(s->py, sizeof(s->py), sc->py);
	s->py_frames = n;
	s->py_status = w.status;
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
	s->ustack_bytes = bpf_get_stack(ctx, s->ustack, sizeof(s->ustack), BPF_F_USER_STACK);
	struct py_proc *p = bpf_map_lookup_elem(&py_procs, &pid);
	if (p) {
		walk_python(s, p);
		if (s->py_status != PY_OK && s->py_status != PY_TRUNCATED)
			count(PCNT_PY_ERRORS);
	}
	count(PCNT_SAMPLES);
	/* no wake-up: the agent drains on its own timer (DESIGN §1: a wake-up costs the
	 * sampled program more than the sample) */
	bpf_ringbuf_submit(s, BPF_RB_NO_WAKEUP);
	return 0;
}
