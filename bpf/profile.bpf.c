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
	if (s->py_status != PY_OK && s->py_status != PY_TRUNCATED && s->py_status != PY_NONE)
		count(PCNT_PY_ERRORS);
	count(PCNT_SAMPLES);
	/* no wake-up: the agent drains on its own timer (waking a waiting reader costs the
	 * sampled program more than taking the sample) */
	bpf_ringbuf_submit(s, BPF_RB_NO_WAKEUP);
	return 0;
}
