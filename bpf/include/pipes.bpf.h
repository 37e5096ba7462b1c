/* SPDX-License-Identifier: GPL-2.0 */
/* Pipes of selected processes (an MCP server run as a subprocess speaks JSON-RPC on its
 * stdin and stdout): read/write/readv/writev on a pipe or FIFO of a selected process
 * become data events on a "connection" per (process, fd), with the pipe's inode number as
 * its address (both ends of a pipe see the same one). Selection is by process only: the
 * agent fills pipe_pids (configured pids, running processes by name) and pipe_comms; a
 * process that execs a selected name, and every child a selected process forks, is added
 * here. Processes not selected pay one hash lookup on a non-socket read or write, and
 * nothing when `cfg.pipes` is 0 (the verifier drops the code). Included once, by
 * socket_trace.bpf.c, after capture.bpf.h. */
#ifndef OTEL_EBPF_PIPES_BPF_H
#define OTEL_EBPF_PIPES_BPF_H

#define ARG_PIPE 0x100 /* or'ed into syscall_args.kind: the fd is a selected process's pipe */

/* Selected processes, by tgid. Not LRU: a selected process must not be forgotten while
 * it runs; entries leave at the process's exit. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} pipe_pids SEC(".maps");

/* Names (a process's main-thread comm) whose exec selects the process. */
struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGETS);
	__type(key, char[COMM_LEN]);
	__type(value, __u8);
} pipe_comms SEC(".maps");

/* Per pipe fd of a selected process, keyed as `conns` is (tgid << 32 | fd); `sk` holds
 * the file's inode address, which tells a reused fd from the pipe seen before. */
struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, struct conn_state);
} pipe_conns SEC(".maps");

/* fd -> its struct file when it is a pipe or FIFO, else NULL. */
static __always_inline struct file *fd_to_pipe(int fd)
{
	return fd_to_file(fd, S_IFIFO);
}

/* Is this call on an fd that is not a socket one of a selected process's pipes, not muted?
 * (A write's entry asks, a read's exit.) */
static __always_inline bool pipe_selected(int fd, __u32 kind, __u32 tgid)
{
	if (!cfg.pipes || (kind != ARG_BUF && kind != ARG_IOV))
		return false;
	if (!bpf_map_lookup_elem(&pipe_pids, &tgid))
		return false;
	__u64 mkey = conn_map_key(tgid, fd);
	struct conn_state *st = bpf_map_lookup_elem(&pipe_conns, &mkey);
	if (st) {
		if (!st->traced)
			return false;
		/* user space gave up on it (no parser knows its bytes: a pipe to git, a shell) */
		if (mute_asked(st, mkey)) {
			count(CNT_MUTED, 1);
			return false;
		}
		return true;
	}
	return fd_to_pipe(fd) != NULL;
}

/* At a write-family entry on an fd that is not a socket: remember the call for its exit
 * when it is a selected pipe. */
static __always_inline int pipe_remember(int fd, __u64 ptr, __u32 kind, __u32 cnt, __u64 id)
{
	if (!pipe_selected(fd, kind, id >> 32))
		return 0;
	struct syscall_args a = {
		.enter_ns = bpf_ktime_get_ns(), .ptr = ptr, .fd = fd, .kind = kind | ARG_PIPE,
		.count = cnt,
	};
	stash_args(id, &a);
	return 0;
}

/* At the exit of a call on a selected pipe: emit what it moved (ret > 0). */
static __always_inline int pipe_exit(struct syscall_args *a, __u8 dir, long ret, __u64 id)
{
	struct file *file = fd_to_pipe(a->fd);
	if (!file)
		return 0;
	struct inode *inode = BPF_CORE_READ(file, f_inode);
	__u32 tgid = id >> 32;
	__u64 mkey = conn_map_key(tgid, a->fd);
	struct conn_state *st = bpf_map_lookup_elem(&pipe_conns, &mkey);
	if (st && st->sk != (__u64)inode) { /* the fd now names another pipe */
		emit_close(st);
		bpf_map_delete_elem(&pipe_conns, &mkey);
		st = NULL;
	}
	if (!st) {
		struct conn_state new_st = {};
		new_st.key.pid = tgid;
		new_st.key.fd = a->fd;
		new_st.key.gen = bpf_ktime_get_ns();
		new_st.sk = (__u64)inode;
		new_st.flags = CONN_F_STREAM | CONN_F_PIPE | CONN_F_PREEXISTING;
		new_st.traced = 1;
		bpf_map_update_elem(&pipe_conns, &mkey, &new_st, BPF_ANY);
		st = bpf_map_lookup_elem(&pipe_conns, &mkey);
		if (!st)
			return 0;
		/* the inode number names the pipe at both of its ends */
		struct addr local = {}, remote = {};
		__u64 ino = BPF_CORE_READ(inode, i_ino);
		__builtin_memcpy(local.bytes, &ino, sizeof(ino));
		emit_open(st, ROLE_UNKNOWN, &local, &remote);
	}
	if (!st->traced)
		return 0;
	__u32 kind = a->kind & ~ARG_PIPE;
	/* one call site for both kinds: emit_data is inlined, and each copy costs the
	 * verifier its iovec loop */
	emit_data(py_current_context(NULL), st, a, dir, ret, kind == ARG_BUF ? a->ptr : 0, kind == ARG_IOV ? a->ptr : 0,
		  a->count, NULL, 0, MAX_IOV, false, false, true);
	return 0;
}

/* ---- selection: names at exec, children at fork, gone at exit ---------------------- */

SEC("tracepoint/sched/sched_process_exec")
int pipes_exec(void *ctx)
{
	if (!cfg.pipes)
		return 0;
	char comm[COMM_LEN] = {};
	process_comm(comm);
	if (!bpf_map_lookup_elem(&pipe_comms, comm))
		return 0;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u8 one = 1;
	bpf_map_update_elem(&pipe_pids, &tgid, &one, BPF_ANY);
	return 0;
}

/* sched_process_fork(parent, child): a selected process's new process (not its thread) is
 * selected too: an MCP client's server subprocess, before it reads its first request. */
SEC("raw_tp/sched_process_fork")
int pipes_fork(struct bpf_raw_tracepoint_args *ctx)
{
	if (!cfg.pipes)
		return 0;
	__u32 parent = bpf_get_current_pid_tgid() >> 32;
	if (!bpf_map_lookup_elem(&pipe_pids, &parent))
		return 0;
	struct task_struct *child = (struct task_struct *)ctx->args[1];
	__u32 pid = BPF_CORE_READ(child, pid), tgid = BPF_CORE_READ(child, tgid);
	if (pid != tgid)
		return 0;
	__u8 one = 1;
	bpf_map_update_elem(&pipe_pids, &tgid, &one, BPF_ANY);
	return 0;
}

SEC("tracepoint/sched/sched_process_exit")
int pipes_process_exit(void *ctx)
{
	if (!cfg.pipes)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if ((__u32)id == tgid)
		bpf_map_delete_elem(&pipe_pids, &tgid);
	return 0;
}

/* A selected process closes a pipe fd: its connection ends (sockets: enter_close). */
SEC("tracepoint/syscalls/sys_enter_close")
int pipes_close(struct trace_event_raw_sys_enter *ctx)
{
	if (!cfg.pipes)
		return 0;
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	if (!bpf_map_lookup_elem(&pipe_pids, &tgid))
		return 0;
	__u64 mkey = conn_map_key(tgid, (int)ctx->args[0]);
	struct conn_state *st = bpf_map_lookup_elem(&pipe_conns, &mkey);
	if (!st)
		return 0;
	emit_close(st);
	bpf_map_delete_elem(&pipe_conns, &mkey);
	return 0;
}

#endif
