/* SPDX-License-Identifier: GPL-2.0 */
/* What the capture programs share: settings, per-connection state, maps, and the helpers
 * that find a socket's connection and emit its bytes. Included by socket_trace.bpf.c (the
 * syscall tracepoints, which defines the maps: CAPTURE_MAPS_HERE) and ssl_trace.bpf.c (the
 * OpenSSL uprobes, which declares them extern); bpftool links both into capture.bpf.o. */
#ifndef OTEL_EBPF_CAPTURE_BPF_H
#define OTEL_EBPF_CAPTURE_BPF_H

#include "vmlinux.h"
#include <bpf/bpf_helpers.h>
#include <bpf/bpf_core_read.h>
#include <bpf/bpf_endian.h>
#include <bpf/bpf_tracing.h>
#include "abi.h"
#include "ancestry.bpf.h"

#ifdef CAPTURE_MAPS_HERE
#define CAPTURE_MAP
#else
#define CAPTURE_MAP extern
#endif

#define AF_UNIX 1
#define AF_INET 2
#define AF_INET6 10
#define SOCK_STREAM 1
#define SOCK_DGRAM 2
#define S_IFMT 00170000
#define S_IFSOCK 0140000
#define S_IFIFO 0010000
#define EINPROGRESS 115

#ifdef CAPTURE_MAPS_HERE
const volatile struct agent_config cfg = {};
#else
extern const volatile struct agent_config cfg;
#endif

/* What the kernel keeps per traced socket. Keyed by tgid << 32 | fd. */
struct conn_state {
	struct conn_key key;
	__u64 sk;        /* struct sock address: detects fd reuse we did not see close */
	__u64 pos[2];    /* bytes moved so far, by direction */
	__u32 flags;     /* conn_flags */
	__u32 traced;    /* 0: seen but not selected by the targets */
	__u32 wide;      /* 1: captured with cfg.wide_capture (an LLM API call was seen) */
	__u32 tls;       /* 1: an SSL session uses it: its socket bytes are ciphertext, not sent */
	__u64 tls_pos[2]; /* plaintext bytes moved so far, by direction */
	__u64 mute_seen; /* mute_epoch when `muted` was last looked at for it */
	__u8 role;       /* enum conn_role */
	__u8 last_dir;   /* 0: no bytes yet; 1 + the direction of its last bytes */
	__u8 h2;         /* a client connection that sent HTTP/2's preface (propagation) */
	__u8 _pad[5];
};

/* An SSL_read/SSL_write in progress on a thread (ssl_trace.bpf.c). */
struct ssl_call {
	__u64 ssl;
	__u64 buf;
	__u64 ex_len;    /* SSL_*_ex: where the count goes */
	__u64 enter_ns;
	__s32 fd;        /* the socket a syscall inside the call used, or -1 */
	__u32 seq;       /* TCP sequence number of that syscall's first byte */
	__u8 dir;
	__u8 has_seq;
	__u8 active;     /* 1 from the SSL call's entry to its return */
	__u8 _pad[5];
};

struct ssl_key {
	__u32 tgid;
	__u32 _pad;
	__u64 ssl;
};

/* The socket a thread read last, for SSL sessions on memory BIOs (asyncio). */
struct last_read {
	__s32 fd;
	__u32 seq;
	__u8 has_seq;
	__u8 fresh;      /* not yet taken by an SSL_read */
	__u8 _pad[6];
};

enum arg_kind { ARG_BUF = 1, ARG_IOV = 2, ARG_MSG = 3, ARG_MMSG = 4, ARG_CONNECT = 5 };

/* A syscall's arguments, from its enter tracepoint to its exit tracepoint (a write's), or
 * read from its registers at its exit (a read's). */
struct syscall_args {
	__u64 enter_ns; /* 0: stamped with the return */
	__u64 ptr;      /* buffer, iovec array, msghdr or mmsghdr array */
	__u64 addr;     /* sockaddr of sendto/recvfrom */
	__u64 sk;       /* the known connection's struct sock at entry, or 0 (look it up) */
	__s32 fd;
	__u32 kind;     /* arg_kind */
	__u32 count;    /* iovcnt or vlen */
	__u32 _pad;
};

/* The request a thread or a Context serves, whose trace its calls out carry in their TCP
 * option (prop_send.bpf.h): the trace id (an incoming option's, or one drawn here) and the
 * request (its server connection, and the bytes read on it before the request). */
struct prop_origin {
	__u8 trace_id[16];
	struct conn_key conn;
	__u64 pos;
	__u64 read_ns;   /* when the request was read */
	__u8 flags;      /* PROP_F_SAMPLED */
	__u8 set;        /* 0: none */
	__u8 fresh;      /* read, and not yet handed to a Context copy */
	__u8 interleaved; /* (a thread's) it read a request before answering the one before:
			   * an event loop, whose writes its last request cannot name */
	__u8 _pad[4];
};

/* What the capture programs keep per thread, in one value so that a syscall's exit finds
 * its arguments, the SSL call around it and the thread's last read with one lookup: the
 * syscall's arguments from its entry to its exit (kind 0: taken), the SSL call in progress
 * (ssl.active), the socket the thread read last (last.fresh: not yet taken by an SSL_read). */
struct thread_state {
	struct syscall_args args;
	struct ssl_call ssl;
	struct last_read last;
	/* its PyThreadState (py_context.bpf.h), checked at each use, with what reading its
	 * Context needs, so that a call finds it without its process's record: */
	__u64 py_tstate;
	__u32 py_epoch;   /* py_ctx_epoch when it was found (moved: the record is looked at) */
	__u16 py_tid_off; /* PyThreadState.native_thread_id */
	__u16 py_ctx_off; /* PyThreadState.context */
	__u32 py_span;    /* context's word in a window read from native_thread_id on (1 to
			   * PY_CTX_WINDOW - 1), or 0: two reads (py_context.bpf.h) */
	__u32 _pad;
	/* the Context an event loop last entered on this thread to run a protocol callback
	 * (uvloop's run_in_context: socket_trace.bpf.c), and when */
	__u64 loop_entered;
	__u64 loop_entered_ns;
	/* the request this thread read last on a server connection (propagation) */
	struct prop_origin req;
};

struct scratch {
	__u64 unlooked; /* bytes this CPU sent since it last looked at the ring's fill */
	struct data_event ev;
	__u8 payload[2 * MAX_CAPTURE]; /* twice: iovec copies are bounded per piece */
};

CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536); /* set from config before load */
	__type(key, __u64);
	__type(value, struct conn_state);
} conns SEC(".maps");

CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64); /* pid_tgid */
	__type(value, struct thread_state);
} threads SEC(".maps");

/* One zeroed thread_state, never written: a new thread's value is copied from here (a
 * value on the stack would take ~200 of a read exit's 512 bytes). */
CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, struct thread_state);
} thread_blank SEC(".maps");

CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_RINGBUF);
	__uint(max_entries, 16 << 20); /* set from config before load */
} events SEC(".maps");

CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_PERCPU_ARRAY);
	__uint(max_entries, CNT_MAX);
	__type(key, __u32);
	__type(value, __u64);
} counters SEC(".maps");

CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1); /* one per possible CPU, set before load */
	__type(key, __u32);
	__type(value, struct scratch);
} scratch_buf SEC(".maps");

CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGETS);
	__type(key, __u32);
	__type(value, __u8);
} target_pids SEC(".maps");

CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGETS);
	__type(key, char[COMM_LEN]);
	__type(value, __u8);
} target_comms SEC(".maps");

CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGETS);
	__type(key, __u16);
	__type(value, __u8);
} target_ports SEC(".maps");

CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_HASH);
	__uint(max_entries, MAX_TARGETS);
	__type(key, __u16);
	__type(value, __u8);
} ignored_ports SEC(".maps");

CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 65536);
	__type(key, struct ssl_key);
	__type(value, __s32);
} ssl_fds SEC(".maps");

/* Connections user space asked to stop sending (no parser recognized them), by map key,
 * with the generation they were asked for (an fd reused since is another connection). */
CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u64);
	__type(value, __u64);
} muted SEC(".maps");

/* Bumped by user space after each batch it writes into `muted`: a connection looks
 * `muted` up only when the epoch moved since it last looked (an array read, inlined),
 * not at every call (a hash lookup). */
CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_ARRAY);
	__uint(max_entries, 1);
	__type(key, __u32);
	__type(value, __u64);
} mute_epoch SEC(".maps");

/* Has user space asked to stop sending this connection (by `muted`, keyed as its map)? The
 * entry is taken, and the connection marked untraced, when it has. */
static __always_inline bool mute_asked(struct conn_state *st, __u64 mkey)
{
	__u32 zero = 0;
	__u64 *epoch = bpf_map_lookup_elem(&mute_epoch, &zero);
	if (!epoch || *epoch == st->mute_seen)
		return false;
	st->mute_seen = *epoch; /* read before `muted`: user space writes it first */
	__u64 *gen = bpf_map_lookup_elem(&muted, &mkey);
	if (!gen || *gen != st->key.gen)
		return false;
	st->traced = 0;
	bpf_map_delete_elem(&muted, &mkey);
	return true;
}

/* Processes with a traced connection: only theirs are worth task events. */
CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, 16384);
	__type(key, __u32);
	__type(value, __u8);
} traced_pids SEC(".maps");

static __always_inline void count(__u32 idx, __u64 n)
{
	__u64 *v = bpf_map_lookup_elem(&counters, &idx);
	if (v)
		*v += n;
}

/* The calling thread's state, made (zeroed) when it has none yet; NULL only when the map
 * refuses it. */
static __always_inline struct thread_state *thread_state_made(__u64 id)
{
	struct thread_state *t = bpf_map_lookup_elem(&threads, &id);
	if (t)
		return t;
	__u32 zero = 0;
	struct thread_state *blank = bpf_map_lookup_elem(&thread_blank, &zero);
	if (!blank)
		return NULL;
	bpf_map_update_elem(&threads, &id, blank, BPF_NOEXIST);
	return bpf_map_lookup_elem(&threads, &id);
}

#include "py_context.bpf.h"

/* Wake the reader only when the ring fills past the threshold: each wake-up costs the
 * producer more than the copy itself, and the reader polls on a timer anyway. */
static __always_inline __u64 wakeup_flags(void)
{
	__u64 avail = bpf_ringbuf_query(&events, BPF_RB_AVAIL_DATA);
	return avail >= cfg.wakeup_bytes ? BPF_RB_FORCE_WAKEUP : BPF_RB_NO_WAKEUP;
}

/* The same for a data record of `size` bytes sent from this CPU's scratch: the fill is
 * looked at once the CPU has sent cfg.wakeup_step bytes since it last looked, not at every
 * record (bpf_ringbuf_query reads the reader's position, a cache line the reader writes).
 * Past the threshold the ring grows by at most a step per CPU before a wake-up; user space
 * sizes the step to a quarter of the room above the threshold, over all CPUs. */
static __always_inline __u64 data_wakeup_flags(struct scratch *s, __u32 size)
{
	s->unlooked += size;
	if (s->unlooked < cfg.wakeup_step)
		return BPF_RB_NO_WAKEUP;
	s->unlooked = 0;
	return wakeup_flags();
}

/* min(v, max) in a form the verifier sees: clang may drop a plain clamp it can prove
 * redundant, leaving the verifier with an unbounded size. */
static __always_inline __u64 bounded(__u64 v, const __u64 max)
{
	asm volatile("if %[v] <= %[max] goto +1; %[v] = %[max]"
		     : [v] "+r"(v)
		     : [max] "i"(max));
	return v;
}

/* Keep a syscall's arguments for its exit. A thread's entry stays in `threads` once made
 * (the exit marks its arguments consumed: kind 0), so a thread's later calls overwrite them
 * in place: a lookup, where an update and a delete of the LRU hash take its locks on every
 * call. */
static __always_inline void stash_args(__u64 id, struct syscall_args *a)
{
	struct thread_state *t = thread_state_made(id);
	if (t)
		t->args = *a;
}

/* The arguments stashed at this thread's entry, taken; returns the thread's state (NULL
 * when no call is pending), where the exit also finds the SSL call and the last read. */
static __always_inline struct thread_state *take_args(__u64 id, struct syscall_args *out)
{
	struct thread_state *t = bpf_map_lookup_elem(&threads, &id);
	if (!t || !t->args.kind)
		return NULL;
	*out = t->args;
	t->args.kind = 0;
	return t;
}

static __always_inline __u64 conn_map_key(__u32 tgid, int fd)
{
	return ((__u64)tgid << 32) | (__u32)fd;
}

/* fd of the current process -> its struct file when its inode's type is `type` (S_IFSOCK,
 * S_IFIFO...), else NULL. */
static __always_inline struct file *fd_to_file(int fd, umode_t type)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	struct fdtable *fdt = BPF_CORE_READ(task, files, fdt);
	if (!fdt || fd < 0 || (unsigned int)fd >= BPF_CORE_READ(fdt, max_fds))
		return NULL;
	struct file **fds = BPF_CORE_READ(fdt, fd);
	struct file *file = NULL;
	bpf_probe_read_kernel(&file, sizeof(file), &fds[fd]);
	if (!file)
		return NULL;
	umode_t mode = BPF_CORE_READ(file, f_inode, i_mode);
	return (mode & S_IFMT) == type ? file : NULL;
}

/* fd -> struct socket, or NULL when the fd is not a socket. */
static __always_inline struct socket *fd_to_socket(int fd)
{
	struct file *file = fd_to_file(fd, S_IFSOCK);
	return file ? (struct socket *)BPF_CORE_READ(file, private_data) : NULL;
}

/* Families and types we trace: TCP and UDP over IPv4/IPv6, Unix stream sockets. */
static __always_inline __u32 socket_flags(struct socket *sock, struct sock *sk, bool *ok)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	__u16 type = BPF_CORE_READ(sock, type);
	*ok = false;
	if (family == AF_UNIX) {
		*ok = type == SOCK_STREAM;
		return CONN_F_UNIX | CONN_F_STREAM;
	}
	if (family != AF_INET && family != AF_INET6)
		return 0;
	if (type == SOCK_STREAM) {
		*ok = true;
		return CONN_F_STREAM | CONN_F_TCP;
	}
	*ok = type == SOCK_DGRAM;
	return 0;
}

static __always_inline void sock_addrs(struct sock *sk, struct addr *local, struct addr *remote)
{
	__u16 family = BPF_CORE_READ(sk, __sk_common.skc_family);
	local->family = remote->family = family;
	if (family == AF_INET) {
		__u32 l = BPF_CORE_READ(sk, __sk_common.skc_rcv_saddr);
		__u32 r = BPF_CORE_READ(sk, __sk_common.skc_daddr);
		__builtin_memcpy(local->bytes, &l, 4);
		__builtin_memcpy(remote->bytes, &r, 4);
	} else if (family == AF_INET6) {
		BPF_CORE_READ_INTO((struct in6_addr *)local->bytes, sk, __sk_common.skc_v6_rcv_saddr);
		BPF_CORE_READ_INTO((struct in6_addr *)remote->bytes, sk, __sk_common.skc_v6_daddr);
	} else {
		return;
	}
	local->port = BPF_CORE_READ(sk, __sk_common.skc_num);
	remote->port = bpf_ntohs(BPF_CORE_READ(sk, __sk_common.skc_dport));
}

/* Is this process, or one of its ancestors, selected (ancestry.bpf.h)? */
static __always_inline bool pid_selected(void)
{
	return process_or_ancestor_in(&target_pids,
				      (struct task_struct *)bpf_get_current_task());
}

/* The process's name: its main thread's, not the calling thread's (Cyclone DDS makes its
 * sockets' first calls from threads named "recv" and "tev"; a JVM's from "C2 Compiler..."). */
static __always_inline void process_comm(char *comm)
{
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	BPF_CORE_READ_STR_INTO((char(*)[COMM_LEN])comm, task, group_leader, comm);
}

/* Is the calling process selected by pid (itself or an ancestor) or by name? */
static __always_inline bool process_selected(void)
{
	if (cfg.filter_pids && pid_selected())
		return true;
	if (cfg.filter_comms) {
		char comm[COMM_LEN] = {};
		process_comm(comm);
		if (bpf_map_lookup_elem(&target_comms, comm))
			return true;
	}
	return false;
}

static __always_inline bool is_target(struct addr *local, struct addr *remote)
{
	/* the receiving end of the agent's own exports: tracing it would feed back */
	if (cfg.ignore_ports && (bpf_map_lookup_elem(&ignored_ports, &local->port) ||
				 bpf_map_lookup_elem(&ignored_ports, &remote->port)))
		return false;
	if (!cfg.filter_pids && !cfg.filter_comms && !cfg.filter_ports)
		return true;
	if (process_selected())
		return true;
	if (cfg.filter_ports &&
	    (bpf_map_lookup_elem(&target_ports, &local->port) ||
	     bpf_map_lookup_elem(&target_ports, &remote->port)))
		return true;
	return false;
}

static __always_inline void emit_close(struct conn_state *st)
{
	if (!st->traced)
		return;
	struct conn_close_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		count(CNT_RINGBUF_DROPS, 1);
		return;
	}
	ev->hdr.type = EV_CONN_CLOSE;
	ev->hdr.tid = (__u32)bpf_get_current_pid_tgid();
	ev->hdr.ts_ns = bpf_ktime_get_ns();
	ev->key = st->key;
	/* where its records end: user space ends the connection once they all came (a record
	 * another thread sent may be reserved after this one). TLS: the plaintext's positions,
	 * which its records carry (the socket's ciphertext is counted, not sent) */
	ev->bytes_sent = st->tls ? st->tls_pos[DIR_EGRESS] : st->pos[DIR_EGRESS];
	ev->bytes_recv = st->tls ? st->tls_pos[DIR_INGRESS] : st->pos[DIR_INGRESS];
	bpf_ringbuf_submit(ev, wakeup_flags());
	count(CNT_CONN_CLOSED, 1);
}

/* sched_process_exit's record, on kernels that put group_dead in it */
struct trace_event_raw_sched_process_exit___group {
	bool group_dead;
} __attribute__((preserve_access_index));

/* Does this thread's exit end its process (sched_process_exit's context)? A thread counts
 * itself out of signal->live only in do_exit, after its last syscall returned and sent its
 * records, and the tracepoint comes after that count: a record sent when it reaches 0 comes
 * after every record of every thread of the process. A thread that ends before the others
 * (a main thread that exits first, the old leader a thread's exec replaces) is not the end;
 * emitting then would end the process's connections while its other threads still use
 * them. Without group_dead in the record (older kernels), threads exiting at once may each
 * see 0: user space takes a repeated exit as nothing. */
static __always_inline bool ends_process(void *ctx)
{
	if (bpf_core_field_exists(struct trace_event_raw_sched_process_exit___group, group_dead))
		return ((struct trace_event_raw_sched_process_exit___group *)ctx)->group_dead;
	struct task_struct *task = (struct task_struct *)bpf_get_current_task();
	return BPF_CORE_READ(task, signal, live.counter) == 0;
}

static __always_inline void emit_open(struct conn_state *st, __u32 role, struct addr *local,
				      struct addr *remote)
{
	struct conn_open_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		count(CNT_RINGBUF_DROPS, 1);
		return;
	}
	ev->hdr.type = EV_CONN_OPEN;
	ev->hdr.tid = (__u32)bpf_get_current_pid_tgid();
	ev->hdr.ts_ns = st->key.gen;
	ev->key = st->key;
	ev->local = *local;
	ev->remote = *remote;
	ev->role = role;
	ev->flags = st->flags;
	process_comm(ev->comm);
	bpf_ringbuf_submit(ev, wakeup_flags());
	count(CNT_CONN_OPENED, 1);
}

/* The connection state of (tgid, fd), created when new or when the fd now names another
 * socket (`fresh`: connect/accept just made it). `role` is the role learned from
 * connect/accept, or ROLE_UNKNOWN on first data. Returns NULL for sockets of a kind we do
 * not capture; the caller checks `traced`. */
static __always_inline struct conn_state *get_conn(int fd, struct socket *sock, __u32 role,
						   bool fresh)
{
	__u32 tgid = bpf_get_current_pid_tgid() >> 32;
	__u64 mkey = conn_map_key(tgid, fd);
	struct sock *sk = BPF_CORE_READ(sock, sk);
	if (!sk)
		return NULL;
	struct conn_state *st = bpf_map_lookup_elem(&conns, &mkey);
	if (st && st->sk == (__u64)sk && !fresh)
		return st;
	if (st) {
		emit_close(st);
		bpf_map_delete_elem(&conns, &mkey);
	}

	bool ok;
	__u32 flags = socket_flags(sock, sk, &ok);
	if (!ok)
		return NULL;
	struct addr local = {}, remote = {};
	sock_addrs(sk, &local, &remote);
	struct conn_state new_st = {};
	new_st.key.pid = tgid;
	new_st.key.fd = fd;
	new_st.key.gen = bpf_ktime_get_ns();
	new_st.sk = (__u64)sk;
	new_st.flags = flags | (role == ROLE_UNKNOWN ? CONN_F_PREEXISTING : 0);
	new_st.role = role;
	new_st.traced = is_target(&local, &remote);
	bpf_map_update_elem(&conns, &mkey, &new_st, BPF_ANY);
	st = bpf_map_lookup_elem(&conns, &mkey);
	if (st && st->traced) {
		__u8 one = 1;
		bpf_map_update_elem(&traced_pids, &tgid, &one, BPF_ANY);
		emit_open(st, role, &local, &remote);
		/* as asyncio_probes.calls_out: connected, or TCP of a side not seen */
		if (role == ROLE_CLIENT || (role == ROLE_UNKNOWN && (flags & CONN_F_TCP)))
			py_ctx_calls_out(tgid);
	}
	return st;
}

static __always_inline void read_sockaddr(__u64 uaddr, struct addr *out)
{
	__u16 family = 0;
	if (!uaddr || bpf_probe_read_user(&family, sizeof(family), (void *)uaddr))
		return;
	if (family == AF_INET) {
		struct sockaddr_in sin = {};
		bpf_probe_read_user(&sin, sizeof(sin), (void *)uaddr);
		__builtin_memcpy(out->bytes, &sin.sin_addr, 4);
		out->port = bpf_ntohs(sin.sin_port);
		out->family = AF_INET;
	} else if (family == AF_INET6) {
		struct sockaddr_in6 sin6 = {};
		bpf_probe_read_user(&sin6, sizeof(sin6), (void *)uaddr);
		__builtin_memcpy(out->bytes, &sin6.sin6_addr, 16);
		out->port = bpf_ntohs(sin6.sin6_port);
		out->family = AF_INET6;
	}
}

/* Where an iovec walk stands: bpf_loop's context for copy_one_iov. */
struct iov_walk {
	struct scratch *s;
	__u64 iov_ptr;
	__u32 iovcnt;
	__u32 cap;
	__u32 off;
};

/* One iovec entry into the scratch payload; 1 (stop) past the last entry, at the capture
 * or at a fault. */
static __always_inline long iov_step(struct iov_walk *w, __u64 i)
{
	if (i >= w->iovcnt || w->off >= w->cap)
		return 1;
	struct iovec iov = {};
	if (bpf_probe_read_user(&iov, sizeof(iov), (void *)(w->iov_ptr + i * sizeof(iov))))
		return 1;
	__u32 off = w->off;
	__u32 n = w->cap - off;
	if (iov.iov_len < n)
		n = iov.iov_len;
	/* off < cap <= MAX_CAPTURE and n <= cap - off, but the verifier cannot follow
	 * that: restate both bounds where it can see them. */
	off &= MAX_CAPTURE - 1;
	n = bounded(n, MAX_CAPTURE);
	if (bpf_probe_read_user(&w->s->payload[off], n, iov.iov_base))
		return 1;
	w->off = off + n;
	return 0;
}

static long copy_one_iov(__u64 i, void *data) { return iov_step(data, i); }

/* Copy up to `cap` bytes gathered from an iovec array into the scratch payload, walking at
 * most `max_iov` entries. bpf_loop, not an unrolled loop: the verifier checks one entry's
 * copy once instead of once per entry and path, which kept exit_read's program over its
 * limit of a million instructions explored on some 6.18 builds. */
static __always_inline __u32 copy_iov(struct scratch *s, __u64 iov_ptr, __u32 iovcnt, __u32 cap,
				      const __u32 max_iov)
{
	if (iovcnt > max_iov) {
		count(CNT_IOV_LIMIT, 1);
		iovcnt = max_iov;
	}
	struct iov_walk w = {.s = s, .iov_ptr = iov_ptr, .iovcnt = iovcnt, .cap = cap};
	if (max_iov > MAX_MMSG_IOV) {
		bpf_loop(max_iov, copy_one_iov, &w, 0);
		return w.off;
	}
	/* a datagram's few entries, unrolled: its walk already runs inside a bpf_loop
	 * callback (emit_one_mmsg), and a third frame would not fit the 512-byte stack */
	for (__u32 i = 0; i < max_iov; i++)
		if (iov_step(&w, i))
			break;
	return w.off;
}

/* "POST " and a path whose first 8 bytes are a wide key: an LLM API request, whose
 * bodies (a long prompt, a long answer) are worth a wider capture. */
static __always_inline bool wide_request(struct scratch *s, __u32 got)
{
	if (got < 13 || !cfg.wide_key_count)
		return false;
	if (s->payload[0] != 'P' || s->payload[1] != 'O' || s->payload[2] != 'S' ||
	    s->payload[3] != 'T' || s->payload[4] != ' ')
		return false;
	__u64 key = 0;
	__builtin_memcpy(&key, &s->payload[5], sizeof(key));
	for (__u32 i = 0; i < MAX_WIDE_KEYS; i++) {
		if (i >= cfg.wide_key_count)
			break;
		if (cfg.wide_keys[i] == key)
			return true;
	}
	return false;
}

/* Emit one data event of `len` bytes for the connection; the payload comes from a plain
 * buffer (buf) or an iovec array (iov, iovcnt). `task`: the Context the thread runs in
 * (py_current_context), read by the caller: a sendmmsg's datagrams share one, read outside
 * the bpf_loop callback that emits them (its search's own loop would be a third frame). */
/* Stream sockets may be widened (`widen`); on a wide connection a plain-buffer message
 * longer than the capture also sends its last bytes (tail_len). */
static __always_inline void emit_data(__u64 task, struct conn_state *st,
				      struct syscall_args *a, __u8 dir,
				      __u64 len, __u64 buf, __u64 iov, __u32 iovcnt,
				      struct addr *peer, __u32 tcp_seq, const __u32 max_iov,
				      const bool widen, const bool tls, bool has_seq)
{
	__u32 cpu = bpf_get_smp_processor_id();
	struct scratch *s = bpf_map_lookup_elem(&scratch_buf, &cpu);
	if (!s)
		return;
	struct data_event *ev = &s->ev;
	__u32 limit = st->wide ? cfg.wide_capture : cfg.capture_max;
	__u32 cap = len < limit ? len : limit;
	cap = bounded(cap, MAX_CAPTURE);

	ev->hdr.type = EV_DATA;
	ev->hdr.tid = (__u32)bpf_get_current_pid_tgid();
	ev->exit_ns = bpf_ktime_get_ns();
	ev->hdr.ts_ns = a->enter_ns ? a->enter_ns : ev->exit_ns; /* 0: a read, stamped at its return */
	ev->key = st->key;
	ev->direction = dir;
	ev->msg_len = len;
	ev->flags = 0;
	ev->tcp_seq = tcp_seq;
	ev->task = task;
	if (peer) {
		ev->peer = *peer;
		ev->flags |= peer->family ? DATA_F_HAS_PEER : 0;
	} else {
		__builtin_memset(&ev->peer, 0, sizeof(ev->peer));
	}
	dir &= 1;
	if (tls) {
		ev->flags |= DATA_F_TLS | (has_seq ? 0 : DATA_F_NO_SEQ);
		ev->pos = st->tls_pos[dir];
		st->tls_pos[dir] += len;
	} else {
		ev->pos = st->pos[dir];
		st->pos[dir] += len;
	}

	__u32 got;
	if (iov) {
		got = copy_iov(s, iov, iovcnt, cap, max_iov);
	} else {
		got = cap;
		if (bpf_probe_read_user(s->payload, cap, (void *)buf))
			got = 0;
	}
	got = bounded(got, MAX_CAPTURE);
	if (widen && !st->wide && wide_request(s, got)) {
		st->wide = 1;
		count(CNT_WIDENED, 1);
		if (buf && got < len) { /* this very message is the request: copy it again, wider */
			cap = len < cfg.wide_capture ? len : cfg.wide_capture;
			cap = bounded(cap, MAX_CAPTURE);
			if (!bpf_probe_read_user(s->payload, cap, (void *)buf))
				got = cap;
		}
	}
	__u32 tail = 0;
	if (widen && buf && st->wide && got < len && cfg.tail_capture) {
		tail = len - got < cfg.tail_capture ? len - got : cfg.tail_capture;
		tail = bounded(tail, MAX_CAPTURE);
		__u32 off = bounded(got, MAX_CAPTURE);
		if (bpf_probe_read_user(&s->payload[off], tail, (void *)(buf + len - tail)))
			tail = 0;
	}
	if (st->wide)
		ev->flags |= DATA_F_WIDE;
	ev->tail_len = tail;
	__u32 size = bounded(got + tail, 2 * MAX_CAPTURE);
	ev->captured_len = size;
	if (size < len) {
		ev->flags |= DATA_F_TRUNCATED;
		count(CNT_TRUNCATED, 1);
	}
	if (bpf_ringbuf_output(&events, ev, sizeof(*ev) + size,
			       data_wakeup_flags(s, sizeof(*ev) + size)))
		count(CNT_RINGBUF_DROPS, 1);
	else
		count(CNT_DATA_EVENTS, 1);
}

/* TCP sequence number of the first byte a call moved. Both counters have already moved
 * past the call's bytes on exit. */
static __always_inline __u32 tcp_seq_of(struct conn_state *st, struct sock *sk, __u8 dir,
					 __u64 len)
{
	if (!(st->flags & CONN_F_TCP))
		return 0;
	struct tcp_sock *tp = (struct tcp_sock *)sk;
	__u32 seq = dir == DIR_EGRESS ? BPF_CORE_READ(tp, write_seq) : BPF_CORE_READ(tp, copied_seq);
	return seq - (__u32)len;
}

#include "prop_send.bpf.h"

#endif
