/* SPDX-License-Identifier: Apache-2.0 */
/* Reading and writing the __slots__ of the agent's own Python classes by offset: what the
 * interpreter's LOAD_ATTR/STORE_ATTR do for a slot, without a lookup per access. Offsets
 * come from the class's member descriptors at setup; callers check an object's exact type
 * before using them (any other object takes the Python path). */
#ifndef OTEL_EBPF_SLOTS_H
#define OTEL_EBPF_SLOTS_H

#define PY_SSIZE_T_CLEAN
#include <Python.h>
#include <structmember.h>

struct slot {
	const char *name;
	Py_ssize_t offset;
};

/* fill each slot's offset from `type`'s member descriptors; -1 with an error set */
static int slots_of(PyObject *type, struct slot *slots, size_t n)
{
	if (!PyType_Check(type)) {
		PyErr_SetString(PyExc_TypeError, "setup: a class is needed");
		return -1;
	}
	for (size_t i = 0; i < n; i++) {
		PyObject *d = PyObject_GetAttrString(type, slots[i].name);
		if (!d)
			return -1;
		int ok = Py_IS_TYPE(d, &PyMemberDescr_Type) &&
			 ((PyMemberDescrObject *)d)->d_member->type == T_OBJECT_EX;
		if (ok)
			slots[i].offset = ((PyMemberDescrObject *)d)->d_member->offset;
		Py_DECREF(d);
		if (!ok) {
			PyErr_Format(PyExc_TypeError, "setup: %R.%s is not a slot", type,
				     slots[i].name);
			return -1;
		}
	}
	return 0;
}

/* the slot's value (borrowed), NULL when unset (no error set) */
static inline PyObject *slot_get(PyObject *o, const struct slot *s)
{
	return *(PyObject **)((char *)o + s->offset);
}

static inline void slot_set(PyObject *o, const struct slot *s, PyObject *v)
{
	Py_INCREF(v);
	Py_XSETREF(*(PyObject **)((char *)o + s->offset), v);
}

/* an exact int (a slot's value) that fits a long long, in *out: 0; -1 (no error set) for
 * anything else, NULL included */
static inline int ll_of(PyObject *v, long long *out)
{
	if (!v || !PyLong_CheckExact(v))
		return -1;
	int overflow;
	*out = PyLong_AsLongLongAndOverflow(v, &overflow);
	if (overflow || (*out == -1 && PyErr_Occurred())) {
		PyErr_Clear();
		return -1;
	}
	return 0;
}

/* set a slot to a new int; -1 with an error set */
static inline int set_ll(PyObject *o, const struct slot *s, long long v)
{
	PyObject *x = PyLong_FromLongLong(v);
	if (!x)
		return -1;
	Py_XSETREF(*(PyObject **)((char *)o + s->offset), x);
	return 0;
}

#endif
