/* SPDX-License-Identifier: Apache-2.0 */
/* The ring buffer drained in C: libbpf calls a C function per record (no ctypes callback,
 * no Python object per record while draining, the GIL released), records are copied into
 * one growing arena, then decoded in a single pass into the events otel_ebpf/kernel/abi.py
 * defines. The events that come by the thousand (data, a datagram's with its peer, close,
 * and an asyncio program's Context copies) are built here; every other record is handed
 * back as bytes for abi.decode, which stays the reference (tests/unit/test_fast_ring.py
 * decodes the same records both ways).
 *
 *   configure(DataEvent, ConnClose, directions[, make_task[, make_peer]])   once, from
 *       otel_ebpf/kernel/abi.py; make_task(pid, tid, ts_ns, task, parent, entered,
 *       entered_ns) -> TaskNew,
 *       make_peer(raw, family, port) -> (address, port)
 *   decode(records: list[bytes]) -> (events, n_raw)
 *   Ring(fds).poll(timeout_ms) -> (events, n_raw, rc)
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <errno.h>
#include <stdint.h>
#include <string.h>
#include <linux/types.h>
#include <bpf/libbpf.h>

#include "abi.h"

#define ARENA_KEEP (1u << 20) /* arena bytes kept between polls */

static PyTypeObject *data_type, *close_type; /* abi.DataEvent, abi.ConnClose (named tuples) */
static PyObject *directions;                 /* (Direction.EGRESS, Direction.INGRESS) */
static PyObject *make_task;                  /* abi's TaskNew maker, or NULL: handed back */
static PyObject *make_peer;                  /* abi's peer maker, or NULL: handed back */
static PyObject *empty_bytes;

/* A datagram socket's peers recur too (a DDS participant's few ports): the (address, port)
 * tuples made last are kept, direct-mapped by address and port, like the keys below. */
#define PEERS_KEPT 64 /* a power of two */

static struct kept_peer {
	struct addr addr;
	PyObject *value;
} kept_peers[PEERS_KEPT];

static PyObject *configure(PyObject *self, PyObject *args)
{
	PyObject *d, *c, *dirs, *task = NULL, *peer = NULL;
	if (!PyArg_ParseTuple(args, "O!O!O!|OO", &PyType_Type, &d, &PyType_Type, &c, &PyTuple_Type,
			      &dirs, &task, &peer))
		return NULL;
	if (task == Py_None)
		task = NULL;
	if (peer == Py_None)
		peer = NULL;
	if ((task && !PyCallable_Check(task)) || (peer && !PyCallable_Check(peer))) {
		PyErr_SetString(PyExc_TypeError, "configure: make_task and make_peer must be callable");
		return NULL;
	}
	if (!PyType_IsSubtype((PyTypeObject *)d, &PyTuple_Type) ||
	    !PyType_IsSubtype((PyTypeObject *)c, &PyTuple_Type) || PyTuple_GET_SIZE(dirs) != 2) {
		PyErr_SetString(PyExc_TypeError, "configure(DataEvent, ConnClose, (egress, ingress))");
		return NULL;
	}
	Py_INCREF(d);
	Py_INCREF(c);
	Py_INCREF(dirs);
	Py_XSETREF(data_type, (PyTypeObject *)d);
	Py_XSETREF(close_type, (PyTypeObject *)c);
	Py_XSETREF(directions, dirs);
	Py_XINCREF(task);
	Py_XSETREF(make_task, task);
	Py_XINCREF(peer);
	Py_XSETREF(make_peer, peer);
	for (size_t i = 0; i < PEERS_KEPT; i++) /* made by the maker before: made again */
		Py_CLEAR(kept_peers[i].value);
	Py_RETURN_NONE;
}

/* a named tuple of `type` holding items (stolen); NULL items: an error happened */
static PyObject *make(PyTypeObject *type, PyObject **items, Py_ssize_t n)
{
	for (Py_ssize_t i = 0; i < n; i++)
		if (!items[i])
			goto fail;
	PyObject *t = type->tp_alloc(type, n);
	if (!t)
		goto fail;
	for (Py_ssize_t i = 0; i < n; i++)
		PyTuple_SET_ITEM(t, i, items[i]);
	return t;
fail:
	for (Py_ssize_t i = 0; i < n; i++)
		Py_XDECREF(items[i]);
	return NULL;
}

/* Connection keys and thread ids recur record after record (a stream's records come from a
 * few connections and threads): the last ones made are kept, direct-mapped, and handed out
 * again while their values match. Tuples and ints are immutable, so sharing one is as good
 * as a new one; it saves the allocations of a record (a key is a tuple and up to three
 * ints), their frees after it, and lets dict look-ups by key match on identity. */
#define KEYS_KEPT 256 /* a power of two */
#define TIDS_KEPT 64  /* a power of two */

static struct kept_key {
	__u32 pid;
	__s32 fd;
	__u64 gen;
	PyObject *key;
} kept_keys[KEYS_KEPT];

static struct kept_tid {
	__u32 tid;
	PyObject *value;
} kept_tids[TIDS_KEPT];

static PyObject *key_of(const struct conn_key *k)
{
	struct kept_key *slot =
		&kept_keys[(k->pid * 2654435761u ^ (__u32)k->fd * 40503u) & (KEYS_KEPT - 1)];
	if (slot->key && slot->pid == k->pid && slot->fd == k->fd && slot->gen == k->gen) {
		Py_INCREF(slot->key);
		return slot->key;
	}
	PyObject *key = Py_BuildValue("(IiK)", k->pid, k->fd, (unsigned long long)k->gen);
	if (!key)
		return NULL;
	Py_INCREF(key);
	Py_XSETREF(slot->key, key);
	slot->pid = k->pid;
	slot->fd = k->fd;
	slot->gen = k->gen;
	return key;
}

static PyObject *tid_of(__u32 tid)
{
	struct kept_tid *slot = &kept_tids[tid & (TIDS_KEPT - 1)];
	if (slot->value && slot->tid == tid) {
		Py_INCREF(slot->value);
		return slot->value;
	}
	PyObject *value = PyLong_FromUnsignedLong(tid);
	if (!value)
		return NULL;
	Py_INCREF(value);
	Py_XSETREF(slot->value, value);
	slot->tid = tid;
	return value;
}

static int same_addr(const struct addr *a, const struct addr *b)
{
	return a->port == b->port && a->family == b->family &&
	       memcmp(a->bytes, b->bytes, sizeof(a->bytes)) == 0;
}

/* abi._decode_data's peer: make_peer(raw, family, port), kept while the address matches */
static PyObject *peer_of(const struct addr *a)
{
	__u32 h = a->port * 2654435761u;
	for (size_t i = 0; i < sizeof(a->bytes); i += 4) {
		__u32 w;
		memcpy(&w, a->bytes + i, 4);
		h ^= w * 40503u + (h >> 7);
	}
	struct kept_peer *slot = &kept_peers[(h ^ (h >> 16)) & (PEERS_KEPT - 1)];
	if (slot->value && same_addr(&slot->addr, a)) {
		Py_INCREF(slot->value);
		return slot->value;
	}
	PyObject *args[3] = {
		PyBytes_FromStringAndSize((const char *)a->bytes, sizeof(a->bytes)),
		PyLong_FromUnsignedLong(a->family),
		PyLong_FromUnsignedLong(a->port),
	};
	PyObject *value = NULL;
	if (args[0] && args[1] && args[2])
		value = PyObject_Vectorcall(make_peer, args, 3, NULL);
	for (int i = 0; i < 3; i++)
		Py_XDECREF(args[i]);
	if (!value)
		return NULL;
	Py_INCREF(value);
	Py_XSETREF(slot->value, value);
	slot->addr = *a;
	return value;
}

static PyObject *slice(const unsigned char *rec, size_t size, size_t from, size_t to)
{
	/* Python's slice rules: clamped to the record, empty when reversed */
	if (to > size)
		to = size;
	if (from >= to) {
		Py_INCREF(empty_bytes);
		return empty_bytes;
	}
	return PyBytes_FromStringAndSize((const char *)rec + from, to - from);
}

static PyObject *decode_data(const unsigned char *rec, size_t size)
{
	struct data_event ev;
	memcpy(&ev, rec, sizeof(ev)); /* records are 8-aligned, but keep it portable */
	size_t hdr = sizeof(struct data_event);
	size_t captured = ev.captured_len;
	size_t head_end = hdr + (captured > ev.tail_len ? captured - ev.tail_len : 0);
	PyObject *tcp_seq;
	if (ev.flags & DATA_F_NO_SEQ) {
		tcp_seq = Py_None;
		Py_INCREF(tcp_seq);
	} else {
		tcp_seq = PyLong_FromUnsignedLong(ev.tcp_seq);
	}
	PyObject *direction = PyTuple_GET_ITEM(directions, ev.direction & 1);
	Py_INCREF(direction);
	PyObject *peer = Py_None;
	if (ev.flags & DATA_F_HAS_PEER)
		peer = peer_of(&ev.peer); /* decode_one sends it here with make_peer only */
	else
		Py_INCREF(Py_None);
	PyObject *tls = ev.flags & DATA_F_TLS ? Py_True : Py_False;
	Py_INCREF(tls);
	PyObject *items[13] = {
		key_of(&ev.key),
		tid_of(ev.hdr.tid),
		PyLong_FromUnsignedLongLong(ev.hdr.ts_ns),
		PyLong_FromUnsignedLongLong(ev.exit_ns),
		direction,
		PyLong_FromUnsignedLongLong(ev.pos),
		PyLong_FromUnsignedLong(ev.msg_len),
		tcp_seq,
		slice(rec, size, hdr, head_end),
		peer,
		PyLong_FromUnsignedLongLong(ev.task),
		ev.tail_len ? slice(rec, size, head_end, hdr + captured) : (Py_INCREF(empty_bytes), empty_bytes),
		tls,
	};
	return make(data_type, items, 13);
}

static PyObject *decode_close(const unsigned char *rec)
{
	struct conn_close_event ev;
	memcpy(&ev, rec, sizeof(ev));
	PyObject *items[4] = {
		key_of(&ev.key),
		PyLong_FromUnsignedLongLong(ev.hdr.ts_ns),
		PyLong_FromUnsignedLongLong(ev.bytes_sent),
		PyLong_FromUnsignedLongLong(ev.bytes_recv),
	};
	return make(close_type, items, 4);
}

/* abi._decode_task: the maker called with the record's fields in its order */
static PyObject *decode_task(const unsigned char *rec)
{
	struct task_event ev;
	memcpy(&ev, rec, sizeof(ev));
	enum { N = 7 };
	PyObject *fields[N] = {
		PyLong_FromUnsignedLong(ev.pid),
		PyLong_FromUnsignedLong(ev.hdr.tid),
		PyLong_FromUnsignedLongLong(ev.hdr.ts_ns),
		PyLong_FromUnsignedLongLong(ev.task),
		PyLong_FromUnsignedLongLong(ev.parent),
		PyLong_FromUnsignedLongLong(ev.entered),
		PyLong_FromUnsignedLongLong(ev.entered_ns),
	};
	PyObject *out = NULL;
	int made = 1;
	for (int i = 0; i < N; i++)
		made &= fields[i] != NULL;
	if (made)
		out = PyObject_Vectorcall(make_task, fields, N, NULL);
	for (int i = 0; i < N; i++)
		Py_XDECREF(fields[i]);
	return out;
}

/* one record -> an event, or its bytes for abi.decode (*raw incremented) */
static PyObject *decode_one(const unsigned char *rec, size_t size, Py_ssize_t *raw)
{
	if (size >= sizeof(struct data_event) && rec[0] == EV_DATA &&
	    (make_peer || !(((const struct data_event *)rec)->flags & DATA_F_HAS_PEER)))
		return decode_data(rec, size);
	if (size >= sizeof(struct conn_close_event) && rec[0] == EV_CONN_CLOSE)
		return decode_close(rec);
	if (make_task && size >= sizeof(struct task_event) && rec[0] == EV_TASK_NEW)
		return decode_task(rec);
	(*raw)++;
	return PyBytes_FromStringAndSize((const char *)rec, size);
}

static int check_configured(void)
{
	if (!data_type) {
		PyErr_SetString(PyExc_RuntimeError, "otel_ebpf._fast.ring: configure() first");
		return -1;
	}
	return 0;
}

static PyObject *decode(PyObject *self, PyObject *arg)
{
	if (check_configured() < 0)
		return NULL;
	if (!PyList_Check(arg)) {
		PyErr_SetString(PyExc_TypeError, "decode(records: list[bytes])");
		return NULL;
	}
	Py_ssize_t n = PyList_GET_SIZE(arg), raw = 0;
	PyObject *out = PyList_New(n);
	if (!out)
		return NULL;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *r = PyList_GET_ITEM(arg, i);
		if (!PyBytes_Check(r)) {
			Py_DECREF(out);
			PyErr_SetString(PyExc_TypeError, "decode(records: list[bytes])");
			return NULL;
		}
		PyObject *ev = decode_one((const unsigned char *)PyBytes_AS_STRING(r),
					  PyBytes_GET_SIZE(r), &raw);
		if (!ev) {
			Py_DECREF(out);
			return NULL;
		}
		PyList_SET_ITEM(out, i, ev);
	}
	return Py_BuildValue("(Nn)", out, raw);
}

/* ---- the reader ------------------------------------------------------------------ */

typedef struct {
	PyObject_HEAD
	struct ring_buffer *rb;
	unsigned char *arena; /* records as (u32 size, bytes, padding to 8) */
	size_t len, cap;
	size_t count;
	size_t lost; /* records the arena could not grow for */
} Ring;

static int on_record(void *ctx, void *data, size_t size)
{
	Ring *r = ctx;
	size_t need = (sizeof(uint32_t) + size + 7) & ~(size_t)7;
	if (r->len + need > r->cap) {
		size_t cap = r->cap ? r->cap : 256u << 10;
		while (cap < r->len + need)
			cap *= 2;
		unsigned char *grown = realloc(r->arena, cap);
		if (!grown) {
			r->lost++;
			return 0;
		}
		r->arena = grown;
		r->cap = cap;
	}
	uint32_t n = (uint32_t)size;
	memcpy(r->arena + r->len, &n, sizeof(n));
	memcpy(r->arena + r->len + sizeof(n), data, size);
	r->len += need;
	r->count++;
	return 0;
}

static int Ring_init(Ring *self, PyObject *args, PyObject *kw)
{
	PyObject *fds;
	if (!PyArg_ParseTuple(args, "O", &fds))
		return -1;
	PyObject *seq = PySequence_Fast(fds, "Ring(fds): a sequence of ring buffer map fds");
	if (!seq)
		return -1;
	Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
	for (Py_ssize_t i = 0; i < n; i++) {
		int fd = (int)PyLong_AsLong(PySequence_Fast_GET_ITEM(seq, i));
		if (fd == -1 && PyErr_Occurred())
			goto fail;
		int err = 0;
		if (!self->rb) {
			self->rb = ring_buffer__new(fd, on_record, self, NULL);
			err = self->rb ? 0 : errno;
		} else {
			err = -ring_buffer__add(self->rb, fd, on_record, self);
		}
		if (err) {
			errno = err;
			PyErr_SetFromErrno(PyExc_OSError);
			goto fail;
		}
	}
	Py_DECREF(seq);
	return 0;
fail:
	Py_DECREF(seq);
	return -1;
}

static PyObject *Ring_poll(Ring *self, PyObject *args)
{
	int timeout_ms;
	if (!PyArg_ParseTuple(args, "i", &timeout_ms))
		return NULL;
	if (!self->rb) {
		PyErr_SetString(PyExc_ValueError, "ring buffer closed");
		return NULL;
	}
	if (check_configured() < 0)
		return NULL;
	self->len = self->count = 0;
	int rc;
	Py_BEGIN_ALLOW_THREADS
	rc = ring_buffer__poll(self->rb, timeout_ms);
	if (rc >= 0 || rc == -EINTR)
		ring_buffer__consume(self->rb); /* every ring, not only the ones epoll woke for */
	Py_END_ALLOW_THREADS
	PyObject *out = PyList_New(self->count);
	if (!out)
		return NULL;
	Py_ssize_t raw = 0;
	size_t off = 0;
	for (size_t i = 0; i < self->count; i++) {
		uint32_t size;
		memcpy(&size, self->arena + off, sizeof(size));
		const unsigned char *rec = self->arena + off + sizeof(size);
		off += (sizeof(size) + size + 7) & ~(size_t)7;
		PyObject *ev = decode_one(rec, size, &raw);
		if (!ev) {
			Py_DECREF(out);
			return NULL;
		}
		PyList_SET_ITEM(out, i, ev);
	}
	/* a burst (a backlog) grows the arena far past the usual batch: give that memory
	 * back rather than keep the largest batch ever seen resident */
	if (self->cap > ARENA_KEEP) {
		free(self->arena);
		self->arena = NULL;
		self->cap = 0;
	}
	self->len = self->count = 0;
	return Py_BuildValue("(Nni)", out, raw, rc);
}

static PyObject *Ring_lost(Ring *self, void *closure)
{
	return PyLong_FromSize_t(self->lost);
}

static PyObject *Ring_close(Ring *self, PyObject *unused)
{
	if (self->rb) {
		ring_buffer__free(self->rb);
		self->rb = NULL;
	}
	free(self->arena);
	self->arena = NULL;
	self->cap = self->len = 0;
	Py_RETURN_NONE;
}

static void Ring_dealloc(Ring *self)
{
	Ring_close(self, NULL);
	Py_TYPE(self)->tp_free((PyObject *)self);
}

static PyMethodDef Ring_methods[] = {
	{"poll", (PyCFunction)Ring_poll, METH_VARARGS,
	 "poll(timeout_ms) -> (events, n_raw, rc): wait up to timeout_ms, then drain every ring; "
	 "n_raw events are still bytes (for abi.decode); rc < 0: -errno of the poll"},
	{"close", (PyCFunction)Ring_close, METH_NOARGS, "free the reader (idempotent)"},
	{NULL, NULL, 0, NULL},
};

static PyGetSetDef Ring_getset[] = {
	{"lost", (getter)Ring_lost, NULL, "records dropped because memory ran out", NULL},
	{NULL, NULL, NULL, NULL, NULL},
};

static PyTypeObject RingType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "otel_ebpf._fast.ring.Ring",
	.tp_basicsize = sizeof(Ring),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_doc = "Ring(fds): libbpf's ring buffer reader over these BPF ring buffer maps",
	.tp_new = PyType_GenericNew,
	.tp_init = (initproc)Ring_init,
	.tp_dealloc = (destructor)Ring_dealloc,
	.tp_methods = Ring_methods,
	.tp_getset = Ring_getset,
};

static PyMethodDef ring_methods[] = {
	{"configure", configure, METH_VARARGS,
	 "configure(DataEvent, ConnClose, directions[, make_task[, make_peer]]): the events decode() builds"},
	{"decode", decode, METH_O, "decode(records) -> (events, n_raw): n_raw left as bytes"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef ring_module = {
	PyModuleDef_HEAD_INIT, "otel_ebpf._fast.ring",
	"BPF ring buffer drain and event decoding in C; otel_ebpf/kernel/abi.py is the reference.",
	-1, ring_methods,
};

PyMODINIT_FUNC PyInit_ring(void)
{
	if (PyType_Ready(&RingType) < 0)
		return NULL;
	if (!(empty_bytes = PyBytes_FromStringAndSize("", 0)))
		return NULL;
	PyObject *m = PyModule_Create(&ring_module);
	if (!m)
		return NULL;
	Py_INCREF(&RingType);
	if (PyModule_AddObject(m, "Ring", (PyObject *)&RingType) < 0 ||
	    PyModule_AddIntConstant(m, "DATA_SIZE", sizeof(struct data_event))) {
		Py_DECREF(&RingType);
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
