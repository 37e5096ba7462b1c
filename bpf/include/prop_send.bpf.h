/* SPDX-License-Identifier: GPL-2.0 */
/* Trace context known at send time (docs/correlation.md, "TCP option carrier").
 *
 * The option program (propagation.bpf.c) writes into a connection's next segment whatever
 * context waits for it in `prop_out`. User space decides a call's trace after the fact, so
 * a context it queues rides a later segment (an ACK of the answer, the next request, the
 * FIN), or none when the connection goes idle first. Here the capture programs queue the
 * context of a call at its first write, before its first segment is built, from what the
 * kernel itself knows:
 *
 *   a server connection's request is read   the reading thread now serves it: its trace is
 *                                            the incoming option's (prop_in), else the one
 *                                            both hosts derive from the request's wire
 *                                            identity; kept in the thread's state, "fresh"
 *   a Context is copied (PyContext_CopyCurrent) the copy serves what the copying thread
 *                                            read last, when that is fresh (uvicorn making a
 *                                            request's task right after reading it), else
 *                                            what the copied Context serves (a task handing
 *                                            work to a thread pool, call_soon, a child task)
 *   a client connection's request is written the thread's Context serves a request (or,
 *                                            for a thread without any Context, the thread
 *                                            does): its trace goes into `prop_out` with the
 *                                            TCP sequence number of the write's first byte,
 *                                            and user space is told (EV_CONTEXT_OUT) so that
 *                                            the span it makes adopts that trace
 *
 * A request starts where a connection's bytes change direction (a read after a write on a
 * server connection, a write after a read on a client one): HTTP/1 exchanges, and any
 * request/response protocol used one call at a time per connection. On an HTTP/2 client
 * connection, a call starts with a write that starts with a HEADERS frame opening a stream. Where the Context or
 * thread serves nothing known, nothing is queued (user space's late context, or the link
 * both ends derive, stand in): never a context guessed.
 */
#ifndef OTEL_EBPF_PROP_SEND_BPF_H
#define OTEL_EBPF_PROP_SEND_BPF_H

#define PROP_TRACES_MAX 65536 /* Contexts serving a request (LRU: old ones pushed out) */
#define PROP_HEAD_LEN 9       /* bytes of a write looked at: an HTTP/2 frame header */
#define PROP_FRESH_NS 10000000ULL /* a read's request is handed to a Context copied within
				   * 10 ms (the agent's task rule: otel_ebpf/correlate) */

/* Contexts waiting for their connection's next segment, by connection. Written by user
 * space and at a call's first write, emptied by the option program. LRU: a context left
 * for a connection that closed first is pushed out by newer ones, never piles up. */
CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PROP_MAX_CONNS);
	__type(key, struct prop_key);
	__type(value, struct prop_pending);
} prop_out SEC(".maps");

/* Networks whose hosts may send us contexts and be sent ours (user space fills it). */
CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_LPM_TRIE);
	__uint(max_entries, PROP_MAX_NETS);
	__uint(map_flags, BPF_F_NO_PREALLOC);
	__type(key, struct prop_net);
	__type(value, __u8);
} prop_trusted SEC(".maps");

/* The last context a trusted peer sent on a server connection, by connection (as the
 * receiving socket sees it): its request's read adopts the trace. */
struct prop_in_value {
	__u32 seq;
	__u8 flags;
	__u8 _pad[3];
	__u8 trace_id[16];
};

CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PROP_MAX_CONNS);
	__type(key, struct prop_key);
	__type(value, struct prop_in_value);
} prop_in SEC(".maps");

/* The request each Context serves, by the Context's address. */
CAPTURE_MAP struct {
	__uint(type, BPF_MAP_TYPE_LRU_HASH);
	__uint(max_entries, PROP_TRACES_MAX);
	__type(key, __u64);
	__type(value, struct prop_origin);
} prop_traces SEC(".maps");

static __always_inline bool prop_trusted_addr(const __u32 addr[4])
{
	struct prop_net net = {.prefixlen = 128};
	net.addr[0] = addr[0];
	net.addr[1] = addr[1];
	net.addr[2] = addr[2];
	net.addr[3] = addr[3];
	return bpf_map_lookup_elem(&prop_trusted, &net) != NULL;
}

/* The connection of a socket as struct prop_key names it (IPv4 as IPv4-mapped IPv6, so
 * an IPv6 socket talking to an IPv4 peer is the same key). False for other families. */
static __always_inline bool prop_key_of_sock(struct sock *sk, struct prop_key *k)
{
	struct addr local = {}, remote = {};
	sock_addrs(sk, &local, &remote);
	k->local_port = local.port;
	k->remote_port = remote.port;
	if (local.family == AF_INET) {
		k->local[2] = k->remote[2] = bpf_htonl(0xffff);
		__builtin_memcpy(&k->local[3], local.bytes, 4);
		__builtin_memcpy(&k->remote[3], remote.bytes, 4);
		k->family = AF_INET;
		return true;
	}
	if (local.family != AF_INET6)
		return false;
	__builtin_memcpy(k->local, local.bytes, 16);
	__builtin_memcpy(k->remote, remote.bytes, 16);
	k->family = (!k->remote[0] && !k->remote[1] && k->remote[2] == bpf_htonl(0xffff))
		? AF_INET : AF_INET6;
	return true;
}

/* This host's loopback (127.0.0.0/8, ::1): its calls' two ends are seen by one agent,
 * which joins them on the wire; no option needed. */
static __always_inline bool prop_loopback(const __u32 addr[4])
{
	if (!addr[0] && !addr[1] && addr[2] == bpf_htonl(0xffff))
		return (bpf_ntohl(addr[3]) >> 24) == 127;
	return !addr[0] && !addr[1] && !addr[2] && addr[3] == bpf_htonl(1);
}

/* splitmix64's step (Steele et al.'s constants): the mix of the derived pair. */
static __always_inline __u64 prop_splitmix(__u64 z)
{
	z += 0x9E3779B97F4A7C15ULL;
	z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ULL;
	z = (z ^ (z >> 27)) * 0x94D049BB133111EBULL;
	return z ^ (z >> 31);
}

#define PROP_WIRE_SEED 0x6F74656C2D656270ULL

static __always_inline __u64 prop_addr_word(const __u32 a[4], int half)
{
	return ((__u64)bpf_ntohl(a[2 * half]) << 32) | bpf_ntohl(a[2 * half + 1]);
}

static __always_inline void prop_put_be64(__u8 *out, __u64 v)
{
	for (int i = 0; i < 8; i++)
		out[i] = v >> (56 - 8 * i);
}

/* The trace ID both hosts derive for a request from its wire identity, the connection as
 * the server sees it (`k`: this server socket's) and the TCP sequence number of its first
 * byte: otel_ebpf/correlate/joiner.py, wire_ids, computes the same. */
static __always_inline void prop_wire_trace(const struct prop_key *k, __u32 seq, __u8 out[16])
{
	__u64 words[5] = {
		prop_addr_word(k->remote, 0), prop_addr_word(k->remote, 1),
		prop_addr_word(k->local, 0), prop_addr_word(k->local, 1),
		(__u64)k->remote_port << 48 | (__u64)k->local_port << 32 | seq,
	};
	__u64 h = PROP_WIRE_SEED;
	for (int i = 0; i < 5; i++)
		h = prop_splitmix(h ^ words[i]);
	prop_put_be64(out, prop_splitmix(h ^ 1));
	prop_put_be64(out + 8, prop_splitmix(h ^ 2));
}

/* A server connection's request is read (the bytes turned from egress to ingress): the
 * reading thread serves it from here. `seq`: the TCP sequence number of its first byte,
 * `len`: the bytes this read moved. */
static __always_inline void prop_request_read(struct thread_state *t, struct conn_state *st,
					      struct sock *sk, __u32 seq, __u64 len)
{
	struct prop_origin *o = &t->req;
	if (o->set && !o->interleaved && (o->conn.fd != st->key.fd || o->conn.gen != st->key.gen)) {
		/* the request this thread read before, on another connection, not answered yet:
		 * the thread serves several at once (an event loop, not a thread per request) */
		__u64 mkey = conn_map_key(o->conn.pid, o->conn.fd);
		struct conn_state *before = bpf_map_lookup_elem(&conns, &mkey);
		if (before && before->key.gen == o->conn.gen && before->last_dir == 1 + DIR_INGRESS)
			o->interleaved = 1;
	}
	struct prop_key k = {};
	struct prop_in_value *in = NULL;
	if (prop_key_of_sock(sk, &k))
		in = bpf_map_lookup_elem(&prop_in, &k);
	else
		k.family = 0;
	if (in && in->seq - seq < (__u32)len) { /* the peer's context names this request */
		__builtin_memcpy(o->trace_id, in->trace_id, sizeof(o->trace_id));
		o->flags = in->flags;
	} else if (k.family) {
		/* no context came: the trace both hosts derive from the request's wire identity,
		 * which user space gives the request too when no client end is seen here, and a
		 * root's trace takes otherwise */
		prop_wire_trace(&k, seq, o->trace_id);
		o->flags = PROP_F_SAMPLED;
	} else {
		return;
	}
	o->conn = st->key;
	o->pos = st->pos[DIR_INGRESS];
	o->read_ns = bpf_ktime_get_ns();
	o->set = 1;
	o->fresh = 1;
}

/* A Context is copied on this thread (`parent`: the thread's own Context): the copy serves
 * the request the thread just read (within PROP_FRESH_NS, first copy only), else what
 * `parent` serves. */
static __always_inline void prop_context_copied(struct thread_state *t, __u64 copy,
						__u64 parent)
{
	if (t && t->req.fresh && bpf_ktime_get_ns() - t->req.read_ns < PROP_FRESH_NS) {
		t->req.fresh = 0;
		struct prop_origin c = t->req;
		c.interleaved = 0; /* the thread's, not the request's */
		bpf_map_update_elem(&prop_traces, &copy, &c, BPF_ANY);
		return;
	}
	if (!parent)
		return;
	struct prop_origin *o = bpf_map_lookup_elem(&prop_traces, &parent);
	if (o) {
		struct prop_origin c = *o;
		bpf_map_update_elem(&prop_traces, &copy, &c, BPF_ANY);
	}
}

/* The request a write on this thread is made for: its Context's, or for a thread that has
 * no Context at all (C, or Python code that never used contextvars), the thread's own, if
 * it serves one request at a time (a thread per request). */
static __always_inline struct prop_origin *prop_served(struct thread_state *t)
{
	__u64 context = py_current_context(t);
	if (context)
		return bpf_map_lookup_elem(&prop_traces, &context);
	return t->req.set && !t->req.interleaved ? &t->req : NULL;
}

/* A client connection's request is about to be written: queue its context for the option
 * of its first segment, and tell user space. `seq`: the TCP sequence number its first byte
 * will have. */
static __always_inline void prop_request_write(struct thread_state *t, struct conn_state *st,
					       struct sock *sk, __u32 seq, __u64 ts)
{
	struct prop_origin *o = prop_served(t);
	if (!o)
		return;
	struct prop_key k = {};
	if (!prop_key_of_sock(sk, &k) || prop_loopback(k.remote) || !prop_trusted_addr(k.remote))
		return;
	struct prop_pending fresh = {};
	struct prop_pending *p = bpf_map_lookup_elem(&prop_out, &k);
	if (!p) {
		bpf_map_update_elem(&prop_out, &k, &fresh, BPF_NOEXIST);
		p = bpf_map_lookup_elem(&prop_out, &k);
		if (!p)
			return;
	}
	int free = -1;
	for (int i = 0; i < PROP_SLOTS; i++) {
		if (!p->slots[i].order) {
			free = i;
			break;
		}
	}
	if (free < 0 || free >= PROP_SLOTS) {
		count(CNT_PROP_SLOTS_FULL, 1);
		return;
	}
	struct prop_slot *s = &p->slots[free];
	__builtin_memcpy(s->trace_id, o->trace_id, sizeof(s->trace_id));
	s->seq = seq;
	s->flags = o->flags;
	s->order = 1; /* before any context user space queued: this one is for this segment */
	count(CNT_PROP_AT_SEND, 1);

	struct context_out_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		count(CNT_RINGBUF_DROPS, 1);
		return;
	}
	ev->hdr.type = EV_CONTEXT_OUT;
	ev->hdr._pad[0] = ev->hdr._pad[1] = ev->hdr._pad[2] = 0;
	ev->hdr.tid = (__u32)bpf_get_current_pid_tgid();
	ev->hdr.ts_ns = ts;
	ev->conn = st->key;
	ev->pos = st->pos[DIR_EGRESS];
	ev->seq = seq;
	ev->flags = o->flags;
	ev->_pad[0] = ev->_pad[1] = ev->_pad[2] = 0;
	__builtin_memcpy(ev->trace_id, o->trace_id, sizeof(ev->trace_id));
	ev->origin = o->conn;
	ev->origin_pos = o->pos;
	bpf_ringbuf_submit(ev, wakeup_flags());
}

#endif
