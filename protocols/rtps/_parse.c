/* SPDX-License-Identifier: Apache-2.0 */
/* An RTPS datagram into its header and submessages (protocols/rtps/parse.py `parse_python`,
 * the reference): the same RTPSMessage and submessage objects, their slots written by
 * offset (the classes are the Python ones, given to setup()). Pure and total as the
 * reference: bytes that are not RTPS 2.x give None, nothing raises but MemoryError. */
#include "slots.h"

#include <stdint.h>
#include <string.h>

#define HEADER_SIZE 20
#define MAX_SUBMESSAGES 512
#define MAX_SET_BITS 256
#define MAX_PARAMS 128
#define PID_PAD 0x0000
#define PID_SENTINEL 0x0001

enum {
	PAD = 0x01, ACKNACK = 0x06, HEARTBEAT = 0x07, GAP = 0x08, INFO_TS = 0x09,
	INFO_SRC = 0x0C, INFO_REPLY_IP4 = 0x0D, INFO_DST = 0x0E, INFO_REPLY = 0x0F,
	NACK_FRAG = 0x12, HEARTBEAT_FRAG = 0x13, DATA = 0x15, DATA_FRAG = 0x16,
};
#define FLAG_E 0x01
#define DATA_Q 0x02
#define DATA_D 0x04
#define DATA_K 0x08
#define FRAG_Q 0x02
#define INFO_TS_I 0x02

/* the classes, by their index in setup()'s tuple */
enum { C_DATA, C_DATA_FRAG, C_HEARTBEAT, C_ACKNACK, C_NACK_FRAG, C_HEARTBEAT_FRAG, C_GAP,
       C_INFO_TS, C_INFO_DST, C_INFO_SRC, C_OTHER, C_MESSAGE, C_N };

/* slots every submessage class has (Submessage, Addressed) */
enum { S_ID, S_FLAGS, S_READER, S_WRITER, S_SRC, S_DST,
       /* then each class's own, at most 9 */
       S_OWN };
#define MAX_SLOTS (S_OWN + 9)

static const char *const own_names[C_N][10] = {
	[C_DATA] = {"seq", "inline_qos", "payload", "payload_offset", "payload_end",
		    "source_time"},
	[C_DATA_FRAG] = {"seq", "start", "count", "fragment_size", "sample_size",
			 "inline_qos", "payload", "source_time"},
	[C_HEARTBEAT] = {"first", "last", "count"},
	[C_ACKNACK] = {"base", "missing", "count"},
	[C_NACK_FRAG] = {"seq", "missing", "count"},
	[C_HEARTBEAT_FRAG] = {"seq", "last_fragment", "count"},
	[C_GAP] = {"start", "base", "listed"},
	[C_INFO_TS] = {"seconds", "fraction"},
	[C_INFO_DST] = {"prefix"},
	[C_INFO_SRC] = {"prefix", "version", "vendor"},
	[C_OTHER] = {"length"},
	[C_MESSAGE] = {"version", "vendor", "prefix", "submessages", "truncated", "captured",
		       "malformed", "unknown"},
};

struct cls {
	PyTypeObject *type;
	struct slot slots[MAX_SLOTS];
	int addressed; /* has reader/writer ids and prefixes */
};

static struct cls classes[C_N];
/* RTPSMessage's other (Frame) slots, copied from a template; empty dicts made fresh */
#define MAX_FRAME_SLOTS 32
static struct slot frame_slots[MAX_FRAME_SLOTS];
static size_t n_frame_slots;
static PyObject *template_msg;
static PyObject *unknown_prefix; /* 12 zero octets */
static PyObject *empty_bytes;

static inline uint16_t u16(const uint8_t *p, int little)
{
	return little ? (uint16_t)(p[0] | p[1] << 8) : (uint16_t)(p[0] << 8 | p[1]);
}

static inline uint32_t u32(const uint8_t *p, int little)
{
	return little ? (uint32_t)p[0] | (uint32_t)p[1] << 8 | (uint32_t)p[2] << 16 |
				(uint32_t)p[3] << 24
		      : (uint32_t)p[0] << 24 | (uint32_t)p[1] << 16 | (uint32_t)p[2] << 8 |
				(uint32_t)p[3];
}

/* SequenceNumber_t: high signed 32, low unsigned 32 */
static inline int64_t seqnum(const uint8_t *p, int little)
{
	uint32_t high = u32(p, little), low = u32(p + 4, little);
	return (int64_t)(((uint64_t)high << 32) | low);
}

/* a new instance of class c, its slots unset; NULL on MemoryError */
static PyObject *alloc(int c)
{
	PyTypeObject *t = classes[c].type;
	return t->tp_alloc(t, 0);
}

/* set a slot to a new reference (stolen); -1 when v is NULL (an error set) */
static inline int put(PyObject *o, int c, int s, PyObject *v)
{
	if (!v)
		return -1;
	Py_XSETREF(*(PyObject **)((char *)o + classes[c].slots[s].offset), v);
	return 0;
}

static inline int put_long(PyObject *o, int c, int s, long long v)
{
	return put(o, c, s, PyLong_FromLongLong(v));
}

static inline int put_obj(PyObject *o, int c, int s, PyObject *v)
{
	Py_INCREF(v);
	return put(o, c, s, v);
}

struct ctx {
	PyObject *src, *dst, *time; /* borrowed from the message or owned: see parse */
};

/* a submessage of class c with its id, flags and (addressed ones) ids and prefixes */
static PyObject *sub_new(int c, int id, int flags, const uint8_t *ids, const struct ctx *ctx)
{
	PyObject *o = alloc(c);
	if (!o)
		return NULL;
	if (put_long(o, c, S_ID, id) || put_long(o, c, S_FLAGS, flags))
		goto fail;
	if (classes[c].addressed) {
		uint32_t reader = u32(ids, 0), writer = u32(ids + 4, 0); /* octets: big-endian */
		if (put_long(o, c, S_READER, reader) || put_long(o, c, S_WRITER, writer) ||
		    put_obj(o, c, S_SRC, ctx->src) || put_obj(o, c, S_DST, ctx->dst))
			goto fail;
	}
	return o;
fail:
	Py_DECREF(o);
	return NULL;
}

/* payload.parameters: a new dict into *qos; the offset after the sentinel, or -1 when the
 * list did not end before `end`; -2 on error */
static Py_ssize_t parameters(const uint8_t *buf, Py_ssize_t offset, Py_ssize_t end, int little,
			     PyObject **qos)
{
	PyObject *found = PyDict_New();
	if (!found)
		return -2;
	*qos = found;
	for (int i = 0; i < MAX_PARAMS; i++) {
		if (offset + 4 > end)
			return -1;
		unsigned pid = u16(buf + offset, little), length = u16(buf + offset + 2, little);
		offset += 4;
		if (pid == PID_SENTINEL)
			return offset;
		if (offset + (Py_ssize_t)length > end)
			return -1;
		if (pid != PID_PAD) {
			PyObject *key = PyLong_FromUnsignedLong(pid);
			if (!key)
				return -2;
			int has = PyDict_Contains(found, key);
			if (has == 0) {
				PyObject *v = PyBytes_FromStringAndSize((const char *)buf + offset,
									length);
				has = v ? PyDict_SetItem(found, key, v) : -1;
				Py_XDECREF(v);
			}
			Py_DECREF(key);
			if (has < 0)
				return -2;
		}
		offset += length;
	}
	return -1;
}

/* _inline_qos: the offset where the data starts (-1: None), the dict into *qos; -2 error */
static Py_ssize_t inline_qos(const uint8_t *buf, Py_ssize_t offset, Py_ssize_t end, int little,
			     int present, PyObject **qos)
{
	if (offset > end) {
		*qos = NULL;
		return -1;
	}
	if (!present) {
		*qos = PyDict_New();
		return *qos ? offset : -2;
	}
	return parameters(buf, offset, end, little, qos);
}

/* a SequenceNumberSet (wide) or FragmentNumberSet: members into *set (a tuple), the base
 * into *base; the offset after it, -1: None, -2 error */
static Py_ssize_t number_set(const uint8_t *buf, Py_ssize_t offset, Py_ssize_t end, int little,
			     int wide, int64_t *base, PyObject **set)
{
	Py_ssize_t base_size = wide ? 8 : 4;
	if (offset + base_size + 4 > end)
		return -1;
	*base = wide ? seqnum(buf + offset, little) : (int64_t)u32(buf + offset, little);
	uint32_t bits = u32(buf + offset + base_size, little);
	offset += base_size + 4;
	if (bits > MAX_SET_BITS)
		return -1;
	/* members past the largest sequence number (a signed 64-bit count): malformed, as the
	 * Python reference says; base + i would overflow */
	if (wide && bits && *base > INT64_MAX - (int64_t)(bits - 1))
		return -1;
	uint32_t words = (bits + 31) / 32;
	if (offset + 4 * (Py_ssize_t)words > end)
		return -1;
	int64_t members[MAX_SET_BITS];
	Py_ssize_t n = 0;
	for (uint32_t w = 0; w < words; w++) {
		uint32_t word = u32(buf + offset + 4 * w, little);
		for (uint32_t bit = 0; bit < 32; bit++) {
			uint32_t i = w * 32 + bit;
			if (i < bits && (word & (0x80000000u >> bit)))
				members[n++] = *base + i;
		}
	}
	PyObject *t = PyTuple_New(n);
	if (!t)
		return -2;
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *v = PyLong_FromLongLong(members[i]);
		if (!v) {
			Py_DECREF(t);
			return -2;
		}
		PyTuple_SET_ITEM(t, i, v);
	}
	*set = t;
	return offset + 4 * words;
}

#define NONE_SUB ((PyObject *)1) /* a decoder's "None": too short, or a bad set */

/* the decoders: (buf, body, captured end, declared end or -1, flags, context): a new
 * submessage, NONE_SUB, or NULL with an error set */
static PyObject *dec_data(const uint8_t *buf, Py_ssize_t body, Py_ssize_t end,
			  Py_ssize_t declared, int flags, struct ctx *ctx)
{
	int little = flags & FLAG_E;
	if (body + 20 > end)
		return NONE_SUB;
	unsigned to_qos = u16(buf + body + 2, little);
	int64_t seq = seqnum(buf + body + 12, little);
	PyObject *qos;
	Py_ssize_t start = inline_qos(buf, body + 4 + to_qos, end, little, flags & DATA_Q, &qos);
	if (start == -2) {
		Py_XDECREF(qos);
		return NULL;
	}
	if (start < 0) {
		Py_XDECREF(qos);
		return NONE_SUB;
	}
	PyObject *o = sub_new(C_DATA, DATA, flags, buf + body + 4, ctx);
	if (!o) {
		Py_DECREF(qos);
		return NULL;
	}
	int has_payload = flags & (DATA_D | DATA_K);
	PyObject *payload = has_payload
		? PyBytes_FromStringAndSize((const char *)buf + start, end - start)
		: (Py_INCREF(empty_bytes), empty_bytes);
	PyObject *pend;
	if (!has_payload)
		pend = PyLong_FromSsize_t(start);
	else if (declared < 0)
		pend = (Py_INCREF(Py_None), Py_None);
	else
		pend = PyLong_FromSsize_t(declared);
	if (put_long(o, C_DATA, S_OWN + 0, seq) || put(o, C_DATA, S_OWN + 1, qos) ||
	    put(o, C_DATA, S_OWN + 2, payload) || put_long(o, C_DATA, S_OWN + 3, start) ||
	    put(o, C_DATA, S_OWN + 4, pend) || put_obj(o, C_DATA, S_OWN + 5, ctx->time)) {
		Py_DECREF(o);
		return NULL;
	}
	return o;
}

static PyObject *dec_data_frag(const uint8_t *buf, Py_ssize_t body, Py_ssize_t end,
			       Py_ssize_t declared, int flags, struct ctx *ctx)
{
	int little = flags & FLAG_E;
	if (body + 32 > end)
		return NONE_SUB;
	unsigned to_qos = u16(buf + body + 2, little);
	int64_t seq = seqnum(buf + body + 12, little);
	uint32_t start = u32(buf + body + 20, little);
	unsigned count = u16(buf + body + 24, little), fragment_size = u16(buf + body + 26, little);
	uint32_t sample_size = u32(buf + body + 28, little);
	PyObject *qos;
	Py_ssize_t data = inline_qos(buf, body + 4 + to_qos, end, little, flags & FRAG_Q, &qos);
	if (data == -2) {
		Py_XDECREF(qos);
		return NULL;
	}
	if (data < 0 || start < 1 || fragment_size == 0) {
		Py_XDECREF(qos);
		return NONE_SUB;
	}
	PyObject *o = sub_new(C_DATA_FRAG, DATA_FRAG, flags, buf + body + 4, ctx);
	if (!o) {
		Py_DECREF(qos);
		return NULL;
	}
	int c = C_DATA_FRAG;
	if (put_long(o, c, S_OWN + 0, seq) || put_long(o, c, S_OWN + 1, start) ||
	    put_long(o, c, S_OWN + 2, count) || put_long(o, c, S_OWN + 3, fragment_size) ||
	    put_long(o, c, S_OWN + 4, sample_size) || put(o, c, S_OWN + 5, qos) ||
	    put(o, c, S_OWN + 6, PyBytes_FromStringAndSize((const char *)buf + data, end - data)) ||
	    put_obj(o, c, S_OWN + 7, ctx->time)) {
		Py_DECREF(o);
		return NULL;
	}
	return o;
}

static PyObject *dec_heartbeat(const uint8_t *buf, Py_ssize_t body, Py_ssize_t end,
			       Py_ssize_t declared, int flags, struct ctx *ctx)
{
	int little = flags & FLAG_E, c = C_HEARTBEAT;
	if (body + 28 > end)
		return NONE_SUB;
	PyObject *o = sub_new(c, HEARTBEAT, flags, buf + body, ctx);
	if (!o || put_long(o, c, S_OWN + 0, seqnum(buf + body + 8, little)) ||
	    put_long(o, c, S_OWN + 1, seqnum(buf + body + 16, little)) ||
	    put_long(o, c, S_OWN + 2, u32(buf + body + 24, little))) {
		Py_XDECREF(o);
		return NULL;
	}
	return o;
}

static PyObject *dec_heartbeat_frag(const uint8_t *buf, Py_ssize_t body, Py_ssize_t end,
				    Py_ssize_t declared, int flags, struct ctx *ctx)
{
	int little = flags & FLAG_E, c = C_HEARTBEAT_FRAG;
	if (body + 24 > end)
		return NONE_SUB;
	PyObject *o = sub_new(c, HEARTBEAT_FRAG, flags, buf + body, ctx);
	if (!o || put_long(o, c, S_OWN + 0, seqnum(buf + body + 8, little)) ||
	    put_long(o, c, S_OWN + 1, u32(buf + body + 16, little)) ||
	    put_long(o, c, S_OWN + 2, u32(buf + body + 20, little))) {
		Py_XDECREF(o);
		return NULL;
	}
	return o;
}

/* ACKNACK (wide set, then a count) and NACK_FRAG (a sequence number, a fragment set, a
 * count) */
static PyObject *dec_nack(const uint8_t *buf, Py_ssize_t body, Py_ssize_t end, int flags,
			  struct ctx *ctx, int frag)
{
	int little = flags & FLAG_E, c = frag ? C_NACK_FRAG : C_ACKNACK;
	if (body + 8 > end)
		return NONE_SUB;
	int64_t seq = 0, base;
	if (frag) {
		if (body + 16 > end)
			return NONE_SUB;
		seq = seqnum(buf + body + 8, little);
	}
	PyObject *set = NULL;
	Py_ssize_t after = number_set(buf, body + (frag ? 16 : 8), end, little, !frag, &base, &set);
	if (after == -2)
		return NULL;
	if (after < 0 || after + 4 > end) {
		Py_XDECREF(set);
		return NONE_SUB;
	}
	PyObject *o = sub_new(c, frag ? NACK_FRAG : ACKNACK, flags, buf + body, ctx);
	if (!o || put_long(o, c, S_OWN + 0, frag ? seq : base) || put(o, c, S_OWN + 1, set) ||
	    put_long(o, c, S_OWN + 2, u32(buf + after, little))) {
		if (!o)
			Py_DECREF(set);
		Py_XDECREF(o);
		return NULL;
	}
	return o;
}

static PyObject *dec_acknack(const uint8_t *buf, Py_ssize_t body, Py_ssize_t end,
			     Py_ssize_t declared, int flags, struct ctx *ctx)
{
	return dec_nack(buf, body, end, flags, ctx, 0);
}

static PyObject *dec_nack_frag(const uint8_t *buf, Py_ssize_t body, Py_ssize_t end,
			       Py_ssize_t declared, int flags, struct ctx *ctx)
{
	return dec_nack(buf, body, end, flags, ctx, 1);
}

static PyObject *dec_gap(const uint8_t *buf, Py_ssize_t body, Py_ssize_t end,
			 Py_ssize_t declared, int flags, struct ctx *ctx)
{
	int little = flags & FLAG_E, c = C_GAP;
	if (body + 16 > end)
		return NONE_SUB;
	int64_t start = seqnum(buf + body + 8, little), base;
	PyObject *set = NULL;
	Py_ssize_t after = number_set(buf, body + 16, end, little, 1, &base, &set);
	if (after == -2)
		return NULL;
	if (after < 0)
		return NONE_SUB;
	PyObject *o = sub_new(c, GAP, flags, buf + body, ctx);
	if (!o || put_long(o, c, S_OWN + 0, start) || put_long(o, c, S_OWN + 1, base) ||
	    put(o, c, S_OWN + 2, set)) {
		if (!o)
			Py_DECREF(set);
		Py_XDECREF(o);
		return NULL;
	}
	return o;
}

static PyObject *dec_info_ts(const uint8_t *buf, Py_ssize_t body, Py_ssize_t end,
			     Py_ssize_t declared, int flags, struct ctx *ctx)
{
	int c = C_INFO_TS;
	int32_t seconds = 0;
	uint32_t fraction = 0;
	if (flags & INFO_TS_I) {
		Py_INCREF(Py_None);
		Py_SETREF(ctx->time, Py_None);
	} else {
		if (body + 8 > end)
			return NONE_SUB;
		seconds = (int32_t)u32(buf + body, flags & FLAG_E);
		fraction = u32(buf + body + 4, flags & FLAG_E);
		PyObject *t = Py_BuildValue("(iI)", seconds, fraction);
		if (!t)
			return NULL;
		Py_SETREF(ctx->time, t);
	}
	PyObject *o = sub_new(c, INFO_TS, flags, NULL, ctx);
	if (!o || put_long(o, c, S_OWN + 0, seconds) || put_long(o, c, S_OWN + 1, fraction)) {
		Py_XDECREF(o);
		return NULL;
	}
	return o;
}

static PyObject *dec_info_dst(const uint8_t *buf, Py_ssize_t body, Py_ssize_t end,
			      Py_ssize_t declared, int flags, struct ctx *ctx)
{
	if (body + 12 > end)
		return NONE_SUB;
	PyObject *prefix = PyBytes_FromStringAndSize((const char *)buf + body, 12);
	if (!prefix)
		return NULL;
	Py_SETREF(ctx->dst, prefix);
	PyObject *o = sub_new(C_INFO_DST, INFO_DST, flags, NULL, ctx);
	if (!o || put_obj(o, C_INFO_DST, S_OWN + 0, prefix)) {
		Py_XDECREF(o);
		return NULL;
	}
	return o;
}

static PyObject *dec_info_src(const uint8_t *buf, Py_ssize_t body, Py_ssize_t end,
			      Py_ssize_t declared, int flags, struct ctx *ctx)
{
	int c = C_INFO_SRC;
	if (body + 20 > end)
		return NONE_SUB;
	PyObject *prefix = PyBytes_FromStringAndSize((const char *)buf + body + 8, 12);
	if (!prefix)
		return NULL;
	Py_SETREF(ctx->src, prefix);
	Py_INCREF(Py_None);
	Py_SETREF(ctx->time, Py_None); /* a new source: the previous one's time is not its time */
	PyObject *o = sub_new(c, INFO_SRC, flags, NULL, ctx);
	if (!o || put_obj(o, c, S_OWN + 0, prefix) ||
	    put(o, c, S_OWN + 1, Py_BuildValue("(ii)", buf[body + 4], buf[body + 5])) ||
	    put_long(o, c, S_OWN + 2, u16(buf + body + 6, 0))) {
		Py_XDECREF(o);
		return NULL;
	}
	return o;
}

static PyObject *other(int id, int flags, long long length)
{
	PyObject *o = sub_new(C_OTHER, id, flags, NULL, NULL);
	if (!o || put_long(o, C_OTHER, S_OWN + 0, length)) {
		Py_XDECREF(o);
		return NULL;
	}
	return o;
}

static PyObject *dec_other(const uint8_t *buf, Py_ssize_t body, Py_ssize_t end,
			   Py_ssize_t declared, int flags, struct ctx *ctx)
{
	return other(buf[body - 4], flags, (declared >= 0 ? declared : end) - body);
}

typedef PyObject *(*decoder)(const uint8_t *, Py_ssize_t, Py_ssize_t, Py_ssize_t, int,
			     struct ctx *);
static decoder decoders[256];

/* a new RTPSMessage: Frame's slots as the template has them (empty dicts made anew) */
static PyObject *message_new(void)
{
	PyObject *m = alloc(C_MESSAGE);
	if (!m)
		return NULL;
	for (size_t i = 0; i < n_frame_slots; i++) {
		PyObject *v = slot_get(template_msg, &frame_slots[i]);
		if (!v)
			continue;
		if (PyDict_CheckExact(v)) {
			v = PyDict_New();
			if (!v) {
				Py_DECREF(m);
				return NULL;
			}
		} else {
			Py_INCREF(v);
		}
		Py_XSETREF(*(PyObject **)((char *)m + frame_slots[i].offset), v);
	}
	return m;
}

static PyObject *rtps_parse(PyObject *self, PyObject *arg)
{
	if (!template_msg) {
		PyErr_SetString(PyExc_RuntimeError, "rtps: setup() first");
		return NULL;
	}
	Py_buffer view;
	if (PyObject_GetBuffer(arg, &view, PyBUF_SIMPLE) < 0)
		return NULL;
	const uint8_t *buf = view.buf;
	Py_ssize_t size = view.len;
	PyObject *m = NULL, *subs = NULL;
	struct ctx ctx = {NULL, NULL, NULL};
	if (size < HEADER_SIZE || memcmp(buf, "RTPS", 4) || buf[4] != 2 || buf[5] >= 10) {
		PyBuffer_Release(&view);
		Py_RETURN_NONE;
	}
	long malformed = 0, unknown = 0;
	int truncated = 0;
	const int c = C_MESSAGE;
	m = message_new();
	subs = PyList_New(0);
	ctx.src = PyBytes_FromStringAndSize((const char *)buf + 8, 12);
	ctx.dst = (Py_INCREF(unknown_prefix), unknown_prefix);
	ctx.time = (Py_INCREF(Py_None), Py_None);
	if (!m || !subs || !ctx.src)
		goto fail;
	if (put(m, c, S_OWN + 0, Py_BuildValue("(ii)", buf[4], buf[5])) ||
	    put_long(m, c, S_OWN + 1, u16(buf + 6, 0)) || put_obj(m, c, S_OWN + 2, ctx.src) ||
	    put_obj(m, c, S_OWN + 3, subs) || put_long(m, c, S_OWN + 5, size))
		goto fail;
	Py_ssize_t offset = HEADER_SIZE;
	for (int n = 0; n < MAX_SUBMESSAGES; n++) {
		if (offset + 4 > size) {
			truncated = offset < size;
			break;
		}
		int id = buf[offset], flags = buf[offset + 1];
		unsigned length = u16(buf + offset + 2, flags & FLAG_E);
		Py_ssize_t body = offset + 4;
		/* octetsToNextHeader 0: the last submessage, up to the datagram's end; except for
		 * PAD and INFO_TS, whose 0 means an empty body (DDSI-RTPS 9.4.5.1.3) */
		int to_end = length == 0 && id != PAD && id != INFO_TS;
		Py_ssize_t end = to_end ? -1 : body + (Py_ssize_t)length;
		int cut = end >= 0 && end > size;
		decoder d = decoders[id];
		PyObject *sub;
		if (!d) {
			unknown++;
			sub = other(id, flags, length);
		} else {
			sub = d(buf, body, end < 0 ? size : (end < size ? end : size), end, flags,
				&ctx);
		}
		if (!sub)
			goto fail;
		if (sub == NONE_SUB) {
			malformed += cut ? 0 : 1;
		} else {
			int err = PyList_Append(subs, sub);
			Py_DECREF(sub);
			if (err)
				goto fail;
		}
		if (cut) {
			truncated = 1;
			break;
		}
		if (end < 0)
			break;
		offset = end;
	}
	if (put_obj(m, c, S_OWN + 4, truncated ? Py_True : Py_False) ||
	    put_long(m, c, S_OWN + 6, malformed) || put_long(m, c, S_OWN + 7, unknown))
		goto fail;
	Py_DECREF(subs);
	Py_DECREF(ctx.src);
	Py_DECREF(ctx.dst);
	Py_DECREF(ctx.time);
	PyBuffer_Release(&view);
	return m;
fail:
	Py_XDECREF(m);
	Py_XDECREF(subs);
	Py_XDECREF(ctx.src);
	Py_XDECREF(ctx.dst);
	Py_XDECREF(ctx.time);
	PyBuffer_Release(&view);
	return NULL;
}

/* setup(classes, frame_slots, template, unknown_prefix): classes in the order of the enum
 * above, frame_slots the names of RTPSMessage's slots that parse does not set */
static PyObject *rtps_setup(PyObject *self, PyObject *args)
{
	PyObject *types, *names, *tmpl, *prefix;
	if (!PyArg_ParseTuple(args, "O!O!OO!", &PyTuple_Type, &types, &PyTuple_Type, &names,
			      &tmpl, &PyBytes_Type, &prefix))
		return NULL;
	if (PyTuple_GET_SIZE(types) != C_N || PyTuple_GET_SIZE(names) > MAX_FRAME_SLOTS) {
		PyErr_SetString(PyExc_ValueError, "setup: classes or slots do not match");
		return NULL;
	}
	static const char *const common[S_OWN] = {"id", "flags", "reader_id", "writer_id",
						  "src_prefix", "dst_prefix"};
	for (int c = 0; c < C_N; c++) {
		PyObject *t = PyTuple_GET_ITEM(types, c);
		struct cls *k = &classes[c];
		size_t n = 0;
		memset(k->slots, 0, sizeof(k->slots));
		k->addressed = c <= C_GAP;
		if (c != C_MESSAGE) {
			for (int i = 0; i < S_OWN; i++)
				if (i < 2 || k->addressed)
					k->slots[i].name = common[i];
				else
					k->slots[i].name = "id"; /* unused: any valid slot */
			n = S_OWN;
		} else {
			for (int i = 0; i < S_OWN; i++)
				k->slots[i].name = "version"; /* unused */
			n = S_OWN;
		}
		for (int i = 0; own_names[c][i]; i++)
			k->slots[n++].name = own_names[c][i];
		if (slots_of(t, k->slots, n) < 0)
			return NULL;
		if (!PyType_Check(t) || ((PyTypeObject *)t)->tp_init == NULL)
			return PyErr_Format(PyExc_TypeError, "setup: %R", t);
		Py_XSETREF(k->type, (PyTypeObject *)Py_NewRef(t));
	}
	n_frame_slots = (size_t)PyTuple_GET_SIZE(names);
	for (size_t i = 0; i < n_frame_slots; i++) {
		PyObject *s = PyTuple_GET_ITEM(names, i);
		if (!PyUnicode_Check(s))
			return PyErr_Format(PyExc_TypeError, "setup: slot names");
		frame_slots[i].name = PyUnicode_AsUTF8(s); /* kept alive by the tuple, kept below */
	}
	if (slots_of((PyObject *)classes[C_MESSAGE].type, frame_slots, n_frame_slots) < 0)
		return NULL;
	if (!PyObject_TypeCheck(tmpl, classes[C_MESSAGE].type))
		return PyErr_Format(PyExc_TypeError, "setup: the template is not an RTPSMessage");
	static PyObject *kept_names;
	Py_XSETREF(kept_names, Py_NewRef(names));
	Py_XSETREF(template_msg, Py_NewRef(tmpl));
	Py_XSETREF(unknown_prefix, Py_NewRef(prefix));
	Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
	{"setup", rtps_setup, METH_VARARGS, "setup(classes, frame_slots, template, prefix)"},
	{"parse", rtps_parse, METH_O, "parse(buf) -> RTPSMessage | None (parse.py's contract)"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "otel_ebpf.protocols.rtps._parse",
				    "RTPS datagrams into submessages (protocols/rtps/parse.py)",
				    -1, methods};

PyMODINIT_FUNC PyInit__parse(void)
{
	decoders[DATA] = dec_data;
	decoders[DATA_FRAG] = dec_data_frag;
	decoders[HEARTBEAT] = dec_heartbeat;
	decoders[HEARTBEAT_FRAG] = dec_heartbeat_frag;
	decoders[ACKNACK] = dec_acknack;
	decoders[NACK_FRAG] = dec_nack_frag;
	decoders[GAP] = dec_gap;
	decoders[INFO_TS] = dec_info_ts;
	decoders[INFO_DST] = dec_info_dst;
	decoders[INFO_SRC] = dec_info_src;
	decoders[PAD] = dec_other;
	decoders[INFO_REPLY] = dec_other;
	decoders[INFO_REPLY_IP4] = dec_other;
	empty_bytes = PyBytes_FromStringAndSize(NULL, 0);
	if (!empty_bytes)
		return NULL;
	return PyModule_Create(&module);
}
