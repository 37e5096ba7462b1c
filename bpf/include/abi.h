/* SPDX-License-Identifier: Apache-2.0 */
/* Every struct and enum shared between the BPF programs and user space; nothing else.
 * otel_ebpf/kernel/abi.py mirrors this file; a unit test checks the two agree. */
#ifndef OTEL_EBPF_ABI_H
#define OTEL_EBPF_ABI_H

#define ABI_VERSION 7
#define MAX_CAPTURE 65536 /* largest payload prefix captured per message (power of two) */
#define MAX_TARGETS 1024  /* entries in each target-selection map */
#define COMM_LEN 16
#define MAX_IOV 64        /* iovec entries walked per readv/writev/sendmsg/recvmsg (grpc writes 20+) */
#define MAX_MMSG 8        /* messages walked per sendmmsg/recvmmsg */
#define MAX_MMSG_IOV 4    /* iovec entries walked per sendmmsg/recvmmsg message (datagrams) */
#define MAX_WIDE_KEYS 32  /* request-path keys that widen a connection's capture (LLM, MCP, vector-DB APIs) */

enum event_type {
	EV_CONN_OPEN = 1,
	EV_CONN_CLOSE = 2,
	EV_DATA = 3,
	EV_PROC_EXIT = 4,
	EV_TASK_NEW = 5,
	EV_PROC_EXEC = 6,   /* a process exec'd a new program (same layout as proc_exit_event) */
	EV_PROC_FORK = 7,   /* a process whose Context probes are its own forked a child (pid: the
			     * child; same layout as proc_exit_event) */
	EV_CONTEXT_IN = 8,  /* a trusted peer's trace context arrived in a TCP option
			     * (propagation.bpf.c; struct context_in_event) */
	EV_CONTEXT_OUT = 9, /* a request's context was queued for its TCP option at its first
			     * write (socket_trace.bpf.c; struct context_out_event) */
};

enum direction {
	DIR_EGRESS = 0,  /* the process wrote the bytes */
	DIR_INGRESS = 1, /* the process read the bytes */
};

enum conn_role {
	ROLE_UNKNOWN = 0,
	ROLE_CLIENT = 1, /* we saw connect() */
	ROLE_SERVER = 2, /* we saw accept() */
};

enum conn_flags {
	CONN_F_STREAM = 1 << 0,   /* SOCK_STREAM (else datagram) */
	CONN_F_UNIX = 1 << 1,     /* AF_UNIX */
	CONN_F_TCP = 1 << 2,      /* IPPROTO_TCP: tcp_seq fields are meaningful */
	CONN_F_PREEXISTING = 1 << 3, /* first seen on data, not on connect/accept */
	CONN_F_PIPE = 1 << 4,     /* a pipe or FIFO of a selected process (local.bytes: inode number) */
};

enum data_flags {
	DATA_F_TRUNCATED = 1 << 0, /* msg_len > captured_len */
	DATA_F_HAS_PEER = 1 << 1,  /* peer holds the datagram's source or destination */
	DATA_F_WIDE = 1 << 2,      /* captured with the wide capture size (see agent_config) */
	DATA_F_TLS = 1 << 3,       /* plaintext of a TLS session (OpenSSL uprobes); its own positions */
	DATA_F_NO_SEQ = 1 << 4,    /* tcp_seq unknown (TLS plaintext not tied to one syscall) */
};

/* Counters in the per-CPU `counters` array, by index. */
enum counter_idx {
	CNT_RINGBUF_DROPS = 0,  /* bpf_ringbuf_output failed: the ring was full */
	CNT_TRUNCATED = 1,      /* messages longer than the capture size */
	CNT_CONN_OPENED = 2,
	CNT_CONN_CLOSED = 3,
	CNT_DATA_EVENTS = 4,
	CNT_IOV_LIMIT = 5,      /* iovec or mmsg entries beyond MAX_IOV/MAX_MMSG not captured */
	CNT_WIDENED = 6,        /* connections whose capture was widened (an LLM request seen) */
	CNT_TLS_UNBOUND = 7,    /* SSL calls whose socket could not be found (plaintext lost) */
	CNT_MUTED = 8,          /* connections user space muted: no parser wants their bytes */
	/* the trace-context TCP option (propagation.bpf.c) */
	CNT_PROP_WRITTEN = 9,   /* options written into an outgoing segment */
	CNT_PROP_NO_ROOM = 10,  /* segments that went out without a pending context: no option
				 * space left (SACK blocks), or a segment the option would split or
				 * push past the MTU; the context waits for the next one */
	CNT_PROP_RECEIVED = 11, /* options received from a trusted source (a record each) */
	CNT_PROP_REFUSED = 12,  /* options received from an untrusted source: dropped */
	CNT_PROP_UNTRUSTED_DST = 13, /* connections made to an untrusted address: never written */
	CNT_PROP_AT_SEND = 14,  /* requests whose context was queued at their first write */
	CNT_PROP_SLOTS_FULL = 15, /* ... that found PROP_SLOTS contexts pending: none queued */
	CNT_MAX = 16,
};

struct addr {
	__u8 bytes[16]; /* IPv4 in the first 4 bytes; IPv6 whole */
	__u16 port;     /* host byte order */
	__u16 family;   /* AF_INET, AF_INET6, AF_UNIX or 0 */
	__u32 _pad;
};

/* Identifies one socket of one process for its whole life. */
struct conn_key {
	__u32 pid; /* tgid */
	__s32 fd;
	__u64 gen; /* bpf_ktime_get_ns() when first seen: fd reuse never merges two */
};

struct event_header {
	__u8 type;
	__u8 _pad[3];
	__u32 tid;
	__u64 ts_ns;
};

struct conn_open_event {
	struct event_header hdr;
	struct conn_key key;
	struct addr local;
	struct addr remote;
	__u32 role;
	__u32 flags;
	char comm[COMM_LEN];
};

struct conn_close_event {
	struct event_header hdr;
	struct conn_key key;
	__u64 bytes_sent;
	__u64 bytes_recv;
};

struct data_event {
	struct event_header hdr; /* ts_ns: syscall entry */
	struct conn_key key;
	__u64 exit_ns;           /* syscall return */
	__u64 pos;               /* bytes in this direction before this message */
	__u32 msg_len;           /* bytes the syscall moved */
	__u32 captured_len;      /* bytes of payload that follow this header */
	__u32 tcp_seq;           /* TCP sequence number of the first byte (CONN_F_TCP) */
	__u8 direction;
	__u8 flags;
	__u16 tail_len;          /* the payload's last tail_len bytes are the message's last
				  * bytes (its middle was not captured); the rest is its prefix */
	struct addr peer;        /* DATA_F_HAS_PEER: datagram source/destination */
	__u64 task;              /* the contextvars.Context the thread ran in (its address), or 0 */
	/* payload follows */
};

/* A contextvars.Context was copied (uprobe pair on CPython's PyContext_CopyCurrent): an
 * asyncio task's creation, a thread-pool call's hand-off. */
struct task_event {
	struct event_header hdr;
	__u32 pid;
	__u32 _pad;
	__u64 task;    /* the new Context's address */
	__u64 parent;  /* the Context the copying thread ran in, or 0 */
	__u64 entered; /* the Context the thread's event loop last entered to run a protocol
			* callback (uvloop), or 0 */
	__u64 entered_ns; /* when it entered it */
};

struct proc_exit_event {
	struct event_header hdr;
	__u32 pid;
	__u32 _pad;
};

/* ---- trace context in a TCP header option (propagation.bpf.c) -------------------------
 * RFC 6994 shared experimental option: kind 253, then a 2-byte experiment identifier (ExID).
 * 0x07E1 ("OTEL" in hex-speak) is not among the ExIDs IANA lists in its TCP ExID registry
 * (RFC 6994 section 3.1 asks users to register theirs: do so before any deployment beyond
 * networks one controls). The option, 25 bytes, all numbers in network order:
 *   kind 253 | length 25 | ExID 0x07E1 | seq (4) | flags (1, bit 0: sampled) | trace id (16)
 * 25 bytes take 28 of the 40 bytes of TCP options (4-byte alignment): exactly what the
 * timestamps option (12 with its padding) leaves. */
#define PROP_OPT_KIND 253
#define PROP_EXID 0x07E1
#define PROP_OPT_LEN 25
#define PROP_F_SAMPLED 1
#define PROP_SLOTS 4          /* contexts pending per connection (HTTP/2: requests in flight) */
#define PROP_MAX_CONNS 16384  /* connections with pending contexts (LRU) */
#define PROP_MAX_NETS 1024    /* trusted networks */

/* A TCP connection as one of its sockets sees it. IPv4 (an AF_INET socket, or an AF_INET6
 * one talking to an IPv4-mapped address) is family AF_INET with the addresses as
 * IPv4-mapped IPv6 (::ffff:a.b.c.d), so one key names the connection whichever socket
 * family carries it, and the remote address is a trusted-network key as it stands. */
struct prop_key {
	__u32 local[4];     /* network order */
	__u32 remote[4];
	__u16 local_port;   /* host order */
	__u16 remote_port;
	__u16 family;       /* AF_INET or AF_INET6 */
	__u16 _pad;
};

/* One context waiting for the next outgoing segment of its connection. */
struct prop_slot {
	__u8 trace_id[16];
	__u32 seq;          /* host order: the TCP sequence number of the request's first byte */
	__u32 order;        /* user space's counter, increasing: the lowest is sent first; 0: free */
	__u8 flags;         /* PROP_F_SAMPLED */
	__u8 _pad[7];
};

/* prop_out's value: written by user space (send), each slot cleared by the kernel once its
 * context is in a segment. */
struct prop_pending {
	struct prop_slot slots[PROP_SLOTS];
};

/* A trusted network: an LPM trie key, IPv4 as IPv4-mapped IPv6 (prefix length + 96). */
struct prop_net {
	__u32 prefixlen;
	__u32 addr[4];      /* network order */
};

/* A context a trusted peer sent (EV_CONTEXT_IN), parsed from a segment it received. */
struct context_in_event {
	struct event_header hdr; /* ts_ns: when the segment was parsed; tid: 0 */
	struct prop_key conn;    /* as the receiving (server) socket sees it */
	__u32 seq;               /* host order: the sender's request's first byte */
	__u8 flags;
	__u8 _pad[3];
	__u8 trace_id[16];
};

/* A request's context, queued for the TCP option of its first segment at its first write
 * (EV_CONTEXT_OUT): the trace of the request the writing thread or Context serves. */
struct context_out_event {
	struct event_header hdr; /* ts_ns: the write's entry */
	struct conn_key conn;    /* the client connection */
	__u64 pos;               /* its bytes written before the request */
	__u32 seq;               /* host order: TCP sequence number of the request's first byte */
	__u8 flags;              /* PROP_F_SAMPLED */
	__u8 _pad[3];
	__u8 trace_id[16];
	struct conn_key origin;  /* the served request's connection (a server connection) */
	__u64 origin_pos;        /* its bytes read before the served request */
};

/* Settings written into .rodata before load; one struct so user space mirrors it exactly. */
struct agent_config {
	__u32 abi_version;
	__u32 agent_pid;        /* never trace this tgid */
	__u32 capture_max;      /* payload bytes per message, <= MAX_CAPTURE */
	__u32 filter_pids;      /* nonzero: target_pids map is a filter */
	__u32 filter_comms;     /* nonzero: target_comms map is a filter */
	__u32 filter_ports;     /* nonzero: target_ports map is a filter */
	__u32 wakeup_bytes;     /* force a wake-up when the ring holds more than this */
	__u32 ignore_ports;     /* nonzero: never select connections on ignored_ports */
	/* Wide capture: a connection that sends or receives "POST " + a path whose first 8
	 * bytes equal a wide_keys entry (an LLM API call) is captured with wide_capture bytes
	 * per message from then on (that message included), plus its last tail_capture bytes
	 * when longer: a prompt's JSON may name its model only at the end. */
	__u32 wide_capture;     /* 0: off */
	__u32 tail_capture;     /* <= wide_capture */
	__u32 wide_key_count;   /* entries used in wide_keys */
	__u32 pipes;            /* nonzero: capture pipes of the processes in pipe_pids */
	__u32 wakeup_step;      /* a CPU looks at the ring's fill once it has sent this many
				 * bytes since it last looked (0: at every record) */
	__u32 propagate;        /* nonzero: a request's trace context goes into its TCP option
				 * at its first write (propagation.enabled) */
	__u32 exec_by_argv;     /* nonzero: every exec is told (user space matches process
				 * names against its argv: `python3 train.py`'s comm is python3) */
	__u32 _pad;
	__u64 wide_keys[MAX_WIDE_KEYS]; /* first 8 path bytes, as a little-endian u64 */
};

#endif
