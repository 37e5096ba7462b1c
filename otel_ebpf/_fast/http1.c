/* SPDX-License-Identifier: Apache-2.0 */
/* HTTP/1 heads on the common path, in one pass: a strict subset of what llhttp accepts.
 *
 * head(buf, request, kept) -> tuple | None
 *
 * A head this code is sure about (complete in buf, every byte inside the grammar below) is
 * returned as the fields protocols/http1/parse.py reads from it; anything else returns
 * None and the caller takes the llhttp (httptools) path, which stays the reference. The
 * subset is deliberately narrow, so that whatever it accepts llhttp accepts with the same
 * meaning (tests/protocols/http1/test_http1_fastpath.py checks both on the same bytes):
 *   request line  KNOWN-METHOD SP origin-form SP "HTTP/1." [01] CRLF  (no CONNECT)
 *   status line   "HTTP/1." [01] SP [1-5] DIGIT DIGIT SP 1*(VCHAR / SP) CRLF
 *   header        1*tchar ":" *(SP / HT) 1*VCHAR *(VCHAR / SP / HT) CRLF
 *   then CRLF. No obs-fold, no obs-text, no empty value; Transfer-Encoding, Upgrade, a
 *   repeated or non-decimal Content-Length all go to llhttp.
 *
 * kept maps a lower-case header name (bytes) to (name as str, flags): which of the head's
 * values the caller wants (the framing headers and the correlation carriers, secrets
 * already left out). Returned:
 *   (start, end, method | status, target | reason, version, carrier, host, user_agent,
 *    content_type, content_length)   -- content_length -1: none
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

#define MAX_HEAD (64 * 1024)  /* parse.py MAX_HEAD: the window the head's end is looked for in */
#define MAX_LEAD 64           /* empty lines before a message: more than this is rare, llhttp's */
#define MAX_NAME 64           /* longer header names go to llhttp */

/* flags in kept's values (parse.py _fast_kept builds them) */
#define K_HOST 1
#define K_UA 2
#define K_CTYPE 4
#define K_CLEN 8
#define K_FALLBACK 16 /* Transfer-Encoding, Upgrade: framing llhttp decides */
#define K_CARRIER 32

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

static PyObject *head(PyObject *self, PyObject *args)
{
	Py_buffer view;
	int request;
	PyObject *kept;
	if (!PyArg_ParseTuple(args, "y*pO!", &view, &request, &PyDict_Type, &kept))
		return NULL;
	PyObject *result = NULL, *carrier = NULL, *first_line = NULL, *line_text = NULL;
	PyObject *vals[3] = {NULL, NULL, NULL}; /* host, user-agent, content-type */
	long long clen = -1;
	const unsigned char *buf = view.buf, *end = buf + view.len;

	Py_ssize_t lead = 0;
	while (lead < view.len && (buf[lead] == '\r' || buf[lead] == '\n'))
		lead++;
	if (lead > MAX_LEAD || lead == view.len)
		goto fallback;
	const unsigned char *p = buf + lead;
	const unsigned char *window = view.len - lead > MAX_HEAD ? p + MAX_HEAD : end;

	const unsigned char *eol = line_end(p, window);
	if (!eol)
		goto fallback;
	int code, minor;
	const unsigned char *text;
	Py_ssize_t text_len;
	if (request ? request_line(p, eol, &code, &minor, &text, &text_len)
		    : status_line(p, eol, &code, &minor, &text, &text_len))
		goto fallback;
	if (!(carrier = PyDict_New()))
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
		if (flags & K_CLEN) {
			if (clen >= 0 || ve != eol || eol - v > 15)
				goto fallback; /* repeated, trailing blanks, or too long: llhttp's */
			clen = 0;
			for (const unsigned char *c = v; c < eol; c++) {
				if (*c < '0' || *c > '9')
					goto fallback;
				clen = clen * 10 + (*c - '0');
			}
		}
		int slot = flags & K_HOST ? 0 : flags & K_UA ? 1 : flags & K_CTYPE ? 2 : -1;
		if ((slot >= 0 && !vals[slot]) || (flags & K_CARRIER)) {
			PyObject *value = latin1(v, ve - v);
			if (!value)
				goto error;
			if (slot >= 0 && !vals[slot]) { /* the first value, as parse.py's _Head.first */
				Py_INCREF(value);
				vals[slot] = value;
			}
			/* carriers: the last value, as parse.py's dict of the fields */
			if ((flags & K_CARRIER) && PyDict_SetItem(carrier, name, value) < 0) {
				Py_DECREF(value);
				goto error;
			}
			Py_DECREF(value);
		}
		p = eol + 2;
	}
	if (!(line_text = latin1(text, text_len)))
		goto error;
	if (request) {
		first_line = methods[code];
		Py_INCREF(first_line);
	} else if (!(first_line = PyLong_FromLong(code))) {
		goto error;
	}
	for (int i = 0; i < 3; i++)
		if (!vals[i]) {
			Py_INCREF(empty);
			vals[i] = empty;
		}
	result = Py_BuildValue("(nnNNONNNNL)", lead, (Py_ssize_t)(p - buf), first_line, line_text,
			       minor ? v11 : v10, carrier, vals[0], vals[1], vals[2], clen);
	first_line = line_text = carrier = vals[0] = vals[1] = vals[2] = NULL; /* stolen (N) */
	goto done;
fallback:
	result = Py_None;
	Py_INCREF(result);
	goto done;
error:
	result = NULL;
done:
	Py_XDECREF(carrier);
	Py_XDECREF(first_line);
	Py_XDECREF(line_text);
	for (int i = 0; i < 3; i++)
		Py_XDECREF(vals[i]);
	PyBuffer_Release(&view);
	return result;
}

static PyMethodDef http1_methods[] = {
	{"head", head, METH_VARARGS,
	 "head(buf, request, kept) -> fields of a whole, plain HTTP/1 head at buf's start, or "
	 "None (not sure: parse with llhttp)"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef http1_module = {
	PyModuleDef_HEAD_INIT, "otel_ebpf._fast.http1",
	"HTTP/1 heads on the common path, in C; protocols/http1/parse.py is the reference.", -1,
	http1_methods,
};

PyMODINIT_FUNC PyInit_http1(void)
{
	init_tables();
	for (size_t i = 0; i < N_METHODS; i++)
		if (!(methods[i] = PyUnicode_InternFromString(METHOD_NAMES[i])))
			return NULL;
	if (!(v10 = PyUnicode_InternFromString("1.0")) || !(v11 = PyUnicode_InternFromString("1.1")) ||
	    !(empty = PyUnicode_InternFromString("")))
		return NULL;
	PyObject *m = PyModule_Create(&http1_module);
	if (!m)
		return NULL;
	if (PyModule_AddIntConstant(m, "K_HOST", K_HOST) || PyModule_AddIntConstant(m, "K_UA", K_UA) ||
	    PyModule_AddIntConstant(m, "K_CTYPE", K_CTYPE) ||
	    PyModule_AddIntConstant(m, "K_CLEN", K_CLEN) ||
	    PyModule_AddIntConstant(m, "K_FALLBACK", K_FALLBACK) ||
	    PyModule_AddIntConstant(m, "K_CARRIER", K_CARRIER)) {
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
