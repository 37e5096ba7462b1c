/* SPDX-License-Identifier: Apache-2.0 */
/* Slots dataclasses built from positional fields in one C call: what
 * protocols/base.py positional_maker's generated Python function does (object.__new__,
 * then every field set in the class's field order, from an argument, a default or a
 * default factory), without a bytecode per field. The agent builds several such objects
 * per exchange (frames, records, spans, requests). */
#include "slots.h"

enum source { FROM_ARG, FROM_VALUE, FROM_FACTORY };

struct field {
	Py_ssize_t offset;
	enum source source;
	Py_ssize_t arg;	 /* FROM_ARG: its position */
	PyObject *value; /* FROM_VALUE: the default; FROM_FACTORY: what makes it */
};

typedef struct {
	PyObject_HEAD
	vectorcallfunc vectorcall;
	PyTypeObject *cls;
	PyObject *names; /* the arguments' field names, in order (a tuple) */
	Py_ssize_t nargs;
	Py_ssize_t nfields;
	struct field fields[];
} Maker;

static PyTypeObject MakerType;

static PyObject *maker_call(PyObject *self, PyObject *const *args, size_t nargsf,
			    PyObject *kwnames)
{
	Maker *m = (Maker *)self;
	Py_ssize_t n = PyVectorcall_NARGS(nargsf);
	if (kwnames && PyTuple_GET_SIZE(kwnames)) {
		PyErr_Format(PyExc_TypeError, "%s maker takes positional arguments only",
			     m->cls->tp_name);
		return NULL;
	}
	if (n != m->nargs) {
		PyErr_Format(PyExc_TypeError, "%s maker takes %zd positional arguments but %zd were given",
			     m->cls->tp_name, m->nargs, n);
		return NULL;
	}
	PyObject *o = m->cls->tp_alloc(m->cls, 0);
	if (!o)
		return NULL;
	for (Py_ssize_t i = 0; i < m->nfields; i++) {
		const struct field *f = &m->fields[i];
		PyObject *v;
		switch (f->source) {
		case FROM_ARG:
			v = Py_NewRef(args[f->arg]);
			break;
		case FROM_VALUE:
			v = Py_NewRef(f->value);
			break;
		default:
			v = PyObject_CallNoArgs(f->value);
			if (!v) {
				Py_DECREF(o);
				return NULL;
			}
		}
		Py_XSETREF(*(PyObject **)((char *)o + f->offset), v);
	}
	return o;
}

/* Maker(cls, names, plan): plan is one (field name, source, arg position or value) per
 * field of cls, in field order; source 0 = an argument, 1 = a default, 2 = a factory */
static PyObject *maker_new(PyTypeObject *type, PyObject *args, PyObject *kwds)
{
	PyObject *cls, *names, *plan;
	if (!PyArg_ParseTuple(args, "O!O!O!:Maker", &PyType_Type, &cls, &PyTuple_Type, &names,
			      &PyTuple_Type, &plan))
		return NULL;
	Py_ssize_t nfields = PyTuple_GET_SIZE(plan);
	Maker *m = PyObject_GC_NewVar(Maker, type, nfields);
	if (!m)
		return NULL;
	m->vectorcall = maker_call;
	m->cls = (PyTypeObject *)Py_NewRef(cls);
	m->names = Py_NewRef(names);
	m->nargs = PyTuple_GET_SIZE(names);
	m->nfields = 0; /* grows as fields are checked: dealloc clears only those */
	for (Py_ssize_t i = 0; i < nfields; i++) {
		PyObject *item = PyTuple_GET_ITEM(plan, i);
		const char *name;
		int source;
		PyObject *what;
		if (!PyArg_ParseTuple(item, "siO:Maker plan", &name, &source, &what))
			goto fail;
		struct slot s = {name, 0};
		if (slots_of(cls, &s, 1) < 0)
			goto fail;
		struct field *f = &m->fields[i];
		f->offset = s.offset;
		f->value = NULL;
		f->arg = 0;
		if (source == FROM_ARG) {
			f->arg = PyLong_AsSsize_t(what);
			if (f->arg == -1 && PyErr_Occurred())
				goto fail;
			if (f->arg < 0 || f->arg >= m->nargs) {
				PyErr_Format(PyExc_ValueError, "Maker: %s's argument %zd of %zd", name,
					     f->arg, m->nargs);
				goto fail;
			}
		} else if (source == FROM_VALUE || source == FROM_FACTORY) {
			f->value = Py_NewRef(what);
		} else {
			PyErr_Format(PyExc_ValueError, "Maker: %s's source %d", name, source);
			goto fail;
		}
		f->source = (enum source)source;
		m->nfields = i + 1;
	}
	PyObject_GC_Track(m);
	return (PyObject *)m;
fail:
	PyObject_GC_Track(m);
	Py_DECREF(m);
	return NULL;
}

static int maker_traverse(PyObject *self, visitproc visit, void *arg)
{
	Maker *m = (Maker *)self;
	Py_VISIT(m->cls);
	Py_VISIT(m->names);
	for (Py_ssize_t i = 0; i < m->nfields; i++)
		Py_VISIT(m->fields[i].value);
	return 0;
}

static int maker_clear(PyObject *self)
{
	Maker *m = (Maker *)self;
	Py_CLEAR(m->cls);
	Py_CLEAR(m->names);
	for (Py_ssize_t i = 0; i < m->nfields; i++)
		Py_CLEAR(m->fields[i].value);
	return 0;
}

static void maker_dealloc(PyObject *self)
{
	PyObject_GC_UnTrack(self);
	maker_clear(self);
	Py_TYPE(self)->tp_free(self);
}

static PyObject *maker_names(PyObject *self, void *closure)
{
	return Py_NewRef(((Maker *)self)->names);
}

static PyGetSetDef maker_getset[] = {
	{"names", maker_names, NULL, "the arguments' field names, in order", NULL},
	{NULL},
};

static PyTypeObject MakerType = {
	PyVarObject_HEAD_INIT(NULL, 0)
	.tp_name = "otel_ebpf._fast.maker.Maker",
	.tp_basicsize = sizeof(Maker),
	.tp_itemsize = sizeof(struct field),
	.tp_flags = Py_TPFLAGS_DEFAULT | Py_TPFLAGS_HAVE_GC | Py_TPFLAGS_HAVE_VECTORCALL,
	.tp_doc = "a slots dataclass built from positional fields (protocols/base.py positional_maker)",
	.tp_new = maker_new,
	.tp_call = PyVectorcall_Call,
	.tp_vectorcall_offset = offsetof(Maker, vectorcall),
	.tp_traverse = maker_traverse,
	.tp_clear = maker_clear,
	.tp_dealloc = maker_dealloc,
	.tp_getset = maker_getset,
};

static struct PyModuleDef maker_module = {
	PyModuleDef_HEAD_INIT, "maker",
	"Slots dataclasses built from positional fields (protocols/base.py positional_maker).",
	-1, NULL,
};

PyMODINIT_FUNC PyInit_maker(void)
{
	if (PyType_Ready(&MakerType) < 0)
		return NULL;
	PyObject *mod = PyModule_Create(&maker_module);
	if (!mod)
		return NULL;
	if (PyModule_AddObjectRef(mod, "Maker", (PyObject *)&MakerType) < 0) {
		Py_DECREF(mod);
		return NULL;
	}
	return mod;
}
