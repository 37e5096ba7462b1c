// SPDX-License-Identifier: GPL-2.0
/* Socket capture from syscall tracepoints: connections (connect/accept/close) and the
 * bytes every read/write-family call moves on them, with stream positions and TCP
 * sequence numbers, into one ring buffer. CO-RE: no kernel headers on the target. */
#define CAPTURE_MAPS_HERE
#include "capture.bpf.h"
#include "pipes.bpf.h"

char LICENSE[] SEC("license") = "GPL";

/* An unconnected datagram socket is selected by port per datagram: its peer varies. */
static __always_inline bool datagram_selected(struct conn_state *st, struct sock *sk,
					      struct addr *peer)
{
	if (!cfg.filter_ports || !peer->family || !bpf_map_lookup_elem(&target_ports, &peer->port))
		return false;
	struct addr local = {}, remote = {};
	sock_addrs(sk, &local, &remote);
	st->traced = 1;
	emit_open(st, ROLE_UNKNOWN, &local, &remote);
	return true;
}

/* ---- syscall enter: remember the arguments ---------------------------------------- */

/* User space gave up on this connection (no parser knows its bytes): stop tracing it, so
 * its later calls cost one lookup at entry and nothing is copied. Checked at
 * entry: a muted connection's call is not remembered for its exit at all. */
static __always_inline bool connection_muted(struct conn_state *st, int fd)
{
	if (!mute_asked(st, conn_map_key(st->key.pid, fd)))
		return false;
	count(CNT_MUTED, 1);
	return true;
}


/* The first bytes a write sends (of its buffer, or of its first iovec), into `head`. */
static __always_inline bool write_head(__u32 kind, __u64 ptr, __u8 head[PROP_HEAD_LEN])
{
	__u64 base = ptr;
	if (kind == ARG_IOV || kind == ARG_MSG) {
		__u64 iov_at = ptr;
		if (kind == ARG_MSG) {
			struct user_msghdr msg;
			if (bpf_probe_read_user(&msg, sizeof(msg), (void *)ptr))
				return false;
			iov_at = (__u64)msg.msg_iov;
		}
		struct iovec iov;
		if (bpf_probe_read_user(&iov, sizeof(iov), (void *)iov_at) ||
		    iov.iov_len < PROP_HEAD_LEN)
			return false;
		base = (__u64)iov.iov_base;
	} else if (kind != ARG_BUF) {
		return false;
	}
	return bpf_probe_read_user(head, PROP_HEAD_LEN, (void *)base) == 0;
}

/* Propagation: does this write start a request on a TCP client connection? HTTP/1 and other
 * one-call-at-a-time protocols: where the bytes turn to egress. HTTP/2 (known by the client
 * preface): where a write starts with a HEADERS frame opening a client stream (one per
 * write in grpc and h2-style clients), wherever the reads fall. If so, the request's
 * context goes into prop_out now, before its first segment is built. */
static __always_inline void request_written(struct conn_state *st, __u64 id, __u32 kind,
					    __u64 ptr)
{
	if (!(st->flags & CONN_F_TCP) || st->role != ROLE_CLIENT || st->tls) {
		st->last_dir = 1 + DIR_EGRESS;
		return;
	}
	bool turned = st->last_dir != 1 + DIR_EGRESS;
	if (!turned && !st->h2)
		return;
	st->last_dir = 1 + DIR_EGRESS;
	__u8 head[PROP_HEAD_LEN] = {};
	if (st->h2) {
		/* 9-byte frame header: length (3), type (1: HEADERS), flags, stream id (odd:
		 * opened by the client) */
		if (!write_head(kind, ptr, head) || head[3] != 1 || !(head[8] & 1))
			return;
	} else if (write_head(kind, ptr, head) && head[0] == 'P' && head[1] == 'R' &&
		   head[2] == 'I' && head[3] == ' ' && head[4] == '*' && head[5] == ' ' &&
		   head[6] == 'H' && head[7] == 'T' && head[8] == 'T') {
		st->h2 = 1; /* "PRI * HTTP/2.0": the connection's preface, no request */
		return;
	}
	struct thread_state *t = thread_state_made(id);
	if (!t)
		return;
	struct tcp_sock *tp = (struct tcp_sock *)st->sk;
	prop_request_write(t, st, (struct sock *)st->sk, BPF_CORE_READ(tp, write_seq),
			   bpf_ktime_get_ns());
}

/* Propagation: a TCP server connection's bytes turn to ingress (a request was read). */
static __always_inline void request_read(struct thread_state *t, struct conn_state *st,
					 struct sock *sk, __u8 dir, __u32 seq, long ret)
{
	if (!(st->flags & CONN_F_TCP) || st->last_dir == 1 + dir)
		return;
	st->last_dir = 1 + dir;
	if (dir == DIR_INGRESS && st->role == ROLE_SERVER && t && !st->tls)
		prop_request_read(t, st, sk, seq, ret);
}

static __always_inline int remember(int fd, __u64 ptr, __u64 addr, __u32 kind, __u32 cnt)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (tgid == cfg.agent_pid)
		return 0;
	__u64 mkey = conn_map_key(tgid, fd);
	struct conn_state *st = bpf_map_lookup_elem(&conns, &mkey);
	/* Known and not selected: nothing to do. Unknown: only sockets are worth the exit. */
	if (st && !st->traced && kind != ARG_CONNECT &&
	    ((st->flags & CONN_F_STREAM) || !cfg.filter_ports)) {
		/* inside an SSL call: its session uses this socket (not traced, but known) */
		struct thread_state *t = bpf_map_lookup_elem(&threads, &id);
		if (t && t->ssl.active && t->ssl.fd < 0)
			t->ssl.fd = fd;
		return 0; /* (an unselected datagram socket may still send to a selected port) */
	}
	if (!st && !fd_to_socket(fd))
		return pipe_remember(fd, ptr, kind, cnt, id); /* pipes.bpf.h */
	if (st && st->traced && kind != ARG_CONNECT && connection_muted(st, fd))
		return 0;
	if (cfg.propagate && st && st->traced && kind != ARG_CONNECT)
		request_written(st, id, kind, ptr);
	struct syscall_args a = {
		.enter_ns = bpf_ktime_get_ns(), .ptr = ptr, .addr = addr,
		/* a known stream connection: its exit finds it by key and checks the socket is
		 * the same, instead of walking the fd table again */
		.sk = st && (st->flags & CONN_F_STREAM) ? st->sk : 0,
		.fd = fd, .kind = kind, .count = cnt,
	};
	stash_args(id, &a);
	return 0;
}

#define ENTER(name, kind, ptr_arg, addr_expr, cnt_expr)                                \
	SEC("tracepoint/syscalls/sys_enter_" #name)                                     \
	int enter_##name(struct trace_event_raw_sys_enter *ctx)                         \
	{                                                                               \
		return remember((int)ctx->args[0], ctx->args[ptr_arg], addr_expr, kind, \
				cnt_expr);                                              \
	}

/* Writes only: a write's bytes are stamped with its entry (docs/decisions.md, "Times of
 * bytes"). A read's are stamped with its return, and its exit reads its arguments itself
 * (on_read_exit). */
ENTER(write, ARG_BUF, 1, 0, 0)
ENTER(writev, ARG_IOV, 1, 0, (__u32)ctx->args[2])
ENTER(sendto, ARG_BUF, 1, ctx->args[4], 0)
ENTER(sendmsg, ARG_MSG, 1, 0, 0)
ENTER(sendmmsg, ARG_MMSG, 1, 0, (__u32)ctx->args[2])
ENTER(connect, ARG_CONNECT, 1, 0, 0)

/* ---- syscall exit: emit what moved ------------------------------------------------- */

/* TLS: a syscall inside an SSL call names the session's socket (ssl_trace.bpf.c); a read
 * outside one may be what a memory-BIO session decrypts next. A socket an SSL session
 * uses carries ciphertext: its bytes are counted, not sent (the plaintext is). Returns
 * true when the caller must not emit. */
static __always_inline bool tls_bookkeeping(struct thread_state *t, struct conn_state *st,
					    struct syscall_args *a, __u8 dir, long ret, __u32 seq)
{
	if (t && t->ssl.active) {
		struct ssl_call *call = &t->ssl;
		if (call->fd < 0) {
			call->fd = a->fd;
			call->seq = seq;
			call->has_seq = !!(st->flags & CONN_F_TCP);
		}
		st->tls = 1;
	} else if (dir == DIR_INGRESS && st->traced && (st->flags & CONN_F_TCP)) {
		if (t)
			t->last = (struct last_read){.fd = a->fd, .seq = seq, .has_seq = 1,
						     .fresh = 1};
	}
	if (!st->tls)
		return false;
	st->pos[dir & 1] += ret;
	return true;
}

/* Where a sendmmsg/recvmmsg walk stands: bpf_loop's context for emit_one_mmsg. */
struct mmsg_walk {
	__u64 task;
	struct conn_state *st;
	struct syscall_args *a;
	__u32 n;
	__u8 dir;
};

/* One datagram of a sendmmsg/recvmmsg as its own data event; 1 (stop) after the last.
 * A bpf_loop callback: the verifier checks emit_data here once, not once per message. */
static long emit_one_mmsg(__u64 i, void *data)
{
	struct mmsg_walk *w = data;
	if (i >= w->n)
		return 1;
	/* msg_name, msg_namelen, msg_iov, msg_iovlen, then msg_len: not the whole mmsghdr,
	 * whose 64 bytes would take this frame, the loop's and the Context walk's past the
	 * 512-byte stack */
	__u64 head[4] = {};
	__u32 len = 0;
	__u64 at = w->a->ptr + i * sizeof(struct mmsghdr);
	if (bpf_probe_read_user(head, sizeof(head), (void *)at) ||
	    bpf_probe_read_user(&len, sizeof(len), (void *)(at + offsetof(struct mmsghdr, msg_len))))
		return 1;
	struct addr p = {};
	read_sockaddr(head[0], &p);
	emit_data(w->task, w->st, w->a, w->dir, len, 0, head[2], (__u32)head[3], &p, 0, MAX_MMSG_IOV,
		  false, false, true);
	return 0;
}

/* What a call moved (ret > 0 bytes or messages), emitted on its connection. `t`: the
 * thread's state when the caller has it (a write's exit, from take_args); `st`: the known
 * stream connection when the caller has it (a read's exit, which found it itself). */
static __always_inline int call_exit(struct thread_state *t, struct syscall_args *a,
				     struct conn_state *st, __u8 dir, long ret, __u64 id)
{
	if (a->kind & ARG_PIPE)
		return pipe_exit(a, dir, ret, id);
	struct sock *sk = (struct sock *)a->sk;
	if (!st && sk) { /* the fd may have been closed and reused meanwhile: same socket only */
		__u64 mkey = conn_map_key(id >> 32, a->fd);
		st = bpf_map_lookup_elem(&conns, &mkey);
		if (st && st->sk != a->sk)
			st = NULL;
	}
	if (!st) {
		struct socket *sock = fd_to_socket(a->fd);
		if (!sock)
			return 0;
		st = get_conn(a->fd, sock, ROLE_UNKNOWN, false);
		if (!st)
			return 0;
		sk = BPF_CORE_READ(sock, sk);
	}
	bool datagram = !(st->flags & CONN_F_STREAM);
	struct user_msghdr msg = {};
	if (a->kind == ARG_MSG && bpf_probe_read_user(&msg, sizeof(msg), (void *)a->ptr))
		return 0;
	struct addr peer = {};
	if (datagram) {
		__u64 name = 0;
		if (a->kind == ARG_BUF)
			name = a->addr;
		else if (a->kind == ARG_MSG)
			name = (__u64)msg.msg_name;
		else if (a->kind == ARG_MMSG)
			bpf_probe_read_user(&name, sizeof(name), (void *)a->ptr); /* msg_hdr.msg_name */
		read_sockaddr(name, &peer);
	}
	__u32 seq = tcp_seq_of(st, sk, dir, ret);
	if (!datagram && !t) /* a read's: no entry program looked the thread up */
		t = thread_state_made(id);
	if (!datagram && tls_bookkeeping(t, st, a, dir, ret, seq))
		return 0;
	if (!st->traced && !(datagram && datagram_selected(st, sk, &peer)))
		return 0;

	if (cfg.propagate && !datagram)
		request_read(t, st, sk, dir, seq, ret);
	__u64 task = py_current_context(t);
	switch (a->kind) {
	case ARG_BUF:
		emit_data(task, st, a, dir, ret, a->ptr, 0, 0, datagram ? &peer : NULL, seq, 0,
			  !datagram, false, true);
		break;
	case ARG_IOV:
		emit_data(task, st, a, dir, ret, 0, a->ptr, a->count, NULL, seq, MAX_IOV, !datagram,
			  false, true);
		break;
	case ARG_MSG:
		emit_data(task, st, a, dir, ret, 0, (__u64)msg.msg_iov, msg.msg_iovlen,
			  datagram ? &peer : NULL, seq, MAX_IOV, !datagram, false, true);
		break;
	case ARG_MMSG: {
		/* One event per datagram: ret is the number of messages moved. */
		__u32 n = ret < a->count ? ret : a->count;
		if (n > MAX_MMSG) {
			count(CNT_IOV_LIMIT, 1);
			n = MAX_MMSG;
		}
		struct mmsg_walk w = {.task = task, .st = st, .a = a, .n = n, .dir = dir};
		bpf_loop(MAX_MMSG, emit_one_mmsg, &w, 0);
		return 0;
	}
	default:
		return 0;
	}
	return 0;
}

/* A write-family call returns: what its entry kept, emitted. */
static __always_inline int on_write_exit(struct trace_event_raw_sys_exit *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct syscall_args a;
	struct thread_state *t = take_args(id, &a);
	if (!t)
		return 0;
	long ret = ctx->ret;
	if (ret <= 0)
		return 0;
	return call_exit(t, &a, NULL, DIR_EGRESS, ret, id);
}

/* A read-family call returns: one program, no entry. Its bytes are stamped with its return
 * (docs/decisions.md, "Times of bytes"), and its arguments are still in the registers the
 * thread entered the kernel with (syscalls leave them as they were; a signal rewrites them
 * only on the way back to user space, after this tracepoint), so the exit decides here what
 * remember() decides at a write's entry. A read that moved nothing costs no lookup at all. */
static __always_inline int on_read_exit(struct trace_event_raw_sys_exit *ctx, __u32 kind,
					const bool addr_arg, const bool count_arg)
{
	long ret = ctx->ret;
	if (ret <= 0)
		return 0;
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (tgid == cfg.agent_pid)
		return 0;
	struct pt_regs *regs = (struct pt_regs *)bpf_task_pt_regs(bpf_get_current_task_btf());
	int fd = (int)PT_REGS_PARM1_SYSCALL(regs);
	struct syscall_args a = {
		/* enter_ns 0: stamped with the return */
		.ptr = PT_REGS_PARM2_SYSCALL(regs),
		.addr = addr_arg ? PT_REGS_PARM5_SYSCALL(regs) : 0,
		.fd = fd, .kind = kind,
		.count = count_arg ? (__u32)PT_REGS_PARM3_SYSCALL(regs) : 0,
	};
	__u64 mkey = conn_map_key(tgid, fd);
	struct conn_state *st = bpf_map_lookup_elem(&conns, &mkey);
	if (st && !st->traced && ((st->flags & CONN_F_STREAM) || !cfg.filter_ports)) {
		/* inside an SSL call: its session uses this socket (not traced, but known) */
		struct thread_state *t = bpf_map_lookup_elem(&threads, &id);
		if (t && t->ssl.active && t->ssl.fd < 0)
			t->ssl.fd = fd;
		return 0;
	}
	if (!st && !fd_to_socket(fd)) {
		if (!pipe_selected(fd, kind, tgid))
			return 0;
		a.kind |= ARG_PIPE;
		return pipe_exit(&a, DIR_INGRESS, ret, id);
	}
	if (st && st->traced && connection_muted(st, fd))
		return 0;
	if (st && !(st->flags & CONN_F_STREAM))
		st = NULL; /* a datagram socket's fd is looked at again, as at a write's exit */
	a.sk = st ? st->sk : 0;
	return call_exit(NULL, &a, st, DIR_INGRESS, ret, id);
}

#define EXIT(name)                                                    \
	SEC("tracepoint/syscalls/sys_exit_" #name)                     \
	int exit_##name(struct trace_event_raw_sys_exit *ctx)          \
	{                                                              \
		return on_write_exit(ctx);                             \
	}

#define READ_EXIT(name, kind, addr_arg, count_arg)                    \
	SEC("tracepoint/syscalls/sys_exit_" #name)                     \
	int exit_##name(struct trace_event_raw_sys_exit *ctx)          \
	{                                                              \
		return on_read_exit(ctx, kind, addr_arg, count_arg);   \
	}

EXIT(write)
EXIT(writev)
EXIT(sendto)
EXIT(sendmsg)
EXIT(sendmmsg)
READ_EXIT(read, ARG_BUF, false, false)
READ_EXIT(readv, ARG_IOV, false, true)
READ_EXIT(recvfrom, ARG_BUF, true, false)
READ_EXIT(recvmsg, ARG_MSG, false, false)
READ_EXIT(recvmmsg, ARG_MMSG, false, true)

/* ---- connection lifecycle --------------------------------------------------------- */

SEC("tracepoint/syscalls/sys_exit_connect")
int exit_connect(struct trace_event_raw_sys_exit *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct syscall_args a;
	if (!take_args(id, &a))
		return 0;
	int fd = a.fd;
	if (ctx->ret != 0 && ctx->ret != -EINPROGRESS)
		return 0;
	struct socket *sock = fd_to_socket(fd);
	if (sock)
		get_conn(fd, sock, ROLE_CLIENT, true);
	return 0;
}

static __always_inline int on_accept_exit(struct trace_event_raw_sys_exit *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	if ((id >> 32) == cfg.agent_pid || ctx->ret < 0)
		return 0;
	int fd = ctx->ret;
	struct socket *sock = fd_to_socket(fd);
	if (sock)
		get_conn(fd, sock, ROLE_SERVER, true);
	return 0;
}

SEC("tracepoint/syscalls/sys_exit_accept")
int exit_accept(struct trace_event_raw_sys_exit *ctx) { return on_accept_exit(ctx); }

SEC("tracepoint/syscalls/sys_exit_accept4")
int exit_accept4(struct trace_event_raw_sys_exit *ctx) { return on_accept_exit(ctx); }

SEC("tracepoint/syscalls/sys_enter_close")
int enter_close(struct trace_event_raw_sys_enter *ctx)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 mkey = conn_map_key(tgid, (int)ctx->args[0]);
	struct conn_state *st = bpf_map_lookup_elem(&conns, &mkey);
	if (!st)
		return 0;
	emit_close(st);
	bpf_map_delete_elem(&conns, &mkey);
	return 0;
}

/* Can the program this process now runs be selected? Not when the targets are pids (and
 * their descendants) or process names and it is none of them: user space then neither
 * probes its interpreter nor looks for its OpenSSL (selection by port can take any
 * process: every exec is told then; so with process names, whose match on argv only user
 * space can make: `python3 train.py` is comm python3). */
static __always_inline bool exec_may_select(void)
{
	return cfg.filter_ports || cfg.exec_by_argv || (!cfg.filter_pids && !cfg.filter_comms) ||
	       process_selected();
}

/* A process event (exit, exec, fork) for user space about process `pid`. */
static __always_inline int emit_proc_event(__u8 type, __u32 pid)
{
	__u64 id = bpf_get_current_pid_tgid();
	if ((id >> 32) == cfg.agent_pid)
		return 0;
	struct proc_exit_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		count(CNT_RINGBUF_DROPS, 1);
		return 0;
	}
	ev->hdr.type = type;
	ev->hdr.tid = (__u32)id;
	ev->hdr.ts_ns = bpf_ktime_get_ns();
	ev->pid = pid;
	ev->_pad = 0;
	bpf_ringbuf_submit(ev, wakeup_flags());
	return 0;
}

/* A process is gone: user space closes all its connections (the kernel map is LRU). */
SEC("tracepoint/sched/sched_process_exit")
int on_process_exit(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	/* Every thread: its thread id comes back as another thread's (a pool worker, say) */
	bpf_map_delete_elem(&threads, &id);
	if (!ends_process(ctx))
		return 0; /* a thread, not the process (capture.bpf.h) */
	return emit_proc_event(EV_PROC_EXIT, id >> 32);
}

/* A process runs a new program: user space looks for OpenSSL linked into it (a static
 * build is known from its executable alone, before it makes any connection). */
SEC("tracepoint/sched/sched_process_exec")
int on_process_exec(void *ctx)
{
	__u64 id = bpf_get_current_pid_tgid();
	/* the old program's thread state, cached for the Context read, is no more */
	bpf_map_delete_elem(&threads, &id);
	if (!exec_may_select())
		return 0;
	return emit_proc_event(EV_PROC_EXEC, id >> 32);
}

/* A new process (not a thread) forked by one whose Context probes are its own: user space
 * attaches the child's (a prefork server's workers serve and call out like their parent). */
SEC("raw_tp/sched_process_fork")
int on_process_fork(struct bpf_raw_tracepoint_args *ctx)
{
	struct task_struct *child = (struct task_struct *)ctx->args[1];
	__u32 pid = BPF_CORE_READ(child, pid), tgid = BPF_CORE_READ(child, tgid);
	__u32 parent = bpf_get_current_pid_tgid() >> 32;
	if (pid != tgid || !bpf_map_lookup_elem(&py_ctx_probed, &parent))
		return 0;
	return emit_proc_event(EV_PROC_FORK, tgid);
}

/* ---- contextvars.Context hand-offs (a uprobe pair on CPython's PyContext_CopyCurrent) -- */

/* A process's first copy registers its interpreter: the probe's address here, plus its
 * file's distance from PyContext_CopyCurrent to _PyRuntime (the record the cookie names),
 * is _PyRuntime's address. It counts once the calling thread's state is found there. */
static __always_inline void register_interpreter(struct pt_regs *ctx, __u32 tgid, __u32 tid)
{
	__u32 file = (__u32)bpf_get_attach_cookie(ctx);
	struct py_ctx_proc *f = bpf_map_lookup_elem(&py_ctx_files, &file);
	if (!f || !f->tstate_context)
		return;
	struct py_ctx_proc p = *f;
	p.runtime = PT_REGS_IP(ctx) + f->runtime;
	if (!py_ctx_find_tstate(&p, tid) || bpf_map_update_elem(&py_ctx_procs, &tgid, &p, BPF_ANY))
		return;
	__u32 zero = 0;
	__u32 *any = bpf_map_lookup_elem(&py_ctx_any, &zero);
	if (any && !*any)
		*any = 1;
}

/* PyContext_CopyCurrent(void): every hand-off of a Context to new work copies it (an
 * asyncio task's creation, loop.call_soon, contextvars.copy_context() in asyncio.to_thread,
 * anyio and Starlette's thread pools). The entry registers the process, then counts its
 * copies (user space takes the probes off a process that makes many and only serves). */
SEC("uprobe")
int BPF_KPROBE(context_copy_enter)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	struct py_ctx_proc *p = bpf_map_lookup_elem(&py_ctx_procs, &tgid);
	if (p)
		__sync_fetch_and_add(&p->copies, 1);
	else
		register_interpreter(ctx, tgid, (__u32)id);
	return 0;
}

/* The copy returns: the new Context is the child of the one the thread runs in (the copy
 * leaves the thread's own Context as it was). */
SEC("uretprobe")
int BPF_KRETPROBE(context_copy_return, void *copy)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (!copy || !bpf_map_lookup_elem(&traced_pids, &tgid))
		return 0;
	__u64 parent = py_current_context(NULL);
	struct task_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		count(CNT_RINGBUF_DROPS, 1);
		return 0;
	}
	ev->hdr.type = EV_TASK_NEW;
	ev->hdr.tid = (__u32)id;
	ev->hdr.ts_ns = bpf_ktime_get_ns();
	ev->pid = tgid;
	ev->_pad = 0;
	ev->task = (__u64)copy;
	ev->parent = parent;
	struct thread_state *t = bpf_map_lookup_elem(&threads, &id);
	if (cfg.propagate)
		prop_context_copied(t, (__u64)copy, parent);
	ev->entered = t ? t->loop_entered : 0;
	ev->entered_ns = t ? t->loop_entered_ns : 0;
	bpf_ringbuf_submit(ev, wakeup_flags());
	return 0;
}

/* uvloop reads a socket in libuv's callback, outside any Context, then runs the protocol's
 * data_received (and its other callbacks) in the transport's Context through its
 * run_in_context helpers, whose first argument is that Context: a Context copied in it after
 * the read (uvicorn creating a request's task) is made for the bytes just read, which the
 * read's own Context cannot say there (decisions: "uvloop: the Context a read is delivered
 * in"). Attached to uvloop's loop module for the probed processes that map it. */
SEC("uprobe")
int BPF_KPROBE(loop_context_enter, void *context)
{
	__u64 id = bpf_get_current_pid_tgid();
	__u32 tgid = id >> 32;
	if (!context || !bpf_map_lookup_elem(&traced_pids, &tgid))
		return 0;
	struct thread_state *t = thread_state_made(id);
	if (t) {
		t->loop_entered = (__u64)context;
		t->loop_entered_ns = bpf_ktime_get_ns();
	}
	return 0;
}
