/* SPDX-License-Identifier: Apache-2.0 */
/* A bytes-like object for the sanitizer fuzz targets (bench/fuzz/sanitized.py), built only
 * into the sanitizer build (bench/fuzz/asan_build.py), never into the agent.
 *
 * StrictBuffer(data) hands every buffer request a fresh malloc'd copy of exactly len(data)
 * bytes and frees it on PyBuffer_Release. Under ASan a C reader that reads one byte past
 * the end (a bytes object always has a NUL there, inside its allocation) or reads the
 * buffer after releasing it (as an exporter that unmaps or moves its memory on release
 * would allow) is reported at once, where plain bytes would hide both. */
#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <stdlib.h>
#include <string.h>

typedef struct {
	PyObject_HEAD
	PyObject *data; /* bytes */
	Py_ssize_t exports;
} StrictBuffer;

static int sb_get(PyObject *self, Py_buffer *view, int flags)
{
	StrictBuffer *s = (StrictBuffer *)self;
	Py_ssize_t n = PyBytes_GET_SIZE(s->data);
	char *copy = malloc(n ? (size_t)n : 1);
	if (!copy) {
		PyErr_NoMemory();
		return -1;
	}
	memcpy(copy, PyBytes_AS_STRING(s->data), (size_t)n);
	if (PyBuffer_FillInfo(view, self, copy, n, 1, flags) < 0) {
		free(copy);
		return -1;
	}
	s->exports++;
	return 0;
}

static void sb_release(PyObject *self, Py_buffer *view)
{
	StrictBuffer *s = (StrictBuffer *)self;
	memset(view->buf, 0xdb, (size_t)view->len); /* a freed exporter's bytes: garbage */
	free(view->buf);
	s->exports--;
}

static PyBufferProcs sb_as_buffer = {sb_get, sb_release};

static PyObject *sb_new(PyTypeObject *type, PyObject *args, PyObject *kw)
{
	PyObject *data;
	if (!PyArg_ParseTuple(args, "S", &data))
		return NULL;
	StrictBuffer *s = (StrictBuffer *)type->tp_alloc(type, 0);
	if (!s)
		return NULL;
	Py_INCREF(data);
	s->data = data;
	return (PyObject *)s;
}

static void sb_dealloc(PyObject *self)
{
	Py_XDECREF(((StrictBuffer *)self)->data);
	Py_TYPE(self)->tp_free(self);
}

static PyObject *sb_len(PyObject *self, void *closure)
{
	return PyLong_FromSsize_t(PyBytes_GET_SIZE(((StrictBuffer *)self)->data));
}

static PyObject *sb_exports(PyObject *self, void *closure)
{
	return PyLong_FromSsize_t(((StrictBuffer *)self)->exports);
}

static PyGetSetDef sb_getset[] = {
	{"size", sb_len, NULL, "len(data)", NULL},
	{"exports", sb_exports, NULL, "buffers handed out and not released", NULL},
	{NULL}};

static PyTypeObject StrictBufferType = {
	PyVarObject_HEAD_INIT(NULL, 0).tp_name = "strictbuf.StrictBuffer",
	.tp_basicsize = sizeof(StrictBuffer),
	.tp_flags = Py_TPFLAGS_DEFAULT,
	.tp_new = sb_new,
	.tp_dealloc = sb_dealloc,
	.tp_as_buffer = &sb_as_buffer,
	.tp_getset = sb_getset,
	.tp_doc = "StrictBuffer(data: bytes): exact-size copies, freed on release",
};

static struct PyModuleDef module = {PyModuleDef_HEAD_INIT, "strictbuf", NULL, -1, NULL};

PyMODINIT_FUNC PyInit_strictbuf(void)
{
	if (PyType_Ready(&StrictBufferType) < 0)
		return NULL;
	PyObject *m = PyModule_Create(&module);
	if (!m)
		return NULL;
	Py_INCREF(&StrictBufferType);
	if (PyModule_AddObject(m, "StrictBuffer", (PyObject *)&StrictBufferType) < 0) {
		Py_DECREF(&StrictBufferType);
		Py_DECREF(m);
		return NULL;
	}
	return m;
}
