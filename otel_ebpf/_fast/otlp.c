/* SPDX-License-Identifier: Apache-2.0 */
/* One span of the agent's (a NeutralSpan made ready for export: IDs, resource, wall-clock
 * start and end) as an OTLP Span message and as an OTLP/JSON Span object, written in C:
 * the bytes otel_ebpf/export/otlp_proto.py (span_proto) and otlp_json.py (span_json, then
 * orjson) write, in their order and with their encodings (tests/unit/test_fast_otlp.py
 * compares both on the same spans).
 *
 * span(neutral_span) -> bytes | None
 * span_json(neutral_span, dumps) -> bytes | None    (dumps: orjson.dumps, for doubles)
 * spans(list, fallback), spans_json(list, dumps, fallback) -> bytes: a batch in one
 *     buffer; fallback(span) gives the bytes of a span these writers leave to Python
 *
 * None: something this code leaves to Python (an attribute value of another type, a
 * number past 64 bits, text that is not valid UTF-8, IDs of the wrong size); the caller
 * encodes that span itself, and fails there if it must.
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

typedef struct {
	unsigned char *p;
	size_t len, cap;
	int failed; /* out of memory, or a value left to Python */
	int oom;
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
		b->failed = b->oom = 1;
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
		if (overflow) {
			b->failed = 1; /* not an int64: Python writes its digits as text */
			return;
		}
		byte(b, 0x18);
		varint(b, (uint64_t)s); /* two's complement: v + 2**64 for a negative v */
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

static void key_value(Buf *b, unsigned char tag, PyObject *k, PyObject *v)
{
	if (!PyUnicode_Check(k)) {
		b->failed = 1;
		return;
	}
	size_t pair = begin_field(b, tag);
	text_field(b, 0x0a, k);
	size_t value = begin_field(b, 0x12);
	any_value(b, v, 0);
	end_field(b, value);
	end_field(b, pair);
}

static void attributes(Buf *b, unsigned char tag, PyObject *attrs)
{
	if (attrs == Py_None)
		return;
	if (PyDict_CheckExact(attrs)) {
		Py_ssize_t pos = 0;
		PyObject *k, *v;
		while (!b->failed && PyDict_Next(attrs, &pos, &k, &v))
			key_value(b, tag, k, v);
		return;
	}
	PyObject *items = PyMapping_Items(attrs); /* another mapping */
	if (!items) {
		PyErr_Clear();
		b->failed = 1;
		return;
	}
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(items) && !b->failed; i++) {
		PyObject *kv = PyList_GET_ITEM(items, i);
		key_value(b, tag, PyTuple_GET_ITEM(kv, 0), PyTuple_GET_ITEM(kv, 1));
	}
	Py_DECREF(items);
}

/* ---- reading the span ------------------------------------------------------------ */

static PyObject *s_name, *s_kind, *s_start_ns, *s_end_ns, *s_wall_ns, *s_wall_end_ns,
	*s_attributes, *s_status, *s_status_message, *s_trace_id, *s_span_id, *s_parent_span_id,
	*s_events, *s_links, *s_time_ns, *s_trace_state;

#define KIND_SERVER 2
#define KIND_CONSUMER 5
#define STATUS_ERROR 2

#define VIEW_REFS 12

/* The fields both writers read, borrowed from the span's (new) references. */
typedef struct {
	PyObject *refs[VIEW_REFS];
	PyObject *name, *attrs, *msg, *events, *links, *trace_state;
	const unsigned char *trace, *span, *parent;
	Py_ssize_t parent_len;
	long kind, status;
	uint64_t start, end;   /* wall clock */
	uint64_t kstart, kend; /* kernel clock: events are placed between them */
	int has_parent, remote;
} View;

static void view_release(View *v)
{
	for (int i = 0; i < VIEW_REFS; i++)
		Py_XDECREF(v->refs[i]);
}

static long long ll_of(PyObject *o, int *bad)
{
	if (!PyLong_Check(o)) {
		*bad = 1;
		return 0;
	}
	long long v = PyLong_AsLongLong(o);
	if (v == -1 && PyErr_Occurred()) {
		PyErr_Clear();
		*bad = 1;
	}
	return v;
}

/* a time: what a fixed64 holds; anything else is Python's to write (or refuse) */
static uint64_t u64_of(PyObject *o, int *bad)
{
	if (!PyLong_Check(o)) {
		*bad = 1;
		return 0;
	}
	unsigned long long v = PyLong_AsUnsignedLongLong(o);
	if (v == (unsigned long long)-1 && PyErr_Occurred()) {
		PyErr_Clear();
		*bad = 1;
	}
	return v;
}

/* 0 when every field is one this code writes; -1 (no exception set) when Python must */
static int view_of(PyObject *obj, View *v)
{
	memset(v, 0, sizeof(*v));
	PyObject *names[VIEW_REFS] = {s_name, s_kind, s_start_ns, s_end_ns, s_wall_ns,
				      s_wall_end_ns, s_attributes, s_status, s_status_message,
				      s_trace_id, s_span_id, s_parent_span_id};
	for (int i = 0; i < VIEW_REFS; i++) {
		v->refs[i] = PyObject_GetAttr(obj, names[i]);
		if (!v->refs[i]) {
			PyErr_Clear();
			return -1;
		}
	}
	PyObject **r = v->refs;
	int bad = 0;
	v->name = r[0];
	v->kind = (long)ll_of(r[1], &bad);
	v->kstart = u64_of(r[2], &bad);
	v->kend = u64_of(r[3], &bad);
	v->start = u64_of(r[4], &bad);
	v->end = u64_of(r[5], &bad);
	v->attrs = r[6];
	v->status = (long)ll_of(r[7], &bad);
	v->msg = r[8];
	if (bad || !PyUnicode_CheckExact(v->name) || !PyUnicode_CheckExact(v->msg) ||
	    !PyDict_CheckExact(v->attrs))
		return -1;
	/* a span ending before it starts is not the clock's: Python writes what it makes of it */
	if (v->kend < v->kstart || v->end < v->start || v->kind < 0 || v->kind > 127 ||
	    v->status < 0 || v->status > 127)
		return -1;
	if (!PyBytes_CheckExact(r[9]) || PyBytes_GET_SIZE(r[9]) != 16 ||
	    !PyBytes_CheckExact(r[10]) || PyBytes_GET_SIZE(r[10]) != 8 ||
	    !PyBytes_CheckExact(r[11]))
		return -1;
	v->trace = (const unsigned char *)PyBytes_AS_STRING(r[9]);
	v->span = (const unsigned char *)PyBytes_AS_STRING(r[10]);
	v->parent = (const unsigned char *)PyBytes_AS_STRING(r[11]);
	v->parent_len = PyBytes_GET_SIZE(r[11]);
	if (v->parent_len) {
		if (v->parent_len != 8)
			return -1;
		for (int i = 0; i < 8; i++)
			v->has_parent |= v->parent[i] != 0;
		v->remote = v->kind == KIND_SERVER || v->kind == KIND_CONSUMER;
	}
	v->events = PyObject_GetAttr(obj, s_events);
	v->links = v->events ? PyObject_GetAttr(obj, s_links) : NULL;
	if (!v->events || !v->links) {
		PyErr_Clear();
		Py_CLEAR(v->events);
		return -1;
	}
	if (!PyList_CheckExact(v->events) || !PyList_CheckExact(v->links)) {
		Py_CLEAR(v->events);
		Py_CLEAR(v->links);
		return -1;
	}
	v->trace_state = PyObject_GetAttr(obj, s_trace_state);
	if (!v->trace_state) {
		PyErr_Clear();
		return -1;
	}
	if (!PyUnicode_CheckExact(v->trace_state))
		return -1;
	return 0;
}

static void view_done(View *v)
{
	Py_XDECREF(v->events);
	Py_XDECREF(v->links);
	Py_XDECREF(v->trace_state);
	view_release(v);
}

/* a SpanEvent's or SpanLink's field; NULL (no exception) when it is missing */
static PyObject *field_of(PyObject *o, PyObject *name)
{
	PyObject *f = PyObject_GetAttr(o, name);
	if (!f)
		PyErr_Clear();
	return f;
}

static PyObject *finish(Buf *b)
{
	PyObject *out;
	if (b->failed) {
		if (PyErr_Occurred())
			PyErr_Clear();
		out = Py_None;
		Py_INCREF(out);
	} else {
		out = PyBytes_FromStringAndSize((const char *)b->p, b->len);
	}
	PyMem_Free(b->p);
	return out;
}

/* ---- OTLP protobuf --------------------------------------------------------------- */

static void bytes_field(Buf *b, unsigned char tag, PyObject *o, Py_ssize_t want)
{
	if (!PyBytes_CheckExact(o) || PyBytes_GET_SIZE(o) != want) {
		b->failed = 1;
		return;
	}
	byte(b, tag);
	byte(b, (unsigned char)want);
	put(b, PyBytes_AS_STRING(o), want);
}

/* A SpanEvent's or SpanLink's fields, read once for either writer (new references). */
typedef struct {
	PyObject *first, *second, *attrs; /* event: name, time_ns; link: trace_id, span_id */
	uint64_t at;                      /* an event's wall-clock time */
} Item;

static void item_done(Item *it)
{
	Py_XDECREF(it->first);
	Py_XDECREF(it->second);
	Py_XDECREF(it->attrs);
}

/* An event's wall time, as spans/convert.py's event_wall places it: between the span's
 * wall start and end as its kernel time lies between the kernel ones, kept inside the
 * span. With kstart <= t <= kend and start <= end (view_of) nothing here overflows: the
 * product of two 64-bit differences fits 128 bits, and the quotient is at most end - start. */
static uint64_t event_wall(const View *v, uint64_t t)
{
	if (v->kend == v->kstart)
		return v->start;
	t = t < v->kstart ? v->kstart : t > v->kend ? v->kend : t;
	unsigned __int128 part = (unsigned __int128)(v->end - v->start) * (t - v->kstart);
	return v->start + (uint64_t)(part / (v->kend - v->kstart));
}

/* 0, or -1 when the event is Python's to write */
static int event_of(PyObject *e, View *v, Item *it)
{
	it->first = field_of(e, s_name);
	it->second = field_of(e, s_time_ns);
	it->attrs = field_of(e, s_attributes);
	int bad = !it->first || !it->second || !it->attrs || !PyUnicode_CheckExact(it->first) ||
		  !PyDict_Check(it->attrs);
	uint64_t tns = bad ? 0 : u64_of(it->second, &bad);
	it->at = bad ? 0 : event_wall(v, tns);
	return bad ? -1 : 0;
}

/* 0, or -1 when the link is Python's to write */
static int link_of(PyObject *l, Item *it)
{
	it->first = field_of(l, s_trace_id);
	it->second = field_of(l, s_span_id);
	it->attrs = field_of(l, s_attributes);
	it->at = 0;
	return it->first && it->second && it->attrs && PyBytes_CheckExact(it->first) &&
			       PyBytes_GET_SIZE(it->first) == 16 && PyBytes_CheckExact(it->second) &&
			       PyBytes_GET_SIZE(it->second) == 8 && PyDict_Check(it->attrs)
		       ? 0
		       : -1;
}

static void proto_events(Buf *b, View *v)
{
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v->events) && !b->failed; i++) {
		Item it;
		if (event_of(PyList_GET_ITEM(v->events, i), v, &it) < 0) {
			b->failed = 1;
		} else {
			size_t ev = begin_field(b, 0x5a);
			byte(b, 0x09);
			fixed64(b, it.at);
			text_field(b, 0x12, it.first);
			attributes(b, 0x1a, it.attrs);
			end_field(b, ev);
		}
		item_done(&it);
	}
}

static void proto_links(Buf *b, View *v)
{
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v->links) && !b->failed; i++) {
		Item it;
		if (link_of(PyList_GET_ITEM(v->links, i), &it) < 0) {
			b->failed = 1;
		} else {
			size_t link = begin_field(b, 0x6a);
			bytes_field(b, 0x0a, it.first, 16);
			bytes_field(b, 0x12, it.second, 8);
			attributes(b, 0x22, it.attrs);
			put(b, "\x35\x00\x03\x00\x00", 5); /* flags: has-is-remote | is-remote */
			end_field(b, link);
		}
		item_done(&it);
	}
}

/* the Span message of one span; 0, or -1 with b->failed set (Python's to write) */
static int write_span(Buf *b, PyObject *obj)
{
	View v;
	if (view_of(obj, &v) < 0) {
		view_done(&v);
		b->failed = 1;
		return -1;
	}
	put(b, "\x0a\x10", 2);
	put(b, v.trace, 16);
	put(b, "\x12\x08", 2);
	put(b, v.span, 8);
	if (PyUnicode_GET_LENGTH(v.trace_state))
		text_field(b, 0x1a, v.trace_state);
	if (v.has_parent) {
		put(b, "\x22\x08", 2);
		put(b, v.parent, 8);
	}
	text_field(b, 0x2a, v.name);
	byte(b, 0x30);
	byte(b, (unsigned char)v.kind);
	byte(b, 0x39);
	fixed64(b, v.start);
	byte(b, 0x41);
	fixed64(b, v.end);
	attributes(b, 0x4a, v.attrs);
	proto_events(b, &v);
	proto_links(b, &v);
	size_t status = begin_field(b, 0x7a);
	if (v.status == STATUS_ERROR && PyUnicode_GET_LENGTH(v.msg))
		text_field(b, 0x12, v.msg);
	if (v.status) {
		byte(b, 0x18);
		byte(b, (unsigned char)v.status);
	}
	end_field(b, status);
	put(b, "\x85\x01", 2);
	unsigned char f[4] = {0, v.remote ? 0x03 : 0x01, 0, 0};
	put(b, f, 4);
	view_done(&v);
	return b->failed ? -1 : 0;
}

static PyObject *span(PyObject *self, PyObject *obj)
{
	Buf b = {0};
	write_span(&b, obj);
	return finish(&b);
}

/* ---- OTLP/JSON, as orjson writes otlp_json.span_json's document ------------------ */

static void lit(Buf *b, const char *s) { put(b, s, strlen(s)); }

static void hex(Buf *b, const unsigned char *p, Py_ssize_t n)
{
	static const char digits[] = "0123456789abcdef";
	if (b->failed || grow(b, (size_t)n * 2 + 2))
		return;
	unsigned char *o = b->p + b->len;
	*o++ = '"';
	for (Py_ssize_t i = 0; i < n; i++) {
		*o++ = digits[p[i] >> 4];
		*o++ = digits[p[i] & 15];
	}
	*o++ = '"';
	b->len += (size_t)n * 2 + 2;
}

/* a JSON string as orjson escapes it: quote, backslash and control characters only */
static void jstr(Buf *b, PyObject *s)
{
	Py_ssize_t n;
	const char *u = PyUnicode_AsUTF8AndSize(s, &n);
	if (!u) {
		PyErr_Clear();
		b->failed = 1; /* surrogates: orjson refuses them, in Python's path */
		return;
	}
	if (b->failed || grow(b, (size_t)n + 2))
		return;
	byte(b, '"');
	Py_ssize_t from = 0;
	for (Py_ssize_t i = 0; i < n; i++) {
		unsigned char c = (unsigned char)u[i];
		if (c >= 0x20 && c != '"' && c != '\\')
			continue;
		put(b, u + from, i - from);
		from = i + 1;
		char esc[7];
		switch (c) {
		case '"': lit(b, "\\\""); break;
		case '\\': lit(b, "\\\\"); break;
		case '\b': lit(b, "\\b"); break;
		case '\t': lit(b, "\\t"); break;
		case '\n': lit(b, "\\n"); break;
		case '\f': lit(b, "\\f"); break;
		case '\r': lit(b, "\\r"); break;
		default:
			snprintf(esc, sizeof(esc), "\\u%04x", c);
			put(b, esc, 6);
		}
	}
	put(b, u + from, n - from);
	byte(b, '"');
}

static void jdigits(Buf *b, int negative, uint64_t u)
{
	char tmp[24];
	int i = sizeof(tmp);
	do {
		tmp[--i] = (char)('0' + u % 10);
		u /= 10;
	} while (u);
	if (negative)
		tmp[--i] = '-';
	put(b, tmp + i, sizeof(tmp) - i);
}

static void jnum(Buf *b, long long n)
{
	jdigits(b, n < 0, n < 0 ? 0ULL - (unsigned long long)n : (unsigned long long)n);
}

static void jquoted_num(Buf *b, long long n)
{
	byte(b, '"');
	jnum(b, n);
	byte(b, '"');
}

static void jquoted_time(Buf *b, uint64_t t)
{
	byte(b, '"');
	jdigits(b, 0, t);
	byte(b, '"');
}

static void base64(Buf *b, const unsigned char *p, Py_ssize_t n)
{
	static const char abc[] =
		"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789+/";
	byte(b, '"');
	for (Py_ssize_t i = 0; i < n; i += 3) {
		uint32_t v = (uint32_t)p[i] << 16;
		if (i + 1 < n)
			v |= (uint32_t)p[i + 1] << 8;
		if (i + 2 < n)
			v |= p[i + 2];
		char q[4] = {abc[(v >> 18) & 63], abc[(v >> 12) & 63],
			     i + 1 < n ? abc[(v >> 6) & 63] : '=', i + 2 < n ? abc[v & 63] : '='};
		put(b, q, 4);
	}
	byte(b, '"');
}

static void jvalue(Buf *b, PyObject *v, PyObject *dumps, int depth)
{
	if (PyUnicode_CheckExact(v)) {
		lit(b, "{\"stringValue\":");
		jstr(b, v);
		byte(b, '}');
	} else if (PyBool_Check(v)) {
		lit(b, v == Py_True ? "{\"boolValue\":true}" : "{\"boolValue\":false}");
	} else if (PyLong_CheckExact(v)) {
		int overflow;
		long long n = PyLong_AsLongLongAndOverflow(v, &overflow);
		if (overflow) {
			b->failed = 1; /* not an int64: Python writes its digits as text */
			return;
		}
		lit(b, "{\"intValue\":");
		jquoted_num(b, n); /* proto3 JSON writes int64 as text */
		byte(b, '}');
	} else if (PyFloat_CheckExact(v)) {
		PyObject *text = PyObject_CallOneArg(dumps, v); /* orjson's own double format */
		if (!text || !PyBytes_Check(text)) {
			PyErr_Clear();
			Py_XDECREF(text);
			b->failed = 1;
			return;
		}
		lit(b, "{\"doubleValue\":");
		put(b, PyBytes_AS_STRING(text), PyBytes_GET_SIZE(text));
		byte(b, '}');
		Py_DECREF(text);
	} else if ((PyList_CheckExact(v) || PyTuple_CheckExact(v)) && depth < 4) {
		PyObject *seq = PySequence_Fast(v, "");
		if (!seq) {
			PyErr_Clear();
			b->failed = 1;
			return;
		}
		Py_ssize_t n = PySequence_Fast_GET_SIZE(seq);
		if (!n) {
			lit(b, "{\"arrayValue\":{}}");
		} else {
			lit(b, "{\"arrayValue\":{\"values\":[");
			for (Py_ssize_t i = 0; i < n && !b->failed; i++) {
				if (i)
					byte(b, ',');
				jvalue(b, PySequence_Fast_GET_ITEM(seq, i), dumps, depth + 1);
			}
			lit(b, "]}}");
		}
		Py_DECREF(seq);
	} else if (PyBytes_CheckExact(v)) {
		lit(b, "{\"bytesValue\":");
		base64(b, (const unsigned char *)PyBytes_AS_STRING(v), PyBytes_GET_SIZE(v));
		byte(b, '}');
	} else {
		b->failed = 1; /* str(v) of an object: Python's */
	}
}

static void jattributes(Buf *b, PyObject *attrs, PyObject *dumps)
{
	if (!PyDict_Check(attrs)) {
		b->failed = 1;
		return;
	}
	byte(b, '[');
	Py_ssize_t pos = 0, i = 0;
	PyObject *k, *val;
	while (!b->failed && PyDict_Next(attrs, &pos, &k, &val)) {
		if (!PyUnicode_CheckExact(k)) {
			b->failed = 1;
			break;
		}
		if (i++)
			byte(b, ',');
		lit(b, "{\"key\":");
		jstr(b, k);
		lit(b, ",\"value\":");
		jvalue(b, val, dumps, 0);
		byte(b, '}');
	}
	byte(b, ']');
}

static void json_events(Buf *b, View *v, PyObject *dumps)
{
	lit(b, ",\"events\":[");
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v->events) && !b->failed; i++) {
		Item it;
		if (event_of(PyList_GET_ITEM(v->events, i), v, &it) < 0) {
			b->failed = 1;
		} else {
			if (i)
				byte(b, ',');
			lit(b, "{\"timeUnixNano\":");
			jquoted_time(b, it.at);
			lit(b, ",\"name\":");
			jstr(b, it.first);
			if (PyDict_GET_SIZE(it.attrs)) {
				lit(b, ",\"attributes\":");
				jattributes(b, it.attrs, dumps);
			}
			byte(b, '}');
		}
		item_done(&it);
	}
	byte(b, ']');
}

static void json_links(Buf *b, View *v, PyObject *dumps)
{
	lit(b, ",\"links\":[");
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(v->links) && !b->failed; i++) {
		Item it;
		if (link_of(PyList_GET_ITEM(v->links, i), &it) < 0) {
			b->failed = 1;
		} else {
			if (i)
				byte(b, ',');
			lit(b, "{\"traceId\":");
			hex(b, (const unsigned char *)PyBytes_AS_STRING(it.first), 16);
			lit(b, ",\"spanId\":");
			hex(b, (const unsigned char *)PyBytes_AS_STRING(it.second), 8);
			if (PyDict_GET_SIZE(it.attrs)) {
				lit(b, ",\"attributes\":");
				jattributes(b, it.attrs, dumps);
			}
			lit(b, ",\"flags\":768}");
		}
		item_done(&it);
	}
	byte(b, ']');
}

/* the Span object of one span; 0, or -1 with b->failed set (Python's to write) */
static int write_span_json(Buf *b, PyObject *obj, PyObject *dumps)
{
	View v;
	if (view_of(obj, &v) < 0) {
		view_done(&v);
		b->failed = 1;
		return -1;
	}
	lit(b, "{\"traceId\":");
	hex(b, v.trace, 16);
	lit(b, ",\"spanId\":");
	hex(b, v.span, 8);
	if (PyUnicode_GET_LENGTH(v.trace_state)) {
		lit(b, ",\"traceState\":");
		jstr(b, v.trace_state);
	}
	if (v.has_parent) {
		lit(b, ",\"parentSpanId\":");
		hex(b, v.parent, 8);
	}
	lit(b, v.remote ? ",\"flags\":768,\"name\":" : ",\"flags\":256,\"name\":");
	jstr(b, v.name);
	lit(b, ",\"kind\":");
	jnum(b, v.kind);
	lit(b, ",\"startTimeUnixNano\":");
	jquoted_time(b, v.start);
	lit(b, ",\"endTimeUnixNano\":");
	jquoted_time(b, v.end);
	if (PyDict_GET_SIZE(v.attrs)) {
		lit(b, ",\"attributes\":");
		jattributes(b, v.attrs, dumps);
	}
	if (PyList_GET_SIZE(v.events))
		json_events(b, &v, dumps);
	if (PyList_GET_SIZE(v.links))
		json_links(b, &v, dumps);
	lit(b, ",\"status\":{");
	if (v.status) {
		lit(b, "\"code\":");
		jnum(b, v.status);
	}
	if (v.status == STATUS_ERROR && PyUnicode_GET_LENGTH(v.msg)) {
		lit(b, ",\"message\":"); /* after the code: ERROR is not 0 */
		jstr(b, v.msg);
	}
	lit(b, "}}");
	view_done(&v);
	return b->failed ? -1 : 0;
}

static PyObject *span_json(PyObject *self, PyObject *args)
{
	PyObject *obj, *dumps;
	if (!PyArg_ParseTuple(args, "OO", &obj, &dumps))
		return NULL;
	Buf b = {0};
	write_span_json(&b, obj, dumps);
	return finish(&b);
}

/* ---- a batch: one call, one buffer ----------------------------------------------- */

/* The span a writer left to Python: fallback(span) gives its bytes (an exception from it
 * goes to the caller). 0, or -1 with an exception set. */
static int from_python(Buf *b, PyObject *fallback, PyObject *obj)
{
	PyObject *out = PyObject_CallOneArg(fallback, obj);
	if (!out)
		return -1;
	if (!PyBytes_Check(out)) {
		Py_DECREF(out);
		PyErr_SetString(PyExc_TypeError, "the fallback must return bytes");
		return -1;
	}
	put(b, PyBytes_AS_STRING(out), PyBytes_GET_SIZE(out));
	Py_DECREF(out);
	return 0;
}

static PyObject *batch_done(Buf *b, int error)
{
	if (b->oom && !error) {
		PyErr_NoMemory();
		error = 1;
	}
	if (error) {
		PyMem_Free(b->p);
		return NULL;
	}
	PyObject *out = PyBytes_FromStringAndSize((const char *)b->p, b->len);
	PyMem_Free(b->p);
	return out;
}

/* spans(list, fallback) -> the ScopeSpans `spans` fields (tag 2) of every span */
static PyObject *spans(PyObject *self, PyObject *args)
{
	PyObject *list, *fallback;
	if (!PyArg_ParseTuple(args, "O!O", &PyList_Type, &list, &fallback))
		return NULL;
	Py_ssize_t n = PyList_GET_SIZE(list);
	Buf b = {0};
	grow(&b, (size_t)n * 768);
	int error = 0;
	for (Py_ssize_t i = 0; i < n && !error && !b.oom; i++) {
		PyObject *obj = PyList_GET_ITEM(list, i);
		size_t at = begin_field(&b, 0x12);
		if (write_span(&b, obj) < 0 && !b.oom) {
			b.failed = 0;
			b.len = at + 5;
			error = from_python(&b, fallback, obj) < 0;
		}
		end_field(&b, at);
	}
	return batch_done(&b, error);
}

/* spans_json(list, dumps, fallback) -> the JSON array of every span's object */
static PyObject *spans_json(PyObject *self, PyObject *args)
{
	PyObject *list, *dumps, *fallback;
	if (!PyArg_ParseTuple(args, "O!OO", &PyList_Type, &list, &dumps, &fallback))
		return NULL;
	Py_ssize_t n = PyList_GET_SIZE(list);
	Buf b = {0};
	grow(&b, (size_t)n * 1536 + 2);
	byte(&b, '[');
	int error = 0;
	for (Py_ssize_t i = 0; i < n && !error && !b.oom; i++) {
		PyObject *obj = PyList_GET_ITEM(list, i);
		if (i)
			byte(&b, ',');
		size_t at = b.len;
		if (write_span_json(&b, obj, dumps) < 0 && !b.oom) {
			b.failed = 0;
			b.len = at;
			error = from_python(&b, fallback, obj) < 0;
		}
	}
	byte(&b, ']');
	return batch_done(&b, error);
}

static PyMethodDef otlp_methods[] = {
	{"span", span, METH_O,
	 "span(neutral_span) -> its OTLP Span message's bytes, or None (Python's to write)"},
	{"span_json", span_json, METH_VARARGS,
	 "span_json(neutral_span, dumps) -> its OTLP/JSON Span object's bytes, or None"},
	{"spans", spans, METH_VARARGS,
	 "spans(list, fallback) -> ScopeSpans.spans fields of every span; fallback(span) -> "
	 "the Span message of one this code leaves to Python"},
	{"spans_json", spans_json, METH_VARARGS,
	 "spans_json(list, dumps, fallback) -> the JSON array of the spans; fallback(span) -> "
	 "the JSON object of one this code leaves to Python"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef otlp_module = {
	PyModuleDef_HEAD_INIT, "otel_ebpf._fast.otlp",
	"OTLP spans written in C; otel_ebpf/export/otlp_proto.py and otlp_json.py are the "
	"reference.",
	-1, otlp_methods,
};

PyMODINIT_FUNC PyInit_otlp(void)
{
	struct {
		PyObject **slot;
		const char *name;
	} names[] = {
		{&s_name, "name"},
		{&s_kind, "kind"},
		{&s_start_ns, "start_ns"},
		{&s_end_ns, "end_ns"},
		{&s_wall_ns, "wall_ns"},
		{&s_wall_end_ns, "wall_end_ns"},
		{&s_attributes, "attributes"},
		{&s_status, "status"},
		{&s_status_message, "status_message"},
		{&s_trace_id, "trace_id"},
		{&s_span_id, "span_id"},
		{&s_parent_span_id, "parent_span_id"},
		{&s_events, "events"},
		{&s_links, "links"},
		{&s_time_ns, "time_ns"},
		{&s_trace_state, "trace_state"},
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++) {
		*names[i].slot = PyUnicode_InternFromString(names[i].name);
		if (!*names[i].slot)
			return NULL;
	}
	return PyModule_Create(&otlp_module);
}
