/* SPDX-License-Identifier: Apache-2.0 */
/* SSE bodies whose pieces end where events end, split into StreamEvents
 * (protocols/llm/stream.py `_sse_whole_pieces_python`, the reference): the same events,
 * the same index of the first piece not read so and its expected offset. An event other
 * than one `data: ` line is handed to the Python `_sse_event` given to setup().
 *
 * openai_events reads the same events of an OpenAI chat-completions stream straight into
 * the ResponseInfo (protocols/llm/events.py `read_events` with `_openai_chunk`, the
 * reference): a chunk's JSON is read here when it is within a narrow grammar this file
 * is sure of, and handed to the Python `_openai_event` otherwise. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdint.h>
#include <string.h>

#include "slots.h"

static PyTypeObject *event_type; /* StreamEvent, a tuple subclass */
static PyTypeObject *piece_type; /* BodyPiece, read by slot */
static struct slot piece_slots[] = {{"offset", 0}, {"ns", 0}, {"data", 0}};
enum { P_OFFSET, P_NS, P_DATA };
static PyObject *sse_event;      /* _sse_event(block, ns) -> StreamEvent | None */
static PyObject *empty_name, *s_offset, *s_data, *s_ns;

/* a StreamEvent("", data[6:], ns), as tuple.__new__ of a subclass makes one */
static PyObject *one_line(const char *data, Py_ssize_t n, PyObject *ns)
{
	PyObject *value = PyBytes_FromStringAndSize(data, n);
	if (!value)
		return NULL;
	PyObject *ev = event_type->tp_alloc(event_type, 3);
	if (!ev) {
		Py_DECREF(value);
		return NULL;
	}
	Py_INCREF(empty_name);
	Py_INCREF(ns);
	PyTuple_SET_ITEM(ev, 0, empty_name);
	PyTuple_SET_ITEM(ev, 1, value);
	PyTuple_SET_ITEM(ev, 2, ns);
	return ev;
}

/* where a piece's events go: `line` takes a one-`data: ` line event's data, `other` an
 * event _sse_event made of any other block; each returns 0, or -1 with an error set */
struct sink {
	int (*line)(struct sink *, const char *data, Py_ssize_t n, PyObject *ns);
	int (*other)(struct sink *, PyObject *event);
	PyObject *events; /* whole_pieces: the list the events go into */
	PyObject *info;   /* openai_events: the ResponseInfo they are read into */
};

/* the events of one piece's blocks into the sink; 1 when the piece is not one we read
 * (its last separator began a byte earlier: "\n\n\n" at its end), -1 on error */
static int piece_events(const char *d, Py_ssize_t n, PyObject *ns, struct sink *sink)
{
	/* split at "\n\n" from the left, as bytes.split: the remainder must be empty */
	Py_ssize_t start = 0;
	for (;;) {
		const char *p = memchr(d + start, '\n', n - start);
		while (p && (p + 1 >= d + n || p[1] != '\n'))
			p = memchr(p + 1, '\n', (d + n) - (p + 1));
		if (!p)
			break;
		start = (p - d) + 2;
	}
	if (start != n)
		return 1;
	start = 0;
	while (start < n) {
		const char *p = memchr(d + start, '\n', n - start);
		while (p && (p + 1 >= d + n || p[1] != '\n'))
			p = memchr(p + 1, '\n', (d + n) - (p + 1));
		if (!p) /* not after the check above: a separator ends every block */
			break;
		Py_ssize_t end = p - d, len = end - start;
		const char *block = d + start;
		int err;
		if (len >= 6 && !memcmp(block, "data: ", 6) && !memchr(block, '\n', len)) {
			err = sink->line(sink, block + 6, len - 6, ns);
		} else {
			PyObject *b = PyBytes_FromStringAndSize(block, len);
			PyObject *ev = b ? PyObject_CallFunctionObjArgs(sse_event, b, ns, NULL) : NULL;
			Py_XDECREF(b);
			if (!ev)
				return -1;
			err = ev != Py_None ? sink->other(sink, ev) : 0;
			Py_DECREF(ev);
		}
		if (err)
			return -1;
		start = end + 2;
	}
	return 0;
}

static int append_line(struct sink *sink, const char *data, Py_ssize_t n, PyObject *ns)
{
	PyObject *ev = one_line(data, n, ns);
	if (!ev)
		return -1;
	int err = PyList_Append(sink->events, ev);
	Py_DECREF(ev);
	return err;
}

static int append_other(struct sink *sink, PyObject *event)
{
	return PyList_Append(sink->events, event);
}

/* the body's first pieces that end where events end, each piece's events into the sink:
 * (index of the first piece not read, its expected offset), or NULL on error */
static PyObject *walk(PyObject *pieces, struct sink *sink)
{
	if (!PyList_Check(pieces)) {
		PyErr_SetString(PyExc_TypeError, "sse: a list of body pieces");
		return NULL;
	}
	long long expect = 0;
	Py_ssize_t i, count = PyList_GET_SIZE(pieces);
	for (i = 0; i < count; i++) {
		PyObject *piece = PyList_GET_ITEM(pieces, i), *offset, *data, *ns;
		if (Py_IS_TYPE(piece, piece_type)) { /* a BodyPiece: its slots, by offset */
			offset = slot_get(piece, &piece_slots[P_OFFSET]);
			data = slot_get(piece, &piece_slots[P_DATA]);
			ns = slot_get(piece, &piece_slots[P_NS]);
			if (!offset || !data || !ns) {
				PyErr_SetString(PyExc_AttributeError, "sse: a BodyPiece without a field");
				return NULL;
			}
			Py_INCREF(offset);
			Py_INCREF(data);
			Py_INCREF(ns);
		} else {
			offset = PyObject_GetAttr(piece, s_offset);
			data = offset ? PyObject_GetAttr(piece, s_data) : NULL;
			ns = data ? PyObject_GetAttr(piece, s_ns) : NULL;
			if (!ns) {
				Py_XDECREF(offset);
				Py_XDECREF(data);
				return NULL;
			}
		}
		int r = -2;
		if (PyLong_Check(offset)) {
			int overflow;
			long long at = PyLong_AsLongLongAndOverflow(offset, &overflow);
			r = !overflow && at == expect ? 0 : 1;
		}
		/* at its offset, bytes ending in "\n\n" and without a CR, or the search reads it */
		if (!r && PyBytes_CheckExact(data)) {
			const char *d = PyBytes_AS_STRING(data);
			Py_ssize_t n = PyBytes_GET_SIZE(data);
			if (n >= 2 && d[n - 1] == '\n' && d[n - 2] == '\n' && !memchr(d, '\r', n)) {
				r = piece_events(d, n, ns, sink);
				if (!r)
					expect += n;
			} else {
				r = 1;
			}
		} else {
			r = 1;
		}
		Py_DECREF(offset);
		Py_DECREF(data);
		Py_DECREF(ns);
		if (r < 0)
			return NULL;
		if (r > 0)
			break;
	}
	return Py_BuildValue("(nL)", i, expect);
}

static PyObject *whole_pieces(PyObject *self, PyObject *pieces)
{
	if (!event_type) {
		PyErr_SetString(PyExc_RuntimeError, "sse: setup() first");
		return NULL;
	}
	PyObject *events = PyList_New(0);
	if (!events)
		return NULL;
	struct sink sink = {append_line, append_other, events, NULL};
	PyObject *at = walk(pieces, &sink);
	if (!at) {
		Py_DECREF(events);
		return NULL;
	}
	PyObject *out = Py_BuildValue("(NOO)", events, PyTuple_GET_ITEM(at, 0),
				      PyTuple_GET_ITEM(at, 1));
	Py_DECREF(at);
	return out;
}

/* ---- OpenAI chat.completion.chunk events, read into the ResponseInfo ------------------
 *
 * What is read here, and nothing else (anything else goes to `_openai_event`, the Python
 * reference's loop turn, so orjson decides on every document this code is not sure of):
 * one JSON object, with JSON whitespace around and between tokens; strings of printable
 * ASCII, valid UTF-8 (no overlong forms, no surrogates, nothing past U+10FFFF) and the
 * JSON escapes (\uXXXX not a surrogate); integers of at most 18 digits without a leading
 * zero; true, false, null; objects and arrays nested at most MAX_DEPTH deep. Keys of the
 * document, of a choice and of a delta are without escapes. Not read here either: an
 * `error` that is not null, a `usage` that is not empty, a non-empty `tool_calls` list, a
 * second `choices` or `delta`, more than MAX_CHOICES choices, an id, model, fingerprint,
 * tier or finish reason that would be kept and has an escape. Every check is made before
 * the ResponseInfo changes: a chunk not read here leaves it as it was. */

enum kind { J_NONE, J_NULL, J_FALSE, J_TRUE, J_INT, J_STR, J_OBJ, J_ARR };

struct val {
	enum kind kind; /* J_NONE: the key is absent */
	int truthy;     /* bool() of what orjson would make of it */
	const char *s;  /* a string's bytes between its quotes */
	Py_ssize_t n;
	int esc;     /* ... with an escape in them */
	long long i; /* an int's value */
};

struct scan {
	const char *p, *end;
	int depth;
};

#define MAX_DEPTH 64
#define MAX_CHOICES 16

struct choice {
	struct val index, finish, text;                       /* the choice's */
	struct val content, reasoning_content, reasoning, refusal; /* its delta's */
	int delta_seen, delta_keys;                             /* delta_keys: a non-empty dict */
};

struct chunk {
	struct val id, model, error, usage, fingerprint, tier;
	int choices_seen, choices_list, count;
	struct choice choices[MAX_CHOICES];
};

static struct slot info_slots[] = {
	{"id", 0},	       {"model", 0},	     {"system_fingerprint", 0}, {"service_tier", 0},
	{"reasoning_streamed", 0}, {"finish_reasons", 0}, {"content_ns", 0},	    {"capture", 0},
};
enum { I_ID, I_MODEL, I_FINGERPRINT, I_TIER, I_REASONING, I_FINISH, I_CONTENT_NS, I_CAPTURE };
static PyTypeObject *info_type; /* ResponseInfo */
static PyObject *openai_event;  /* _openai_event(data, ns, info): one chunk, in Python */
static Py_ssize_t max_content_times;

static inline void ws(struct scan *sc)
{
	while (sc->p < sc->end &&
	       (*sc->p == ' ' || *sc->p == '\t' || *sc->p == '\n' || *sc->p == '\r'))
		sc->p++;
}

static inline int hex(unsigned char c)
{
	if (c >= '0' && c <= '9')
		return c - '0';
	if (c >= 'a' && c <= 'f')
		return c - 'a' + 10;
	if (c >= 'A' && c <= 'F')
		return c - 'A' + 10;
	return -1;
}

static inline int cont(unsigned char c)
{
	return (c & 0xC0) == 0x80;
}

/* what a byte is inside a string: 0 printable ASCII but '"' and '\\'; else the class
 * that the loop in jstring looks at */
enum { B_PLAIN, B_QUOTE, B_ESCAPE, B_BAD, B_LEAD2, B_LEAD3, B_LEAD4 };
static unsigned char byte_class[256];

static void byte_classes(void)
{
	for (int c = 0; c < 256; c++)
		byte_class[c] = c < 0x20		 ? B_BAD
				: c < 0x80		 ? B_PLAIN
				: c < 0xC2		 ? B_BAD /* continuation, overlong lead */
				: c < 0xE0		 ? B_LEAD2
				: c < 0xF0		 ? B_LEAD3
				: c < 0xF5		 ? B_LEAD4
							 : B_BAD;
	byte_class['"'] = B_QUOTE;
	byte_class['\\'] = B_ESCAPE;
}

/* eight bytes, all B_PLAIN: no '"', no '\\', none below 0x20 or above 0x7F, tested as one
 * word; 0 sends the byte loop to look (`found` has a high bit set at each such byte, maybe
 * at a later one too where a borrow ran on, and none when there is no such byte) */
static inline int plain8(const unsigned char *p)
{
	const uint64_t ones = 0x0101010101010101ULL, highs = 0x8080808080808080ULL;
	uint64_t w;
	memcpy(&w, p, 8);
	uint64_t q = w ^ (ones * '"'), b = w ^ (ones * '\\');
	uint64_t found = ((q - ones) & ~q) | ((b - ones) & ~b) | ((w - ones * 0x20) & ~w) | w;
	return !(found & highs);
}

/* a string (sc->p at its opening quote): 0, or -1 for anything not read here */
static int jstring(struct scan *sc, struct val *v)
{
	const unsigned char *p = (const unsigned char *)sc->p + 1;
	const unsigned char *end = (const unsigned char *)sc->end;
	v->esc = 0;
	v->s = (const char *)p;
	for (;;) {
		while (end - p >= 8 && plain8(p))
			p += 8;
		while (p < end && byte_class[*p] == B_PLAIN)
			p++;
		if (p >= end)
			return -1;
		unsigned char c = *p;
		Py_ssize_t left = end - p;
		switch (byte_class[c]) {
		case B_QUOTE:
			goto closed;
		case B_ESCAPE: {
			if (left < 2)
				return -1;
			unsigned char e = p[1];
			if (e == 'u') {
				if (left < 6)
					return -1;
				int u = 0;
				for (int k = 2; k < 6; k++) {
					int h = hex(p[k]);
					if (h < 0)
						return -1;
					u = u * 16 + h;
				}
				if (u >= 0xD800 && u <= 0xDFFF) /* surrogates: orjson decides */
					return -1;
				p += 6;
			} else if (e == '"' || e == '\\' || e == '/' || e == 'b' || e == 'f' ||
				   e == 'n' || e == 'r' || e == 't') {
				p += 2;
			} else {
				return -1;
			}
			v->esc = 1;
			break;
		}
		case B_LEAD2:
			if (left < 2 || !cont(p[1]))
				return -1;
			p += 2;
			break;
		case B_LEAD3:
			if (left < 3 || !cont(p[1]) || !cont(p[2]) || (c == 0xE0 && p[1] < 0xA0) ||
			    (c == 0xED && p[1] > 0x9F))
				return -1;
			p += 3;
			break;
		case B_LEAD4:
			if (left < 4 || !cont(p[1]) || !cont(p[2]) || !cont(p[3]) ||
			    (c == 0xF0 && p[1] < 0x90) || (c == 0xF4 && p[1] > 0x8F))
				return -1;
			p += 4;
			break;
		default: /* a control character, a byte no UTF-8 character starts with */
			return -1;
		}
	}
closed:
	v->kind = J_STR;
	v->n = (const char *)p - v->s;
	v->truthy = v->n > 0; /* every escape and every character is at least one character */
	sc->p = (const char *)p + 1;
	return 0;
}

/* an integer of at most 18 digits (no fraction, no exponent): 0, or -1 */
static int jint(struct scan *sc, struct val *v)
{
	const char *p = sc->p, *end = sc->end;
	int neg = 0, digits = 0;
	long long x = 0;
	if (p < end && *p == '-') {
		neg = 1;
		p++;
	}
	if (p >= end || *p < '0' || *p > '9')
		return -1;
	if (*p == '0') {
		p++;
	} else {
		while (p < end && *p >= '0' && *p <= '9') {
			if (++digits > 18)
				return -1;
			x = x * 10 + (*p++ - '0');
		}
	}
	if (p < end && (*p == '.' || *p == 'e' || *p == 'E' || (*p >= '0' && *p <= '9')))
		return -1;
	v->kind = J_INT;
	v->i = neg ? -x : x;
	v->truthy = x != 0;
	sc->p = p;
	return 0;
}

static int jliteral(struct scan *sc, struct val *v, const char *word, size_t n, enum kind kind)
{
	if ((size_t)(sc->end - sc->p) < n || memcmp(sc->p, word, n))
		return -1;
	sc->p += n;
	v->kind = kind;
	v->truthy = kind == J_TRUE;
	return 0;
}

static int jvalue(struct scan *sc, struct val *v);

/* a key and its colon: 0 with the key in *key, or -1 */
static int jkey(struct scan *sc, struct val *key)
{
	if (sc->p >= sc->end || *sc->p != '"' || jstring(sc, key))
		return -1;
	ws(sc);
	if (sc->p >= sc->end || *sc->p != ':')
		return -1;
	sc->p++;
	ws(sc);
	return 0;
}

/* after a member or element: 1 at the closing bracket (passed), 0 after a comma, or -1 */
static int jnext(struct scan *sc, char close)
{
	ws(sc);
	if (sc->p >= sc->end)
		return -1;
	if (*sc->p == ',') {
		sc->p++;
		ws(sc);
		return 0;
	}
	if (*sc->p == close) {
		sc->p++;
		return 1;
	}
	return -1;
}

/* sc->p at '{' or '[': 0 past its closing bracket with the depth checked, 1 when it was
 * empty (passed too), or -1 */
static int jopen(struct scan *sc, char close)
{
	if (++sc->depth > MAX_DEPTH)
		return -1;
	sc->p++;
	ws(sc);
	if (sc->p < sc->end && *sc->p == close) {
		sc->p++;
		sc->depth--;
		return 1;
	}
	return 0;
}

/* an object or array of any content, checked and passed over */
static int jcontainer(struct scan *sc, struct val *v)
{
	char close = *sc->p == '{' ? '}' : ']';
	v->kind = close == '}' ? J_OBJ : J_ARR;
	int r = jopen(sc, close);
	v->truthy = r == 0;
	if (r)
		return r < 0 ? -1 : 0;
	for (;;) {
		struct val x;
		if (close == '}' && jkey(sc, &x))
			return -1;
		if (jvalue(sc, &x))
			return -1;
		r = jnext(sc, close);
		if (r < 0)
			return -1;
		if (r)
			break;
	}
	sc->depth--;
	return 0;
}

static int jvalue(struct scan *sc, struct val *v)
{
	if (sc->p >= sc->end)
		return -1;
	switch (*sc->p) {
	case '"':
		return jstring(sc, v);
	case '{':
	case '[':
		return jcontainer(sc, v);
	case 't':
		return jliteral(sc, v, "true", 4, J_TRUE);
	case 'f':
		return jliteral(sc, v, "false", 5, J_FALSE);
	case 'n':
		return jliteral(sc, v, "null", 4, J_NULL);
	default:
		return jint(sc, v);
	}
}

static inline int is_key(const struct val *key, const char *name, size_t n)
{
	return (size_t)key->n == n && !memcmp(key->s, name, n);
}
#define KEY(k, lit) is_key(k, lit, sizeof(lit) - 1)

/* a choice's delta object: the fields _openai_chunk reads */
static int jdelta(struct scan *sc, struct choice *c)
{
	int r = jopen(sc, '}');
	if (r)
		return r < 0 ? -1 : 0;
	for (;;) {
		struct val key, x, *into = &x;
		if (jkey(sc, &key) || key.esc)
			return -1;
		c->delta_keys++;
		if (KEY(&key, "content"))
			into = &c->content;
		else if (KEY(&key, "reasoning_content"))
			into = &c->reasoning_content;
		else if (KEY(&key, "reasoning"))
			into = &c->reasoning;
		else if (KEY(&key, "refusal"))
			into = &c->refusal;
		if (jvalue(sc, into))
			return -1;
		/* a tool call: the Python reader keeps its name */
		if (KEY(&key, "tool_calls") && x.kind == J_ARR && x.truthy)
			return -1;
		r = jnext(sc, '}');
		if (r < 0)
			return -1;
		if (r)
			break;
	}
	sc->depth--;
	return 0;
}

static int jchoice(struct scan *sc, struct choice *c)
{
	int r = jopen(sc, '}');
	if (r)
		return r < 0 ? -1 : 0;
	for (;;) {
		struct val key, x, *into = &x;
		if (jkey(sc, &key) || key.esc)
			return -1;
		if (KEY(&key, "delta")) {
			if (c->delta_seen++)
				return -1;
			if (sc->p < sc->end && *sc->p == '{') {
				if (jdelta(sc, c))
					return -1;
			} else if (jvalue(sc, &x)) {
				return -1;
			}
		} else {
			if (KEY(&key, "index"))
				into = &c->index;
			else if (KEY(&key, "finish_reason"))
				into = &c->finish;
			else if (KEY(&key, "text"))
				into = &c->text;
			if (jvalue(sc, into))
				return -1;
		}
		r = jnext(sc, '}');
		if (r < 0)
			return -1;
		if (r)
			break;
	}
	sc->depth--;
	return 0;
}

static int jchoices(struct scan *sc, struct chunk *k)
{
	k->choices_list = 1;
	int r = jopen(sc, ']');
	if (r)
		return r < 0 ? -1 : 0;
	for (;;) {
		if (k->count == MAX_CHOICES)
			return -1;
		struct choice *c = &k->choices[k->count++];
		memset(c, 0, sizeof *c);
		if (sc->p < sc->end && *sc->p == '{') {
			if (jchoice(sc, c))
				return -1;
		} else {
			struct val x;
			if (jvalue(sc, &x)) /* not a dict: read as {} */
				return -1;
		}
		r = jnext(sc, ']');
		if (r < 0)
			return -1;
		if (r)
			break;
	}
	sc->depth--;
	return 0;
}

/* the whole document: 0 when it is read here, -1 when not */
static int jchunk(const char *d, Py_ssize_t n, struct chunk *k)
{
	struct scan sc = {d, d + n, 0};
	ws(&sc);
	if (sc.p >= sc.end || *sc.p != '{')
		return -1;
	int r = jopen(&sc, '}');
	if (r < 0)
		return -1;
	while (!r) {
		struct val key, x, *into = &x;
		if (jkey(&sc, &key) || key.esc)
			return -1;
		if (KEY(&key, "choices")) {
			if (k->choices_seen++)
				return -1;
			if (sc.p < sc.end && *sc.p == '[') {
				if (jchoices(&sc, k))
					return -1;
			} else if (jvalue(&sc, &x)) {
				return -1;
			}
		} else {
			if (KEY(&key, "id"))
				into = &k->id;
			else if (KEY(&key, "model"))
				into = &k->model;
			else if (KEY(&key, "error"))
				into = &k->error;
			else if (KEY(&key, "usage"))
				into = &k->usage;
			else if (KEY(&key, "system_fingerprint"))
				into = &k->fingerprint;
			else if (KEY(&key, "service_tier"))
				into = &k->tier;
			if (jvalue(&sc, into))
				return -1;
		}
		r = jnext(&sc, '}');
		if (r < 0)
			return -1;
	}
	ws(&sc);
	return sc.p == sc.end ? 0 : -1;
}

/* set a slot to a new reference, taking it */
static inline void slot_take(PyObject *o, const struct slot *s, PyObject *v)
{
	Py_XSETREF(*(PyObject **)((char *)o + s->offset), v);
}

/* text(value) of a value read here, as a new reference: the str, or None */
static PyObject *text_of(const struct val *v)
{
	if (v->kind == J_STR && v->truthy)
		return PyUnicode_DecodeUTF8(v->s, v->n, NULL);
	Py_RETURN_NONE;
}

/* a str or None slot that _openai_chunk reads for its truth: 1 falsy, 0 truthy, -1 when
 * it is neither (the Python reader takes the chunk) */
static int empty_text(PyObject *o)
{
	if (o == Py_None)
		return 1;
	if (PyUnicode_CheckExact(o))
		return PyUnicode_GET_LENGTH(o) == 0;
	return -1;
}

/* kept, with an escape: built by orjson in the Python reader */
static inline int escaped_kept(const struct val *v, int kept)
{
	return kept && v->kind == J_STR && v->truthy && v->esc;
}

/* one chunk's JSON into the ResponseInfo as _openai_chunk and read_events' loop would:
 * 1 when read, 0 when not read here (nothing changed), -1 with an error set */
static int read_chunk(PyObject *info, const char *d, Py_ssize_t n, PyObject *ns)
{
	struct chunk k;
	memset(&k, 0, offsetof(struct chunk, choices));
	if (jchunk(d, n, &k))
		return 0;
	if ((k.error.kind != J_NONE && k.error.kind != J_NULL) || k.usage.truthy)
		return 0;
	PyObject *slot[8];
	for (int i = 0; i < 8; i++)
		if (!(slot[i] = slot_get(info, &info_slots[i])))
			return 0;
	if (slot[I_CAPTURE] != Py_False || !PyDict_CheckExact(slot[I_FINISH]) ||
	    !PyList_CheckExact(slot[I_CONTENT_NS]) ||
	    (slot[I_REASONING] != Py_True && slot[I_REASONING] != Py_False))
		return 0;
	int want_id = slot[I_ID] == Py_None, want_model = slot[I_MODEL] == Py_None;
	int want_fp = empty_text(slot[I_FINGERPRINT]), want_tier = empty_text(slot[I_TIER]);
	if (want_fp < 0 || want_tier < 0)
		return 0;
	if (escaped_kept(&k.id, want_id) || escaped_kept(&k.model, want_model) ||
	    escaped_kept(&k.fingerprint, want_fp) || escaped_kept(&k.tier, want_tier))
		return 0;
	for (int i = 0; i < k.count; i++)
		if (escaped_kept(&k.choices[i].finish, 1))
			return 0;
	/* read: what the Python reader does, in its order */
	PyObject *v;
	if (want_id) {
		if (!(v = text_of(&k.id)))
			return -1;
		slot_take(info, &info_slots[I_ID], v);
	}
	if (want_model) {
		if (!(v = text_of(&k.model)))
			return -1;
		slot_take(info, &info_slots[I_MODEL], v);
	}
	if (want_fp) {
		if (!(v = text_of(&k.fingerprint)))
			return -1;
		slot_take(info, &info_slots[I_FINGERPRINT], v);
	}
	if (want_tier) {
		if (!(v = text_of(&k.tier)))
			return -1;
		slot_take(info, &info_slots[I_TIER], v);
	}
	if (!k.choices_list)
		return 1;
	int content = 0, thought_any = 0;
	for (int i = 0; i < k.count; i++) {
		const struct choice *c = &k.choices[i];
		long long index = c->index.kind == J_INT ? c->index.i : i;
		int words = c->delta_keys ? c->content.truthy : c->text.truthy;
		int thought = c->reasoning_content.truthy || c->reasoning.truthy;
		if (words || thought || c->refusal.truthy)
			content = 1;
		thought_any |= thought;
		if (c->finish.kind == J_STR && c->finish.truthy) {
			PyObject *key = PyLong_FromLongLong(index);
			PyObject *reason = key ? text_of(&c->finish) : NULL;
			int err = reason ? PyDict_SetItem(slot[I_FINISH], key, reason) : -1;
			Py_XDECREF(key);
			Py_XDECREF(reason);
			if (err)
				return -1;
		}
	}
	if (thought_any)
		slot_set(info, &info_slots[I_REASONING], Py_True);
	if (content && PyList_GET_SIZE(slot[I_CONTENT_NS]) < max_content_times &&
	    PyList_Append(slot[I_CONTENT_NS], ns))
		return -1;
	return 1;
}

static int openai_fallback(PyObject *info, PyObject *data, PyObject *ns)
{
	PyObject *r = PyObject_CallFunctionObjArgs(openai_event, data, ns, info, NULL);
	Py_XDECREF(r);
	return r ? 0 : -1;
}

static int openai_line(struct sink *sink, const char *d, Py_ssize_t n, PyObject *ns)
{
	if (n == 6 && !memcmp(d, "[DONE]", 6)) /* OpenAI's end marker, not JSON */
		return 0;
	int r = read_chunk(sink->info, d, n, ns);
	if (r)
		return r < 0 ? -1 : 0;
	PyObject *data = PyBytes_FromStringAndSize(d, n);
	if (!data)
		return -1;
	int err = openai_fallback(sink->info, data, ns);
	Py_DECREF(data);
	return err;
}

static int openai_other(struct sink *sink, PyObject *event)
{
	if (!PyTuple_Check(event) || PyTuple_GET_SIZE(event) != 3) {
		PyErr_SetString(PyExc_TypeError, "sse: _sse_event made no StreamEvent");
		return -1;
	}
	return openai_fallback(sink->info, PyTuple_GET_ITEM(event, 1), PyTuple_GET_ITEM(event, 2));
}

static PyObject *openai_events(PyObject *self, PyObject *args)
{
	PyObject *pieces, *info;
	if (!PyArg_ParseTuple(args, "OO", &pieces, &info))
		return NULL;
	if (!event_type || !info_type) {
		PyErr_SetString(PyExc_RuntimeError, "sse: setup() and openai_setup() first");
		return NULL;
	}
	if (!Py_IS_TYPE(info, info_type)) {
		PyErr_SetString(PyExc_TypeError, "sse: a ResponseInfo");
		return NULL;
	}
	struct sink sink = {openai_line, openai_other, NULL, info};
	return walk(pieces, &sink);
}

static PyObject *openai_setup(PyObject *self, PyObject *args)
{
	PyObject *type, *fn;
	Py_ssize_t most;
	if (!PyArg_ParseTuple(args, "O!On", &PyType_Type, &type, &fn, &most))
		return NULL;
	if (!PyCallable_Check(fn) || most < 0) {
		PyErr_SetString(PyExc_TypeError,
				"openai_setup(ResponseInfo, _openai_event, MAX_CONTENT_TIMES)");
		return NULL;
	}
	if (slots_of(type, info_slots, sizeof info_slots / sizeof *info_slots))
		return NULL;
	Py_XSETREF(info_type, (PyTypeObject *)Py_NewRef(type));
	Py_XSETREF(openai_event, Py_NewRef(fn));
	max_content_times = most;
	Py_RETURN_NONE;
}

static PyObject *setup(PyObject *self, PyObject *args)
{
	PyObject *type, *fn, *piece;
	if (!PyArg_ParseTuple(args, "O!OO!", &PyType_Type, &type, &fn, &PyType_Type, &piece))
		return NULL;
	if (!PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type) || !PyCallable_Check(fn)) {
		PyErr_SetString(PyExc_TypeError, "setup(StreamEvent, _sse_event, BodyPiece)");
		return NULL;
	}
	if (slots_of(piece, piece_slots, sizeof piece_slots / sizeof *piece_slots))
		return NULL;
	Py_XSETREF(event_type, (PyTypeObject *)Py_NewRef(type));
	Py_XSETREF(sse_event, Py_NewRef(fn));
	Py_XSETREF(piece_type, (PyTypeObject *)Py_NewRef(piece));
	Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
	{"setup", setup, METH_VARARGS, "setup(StreamEvent, _sse_event, BodyPiece)"},
	{"whole_pieces", whole_pieces, METH_O,
	 "whole_pieces(body.pieces) -> (events, first piece not read, its offset)"},
	{"openai_setup", openai_setup, METH_VARARGS,
	 "openai_setup(ResponseInfo, _openai_event, MAX_CONTENT_TIMES)"},
	{"openai_events", openai_events, METH_VARARGS,
	 "openai_events(body.pieces, info) -> (first piece not read, its offset)"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "otel_ebpf.protocols.llm._stream",
				    "SSE bodies into events (protocols/llm/stream.py)", -1, methods};

PyMODINIT_FUNC PyInit__stream(void)
{
	empty_name = PyUnicode_InternFromString("");
	s_offset = PyUnicode_InternFromString("offset");
	s_data = PyUnicode_InternFromString("data");
	s_ns = PyUnicode_InternFromString("ns");
	if (!empty_name || !s_offset || !s_data || !s_ns)
		return NULL;
	byte_classes();
	return PyModule_Create(&module);
}
