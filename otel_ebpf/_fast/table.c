/* SPDX-License-Identifier: Apache-2.0 */
/* The connection table's loop over a poll's usual data events, in C.
 *
 * data_run(table, events, start) -> (stop, payload_bytes)
 *
 * What otel_ebpf/conntrack/table.py ConnTable.handle (the reference) does for each event
 * from `start` on while the event is a DataEvent of a stream connection the table knows:
 * the connection moved to the end of the LRU, the compiled data step (conn.c data, the
 * table's fast_data) or Connection.on_data when it declines, the key noted as touched, a
 * connection no parser wants queued for muting, and an ingress read remembered as its
 * thread's last; a datagram with its peer (an unconnected UDP socket's: DDS) goes to
 * Connection.on_data without the compiled step, as in the reference. It stops, before
 * changing anything for it, at the first other event (a connection not in the table, an
 * open, a close, a task birth, an exit): the reference's loop takes that one and calls
 * again after it. `stop` is the
 * index it stopped at (len(events) when it took them all); `payload_bytes` the payload and
 * tail bytes of the events it took (the reference counts them once per batch).
 */
#define PY_SSIZE_T_CLEAN
#include <Python.h>

static PyTypeObject *data_event_type, *last_read_type;
static PyObject *ingress;
static Py_ssize_t last_read_max;
static PyObject *s_move_to_end, *s_on_data, *s_popitem, *s_unparsed, *s_muted, *s_last;
static PyObject *a_conns, *a_touched, *a_to_mute, *a_last_read, *a_fast_data, *a_stats,
	*a_registry;

enum { E_KEY, E_TID, E_ENTER, E_EXIT, E_DIR, E_POS, E_LEN, E_SEQ, E_PAYLOAD, E_PEER, E_TASK,
       E_TAIL, E_TLS, E_N };

static PyObject *setup(PyObject *self, PyObject *args)
{
	PyObject *ev, *lr, *in;
	Py_ssize_t max;
	if (!PyArg_ParseTuple(args, "O!O!On", &PyType_Type, &ev, &PyType_Type, &lr, &in, &max))
		return NULL;
	if (!PyType_IsSubtype((PyTypeObject *)ev, &PyTuple_Type) ||
	    !PyType_IsSubtype((PyTypeObject *)lr, &PyTuple_Type)) {
		PyErr_SetString(PyExc_TypeError, "setup: DataEvent and LastRead are named tuples");
		return NULL;
	}
	Py_INCREF(ev);
	Py_XSETREF(data_event_type, (PyTypeObject *)ev);
	Py_INCREF(lr);
	Py_XSETREF(last_read_type, (PyTypeObject *)lr);
	Py_INCREF(in);
	Py_XSETREF(ingress, in);
	last_read_max = max;
	Py_RETURN_NONE;
}

static int call_discard(PyObject *r)
{
	if (!r)
		return -1;
	Py_DECREF(r);
	return 0;
}

static int move_to_end(PyObject *od, PyObject *key)
{
	PyObject *argv[] = {od, key};
	return call_discard(PyObject_VectorcallMethod(s_move_to_end, argv,
						      2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL));
}

static Py_ssize_t size_of(PyObject *b)
{
	return PyBytes_CheckExact(b) ? PyBytes_GET_SIZE(b) : PyObject_Length(b);
}

/* the event's connection took its bytes: what the reference does after the step; -1 error */
static int after_step(PyObject *conn, PyObject *const *e, PyObject *touched, PyObject *to_mute,
		      PyObject *last_read)
{
	PyObject *key = e[E_KEY];
	if (PySet_Add(touched, key))
		return -1;
	PyObject *unparsed = PyObject_GetAttr(conn, s_unparsed);
	if (!unparsed)
		return -1;
	int up = PyObject_IsTrue(unparsed);
	Py_DECREF(unparsed);
	if (up < 0)
		return -1;
	if (up) {
		PyObject *muted = PyObject_GetAttr(conn, s_muted);
		if (!muted)
			return -1;
		int m = PyObject_IsTrue(muted);
		Py_DECREF(muted);
		if (m < 0)
			return -1;
		if (!m && (PyObject_SetAttr(conn, s_muted, Py_True) || PyList_Append(to_mute, key)))
			return -1;
	}
	if (e[E_DIR] != ingress)
		return 0;
	/* what a thread read last: a loop callback creating a task works on it */
	PyObject *end = PyNumber_Add(e[E_POS], e[E_LEN]);
	if (!end)
		return -1;
	/* LastRead(key, pos, end, ns, context), made as tuple.__new__ would fill it: one
	 * allocation, no argument tuples (a read of every ingress record) */
	PyObject *read = last_read_type->tp_alloc(last_read_type, 5);
	if (!read) {
		Py_DECREF(end);
		return -1;
	}
	PyObject *items[5] = {key, e[E_POS], end, e[E_EXIT], e[E_TASK]};
	for (int k = 0; k < 5; k++) {
		if (k != 2)
			Py_INCREF(items[k]);
		PyTuple_SET_ITEM(read, k, items[k]); /* `end`'s reference moves in */
	}
	int err = PyObject_SetItem(last_read, e[E_TID], read);
	Py_DECREF(read);
	if (err || move_to_end(last_read, e[E_TID]))
		return -1;
	if (PyObject_Length(last_read) > last_read_max) {
		PyObject *argv[] = {last_read, Py_False};
		PyObject *names = PyTuple_Pack(1, s_last);
		if (!names)
			return -1;
		PyObject *r = PyObject_VectorcallMethod(s_popitem, argv,
							1 | PY_VECTORCALL_ARGUMENTS_OFFSET, names);
		Py_DECREF(names);
		if (call_discard(r))
			return -1;
	}
	return 0;
}

static PyObject *data_run(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 3 || !PyList_CheckExact(args[1]) || !PyLong_CheckExact(args[2])) {
		PyErr_SetString(PyExc_TypeError, "data_run(table, events: list, start: int)");
		return NULL;
	}
	PyObject *table = args[0], *events = args[1];
	Py_ssize_t i = PyLong_AsSsize_t(args[2]);
	if (i < 0) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_ValueError, "data_run: start < 0");
		return NULL;
	}
	PyObject *conns = NULL, *touched = NULL, *to_mute = NULL, *last_read = NULL,
		 *fast_data = NULL, *stats = NULL, *registry = NULL, *result = NULL;
	PyObject **dst[] = {&conns, &touched, &to_mute, &last_read, &fast_data, &stats, &registry};
	PyObject *names[] = {a_conns, a_touched, a_to_mute, a_last_read, a_fast_data, a_stats,
			     a_registry};
	for (int k = 0; k < 7; k++)
		if (!(*dst[k] = PyObject_GetAttr(table, names[k])))
			goto out;
	if (!PyDict_Check(conns) || !PySet_Check(touched) || !PyList_Check(to_mute) ||
	    !PyDict_Check(last_read) || fast_data == Py_None) {
		PyErr_SetString(PyExc_TypeError, "data_run: not a table this step reads");
		goto out;
	}
	long long payload_bytes = 0;
	for (; i < PyList_GET_SIZE(events); i++) {
		PyObject *ev = PyList_GET_ITEM(events, i);
		if (Py_TYPE(ev) != data_event_type || PyTuple_GET_SIZE(ev) != E_N)
			break;
		PyObject *const *e = &PyTuple_GET_ITEM(ev, 0);
		PyObject *conn = PyDict_GetItemWithError(conns, e[E_KEY]);
		if (!conn) {
			if (PyErr_Occurred())
				goto out;
			break; /* its open event was lost: the reference tracks it */
		}
		Py_INCREF(conn);
		Py_INCREF(ev); /* held while Python code runs */
		int err = move_to_end(conns, e[E_KEY]);
		Py_ssize_t n1 = err ? -1 : size_of(e[E_PAYLOAD]);
		Py_ssize_t n2 = n1 < 0 ? -1 : size_of(e[E_TAIL]);
		if (n2 < 0)
			err = 1;
		else
			payload_bytes += n1 + n2;
		if (!err) {
			PyObject *argv[] = {conn,	    e[E_DIR],  e[E_POS],  e[E_LEN], e[E_PAYLOAD],
					    e[E_ENTER], e[E_EXIT], e[E_SEQ],  e[E_TID], e[E_TASK],
					    e[E_TAIL],	    e[E_TLS],  stats};
			int took = 0; /* a datagram with its peer: on_data's */
			if (e[E_PEER] == Py_None) {
				PyObject *r = PyObject_Vectorcall(fast_data, argv, 13, NULL);
				took = r ? PyObject_IsTrue(r) : -1;
				Py_XDECREF(r);
			}
			if (took < 0) {
				err = 1;
			} else if (!took) {
				PyObject *argv2[] = {conn,	  e[E_DIR],  e[E_POS],	e[E_LEN],
						     e[E_PAYLOAD], e[E_ENTER], e[E_EXIT], e[E_SEQ],
						     registry,	  stats,     e[E_TID],	e[E_TASK],
						     e[E_TAIL],	  e[E_TLS],  e[E_PEER]};
				err = call_discard(PyObject_VectorcallMethod(
					s_on_data, argv2, 15 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL));
			}
		}
		if (!err)
			err = after_step(conn, e, touched, to_mute, last_read);
		Py_DECREF(ev);
		Py_DECREF(conn);
		if (err)
			goto out;
	}
	result = Py_BuildValue("(nL)", i, payload_bytes);
out:
	for (int k = 0; k < 7; k++)
		Py_XDECREF(*dst[k]);
	return result;
}

static PyMethodDef table_methods[] = {
	{"data_run", (PyCFunction)(void (*)(void))data_run, METH_FASTCALL,
	 "data_run(table, events, start) -> (stop, payload_bytes): ConnTable.handle's loop over "
	 "the usual data events from start, up to the first event it leaves to the reference"},
	{"setup", setup, METH_VARARGS, "setup(DataEvent, LastRead, INGRESS, LAST_READ_THREADS)"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef table_module = {
	PyModuleDef_HEAD_INIT, "otel_ebpf._fast.table",
	"The connection table's loop over the usual data events in C; "
	"otel_ebpf/conntrack/table.py is the reference.",
	-1, table_methods,
};

PyMODINIT_FUNC PyInit_table(void)
{
	struct {
		PyObject **dst;
		const char *s;
	} names[] = {
		{&s_move_to_end, "move_to_end"}, {&s_on_data, "on_data"},
		{&s_popitem, "popitem"},	 {&s_unparsed, "unparsed"},
		{&s_muted, "muted"},		 {&s_last, "last"},
		{&a_conns, "conns"},		 {&a_touched, "touched"},
		{&a_to_mute, "to_mute"},	 {&a_last_read, "last_read"},
		{&a_fast_data, "fast_data"},	 {&a_stats, "stats"},
		{&a_registry, "registry"},
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!(*names[i].dst = PyUnicode_InternFromString(names[i].s)))
			return NULL;
	return PyModule_Create(&table_module);
}
