/* SPDX-License-Identifier: Apache-2.0 */
/* SSE bodies whose pieces end where events end, split into StreamEvents
 * (protocols/llm/stream.py `_sse_whole_pieces_python`, the reference): the same events,
 * the same index of the first piece not read so and its expected offset. An event other
 * than one `data: ` line is handed to the Python `_sse_event` given to setup(). */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <string.h>

static PyTypeObject *event_type; /* StreamEvent, a tuple subclass */
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

/* the events of one piece's blocks into `events`; 1 when the piece is not one we read
 * (its last separator began a byte earlier: "\n\n\n" at its end), -1 on error */
static int piece_events(const char *d, Py_ssize_t n, PyObject *ns, PyObject *events)
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
		PyObject *ev;
		if (len >= 6 && !memcmp(block, "data: ", 6) && !memchr(block, '\n', len)) {
			ev = one_line(block + 6, len - 6, ns);
		} else {
			PyObject *b = PyBytes_FromStringAndSize(block, len);
			ev = b ? PyObject_CallFunctionObjArgs(sse_event, b, ns, NULL) : NULL;
			Py_XDECREF(b);
		}
		if (!ev)
			return -1;
		int err = ev != Py_None ? PyList_Append(events, ev) : 0;
		Py_DECREF(ev);
		if (err)
			return -1;
		start = end + 2;
	}
	return 0;
}

static PyObject *whole_pieces(PyObject *self, PyObject *pieces)
{
	if (!event_type) {
		PyErr_SetString(PyExc_RuntimeError, "sse: setup() first");
		return NULL;
	}
	if (!PyList_Check(pieces)) {
		PyErr_SetString(PyExc_TypeError, "sse: a list of body pieces");
		return NULL;
	}
	PyObject *events = PyList_New(0);
	if (!events)
		return NULL;
	long long expect = 0;
	Py_ssize_t i, count = PyList_GET_SIZE(pieces);
	for (i = 0; i < count; i++) {
		PyObject *piece = PyList_GET_ITEM(pieces, i);
		PyObject *offset = PyObject_GetAttr(piece, s_offset);
		if (!offset)
			goto fail;
		int overflow;
		long long at = PyLong_Check(offset) ? PyLong_AsLongLongAndOverflow(offset, &overflow)
						    : -1;
		int off_ok = PyLong_Check(offset) && !overflow && at == expect;
		Py_DECREF(offset);
		if (!off_ok)
			break;
		PyObject *data = PyObject_GetAttr(piece, s_data);
		if (!data)
			goto fail;
		if (!PyBytes_CheckExact(data)) { /* not bytes: the search reads it */
			Py_DECREF(data);
			break;
		}
		const char *d = PyBytes_AS_STRING(data);
		Py_ssize_t n = PyBytes_GET_SIZE(data);
		if (n < 2 || d[n - 1] != '\n' || d[n - 2] != '\n' || memchr(d, '\r', n)) {
			Py_DECREF(data);
			break;
		}
		PyObject *ns = PyObject_GetAttr(piece, s_ns);
		if (!ns) {
			Py_DECREF(data);
			goto fail;
		}
		int r = piece_events(d, n, ns, events);
		Py_DECREF(ns);
		Py_DECREF(data);
		if (r < 0)
			goto fail;
		if (r > 0)
			break;
		expect += n;
	}
	return Py_BuildValue("(NnL)", events, i, expect);
fail:
	Py_DECREF(events);
	return NULL;
}

static PyObject *setup(PyObject *self, PyObject *args)
{
	PyObject *type, *fn;
	if (!PyArg_ParseTuple(args, "O!O", &PyType_Type, &type, &fn))
		return NULL;
	if (!PyType_IsSubtype((PyTypeObject *)type, &PyTuple_Type) || !PyCallable_Check(fn)) {
		PyErr_SetString(PyExc_TypeError, "setup(StreamEvent, _sse_event)");
		return NULL;
	}
	Py_XSETREF(event_type, (PyTypeObject *)Py_NewRef(type));
	Py_XSETREF(sse_event, Py_NewRef(fn));
	Py_RETURN_NONE;
}

static PyMethodDef methods[] = {
	{"setup", setup, METH_VARARGS, "setup(StreamEvent, _sse_event)"},
	{"whole_pieces", whole_pieces, METH_O,
	 "whole_pieces(body.pieces) -> (events, first piece not read, its offset)"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "sse",
				    "SSE bodies into events (protocols/llm/stream.py)", -1, methods};

PyMODINIT_FUNC PyInit_sse(void)
{
	empty_name = PyUnicode_InternFromString("");
	s_offset = PyUnicode_InternFromString("offset");
	s_data = PyUnicode_InternFromString("data");
	s_ns = PyUnicode_InternFromString("ns");
	if (!empty_name || !s_offset || !s_data || !s_ns)
		return NULL;
	return PyModule_Create(&module);
}
