/* SPDX-License-Identifier: Apache-2.0 */
/* One OTLP Span message's bytes, written in C: the fields otel_ebpf/export/otlp_proto.py
 * writes, in its order and with its encodings, so the output is the same byte for byte
 * (tests/unit/test_fast_otlp.py compares both on the same spans).
 *
 * span(trace_id, span_id, trace_state, parent_span_id, parent_remote, name, kind, start,
 *      end, attributes, status_description, status_code) -> bytes | None
 *
 * None: something this code leaves to Python (an attribute value of another type, a
 * number past 64 bits, text that is not valid UTF-8); the caller encodes that span itself.
 * Spans with events or links never come here.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
	unsigned char *p;
	size_t len, cap;
	int failed; /* out of memory, or a value left to Python */
} Buf;

static int grow(Buf *b, size_t n)
{
	if (b->len + n <= b->cap)
		return 0;
	size_t cap = b->cap ? b->cap * 2 : 512;
	while (cap < b->len + n)
		cap *= 2;
	unsigned char *p = PyMem_Realloc(b->p, cap);
	if (!p) {
		b->failed = 1;
		return -1;
	}
	b->p = p;
	b->cap = cap;
	return 0;
}

static void put(Buf *b, const void *data, size_t n)
{
	if (b->failed || grow(b, n))
		return;
	memcpy(b->p + b->len, data, n);
	b->len += n;
}

static void byte(Buf *b, unsigned char c) { put(b, &c, 1); }

static void varint(Buf *b, uint64_t n)
{
	unsigned char tmp[10];
	int i = 0;
	while (n >= 128) {
		tmp[i++] = (unsigned char)((n & 0x7f) | 0x80);
		n >>= 7;
	}
	tmp[i++] = (unsigned char)n;
	put(b, tmp, i);
}

static void fixed64(Buf *b, uint64_t v)
{
	unsigned char tmp[8];
	for (int i = 0; i < 8; i++)
		tmp[i] = (unsigned char)(v >> (8 * i));
	put(b, tmp, 8);
}

static void be(Buf *b, uint64_t v, int n)
{
	unsigned char tmp[8];
	for (int i = 0; i < n; i++)
		tmp[i] = (unsigned char)(v >> (8 * (n - 1 - i)));
	put(b, tmp, n);
}

/* A length-delimited field whose payload is written by the caller after this: the length
 * is not known yet, so a 5-byte gap is left and closed by end_field (the bytes are then
 * moved to take the varint's real size, as Python's tag + varint(len) + payload does). */
static size_t begin_field(Buf *b, unsigned char tag)
{
	byte(b, tag);
	size_t at = b->len;
	put(b, "\0\0\0\0\0", 5);
	return at;
}

static void end_field(Buf *b, size_t at)
{
	if (b->failed)
		return;
	size_t payload = b->len - at - 5;
	unsigned char tmp[10];
	int n = 0;
	uint64_t v = payload;
	while (v >= 128) {
		tmp[n++] = (unsigned char)((v & 0x7f) | 0x80);
		v >>= 7;
	}
	tmp[n++] = (unsigned char)v;
	memmove(b->p + at + n, b->p + at + 5, payload);
	memcpy(b->p + at, tmp, n);
	b->len = at + n + payload;
}

static void text_field(Buf *b, unsigned char tag, PyObject *s)
{
	Py_ssize_t n;
	const char *u = PyUnicode_AsUTF8AndSize(s, &n);
	if (!u) {
		PyErr_Clear();
		b->failed = 1;
		return;
	}
	byte(b, tag);
	varint(b, (uint64_t)n);
	put(b, u, n);
}

/* AnyValue, as otlp_proto._any_value: exact types only (a subclass is Python's call) */
static void any_value(Buf *b, PyObject *v, int depth)
{
	if (PyUnicode_CheckExact(v)) {
		text_field(b, 0x0a, v);
	} else if (PyBool_Check(v)) {
		byte(b, 0x10);
		byte(b, v == Py_True);
	} else if (PyLong_CheckExact(v)) {
		int overflow;
		long long s = PyLong_AsLongLongAndOverflow(v, &overflow);
		uint64_t u;
		if (overflow > 0) {
			u = PyLong_AsUnsignedLongLong(v);
			if (u == (uint64_t)-1 && PyErr_Occurred()) {
				PyErr_Clear();
				b->failed = 1; /* past 64 bits */
				return;
			}
		} else if (overflow < 0) {
			b->failed = 1;
			return;
		} else {
			u = (uint64_t)s; /* two's complement: v + 2**64 for a negative v */
		}
		byte(b, 0x18);
		varint(b, u);
	} else if (PyFloat_CheckExact(v)) {
		double d = PyFloat_AS_DOUBLE(v);
		uint64_t bits;
		memcpy(&bits, &d, 8);
		byte(b, 0x21);
		fixed64(b, bits);
	} else if ((PyList_CheckExact(v) || PyTuple_CheckExact(v)) && depth < 4) {
		PyObject *seq = PySequence_Fast(v, "");
		if (!seq) {
			PyErr_Clear();
			b->failed = 1;
			return;
		}
		size_t arr = begin_field(b, 0x2a);
		for (Py_ssize_t i = 0; i < PySequence_Fast_GET_SIZE(seq) && !b->failed; i++) {
			size_t item = begin_field(b, 0x0a);
			any_value(b, PySequence_Fast_GET_ITEM(seq, i), depth + 1);
			end_field(b, item);
		}
		Py_DECREF(seq);
		end_field(b, arr);
	} else if (PyBytes_CheckExact(v)) {
		byte(b, 0x3a);
		varint(b, (uint64_t)PyBytes_GET_SIZE(v));
		put(b, PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
	} else {
		b->failed = 1; /* str(v) of an object: Python's */
	}
}

static void attributes(Buf *b, unsigned char tag, PyObject *attrs)
{
	if (attrs == Py_None)
		return;
	PyObject *items = PyMapping_Items(attrs); /* a dict or the SDK's BoundedAttributes */
	if (!items) {
		PyErr_Clear();
		b->failed = 1;
		return;
	}
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items) && !b->failed; i++) {
		PyObject *kv = PyList_GET_ITEM(items, i);
		PyObject *k = PyTuple_GET_ITEM(kv, 0);
		if (!PyUnicode_Check(k)) {
			b->failed = 1;
			break;
		}
		size_t pair = begin_field(b, tag);
		text_field(b, 0x0a, k);
		size_t value = begin_field(b, 0x12);
		any_value(b, PyTuple_GET_ITEM(kv, 1), 0);
		end_field(b, value);
		end_field(b, pair);
	}
	Py_DECREF(items);
}

/* an id (int) as n big-endian bytes; -1 when it does not fit */
static int id_bytes(Buf *b, PyObject *id, int n)
{
	if (!PyLong_Check(id))
		return -1;
	if (n == 8) {
		uint64_t v = PyLong_AsUnsignedLongLong(id);
		if (v == (uint64_t)-1 && PyErr_Occurred())
			return PyErr_Clear(), -1;
		be(b, v, 8);
		return 0;
	}
	PyObject *shift = PyLong_FromLong(64);
	PyObject *hi = shift ? PyNumber_Rshift(id, shift) : NULL;
	Py_XDECREF(shift);
	if (!hi)
		return PyErr_Clear(), -1;
	uint64_t h = PyLong_AsUnsignedLongLong(hi);
	Py_DECREF(hi);
	if (h == (uint64_t)-1 && PyErr_Occurred())
		return PyErr_Clear(), -1;
	uint64_t l = PyLong_AsUnsignedLongLongMask(id);
	if (l == (uint64_t)-1 && PyErr_Occurred())
		return PyErr_Clear(), -1;
	be(b, h, 8);
	be(b, l, 8);
	return 0;
}

static PyObject *span(PyObject *self, PyObject *args)
{
	PyObject *trace_id, *span_id, *parent_id, *name, *attrs, *desc;
	Py_buffer trace_state;
	int parent_remote, kind, code;
	unsigned long long start, end;
	if (!PyArg_ParseTuple(args, "OOy*OpUiKKOUi", &trace_id, &span_id, &trace_state, &parent_id,
			      &parent_remote, &name, &kind, &start, &end, &attrs, &desc, &code))
		return NULL;
	Buf b = {0};
	put(&b, "\x0a\x10", 2);
	if (id_bytes(&b, trace_id, 16) < 0)
		b.failed = 1;
	put(&b, "\x12\x08", 2);
	if (id_bytes(&b, span_id, 8) < 0)
		b.failed = 1;
	if (trace_state.len) {
		byte(&b, 0x1a);
		varint(&b, (uint64_t)trace_state.len);
		put(&b, trace_state.buf, trace_state.len);
	}
	PyBuffer_Release(&trace_state);
	int has_parent = PyObject_IsTrue(parent_id);
	if (has_parent < 0) {
		PyErr_Clear();
		b.failed = 1;
	} else if (has_parent) {
		put(&b, "\x22\x08", 2);
		if (id_bytes(&b, parent_id, 8) < 0)
			b.failed = 1;
	}
	text_field(&b, 0x2a, name);
	if (kind < 0 || kind > 127)
		b.failed = 1;
	byte(&b, 0x30);
	byte(&b, (unsigned char)kind);
	byte(&b, 0x39);
	fixed64(&b, start);
	byte(&b, 0x41);
	fixed64(&b, end);
	attributes(&b, 0x4a, attrs);
	size_t status = begin_field(&b, 0x7a);
	if (PyUnicode_GET_LENGTH(desc))
		text_field(&b, 0x12, desc);
	if (code) {
		if (code < 0 || code > 127)
			b.failed = 1;
		byte(&b, 0x18);
		byte(&b, (unsigned char)code);
	}
	end_field(&b, status);
	put(&b, "\x85\x01", 2);
	uint32_t flags = 0x100 | (parent_remote ? 0x200 : 0);
	unsigned char f[4] = {flags & 0xff, (flags >> 8) & 0xff, 0, 0};
	put(&b, f, 4);
	PyObject *out;
	if (b.failed) {
		if (PyErr_Occurred())
			PyErr_Clear();
		out = Py_None;
		Py_INCREF(out);
	} else {
		out = PyBytes_FromStringAndSize((const char *)b.p, b.len);
	}
	PyMem_Free(b.p);
	return out;
}

static PyMethodDef otlp_methods[] = {
	{"span", span, METH_VARARGS,
	 "span(trace_id, span_id, trace_state, parent_span_id, parent_remote, name, kind, start, "
	 "end, attributes, status_description, status_code) -> the Span message's bytes, or None"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef otlp_module = {
	PyModuleDef_HEAD_INIT, "otel_ebpf._fast.otlp",
	"OTLP Span messages written in C; otel_ebpf/export/otlp_proto.py is the reference.", -1,
	otlp_methods,
};

PyMODINIT_FUNC PyInit_otlp(void) { return PyModule_Create(&otlp_module); }
