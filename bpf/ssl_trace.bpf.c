// SPDX-License-Identifier: GPL-2.0
/* TLS plaintext from OpenSSL uprobes: SSL_write/SSL_read (and their _ex forms) on the way
 * out and on return, emitted as data events of the socket under the SSL session, with
 * stream positions of their own (DATA_F_TLS). Linked with socket_trace.bpf.c (shared maps).
 *
 * Which socket: a syscall the SSL call makes on this thread names it (sockets used by fd:
 * Python's ssl.SSLSocket, curl, nginx); for sessions on memory BIOs (asyncio's SSL
 * transport) no syscall happens inside SSL_read, and the socket is the one this thread
 * read last (the loop feeds a BIO with what it just read, then calls SSL_read). Either
 * way the session remembers its socket (ssl_fds). */
#include "capture.bpf.h"

/* SSL_do_handshake moves no application bytes: it only binds the session to its socket,
 * early enough for a client on a memory BIO whose first data call is a write. */
#define SSL_HANDSHAKE 2

static __always_inline int ssl_enter(void *ssl, void *buf, void *ex_len, __u8 dir)
{
	__u64 id = bpf_get_current_pid_tgid();
	if ((id >> 32) == cfg.agent_pid)
		return 0;
	struct ssl_call call = {
		.ssl = (__u64)ssl, .buf = (__u64)buf, .ex_len = (__u64)ex_len,
		.enter_ns = bpf_ktime_get_ns(), .fd = -1, .dir = dir, .active = 1,
	};
	struct thread_state *t = thread_state_made(id);
	if (t)
		t->ssl = call;
	return 0;
}

/* The socket of this SSL call: the one a syscall inside it used; else the one the session
 * used before; else, for a read on a memory BIO, the one this thread just read (then the
 * TCP sequence number of that read is the plaintext's too). */
static __always_inline int ssl_socket(struct ssl_call *call, struct ssl_key *key,
				      struct last_read *last, __u32 *seq, bool *has_seq)
{
	if (call->fd >= 0) {
		*seq = call->seq;
		*has_seq = call->has_seq;
		return call->fd;
	}
	__s32 *known = bpf_map_lookup_elem(&ssl_fds, key);
	if (call->dir != DIR_EGRESS && last->fresh && (!known || *known == last->fd)) {
		last->fresh = 0;
		*seq = last->seq;
		*has_seq = last->has_seq;
		return last->fd;
	}
	return known ? *known : -1;
}

static __always_inline int ssl_exit(long ret, bool ex)
{
	__u64 id = bpf_get_current_pid_tgid();
	struct thread_state *t = bpf_map_lookup_elem(&threads, &id);
	if (!t || !t->ssl.active)
		return 0;
	struct ssl_call call = t->ssl;
	t->ssl.active = 0;
	if (call.dir == SSL_HANDSHAKE) { /* in progress or done, the socket is known now */
		struct ssl_key key = {.tgid = id >> 32, .ssl = call.ssl};
		__u32 seq;
		bool has_seq;
		int fd = ssl_socket(&call, &key, &t->last, &seq, &has_seq);
		if (fd >= 0)
			bpf_map_update_elem(&ssl_fds, &key, &fd, BPF_ANY);
		return 0;
	}
	__u64 len = 0;
	if (ex) { /* SSL_write_ex/SSL_read_ex: 1 on success, the count through a pointer */
		if (ret != 1 || !call.ex_len ||
		    bpf_probe_read_user(&len, sizeof(len), (void *)call.ex_len))
			return 0;
	} else {
		if (ret <= 0)
			return 0;
		len = ret;
	}
	if (!len)
		return 0;
	struct ssl_key key = {.tgid = id >> 32, .ssl = call.ssl};
	__u32 seq = 0;
	bool has_seq = false;
	int fd = ssl_socket(&call, &key, &t->last, &seq, &has_seq);
	if (fd < 0) {
		count(CNT_TLS_UNBOUND, 1);
		return 0;
	}
	bpf_map_update_elem(&ssl_fds, &key, &fd, BPF_ANY);
	struct socket *sock = fd_to_socket(fd);
	if (!sock)
		return 0;
	struct conn_state *st = get_conn(fd, sock, ROLE_UNKNOWN, false);
	if (!st)
		return 0;
	st->tls = 1; /* from now on its socket bytes are ciphertext: not sent */
	if (!st->traced || !(st->flags & CONN_F_STREAM))
		return 0;
	struct syscall_args a = {.enter_ns = call.enter_ns, .fd = fd};
	emit_data(py_current_context(t), st, &a, call.dir, len, call.buf, 0, 0, NULL, seq, 0, true, true, has_seq);
	return 0;
}

/* int SSL_write(SSL *ssl, const void *buf, int num) / int SSL_read(SSL *ssl, void *buf, int num) */
SEC("uprobe")
int BPF_KPROBE(ssl_write_enter, void *ssl, void *buf) { return ssl_enter(ssl, buf, 0, DIR_EGRESS); }

SEC("uprobe")
int BPF_KPROBE(ssl_read_enter, void *ssl, void *buf) { return ssl_enter(ssl, buf, 0, DIR_INGRESS); }

SEC("uretprobe")
int BPF_KRETPROBE(ssl_exit_plain, int ret) { return ssl_exit(ret, false); }

/* int SSL_write_ex(SSL *s, const void *buf, size_t num, size_t *written), and SSL_read_ex
 * with size_t *readbytes */
SEC("uprobe")
int BPF_KPROBE(ssl_write_ex_enter, void *ssl, void *buf, size_t num, size_t *written)
{
	return ssl_enter(ssl, buf, written, DIR_EGRESS);
}

SEC("uprobe")
int BPF_KPROBE(ssl_read_ex_enter, void *ssl, void *buf, size_t num, size_t *readbytes)
{
	return ssl_enter(ssl, buf, readbytes, DIR_INGRESS);
}

SEC("uretprobe")
int BPF_KRETPROBE(ssl_exit_ex, int ret) { return ssl_exit(ret, true); }

/* int SSL_do_handshake(SSL *s) */
SEC("uprobe")
int BPF_KPROBE(ssl_handshake_enter, void *ssl) { return ssl_enter(ssl, 0, 0, SSL_HANDSHAKE); }
