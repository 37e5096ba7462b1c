// SPDX-License-Identifier: GPL-2.0
/* Trace context in a TCP header option (docs/correlation.md, "TCP option carrier").
 *
 * A call's context waits in `prop_out` under its connection: queued by the capture
 * programs at the call's first write (prop_send.bpf.h), or by the client node's agent
 * after the fact, when the kernel could not tell which request the call was made for.
 * This program puts it into the connection's next outgoing segment (the call's first
 * segment when queued at its write; else a data segment, a pure ACK, the FIN: whichever
 * leaves first), one context per segment, oldest first. The server node's copy of this program finds the option in the segment
 * it receives and hands it to its agent through the capture ring (EV_CONTEXT_IN). No
 * payload byte is touched: the option lives in the TCP header only.
 *
 * One sock_ops program, attached to a cgroup v2 by user space (otel_ebpf/kernel/
 * propagation.py), linked into capture.bpf.o so that it shares the capture maps: the
 * `events` ring, the `counters` (capture.bpf.h), and `prop_out`, which the capture
 * programs also fill at a call's first write (prop_send.bpf.h).
 *
 * What runs when:
 *   ACTIVE_ESTABLISHED   a connection this node opened: towards a trusted address other than
 *                        loopback (one agent sees both ends of those), ask for
 *                        the option callbacks (HDR_OPT_LEN and WRITE_HDR_OPT, per segment);
 *                        otherwise ask for nothing, so an untrusted connection costs
 *                        nothing per segment and can never carry a context.
 *   PASSIVE_ESTABLISHED  a connection this node accepted: ask for the parse callback,
 *                        which the kernel runs only for segments carrying an option it
 *                        does not know (so a connection without ours costs nothing).
 *   HDR_OPT_LEN          before each segment is built: one lookup of `prop_out`; when a
 *                        context is pending, reserve room for it.
 *   WRITE_HDR_OPT        only after a reservation: write the oldest pending context, clear
 *                        its slot.
 *   PARSE_HDR_OPT        a received segment with an unknown option: is it ours, and is its
 *                        source trusted? Then a record; else a count.
 */
#include "capture.bpf.h"

#define TCP_OPT_ROOM 28 /* what the kernel reserves for our 25 bytes (4-byte aligned) */

/* The option as it is on the wire (25 bytes; the tail pad is never sent). */
struct prop_opt {
	__u8 kind;
	__u8 len;
	__u16 exid;     /* network order */
	__u32 seq;      /* network order */
	__u8 flags;
	__u8 trace_id[16];
	__u8 _pad[3];
};

/* The connection as this socket sees it (struct prop_key): IPv4, whichever the socket's
 * family, as IPv4-mapped IPv6. False for a socket that is neither IPv4 nor IPv6. */
static __always_inline bool prop_key_of(struct bpf_sock_ops *skops, struct prop_key *k)
{
	__u32 family = skops->family;
	k->local_port = skops->local_port;               /* host order */
	k->remote_port = bpf_ntohl(skops->remote_port);  /* network order in the upper half */
	if (family == AF_INET) {
		k->local[2] = k->remote[2] = bpf_htonl(0xffff);
		k->local[3] = skops->local_ip4;
		k->remote[3] = skops->remote_ip4;
		k->family = AF_INET;
		return true;
	}
	if (family != AF_INET6)
		return false;
	k->local[0] = skops->local_ip6[0];
	k->local[1] = skops->local_ip6[1];
	k->local[2] = skops->local_ip6[2];
	k->local[3] = skops->local_ip6[3];
	k->remote[0] = skops->remote_ip6[0];
	k->remote[1] = skops->remote_ip6[1];
	k->remote[2] = skops->remote_ip6[2];
	k->remote[3] = skops->remote_ip6[3];
	k->family = (!k->remote[0] && !k->remote[1] && k->remote[2] == bpf_htonl(0xffff))
		? AF_INET : AF_INET6;
	return true;
}

/* The pending slot to send next (the lowest order), or -1. */
static __always_inline int prop_oldest(struct prop_pending *p)
{
	int pick = -1;
	__u32 best = 0;
	for (int i = 0; i < PROP_SLOTS; i++) {
		__u32 order = p->slots[i].order;
		if (order && (pick < 0 || order < best)) {
			pick = i;
			best = order;
		}
	}
	return pick;
}

static __always_inline void prop_active(struct bpf_sock_ops *skops)
{
	struct prop_key k = {};
	if (!prop_key_of(skops, &k))
		return;
	if (prop_loopback(k.remote))
		return; /* one agent sees both ends: no option, so no callback per segment */
	if (!prop_trusted_addr(k.remote)) {
		count(CNT_PROP_UNTRUSTED_DST, 1);
		return;
	}
	/* a new connection on a 4-tuple used before starts with nothing pending */
	bpf_map_delete_elem(&prop_out, &k);
	bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
				  BPF_SOCK_OPS_WRITE_HDR_OPT_CB_FLAG);
}

/* Before a segment is built, and when the kernel sizes the segments of a write
 * (tcp_current_mss: no segment then, skb_tcp_flags 0): reserve room when a context is
 * pending. This runs for every segment of every trusted connection, so it does one hash
 * lookup and nothing else when nothing is pending (the common case). */
static __always_inline void prop_reserve(struct bpf_sock_ops *skops)
{
	struct prop_key k = {};
	if (!prop_key_of(skops, &k))
		return;
	struct prop_pending *p = bpf_map_lookup_elem(&prop_out, &k);
	if (!p || prop_oldest(p) < 0)
		return;
	bool sizing = skops->skb_tcp_flags == 0; /* every real segment here carries ACK */
	/* A segment the option would push past the path's MTU, or a TSO/GSO one whose header
	 * (with the option) every segment cut from it would repeat: not this one. Reserving
	 * while the kernel sizes a write makes its segments leave room for the option. */
	if (!sizing && skops->skb_len + TCP_OPT_ROOM > skops->mss_cache) {
		count(CNT_PROP_NO_ROOM, 1);
		return;
	}
	if (bpf_reserve_hdr_opt(skops, PROP_OPT_LEN, 0) != 0 && !sizing)
		count(CNT_PROP_NO_ROOM, 1); /* the options in use leave less than 28 bytes */
}

static __always_inline void prop_write(struct bpf_sock_ops *skops)
{
	struct prop_key k = {};
	if (!prop_key_of(skops, &k))
		return;
	struct prop_pending *p = bpf_map_lookup_elem(&prop_out, &k);
	if (!p)
		return;
	int i = prop_oldest(p);
	if (i < 0 || i >= PROP_SLOTS)
		return;
	struct prop_slot *s = &p->slots[i];
	struct prop_opt opt = {
		.kind = PROP_OPT_KIND,
		.len = PROP_OPT_LEN,
		.exid = bpf_htons(PROP_EXID),
		.seq = bpf_htonl(s->seq),
		.flags = s->flags,
	};
	__builtin_memcpy(opt.trace_id, s->trace_id, sizeof(opt.trace_id));
	if (bpf_store_hdr_opt(skops, &opt, PROP_OPT_LEN, 0) != 0) {
		count(CNT_PROP_NO_ROOM, 1); /* the kernel pads the room with NOPs */
		return;
	}
	s->order = 0;
	count(CNT_PROP_WRITTEN, 1);
	if (prop_oldest(p) < 0)
		bpf_map_delete_elem(&prop_out, &k); /* so the next segments miss at once */
}

static __always_inline void prop_parse(struct bpf_sock_ops *skops)
{
	/* kind 253 with length 4 searches by the 2-byte ExID that follows (RFC 6994). Set
	 * field by field: an initializer would be a constant in .rodata, which this object
	 * keeps for the agent's settings alone (struct agent_config). */
	struct prop_opt opt = {};
	opt.kind = PROP_OPT_KIND;
	opt.len = 4;
	opt.exid = bpf_htons(PROP_EXID);
	long n = bpf_load_hdr_opt(skops, &opt, sizeof(opt), 0);
	if (n != PROP_OPT_LEN || opt.len != PROP_OPT_LEN)
		return; /* someone else's option, or a malformed one */
	struct prop_key k = {};
	if (!prop_key_of(skops, &k))
		return;
	if (!prop_trusted_addr(k.remote)) {
		count(CNT_PROP_REFUSED, 1);
		return;
	}
	/* for the read of the request it names: the server's own calls out carry its trace */
	struct prop_in_value in = {.seq = bpf_ntohl(opt.seq), .flags = opt.flags};
	__builtin_memcpy(in.trace_id, opt.trace_id, sizeof(in.trace_id));
	bpf_map_update_elem(&prop_in, &k, &in, BPF_ANY);
	struct context_in_event *ev = bpf_ringbuf_reserve(&events, sizeof(*ev), 0);
	if (!ev) {
		count(CNT_RINGBUF_DROPS, 1);
		return;
	}
	ev->hdr.type = EV_CONTEXT_IN;
	ev->hdr._pad[0] = ev->hdr._pad[1] = ev->hdr._pad[2] = 0;
	ev->hdr.tid = 0;
	ev->hdr.ts_ns = bpf_ktime_get_ns();
	ev->conn = k;
	ev->seq = bpf_ntohl(opt.seq);
	ev->flags = opt.flags;
	ev->_pad[0] = ev->_pad[1] = ev->_pad[2] = 0;
	__builtin_memcpy(ev->trace_id, opt.trace_id, sizeof(ev->trace_id));
	bpf_ringbuf_submit(ev, wakeup_flags());
	count(CNT_PROP_RECEIVED, 1);
}

SEC("sockops")
int prop_sockops(struct bpf_sock_ops *skops)
{
	switch (skops->op) {
	case BPF_SOCK_OPS_HDR_OPT_LEN_CB:
		prop_reserve(skops);
		break;
	case BPF_SOCK_OPS_WRITE_HDR_OPT_CB:
		prop_write(skops);
		break;
	case BPF_SOCK_OPS_PARSE_HDR_OPT_CB:
		prop_parse(skops);
		break;
	case BPF_SOCK_OPS_ACTIVE_ESTABLISHED_CB:
		prop_active(skops);
		break;
	case BPF_SOCK_OPS_PASSIVE_ESTABLISHED_CB:
		bpf_sock_ops_cb_flags_set(skops, skops->bpf_sock_ops_cb_flags |
					  BPF_SOCK_OPS_PARSE_UNKNOWN_HDR_OPT_CB_FLAG);
		break;
	}
	return 1; /* 0 would make the kernel ignore the reservation (and refuse other ops) */
}
