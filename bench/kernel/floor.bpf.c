// SPDX-License-Identifier: GPL-2.0
/* The least a syscall-tracepoint capture does per call, for bench/kernel_overhead.py's
 * `floor` mode: a write's entry time kept per thread (a hash update at its entry, a lookup
 * at its return), and at each write's and read's return up to 256 of the call's bytes
 * copied into a ring buffer record. One process is selected (its tgid in `floor_target`,
 * written by the bench); no connection state, no selection by socket, no Context, no
 * counters. What the agent's programs cost above this is their own work; this is what the
 * machine and its kernel charge any such capture. Compiled by the bench at run time. */
#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_tracing.h>
#include <bpf/bpf_core_read.h>

char LICENSE[] SEC("license") = "GPL";

#define FLOOR_BYTES 256

struct floor_record {
	__u64 enter_ns;
	__u64 exit_ns;
	__u32 tid;
	__u32 len;
	__u8 data[FLOOR_BYTES];
};

struct floor_args {
	__u64 enter_ns;
	__u64 buf;
};

struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u32);
} floor_target SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct floor_args);
} floor_inflight SEC(".maps");

struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20);
} floor_events SEC(".maps");

static __always_inline bool selected(__u64 id)
{
	__u32 zero = 0;
	__u32 *tgid = bpf_map_lookup_elem(&floor_target, &zero);
	return tgid && *tgid == (__u32)(id >> 32);
}

static __always_inline void emit(__u64 id, __u64 enter_ns, __u64 buf, long ret)
{
	struct floor_record *r = bpf_ringbuf_reserve(&floor_events, sizeof(*r), 0);
	if (!r)
		return;
	__u64 n = ret;
	/* min(ret, FLOOR_BYTES) where the verifier sees it (clang drops a plain clamp) */
	asm volatile("if %[n] <= %[max] goto +1; %[n] = %[max]" : [n] "+r"(n) : [max] "i"(FLOOR_BYTES));
	r->exit_ns = bpf_ktime_get_ns();
	r->enter_ns = enter_ns ? enter_ns : r->exit_ns;
	r->tid = (__u32)id;
	r->len = n;
	if (bpf_probe_read_user(r->data, n, (void *)buf))
		r->len = 0;
	bpf_ringbuf_submit(r, BPF_RB_NO_WAKEUP);
}

SEC("tracepoint/syscalls/sys_enter_write")
int floor_enter_write(struct trace_event_raw_sys_enter *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!selected(id))
		return 0;
	struct floor_args a = {.enter_ns = bpf_ktime_get_ns(), .buf = ctx->args[1]};
	bpf_map_update_elem(&floor_inflight, &id, &a, BPF_ANY);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_write")
int floor_exit_write(struct trace_event_raw_sys_exit *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!selected(id))
		return 0;
	struct floor_args *a = bpf_map_lookup_elem(&floor_inflight, &id);
	if (!a || ctx->ret <= 0)
		return 0;
	emit(id, a->enter_ns, a->buf, ctx->ret);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_read")
int floor_exit_read(struct trace_event_raw_sys_exit *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if (!selected(id) || ctx->ret <= 0)
		return 0;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	emit(id, 0, PT_REGS_PARM2_SYSCALL(regs), ctx->ret);
	return 0;
}
