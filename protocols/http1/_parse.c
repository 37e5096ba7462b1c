/* SPDX-License-Identifier: Apache-2.0 */
/* HTTP/1 heads on the common path, in one pass: a strict subset of what llhttp accepts.
 *
 * head(buf, request, kept[, chunked]) -> tuple | None
 *
 * A head this code is sure about (complete in buf, every byte inside the grammar below) is
 * returned as the fields protocols/http1/parse.py reads from it; anything else returns
 * None and the caller takes the llhttp (httptools) path, which stays the reference. The
 * subset is deliberately narrow, so that whatever it accepts llhttp accepts with the same
 * meaning (tests/protocols/http1/test_http1_fastpath.py checks both on the same bytes):
 *   request line  KNOWN-METHOD SP origin-form SP "HTTP/1." [01] CRLF  (no CONNECT)
 *   status line   "HTTP/1." [01] SP [1-5] DIGIT DIGIT SP 1*(VCHAR / SP) CRLF
 *   header        1*tchar ":" *(SP / HT) 1*VCHAR *(VCHAR / SP / HT) CRLF
 *   then CRLF. No obs-fold, no obs-text, no empty value; Upgrade, a repeated or
 *   non-decimal Content-Length all go to llhttp, and so does Transfer-Encoding unless
 *   the caller takes chunked bodies (chunked true): then one "Transfer-Encoding: chunked"
 *   exactly (lower case, no parameters or other codings, no blanks after it) in an
 *   HTTP/1.1 head without Content-Length is taken, as content_length CHUNKED (-2).
 *
 * kept maps a lower-case header name (bytes) to (name as str, flags): which of the head's
 * values the caller wants (the framing headers and the correlation carriers, secrets
 * already left out). Returned:
 *   (start, end, method | status, target | reason, version, carrier, host, user_agent,
 *    content_type, content_length)   -- content_length -1: none
 *
 * whole(direction, data, state, pos, start_ns, end_ns, seq, tid, task) -> frame | None
 *
 * The usual event in one call: a syscall's bytes that are one whole message in the subset
 * (its body, if any, skipped by length, no layer wanting it), at an empty stream's head.
 * Does what parse.py whole() does (the reference): the HTTP1State bookkeeping of
 * _request_head / _response_head and the frame, timed, built by parse.py's makers;
 * None, with nothing changed, whenever the general path must run.
 */
#include <limits.h>
#include <string.h>

#include "slots.h"

#define MAX_HEAD (64 * 1024)  /* parse.py MAX_HEAD: the window the head's end is looked for in */
#define MAX_LEAD 64           /* empty lines before a message: more than this is rare, llhttp's */
#define MAX_NAME 64           /* longer header names go to llhttp */

/* flags in kept's values (parse.py _fast_kept builds them) */
#define K_HOST 1
#define K_UA 2
#define K_CTYPE 4
#define K_CLEN 8
#define K_FALLBACK 16 /* Upgrade: framing llhttp decides */
#define K_CARRIER 32
#define K_TE 64 /* Transfer-Encoding: "chunked" alone taken where the caller asks, else llhttp's */

#define CLEN_NONE (-1)
#define CLEN_CHUNKED (-2)

static const char *const METHOD_NAMES[] = {"GET", "HEAD", "POST", "PUT", "DELETE",
					   "OPTIONS", "TRACE", "PATCH"};
#define N_METHODS (sizeof(METHOD_NAMES) / sizeof(METHOD_NAMES[0]))
static PyObject *methods[N_METHODS]; /* interned: one string per method for every frame */
static PyObject *v10, *v11, *empty;

static unsigned char tchar[256];  /* RFC 9110 token characters */
static unsigned char tgtchar[256]; /* origin-form characters taken here (no '#', no brackets) */

static void init_tables(void)
{
	const char *t = "!#$%&'*+-.^_`|~";
	const char *g = "-._~:/?@!$&'()*+,;=%";
	for (int c = 0; c < 256; c++) {
		int alnum = (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z');
		tchar[c] = alnum || (c && strchr(t, c));
		tgtchar[c] = alnum || (c && strchr(g, c));
	}
}

static inline int is_vchar(unsigned char c) { return c >= 0x21 && c <= 0x7e; }

/* the end of the line starting at p (the CR of its CRLF), or NULL past `end` */
static inline const unsigned char *line_end(const unsigned char *p, const unsigned char *end)
{
	const unsigned char *cr = memchr(p, '\r', end - p);
	return cr && cr + 1 < end && cr[1] == '\n' ? cr : NULL;
}

static PyObject *latin1(const unsigned char *p, Py_ssize_t n)
{
	return PyUnicode_DecodeLatin1((const char *)p, n, NULL);
}

/* -1: not in the subset (the caller falls back); else the request line's length */
static int request_line(const unsigned char *p, const unsigned char *eol, int *method,
			int *minor, const unsigned char **tgt, Py_ssize_t *tgt_len)
{
	*method = -1;
	for (size_t i = 0; i < N_METHODS; i++) {
		size_t n = strlen(METHOD_NAMES[i]);
		if ((size_t)(eol - p) > n && !memcmp(p, METHOD_NAMES[i], n) && p[n] == ' ') {
			*method = (int)i;
			p += n + 1;
			break;
		}
	}
	if (*method < 0 || p >= eol || *p != '/')
		return -1;
	const unsigned char *t = p;
	while (p < eol && tgtchar[*p])
		p++;
	/* " HTTP/1.x" must end the line exactly */
	if (eol - p != 9 || memcmp(p, " HTTP/1.", 8) || (p[8] != '0' && p[8] != '1'))
		return -1;
	*tgt = t;
	*tgt_len = p - t;
	*minor = p[8] - '0';
	return 0;
}

static int status_line(const unsigned char *p, const unsigned char *eol, int *status,
		       int *minor, const unsigned char **reason, Py_ssize_t *reason_len)
{
	if (eol - p < 14 || memcmp(p, "HTTP/1.", 7) || (p[7] != '0' && p[7] != '1') || p[8] != ' ')
		return -1;
	if (p[9] < '1' || p[9] > '5' || p[10] < '0' || p[10] > '9' || p[11] < '0' || p[11] > '9' ||
	    p[12] != ' ')
		return -1;
	for (const unsigned char *r = p + 13; r < eol; r++)
		if (!is_vchar(*r) && *r != ' ')
			return -1;
	*minor = p[7] - '0';
	*status = (p[9] - '0') * 100 + (p[10] - '0') * 10 + (p[11] - '0');
	*reason = p + 13;
	*reason_len = eol - (p + 13);
	return 0;
}

/* What a head in the subset holds (read_head): the fields parse.py reads from it. */
struct head {
	Py_ssize_t lead, end; /* the head is buf[lead:end] */
	int code, minor;      /* method index or status; HTTP/1.minor */
	const unsigned char *text; /* target or reason, in buf */
	Py_ssize_t text_len;
	PyObject *carrier;  /* owned: {name: value} of the carriers */
	PyObject *vals[3];  /* owned or NULL: host, user-agent, content-type */
	long long clen;     /* CLEN_NONE, CLEN_CHUNKED or the Content-Length */
};

static void head_clear(struct head *h)
{
	Py_CLEAR(h->carrier);
	for (int i = 0; i < 3; i++)
		Py_CLEAR(h->vals[i]);
}

/* 1: a head in the subset, its fields in h (vals filled with "" where absent); 0: not
 * sure, llhttp's (h holds nothing); -1: an error set */
static int read_head(const unsigned char *buf, Py_ssize_t len, int request, PyObject *kept,
		     int chunked_ok, struct head *h)
{
	const unsigned char *end = buf + len;
	int chunked = 0;
	memset(h, 0, sizeof(*h));
	h->clen = CLEN_NONE;

	Py_ssize_t lead = 0;
	while (lead < len && (buf[lead] == '\r' || buf[lead] == '\n'))
		lead++;
	if (lead > MAX_LEAD || lead == len)
		return 0;
	const unsigned char *p = buf + lead;
	const unsigned char *window = len - lead > MAX_HEAD ? p + MAX_HEAD : end;

	const unsigned char *eol = line_end(p, window);
	if (!eol)
		return 0;
	if (request ? request_line(p, eol, &h->code, &h->minor, &h->text, &h->text_len)
		    : status_line(p, eol, &h->code, &h->minor, &h->text, &h->text_len))
		return 0;
	if (!(h->carrier = PyDict_New()))
		goto error;

	unsigned char lower[MAX_NAME];
	for (p = eol + 2;;) {
		if (window - p >= 2 && p[0] == '\r' && p[1] == '\n') {
			p += 2;
			break; /* the blank line: the head is whole */
		}
		eol = line_end(p, window);
		if (!eol)
			goto fallback; /* not all here yet, or too long: llhttp's call */
		const unsigned char *n = p;
		while (n < eol && tchar[*n])
			n++;
		Py_ssize_t name_len = n - p;
		if (!name_len || name_len > MAX_NAME || n >= eol || *n != ':')
			goto fallback;
		for (Py_ssize_t i = 0; i < name_len; i++)
			lower[i] = (p[i] >= 'A' && p[i] <= 'Z') ? p[i] + 32 : p[i];
		const unsigned char *v = n + 1;
		while (v < eol && (*v == ' ' || *v == '\t'))
			v++;
		if (v == eol)
			goto fallback; /* an empty value */
		const unsigned char *ve = eol;
		for (const unsigned char *c = v; c < eol; c++)
			if (!is_vchar(*c) && *c != ' ' && *c != '\t')
				goto fallback;
		while (ve > v && (ve[-1] == ' ' || ve[-1] == '\t'))
			ve--;
		PyObject *key = PyBytes_FromStringAndSize((const char *)lower, name_len);
		if (!key)
			goto error;
		PyObject *entry = PyDict_GetItemWithError(kept, key); /* borrowed */
		Py_DECREF(key);
		if (!entry) {
			if (PyErr_Occurred())
				goto error;
			p = eol + 2;
			continue; /* validated, not wanted: not decoded */
		}
		long flags;
		PyObject *name;
		if (!PyTuple_Check(entry) || PyTuple_GET_SIZE(entry) != 2 ||
		    (flags = PyLong_AsLong(PyTuple_GET_ITEM(entry, 1))) == -1) {
			PyErr_SetString(PyExc_TypeError, "kept: values must be (name, flags)");
			goto error;
		}
		name = PyTuple_GET_ITEM(entry, 0);
		if (flags & K_FALLBACK)
			goto fallback;
		if (flags & K_TE) {
			/* one coding, "chunked" as parse.py _transfer reads it; anything else
			 * (other codings, a list, a repeat, blanks after it) is llhttp's */
			if (!chunked_ok || chunked || ve != eol || eol - v != 7 ||
			    memcmp(v, "chunked", 7))
				goto fallback;
			chunked = 1;
		}
		if (flags & K_CLEN) {
			if (h->clen >= 0 || ve != eol || eol - v > 15)
				goto fallback; /* repeated, trailing blanks, or too long: llhttp's */
			h->clen = 0;
			for (const unsigned char *c = v; c < eol; c++) {
				if (*c < '0' || *c > '9')
					goto fallback;
				h->clen = h->clen * 10 + (*c - '0');
			}
		}
		int slot = flags & K_HOST ? 0 : flags & K_UA ? 1 : flags & K_CTYPE ? 2 : -1;
		if ((slot >= 0 && !h->vals[slot]) || (flags & K_CARRIER)) {
			PyObject *value = latin1(v, ve - v);
			if (!value)
				goto error;
			if (slot >= 0 && !h->vals[slot]) { /* the first value, as parse.py's _Head.first */
				Py_INCREF(value);
				h->vals[slot] = value;
			}
			/* carriers: the last value, as parse.py's dict of the fields */
			if ((flags & K_CARRIER) && PyDict_SetItem(h->carrier, name, value) < 0) {
				Py_DECREF(value);
				goto error;
			}
			Py_DECREF(value);
		}
		p = eol + 2;
	}
	if (chunked) {
		/* beside Content-Length (which llhttp is told to tolerate), or in HTTP/1.0: the
		 * reference decides */
		if (h->clen >= 0 || h->minor != 1)
			goto fallback;
		h->clen = CLEN_CHUNKED;
	}
	for (int i = 0; i < 3; i++)
		if (!h->vals[i]) {
			Py_INCREF(empty);
			h->vals[i] = empty;
		}
	h->lead = lead;
	h->end = p - buf;
	return 1;
fallback:
	head_clear(h);
	return 0;
error:
	head_clear(h);
	return -1;
}

/* method (interned) or status, as parse.py has it */
static PyObject *first_of(const struct head *h, int request)
{
	if (request) {
		Py_INCREF(methods[h->code]);
		return methods[h->code];
	}
	return PyLong_FromLong(h->code);
}

static PyObject *head(PyObject *self, PyObject *args)
{
	Py_buffer view;
	int request, chunked = 0;
	PyObject *kept;
	if (!PyArg_ParseTuple(args, "y*pO!|p", &view, &request, &PyDict_Type, &kept, &chunked))
		return NULL;
	struct head h;
	PyObject *result = NULL, *first = NULL, *text = NULL;
	int found = read_head(view.buf, view.len, request, kept, chunked, &h);
	if (found <= 0) {
		PyBuffer_Release(&view);
		if (found < 0)
			return NULL;
		Py_RETURN_NONE;
	}
	/* h.text points into the buffer: read it before the buffer is released */
	if ((text = latin1(h.text, h.text_len)) && (first = first_of(&h, request))) {
		result = Py_BuildValue("(nnNNONNNNL)", h.lead, h.end, first, text,
				       h.minor ? v11 : v10, h.carrier, h.vals[0], h.vals[1],
				       h.vals[2], h.clen);
		if (result) /* stolen (N) */
			first = text = h.carrier = h.vals[0] = h.vals[1] = h.vals[2] = NULL;
	}
	PyBuffer_Release(&view);
	Py_XDECREF(first);
	Py_XDECREF(text);
	head_clear(&h);
	return result;
}

/* ---- whole(): parse.py whole() -------------------------------------------------------- */

/* set by setup(): the frame makers, Sent, the unknown request, first_wanting, SENT_LIMIT,
 * and the classes whose objects whole() reads by slot */
static PyObject *make_request, *make_response, *sent_type, *unknown_request, *first_wanting;
static PyObject *make_kept_request, *kept_body; /* a request with the body a layer wants */
static PyTypeObject *state_type, *stream_type;
static Py_ssize_t sent_limit;
static PyObject *mask32, *zero, *one, *connect, *head_method;
enum { H_FAST_KEPT, H_TUNNEL, H_STREAMS, H_REQUESTS, H_LAYERS, H_NEXT_INDEX, H_SENT,
       H_ANSWERED, H_SWITCH_PENDING, H_N };
static struct slot state_slots[H_N] = {
	{"fast_kept"}, {"tunnel"}, {"streams"}, {"requests"}, {"layers"}, {"next_index"},
	{"sent"}, {"answered"}, {"switch_pending"}};
static struct slot stream_body = {"body"}, stream_size = {"size"};

static PyObject *setup(PyObject *self, PyObject *args)
{
	PyObject *mr, *mp, *st, *unk, *fw, *state, *stream, *mk, *kb;
	Py_ssize_t limit;
	if (!PyArg_ParseTuple(args, "OOO!OOnO!O!OO", &mr, &mp, &PyType_Type, &st, &unk, &fw,
			      &limit, &PyType_Type, &state, &PyType_Type, &stream, &mk, &kb))
		return NULL;
	if (!PyType_IsSubtype((PyTypeObject *)st, &PyTuple_Type) || !PyTuple_Check(unk) ||
	    PyTuple_GET_SIZE(unk) != 4) {
		PyErr_SetString(PyExc_TypeError, "setup: Sent must be a 4-field named tuple");
		return NULL;
	}
	if (slots_of(state, state_slots, H_N) || slots_of(stream, &stream_body, 1) ||
	    slots_of(stream, &stream_size, 1))
		return NULL;
	PyObject **keep[] = {&make_request, &make_response, &sent_type, &unknown_request,
			     &first_wanting, (PyObject **)&state_type, (PyObject **)&stream_type,
			     &make_kept_request, &kept_body};
	PyObject *values[] = {mr, mp, st, unk, fw, state, stream, mk, kb};
	for (int i = 0; i < 9; i++) {
		Py_INCREF(values[i]);
		Py_XSETREF(*keep[i], values[i]);
	}
	sent_limit = limit;
	Py_RETURN_NONE;
}

/* a Sent(index, method, False, layer), built as tuple.__new__ builds it */
static PyObject *new_sent(PyObject *index, PyObject *method, PyObject *layer)
{
	PyObject *t = ((PyTypeObject *)sent_type)->tp_alloc((PyTypeObject *)sent_type, 4);
	if (!t)
		return NULL;
	Py_INCREF(index);
	Py_INCREF(method);
	Py_INCREF(Py_False);
	Py_INCREF(layer);
	PyTuple_SET_ITEM(t, 0, index);
	PyTuple_SET_ITEM(t, 1, method);
	PyTuple_SET_ITEM(t, 2, Py_False);
	PyTuple_SET_ITEM(t, 3, layer);
	return t;
}

static inline int is_sent(PyObject *e)
{
	return PyTuple_Check(e) && PyTuple_GET_SIZE(e) == 4;
}

static PyObject *whole(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 9) {
		PyErr_SetString(PyExc_TypeError,
				"whole(direction, data, state, pos, start_ns, end_ns, seq, tid, task)");
		return NULL;
	}
	if (!make_request) {
		PyErr_SetString(PyExc_RuntimeError, "whole: setup() was not called");
		return NULL;
	}
	PyObject *direction = args[0], *data = args[1], *state = args[2];
	if (!PyBytes_Check(data)) {
		PyErr_SetString(PyExc_TypeError, "whole: data must be bytes");
		return NULL;
	}
	if (!Py_IS_TYPE(state, state_type))
		Py_RETURN_NONE; /* another parser's state: its own path */
	PyObject *kept = slot_get(state, &state_slots[H_FAST_KEPT]);
	PyObject *streams = slot_get(state, &state_slots[H_STREAMS]);
	PyObject *requests = slot_get(state, &state_slots[H_REQUESTS]);
	PyObject *sent = slot_get(state, &state_slots[H_SENT]);
	PyObject *layers = slot_get(state, &state_slots[H_LAYERS]);
	if (!kept || !PyDict_Check(kept) || slot_get(state, &state_slots[H_TUNNEL]) != Py_False ||
	    !streams || !PyTuple_CheckExact(streams) || PyTuple_GET_SIZE(streams) != 2 ||
	    !requests || !sent || !PyList_Check(sent) || !layers || !PyTuple_Check(layers))
		Py_RETURN_NONE;
	int request = PyObject_RichCompareBool(direction, requests, Py_EQ);
	long d = PyLong_AsLong(direction);
	if (request < 0 || (d == -1 && PyErr_Occurred()))
		return NULL;
	if (d != 0 && d != 1)
		Py_RETURN_NONE;
	PyObject *s = PyTuple_GET_ITEM(streams, d);
	PyObject *size = Py_IS_TYPE(s, stream_type) ? slot_get(s, &stream_size) : NULL;
	/* size: 0 is the interpreter's one small int 0; any other object, the general path */
	if (!size || slot_get(s, &stream_body) != Py_None || size != zero)
		Py_RETURN_NONE; /* inside a message, or after an interim head */

	const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(data);
	Py_ssize_t len = PyBytes_GET_SIZE(data);
	struct head h;
	int found = read_head(buf, len, request, kept, 0, &h); /* no chunked body: not whole */
	if (found <= 0) {
		if (found < 0)
			return NULL;
		Py_RETURN_NONE;
	}
	PyObject *result = NULL, *text = NULL, *first = NULL, *index = NULL, *item = NULL;
	PyObject *body_size = NULL, *consumed = NULL, *seq = NULL, *layer = NULL;
	Py_INCREF(state); /* held while Python code runs (first_wanting, the maker) */
	if (!(text = latin1(h.text, h.text_len)) || !(first = first_of(&h, request)))
		goto error;
	Py_ssize_t end = h.end;
	if (request) {
		if (h.clen >= 0)
			end += h.clen;
		if (end < len) /* the next message's bytes too; past len: its body to come */
			goto none;
		if (PyTuple_GET_SIZE(layers)) {
			PyObject *call[3] = {layers, first, text};
			Py_INCREF(layers);
			layer = PyObject_Vectorcall(first_wanting, call, 3, NULL);
			Py_DECREF(layers);
			if (!layer)
				goto error;
			if (layer == Py_None)
				Py_CLEAR(layer);
			else if (end > len)
				goto none; /* a body a layer wants, still to come: the general path's */
			/* first_wanting is Python: the state's slots are read again below */
			sent = slot_get(state, &state_slots[H_SENT]);
			if (!sent || !PyList_Check(sent))
				goto none;
		}
		/* _request_head's compiled branch, from here on */
		index = slot_get(state, &state_slots[H_NEXT_INDEX]);
		if (!index)
			goto none;
		Py_INCREF(index);
		if (!(item = PyNumber_Add(index, one)))
			goto error;
		slot_set(state, &state_slots[H_NEXT_INDEX], item);
		Py_CLEAR(item);
		if (PyList_GET_SIZE(sent) >= sent_limit && PySequence_DelItem(sent, 0) < 0)
			goto error;
		if (!(item = new_sent(index, first, layer ? layer : Py_None)) ||
		    PyList_Append(sent, item) < 0)
			goto error;
		Py_CLEAR(item);
		if (h.clen >= 0) {
			if (!(body_size = PyLong_FromLongLong(h.clen)))
				goto error;
		} else {
			Py_INCREF(Py_None);
			body_size = Py_None;
		}
	} else {
		if (h.code < 200)
			goto none; /* interim, or 101 (a tunnel) */
		PyObject *req = PyList_GET_SIZE(sent) ? PyList_GET_ITEM(sent, 0) : unknown_request;
		PyObject *answered = slot_get(state, &state_slots[H_ANSWERED]);
		PyObject *pending = slot_get(state, &state_slots[H_SWITCH_PENDING]);
		if (!is_sent(req) || PyTuple_GET_ITEM(req, 3) != Py_None || !answered || !pending ||
		    !PyBool_Check(pending))
			goto none; /* a layer wants the answer (or not our state's shape) */
		PyObject *method = PyTuple_GET_ITEM(req, 1);
		int is_connect = PyObject_RichCompareBool(method, connect, Py_EQ);
		int is_head = is_connect ? 0 : PyObject_RichCompareBool(method, head_method, Py_EQ);
		if (is_connect < 0 || is_head < 0)
			goto error;
		if (is_connect)
			goto none;
		if (is_head || h.code == 204 || h.code == 304) {
			Py_INCREF(Py_None);
			body_size = Py_None; /* Body.NONE */
		} else if (h.clen >= 0) {
			if (!(body_size = PyLong_FromLongLong(h.clen)))
				goto error;
			end += h.clen;
		} else {
			goto none; /* until the close */
		}
		if (end < len) /* the next message's bytes too; past len: its body to come */
			goto none;
		int later = PyObject_RichCompareBool(PyTuple_GET_ITEM(req, 0), answered, Py_GT);
		if (later < 0)
			goto error;
		/* _response_head's compiled branch, from here on */
		index = PyTuple_GET_ITEM(req, 0);
		Py_INCREF(index);
		if (PyList_GET_SIZE(sent) && PySequence_DelItem(sent, 0) < 0)
			goto error;
		if (later)
			slot_set(state, &state_slots[H_ANSWERED], index);
		if (pending == Py_True) {
			int any = 0;
			for (Py_ssize_t i = 0; i < PyList_GET_SIZE(sent) && !any; i++) {
				PyObject *e = PyList_GET_ITEM(sent, i);
				if (!is_sent(e)) {
					PyErr_SetString(PyExc_TypeError,
							"whole: state.sent holds Sent tuples");
					goto error;
				}
				if ((any = PyObject_IsTrue(PyTuple_GET_ITEM(e, 2))) < 0)
					goto error;
			}
			slot_set(state, &state_slots[H_SWITCH_PENDING], any ? Py_True : Py_False);
		}
	}
	/* the tracker's stamping: seq & 0xFFFFFFFF (or None), max(end_ns, start_ns) */
	if (args[6] == Py_None) {
		Py_INCREF(Py_None);
		seq = Py_None;
	} else if (!(seq = PyNumber_And(args[6], mask32))) {
		goto error;
	}
	int later = PyObject_RichCompareBool(args[5], args[4], Py_GE);
	if (later < 0 || !(consumed = PyLong_FromSsize_t(end)))
		goto error;
	/* direction, method|status, target|reason, index, carrier, version, host, user_agent,
	 * content_type, stream_pos, start_ns, end_ns, tcp_seq, tid, task, size, body_size */
	PyObject *call[19] = {direction, first, text, index, h.carrier, h.minor ? v11 : v10,
			      h.vals[0], h.vals[1], h.vals[2], args[3], args[4],
			      later ? args[5] : args[4], seq, args[7], args[8], consumed,
			      body_size, layer, NULL};
	if (!layer) {
		result = PyObject_Vectorcall(request ? make_request : make_response, call, 17, NULL);
		goto done;
	}
	/* parse.py kept_body(layer, data[head_end:end], start_ns): the body in one piece */
	PyObject *piece = PyBytes_FromStringAndSize((const char *)buf + h.end, end - h.end);
	if (!piece)
		goto error;
	PyObject *kargs[3] = {layer, piece, args[4]};
	call[18] = PyObject_Vectorcall(kept_body, kargs, 3, NULL);
	Py_DECREF(piece);
	if (!call[18])
		goto error;
	result = PyObject_Vectorcall(make_kept_request, call, 19, NULL);
	Py_DECREF(call[18]);
	goto done;
none:
	result = Py_None;
	Py_INCREF(result);
	goto done;
error:
	result = NULL;
done:
	head_clear(&h);
	Py_DECREF(state);
	Py_XDECREF(text);
	Py_XDECREF(first);
	Py_XDECREF(index);
	Py_XDECREF(item);
	Py_XDECREF(body_size);
	Py_XDECREF(consumed);
	Py_XDECREF(seq);
	Py_XDECREF(layer);
	return result;
}

/* ---- span(): spans.py to_spans, the common case ---------------------------------------- */

/* set by span_setup(): the classes read by slot, what to_spans calls (the span maker, the
 * cached query redaction and Host split, _authority, _connection_attributes), its method
 * set and enum members */
static PyTypeObject *record_type, *request_type, *response_type, *conninfo_type;
static PyObject *make_span, *redact_query, *host_port, *authority_of, *conn_attributes;
static PyObject *known_methods, *role_server, *kind_server, *kind_client, *status_error,
	*status_unset, *protocol_name;
static PyObject *last_conn, *last_conn_attrs; /* _connection_attributes' answer, kept */
static PyObject *s_http, *s_https, *s_sep, *s_qmark;
enum { A_METHOD, A_SCHEME, A_PATH, A_QUERY, A_SERVER_ADDRESS, A_SERVER_PORT, A_CLIENT_ADDRESS,
       A_CLIENT_PORT, A_FULL, A_VERSION, A_UA, A_REQ_BODY, A_STATUS, A_RESP_BODY, A_INCOMPLETE,
       A_UPGRADE, A_ERROR, A_N };
static const char *const ATTR_NAMES[A_N] = {
	"http.request.method", "url.scheme", "url.path", "url.query", "server.address",
	"server.port", "client.address", "client.port", "url.full", "network.protocol.version",
	"user_agent.original", "http.request.body.size", "http.response.status_code",
	"http.response.body.size", "otel_ebpf.http.response.incomplete",
	"http.connection.upgrade", "error.type"};
static PyObject *attr_names[A_N];

enum { R_REQUEST, R_RESPONSE, R_ERROR, R_N };
static struct slot record_slots[R_N] = {{"request"}, {"response"}, {"error"}};
/* the message fields to_spans reads, for requests and responses alike */
enum { M_START, M_END, M_SEQ, M_POS, M_LAYER, M_VERSION, M_HOST, M_UA, M_BODY_SIZE, M_UPGRADE,
       M_CLOSE_HEAD, M_INCOMPLETE, M_N };
#define MESSAGE_SLOTS {"start_ns"}, {"end_ns"}, {"tcp_seq"}, {"stream_pos"}, {"layer"}, \
	{"version"}, {"host"}, {"user_agent"}, {"body_size"}, {"upgrade"}, {"close_head"}, \
	{"incomplete"}
enum { Q_METHOD = M_N, Q_TARGET, Q_N };
static struct slot request_slots[Q_N] = {MESSAGE_SLOTS, {"method"}, {"target"}};
enum { P_STATUS = M_N, P_UPGRADED, P_N };
static struct slot response_slots[P_N] = {MESSAGE_SLOTS, {"status"}, {"upgraded"}};
enum { C_ROLE, C_TLS, C_REMOTE_ADDR, C_REMOTE_PORT, C_LOCAL_PORT, C_N };
static struct slot conn_slots[C_N] = {{"role"}, {"tls"}, {"remote_addr"}, {"remote_port"},
				       {"local_port"}};

static PyObject *span_setup(PyObject *self, PyObject *args)
{
	PyObject *v[16];
	if (!PyArg_ParseTuple(args, "O!O!O!O!OOOOOO!OOOOOU", &PyType_Type, &v[0], &PyType_Type,
			      &v[1], &PyType_Type, &v[2], &PyType_Type, &v[3], &v[4], &v[5], &v[6],
			      &v[7], &v[8], &PyFrozenSet_Type, &v[9], &v[10], &v[11], &v[12],
			      &v[13], &v[14], &v[15]))
		return NULL;
	if (slots_of(v[0], record_slots, R_N) || slots_of(v[1], request_slots, Q_N) ||
	    slots_of(v[2], response_slots, P_N) || slots_of(v[3], conn_slots, C_N))
		return NULL;
	PyObject **keep[16] = {(PyObject **)&record_type, (PyObject **)&request_type,
			       (PyObject **)&response_type, (PyObject **)&conninfo_type,
			       &make_span, &redact_query, &host_port, &authority_of,
			       &conn_attributes, &known_methods, &role_server, &kind_server,
			       &kind_client, &status_error, &status_unset, &protocol_name};
	for (int i = 0; i < 16; i++) {
		Py_INCREF(v[i]);
		Py_XSETREF(*keep[i], v[i]);
	}
	Py_CLEAR(last_conn);
	Py_CLEAR(last_conn_attrs);
	Py_RETURN_NONE;
}

/* attrs[name] = value, stealing value; -1 when value is NULL or the set fails */
static inline int put(PyObject *attrs, int name, PyObject *value)
{
	if (!value)
		return -1;
	int rc = PyDict_SetItem(attrs, attr_names[name], value);
	Py_DECREF(value);
	return rc;
}

static inline int put_borrowed(PyObject *attrs, int name, PyObject *value)
{
	return PyDict_SetItem(attrs, attr_names[name], value);
}

/* _host_port(authority)[0], a new reference */
static PyObject *host_of(PyObject *authority)
{
	PyObject *hp = PyObject_CallOneArg(host_port, authority);
	if (!hp)
		return NULL;
	if (!PyTuple_Check(hp) || PyTuple_GET_SIZE(hp) != 2) {
		Py_DECREF(hp);
		PyErr_SetString(PyExc_TypeError, "span: _host_port must give (host, port)");
		return NULL;
	}
	PyObject *host = PyTuple_GET_ITEM(hp, 0);
	Py_INCREF(host);
	Py_DECREF(hp);
	return host;
}

/* the attribute dict of to_spans (its common case), or NULL with an error set */
static PyObject *span_attributes(PyObject *record, PyObject *req, PyObject *resp,
				 PyObject *conn, PyObject *method, PyObject *target, int server,
				 PyObject **error_type)
{
	PyObject *attrs = NULL, *path = NULL, *query = NULL, *host = NULL, *full = NULL;
	PyObject *cattrs;
	if (conn == last_conn) {
		cattrs = last_conn_attrs;
	} else {
		cattrs = PyObject_CallOneArg(conn_attributes, conn);
		if (!cattrs)
			return NULL;
		if (!PyDict_Check(cattrs)) {
			Py_DECREF(cattrs);
			PyErr_SetString(PyExc_TypeError, "span: connection attributes must be a dict");
			return NULL;
		}
		Py_INCREF(conn);
		Py_XSETREF(last_conn, conn);
		Py_XSETREF(last_conn_attrs, cattrs);
	}
	if (!(attrs = PyDict_New()) || put_borrowed(attrs, A_METHOD, method) ||
	    PyDict_Update(attrs, cattrs))
		goto fail;
	int tls = PyObject_IsTrue(slot_get(conn, &conn_slots[C_TLS]));
	if (tls < 0)
		goto fail;
	PyObject *scheme = tls ? s_https : s_http;
	Py_ssize_t n = PyUnicode_GET_LENGTH(target);
	Py_ssize_t q = PyUnicode_FindChar(target, '?', 0, n, 1);
	if (q == -2)
		goto fail;
	if (!(path = PyUnicode_Substring(target, 0, q < 0 ? n : q)))
		goto fail;
	if (put_borrowed(attrs, A_SCHEME, scheme))
		goto fail;
	if (PyUnicode_GET_LENGTH(path) && put_borrowed(attrs, A_PATH, path))
		goto fail;
	if (q >= 0) {
		PyObject *raw = PyUnicode_Substring(target, q + 1, n);
		if (!raw)
			goto fail;
		query = PyObject_CallOneArg(redact_query, raw);
		Py_DECREF(raw);
		if (!query || put_borrowed(attrs, A_QUERY, query))
			goto fail;
	}
	PyObject *req_host = slot_get(req, &request_slots[M_HOST]);
	if (!(host = host_of(req_host)))
		goto fail;
	int has_host = PyObject_IsTrue(host);
	if (has_host < 0)
		goto fail;
	PyObject *remote_addr = slot_get(conn, &conn_slots[C_REMOTE_ADDR]);
	PyObject *remote_port = slot_get(conn, &conn_slots[C_REMOTE_PORT]);
	int has_remote_port = PyObject_IsTrue(remote_port);
	if (has_remote_port < 0)
		goto fail;
	if (server) {
		PyObject *local_port = slot_get(conn, &conn_slots[C_LOCAL_PORT]);
		int t;
		if (has_host && put_borrowed(attrs, A_SERVER_ADDRESS, host))
			goto fail;
		if ((t = PyObject_IsTrue(local_port)) < 0 ||
		    (t && put_borrowed(attrs, A_SERVER_PORT, local_port)))
			goto fail;
		if ((t = PyObject_IsTrue(remote_addr)) < 0 ||
		    (t && put_borrowed(attrs, A_CLIENT_ADDRESS, remote_addr)))
			goto fail;
		if (has_remote_port && put_borrowed(attrs, A_CLIENT_PORT, remote_port))
			goto fail;
	} else {
		if (put_borrowed(attrs, A_SERVER_ADDRESS, has_host ? host : remote_addr))
			goto fail;
		if (has_remote_port && put_borrowed(attrs, A_SERVER_PORT, remote_port))
			goto fail;
		/* f"{scheme}://{authority}{path}{mark}{redacted query}" */
		int t = PyObject_IsTrue(req_host);
		if (t < 0)
			goto fail;
		PyObject *authority = t ? (Py_INCREF(req_host), req_host)
					: PyObject_CallOneArg(authority_of, conn);
		if (!authority)
			goto fail;
		full = PyUnicode_FromFormat("%U%U%U%U%U%U", scheme, s_sep, authority, path,
					    q >= 0 ? s_qmark : empty, q >= 0 ? query : empty);
		Py_DECREF(authority);
		if (!full || (PyUnicode_GET_LENGTH(full) && put_borrowed(attrs, A_FULL, full)))
			goto fail;
	}
	/* _message */
	PyObject *v = slot_get(req, &request_slots[M_UA]);
	int t;
	if (put_borrowed(attrs, A_VERSION, slot_get(req, &request_slots[M_VERSION])))
		goto fail;
	if ((t = PyObject_IsTrue(v)) < 0 || (t && put_borrowed(attrs, A_UA, v)))
		goto fail;
	v = slot_get(req, &request_slots[M_BODY_SIZE]);
	if (v != Py_None && put_borrowed(attrs, A_REQ_BODY, v))
		goto fail;
	*error_type = NULL;
	if (resp) {
		PyObject *status = slot_get(resp, &response_slots[P_STATUS]);
		if (put_borrowed(attrs, A_STATUS, status))
			goto fail;
		v = slot_get(resp, &response_slots[M_BODY_SIZE]); /* body_bytes: close_head < 0 */
		if (v != Py_None && put_borrowed(attrs, A_RESP_BODY, v))
			goto fail;
		if ((t = PyObject_IsTrue(slot_get(resp, &response_slots[M_INCOMPLETE]))) < 0 ||
		    (t && put_borrowed(attrs, A_INCOMPLETE, Py_True)))
			goto fail;
		if ((t = PyObject_IsTrue(slot_get(resp, &response_slots[P_UPGRADED]))) < 0)
			goto fail;
		if (t) {
			PyObject *protocol = slot_get(resp, &response_slots[M_UPGRADE]);
			int u = PyObject_IsTrue(protocol);
			if (u < 0)
				goto fail;
			if (!u) {
				protocol = slot_get(req, &request_slots[M_UPGRADE]);
				if ((u = PyObject_IsTrue(protocol)) < 0)
					goto fail;
			}
			if (u && put_borrowed(attrs, A_UPGRADE, protocol))
				goto fail;
		}
		/* _status: 5xx fails both sides, 4xx only the client */
		long code = PyLong_AsLong(status);
		if (code == -1 && PyErr_Occurred())
			goto fail;
		if (code >= 500 || (code >= 400 && !server)) {
			if (!(*error_type = PyObject_Str(status)))
				goto fail;
		}
	} else {
		PyObject *error = slot_get(record, &record_slots[R_ERROR]);
		if ((t = PyObject_IsTrue(error)) < 0)
			goto fail;
		if (t) {
			Py_INCREF(error);
			*error_type = error;
		}
	}
	if (*error_type && put_borrowed(attrs, A_ERROR, *error_type)) {
		Py_CLEAR(*error_type);
		goto fail;
	}
	Py_DECREF(path);
	Py_XDECREF(query);
	Py_DECREF(host);
	Py_XDECREF(full);
	return attrs;
fail:
	Py_XDECREF(attrs);
	Py_XDECREF(path);
	Py_XDECREF(query);
	Py_XDECREF(host);
	Py_XDECREF(full);
	return NULL;
}

/* every slot of `o` in `slots` is set (NULL: an unset slot, a case for Python) */
static int all_set(PyObject *o, const struct slot *slots, size_t n)
{
	for (size_t i = 0; i < n; i++)
		if (!slot_get(o, &slots[i]))
			return 0;
	return 1;
}

static PyObject *span(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 2) {
		PyErr_SetString(PyExc_TypeError, "span(record, conn)");
		return NULL;
	}
	if (!make_span) {
		PyErr_SetString(PyExc_RuntimeError, "span: span_setup() was not called");
		return NULL;
	}
	PyObject *record = args[0], *conn = args[1];
	/* the common case only; anything else is None, and spans.py's to_spans runs */
	if (!Py_IS_TYPE(record, record_type) || !Py_IS_TYPE(conn, conninfo_type) ||
	    !all_set(record, record_slots, R_N) || !all_set(conn, conn_slots, C_N))
		Py_RETURN_NONE;
	PyObject *req = slot_get(record, &record_slots[R_REQUEST]);
	PyObject *resp = slot_get(record, &record_slots[R_RESPONSE]);
	if (!Py_IS_TYPE(req, request_type) || !all_set(req, request_slots, Q_N))
		Py_RETURN_NONE;
	if (resp == Py_None)
		resp = NULL;
	else if (!Py_IS_TYPE(resp, response_type) || !all_set(resp, response_slots, P_N) ||
		 !PyLong_CheckExact(slot_get(resp, &response_slots[M_CLOSE_HEAD])) ||
		 PyLong_AsLong(slot_get(resp, &response_slots[M_CLOSE_HEAD])) >= 0 ||
		 !PyLong_CheckExact(slot_get(resp, &response_slots[P_STATUS])))
		Py_RETURN_NONE; /* a body the close delimits: body_bytes is a property's */
	PyObject *method = slot_get(req, &request_slots[Q_METHOD]);
	PyObject *target = slot_get(req, &request_slots[Q_TARGET]);
	if (slot_get(req, &request_slots[M_LAYER]) != Py_None || !PyUnicode_CheckExact(method) ||
	    !PyUnicode_CheckExact(target) || !PyUnicode_GET_LENGTH(target) ||
	    PyUnicode_READ_CHAR(target, 0) != '/' ||
	    !PyUnicode_CheckExact(slot_get(req, &request_slots[M_HOST])))
		Py_RETURN_NONE; /* a layer's exchange, an absolute or authority target */
	int known = PySet_Contains(known_methods, method);
	if (known <= 0) {
		if (known < 0)
			return NULL;
		Py_RETURN_NONE; /* _OTHER */
	}
	int server = PyObject_RichCompareBool(slot_get(conn, &conn_slots[C_ROLE]), role_server,
					      Py_EQ);
	if (server < 0)
		return NULL;
	PyObject *error_type = NULL;
	PyObject *attrs = span_attributes(record, req, resp, conn, method, target, server,
					  &error_type);
	if (!attrs)
		return NULL;
	Py_XDECREF(error_type);
	PyObject *status = error_type ? status_error : status_unset;
	PyObject *last = resp ? resp : req;
	PyObject *margs[11] = {
		method, server ? kind_server : kind_client, slot_get(req, &request_slots[M_START]),
		slot_get(last, resp ? &response_slots[M_END] : &request_slots[M_END]), conn, attrs,
		status, protocol_name, slot_get(req, &request_slots[M_SEQ]),
		slot_get(req, &request_slots[M_POS]),
		resp ? slot_get(resp, &response_slots[M_SEQ]) : Py_None};
	PyObject *made = PyObject_Vectorcall(make_span, margs, 11, NULL);
	Py_DECREF(attrs);
	if (!made)
		return NULL;
	PyObject *list = PyList_New(1);
	if (!list) {
		Py_DECREF(made);
		return NULL;
	}
	PyList_SET_ITEM(list, 0, made);
	return list;
}

/* ---- chunks(): a body piece of whole chunks, parse.py _chunks ---------------------------- */

/* set by chunks_setup(): the classes chunks() reads and writes by slot, Body.CHUNKED and
 * layers.py MAX_PIECES */
static PyTypeObject *c_state_type, *c_stream_type, *c_request_type, *c_response_type,
	*c_body_type, *c_piece_type;
static PyObject *c_chunked;
static Py_ssize_t c_max_pieces;
static struct slot c_state_slots[2] = {{"tunnel"}, {"streams"}};
enum { CS_BODY, CS_FRAME, CS_SIZE, CS_REMAINING, CS_INTERIM, CS_N };
static struct slot c_stream_slots[CS_N] = {{"body"}, {"frame"}, {"size"}, {"remaining"},
					   {"interim"}};
enum { CF_CHUNKS, CF_BODY_SIZE, CF_BODY, CF_SIZE, CF_N };
static struct slot c_frame_slots[CF_N] = {{"chunks"}, {"body_size"}, {"body"}, {"size"}};
enum { CB_PIECES, CB_SIZE, CB_KEPT, CB_LIMIT, CB_N };
static struct slot c_body_slots[CB_N] = {{"pieces"}, {"size"}, {"kept"}, {"limit"}};
enum { CP_OFFSET, CP_NS, CP_DATA, CP_N };
static struct slot c_piece_slots[CP_N] = {{"offset"}, {"ns"}, {"data"}};

static PyObject *chunks_setup(PyObject *self, PyObject *args)
{
	PyObject *state, *stream, *message, *request, *response, *chunked, *body, *piece;
	Py_ssize_t max_pieces;
	if (!PyArg_ParseTuple(args, "O!O!O!O!O!OO!O!n", &PyType_Type, &state, &PyType_Type,
			      &stream, &PyType_Type, &message, &PyType_Type, &request,
			      &PyType_Type, &response, &chunked, &PyType_Type, &body, &PyType_Type,
			      &piece, &max_pieces))
		return NULL;
	if (!PyType_IsSubtype((PyTypeObject *)request, (PyTypeObject *)message) ||
	    !PyType_IsSubtype((PyTypeObject *)response, (PyTypeObject *)message)) {
		PyErr_SetString(PyExc_TypeError, "chunks_setup: requests and responses are messages");
		return NULL;
	}
	if (slots_of(state, c_state_slots, 2) || slots_of(stream, c_stream_slots, CS_N) ||
	    slots_of(message, c_frame_slots, CF_N) || slots_of(body, c_body_slots, CB_N) ||
	    slots_of(piece, c_piece_slots, CP_N))
		return NULL;
	PyObject **keep[] = {(PyObject **)&c_state_type, (PyObject **)&c_stream_type,
			     (PyObject **)&c_request_type, (PyObject **)&c_response_type,
			     &c_chunked, (PyObject **)&c_body_type, (PyObject **)&c_piece_type};
	PyObject *values[] = {state, stream, request, response, chunked, body, piece};
	for (int i = 0; i < 7; i++) {
		Py_INCREF(values[i]);
		Py_XSETREF(*keep[i], values[i]);
	}
	c_max_pieces = max_pieces;
	Py_RETURN_NONE;
}

static inline int hexval(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

/* parse.py _CHUNK_LINE matched at p, within MAX_CHUNK_LINE bytes and before end:
 * ([0-9A-Fa-f]{1,16})[ \t]*(?:;[^\r\n]*)?\r\n. The chunk's data start, or NULL. */
#define MAX_CHUNK_LINE 1024
static const unsigned char *chunk_line(const unsigned char *p, const unsigned char *end,
				       unsigned long long *size)
{
	const unsigned char *limit = end - p > MAX_CHUNK_LINE ? p + MAX_CHUNK_LINE : end;
	const unsigned char *q = p;
	unsigned long long v = 0;
	int h;
	while (q < limit && q - p < 16 && (h = hexval(*q)) >= 0) {
		v = v << 4 | (unsigned)h;
		q++;
	}
	if (q == p || (q < limit && hexval(*q) >= 0))
		return NULL; /* no digit, or a 17th: the pattern cannot match */
	while (q < limit && (*q == ' ' || *q == '\t'))
		q++;
	if (q < limit && *q == ';')
		while (q < limit && *q != '\r' && *q != '\n')
			q++;
	if (limit - q < 2 || q[0] != '\r' || q[1] != '\n')
		return NULL;
	*size = v;
	return q + 2;
}

static PyObject *chunks(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 4) {
		PyErr_SetString(PyExc_TypeError, "chunks(direction, data, state, ns)");
		return NULL;
	}
	if (!c_state_type) {
		PyErr_SetString(PyExc_RuntimeError, "chunks: chunks_setup() was not called");
		return NULL;
	}
	PyObject *direction = args[0], *data = args[1], *state = args[2], *ns = args[3];
	if (!PyBytes_Check(data) || !Py_IS_TYPE(state, c_state_type) ||
	    slot_get(state, &c_state_slots[0]) != Py_False)
		Py_RETURN_FALSE; /* not bytes, another parser's state, or a tunnel */
	PyObject *streams = slot_get(state, &c_state_slots[1]);
	long d = PyLong_Check(direction) ? PyLong_AsLong(direction) : -1;
	if (d == -1 && PyErr_Occurred())
		return NULL;
	if ((d != 0 && d != 1) || !streams || !PyTuple_CheckExact(streams) ||
	    PyTuple_GET_SIZE(streams) != 2)
		Py_RETURN_FALSE;
	PyObject *s = PyTuple_GET_ITEM(streams, d);
	if (!Py_IS_TYPE(s, c_stream_type) || slot_get(s, &c_stream_slots[CS_BODY]) != c_chunked)
		Py_RETURN_FALSE; /* not between two chunks: _BODY_STEPS' other steps */
	PyObject *frame = slot_get(s, &c_stream_slots[CS_FRAME]);
	if (!frame || (!Py_IS_TYPE(frame, c_request_type) && !Py_IS_TYPE(frame, c_response_type)))
		Py_RETURN_FALSE;
	PyObject *body = slot_get(frame, &c_frame_slots[CF_BODY]);
	long long s_size, f_chunks, f_body_size, b_size = 0, b_kept = 0, b_limit = 0;
	PyObject *pieces = NULL;
	if (ll_of(slot_get(s, &c_stream_slots[CS_SIZE]), &s_size) ||
	    ll_of(slot_get(frame, &c_frame_slots[CF_CHUNKS]), &f_chunks) ||
	    ll_of(slot_get(frame, &c_frame_slots[CF_BODY_SIZE]), &f_body_size))
		Py_RETURN_FALSE;
	if (!body)
		Py_RETURN_FALSE;
	if (body != Py_None) { /* kept for a layer: Body.add's fields */
		pieces = slot_get(body, &c_body_slots[CB_PIECES]);
		if (!Py_IS_TYPE(body, c_body_type) || !pieces || !PyList_CheckExact(pieces) ||
		    ll_of(slot_get(body, &c_body_slots[CB_SIZE]), &b_size) ||
		    ll_of(slot_get(body, &c_body_slots[CB_KEPT]), &b_kept) ||
		    ll_of(slot_get(body, &c_body_slots[CB_LIMIT]), &b_limit))
			Py_RETURN_FALSE;
	}

	/* every byte whole chunks, the last one only as the last 5 bytes ("0", no trailer:
	 * _chunks ends the message there too): else nothing changed, the Python steps run */
	const unsigned char *buf = (const unsigned char *)PyBytes_AS_STRING(data);
	const unsigned char *end = buf + PyBytes_GET_SIZE(data), *p = buf;
	long long n_chunks = 0, payload = 0;
	int last = 0;
	while (p < end) {
		if (end - p == 5 && !memcmp(p, "0\r\n\r\n", 5)) {
			last = 1;
			end = p; /* the walk below stops where the last chunk starts */
			break;
		}
		unsigned long long size;
		const unsigned char *at = chunk_line(p, end, &size);
		if (!at || size == 0 || end - at < 2 || size > (unsigned long long)(end - at - 2))
			Py_RETURN_FALSE;
		p = at + size + 2;
		n_chunks++;
		payload += (long long)size;
	}
	if ((!n_chunks && !last) || s_size > LLONG_MAX - PyBytes_GET_SIZE(data) ||
	    f_chunks > LLONG_MAX - n_chunks || f_body_size > LLONG_MAX - payload ||
	    b_size > LLONG_MAX - payload)
		Py_RETURN_FALSE;

	/* _chunks' walk again, applying it; Body.add for each chunk's data when kept */
	if (pieces) {
		Py_INCREF(body);
		Py_INCREF(pieces);
		for (p = buf; p < end;) {
			unsigned long long size;
			const unsigned char *at = chunk_line(p, end, &size);
			p = at + size + 2;
			if (PyList_GET_SIZE(pieces) < c_max_pieces) {
				long long room = b_limit - b_kept > 0 ? b_limit - b_kept : 0;
				Py_ssize_t k = (long long)size < room ? (Py_ssize_t)size : (Py_ssize_t)room;
				PyObject *piece = c_piece_type->tp_alloc(c_piece_type, 0);
				PyObject *offset = PyLong_FromLongLong(b_size);
				PyObject *kept = PyBytes_FromStringAndSize((const char *)at, k);
				if (!piece || !offset || !kept) {
					Py_XDECREF(piece);
					Py_XDECREF(offset);
					Py_XDECREF(kept);
					goto error;
				}
				char *o = (char *)piece;
				*(PyObject **)(o + c_piece_slots[CP_OFFSET].offset) = offset;
				Py_INCREF(ns);
				*(PyObject **)(o + c_piece_slots[CP_NS].offset) = ns;
				*(PyObject **)(o + c_piece_slots[CP_DATA].offset) = kept;
				int r = PyList_Append(pieces, piece);
				Py_DECREF(piece);
				if (r < 0)
					goto error;
				b_kept += k;
			}
			b_size += (long long)size;
		}
		if (set_ll(body, &c_body_slots[CB_KEPT], b_kept) ||
		    set_ll(body, &c_body_slots[CB_SIZE], b_size))
			goto error;
		Py_DECREF(pieces);
		Py_DECREF(body);
	}
	if (set_ll(frame, &c_frame_slots[CF_CHUNKS], f_chunks + n_chunks) ||
	    set_ll(frame, &c_frame_slots[CF_BODY_SIZE], f_body_size + payload))
		return NULL;
	if (!last) {
		if (set_ll(s, &c_stream_slots[CS_SIZE], s_size + PyBytes_GET_SIZE(data)))
			return NULL;
		Py_RETURN_TRUE;
	}
	/* _complete: the message's size, the stream reset (_Stream.reset); the frame returned */
	PyObject *no_interim = PyTuple_New(0);
	if (!no_interim)
		return NULL;
	Py_INCREF(frame); /* the stream's reference goes below */
	if (set_ll(frame, &c_frame_slots[CF_SIZE], s_size + PyBytes_GET_SIZE(data)) ||
	    set_ll(s, &c_stream_slots[CS_SIZE], 0) || set_ll(s, &c_stream_slots[CS_REMAINING], 0)) {
		Py_DECREF(no_interim);
		Py_DECREF(frame);
		return NULL;
	}
	slot_set(s, &c_stream_slots[CS_FRAME], Py_None);
	slot_set(s, &c_stream_slots[CS_BODY], Py_None);
	slot_set(s, &c_stream_slots[CS_INTERIM], no_interim);
	Py_DECREF(no_interim);
	return frame;
error:
	Py_DECREF(pieces);
	Py_DECREF(body);
	return NULL;
}

static PyMethodDef http1_methods[] = {
	{"head", head, METH_VARARGS,
	 "head(buf, request, kept, chunked=False) -> fields of a whole, plain HTTP/1 head at "
	 "buf's start, or None (not sure: parse with llhttp); with chunked, a chunked head's "
	 "content_length is CHUNKED"},
	{"whole", (PyCFunction)(void (*)(void))whole, METH_FASTCALL,
	 "whole(direction, data, state, pos, start_ns, end_ns, seq, tid, task) -> the finished "
	 "frame of a syscall that is one plain message, or None with nothing changed "
	 "(protocols/http1/parse.py whole is the reference)"},
	{"span", (PyCFunction)(void (*)(void))span, METH_FASTCALL,
	 "span(record, conn) -> [the span] of an HTTPRecord in to_spans' common case (a known "
	 "method, an origin-form target, no layer, no close-delimited body), or None: "
	 "protocols/http1/spans.py to_spans is the reference"},
	{"span_setup", span_setup, METH_VARARGS,
	 "span_setup(HTTPRecord, HTTPRequest, HTTPResponse, ConnInfo, make_span, redact_query, "
	 "host_port, authority, connection_attributes, KNOWN_METHODS, Role.SERVER, "
	 "SpanKind.SERVER, SpanKind.CLIENT, StatusCode.ERROR, StatusCode.UNSET, protocol)"},
	{"chunks", (PyCFunction)(void (*)(void))chunks, METH_FASTCALL,
	 "chunks(direction, data, state, ns) -> True when data, a syscall's every byte inside a "
	 "chunked body, is whole chunks none of them the last, all taken (counted, and kept as "
	 "pieces timed ns when a layer reads the body); the message's frame, complete, when "
	 "the same ends with the last chunk (\"0\", no trailer); False with nothing changed "
	 "(protocols/http1/parse.py _chunks is the reference)"},
	{"chunks_setup", chunks_setup, METH_VARARGS,
	 "chunks_setup(HTTP1State, _Stream, HTTPMessage, HTTPRequest, HTTPResponse, "
	 "Body.CHUNKED, layers.Body, BodyPiece, MAX_PIECES): the classes chunks() reads by slot"},
	{"setup", setup, METH_VARARGS,
	 "setup(make_request, make_response, Sent, unknown_request, first_wanting, sent_limit, "
	 "HTTP1State, _Stream, make_kept_request, kept_body): what whole() builds with, and the "
	 "classes it reads by slot"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef http1_module = {
	PyModuleDef_HEAD_INIT, "otel_ebpf.protocols.http1._parse",
	"HTTP/1 heads on the common path, in C; protocols/http1/parse.py is the reference.", -1,
	http1_methods,
};

PyMODINIT_FUNC PyInit__parse(void)
{
	init_tables();
	for (size_t i = 0; i < N_METHODS; i++)
		if (!(methods[i] = PyUnicode_InternFromString(METHOD_NAMES[i])))
			return NULL;
	if (!(v10 = PyUnicode_InternFromString("1.0")) || !(v11 = PyUnicode_InternFromString("1.1")) ||
	    !(empty = PyUnicode_InternFromString("")))
		return NULL;
	if (!(connect = PyUnicode_InternFromString("CONNECT")) ||
	    !(head_method = PyUnicode_InternFromString("HEAD")))
		return NULL;
	for (int i = 0; i < A_N; i++)
		if (!(attr_names[i] = PyUnicode_InternFromString(ATTR_NAMES[i])))
			return NULL;
	if (!(s_http = PyUnicode_InternFromString("http")) ||
	    !(s_https = PyUnicode_InternFromString("https")) ||
	    !(s_sep = PyUnicode_InternFromString("://")) ||
	    !(s_qmark = PyUnicode_InternFromString("?")))
		return NULL;
	if (!(mask32 = PyLong_FromUnsignedLong(0xFFFFFFFFUL)) || !(one = PyLong_FromLong(1)) ||
	    !(zero = PyLong_FromLong(0)))
		return NULL;
	PyObject *m = PyModule_Create(&http1_module);
	if (!m)
		return NULL;
	if (PyModule_AddIntConstant(m, "K_HOST", K_HOST) || PyModule_AddIntConstant(m, "K_UA", K_UA) ||
	    PyModule_AddIntConstant(m, "K_CTYPE", K_CTYPE) ||
	    PyModule_AddIntConstant(m, "K_CLEN", K_CLEN) ||
	    PyModule_AddIntConstant(m, "K_FALLBACK", K_FALLBACK) ||
	    PyModule_AddIntConstant(m, "K_TE", K_TE) ||
	    PyModule_AddIntConstant(m, "CHUNKED", CLEN_CHUNKED) ||
	    PyModule_AddIntConstant(m, "K_CARRIER", K_CARRIER)) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
