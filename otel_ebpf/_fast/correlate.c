/* SPDX-License-Identifier: Apache-2.0 */
/* The correlator's per-frame and per-span steps for the usual request, in C.
 *
 * observe(correlator, observed, now_ns) -> None
 * on_spans(correlator, spans, now_ns) -> list of the spans whose IDs are settled
 *
 * What otel_ebpf/correlate/joiner.py Correlator.observe and the loop of Correlator.on_spans
 * do (the reference), for the usual case: a frame of a stream connection whose request
 * carries no correlation headers, written outside any asyncio task; a span whose request
 * has no links to resolve and needs no derived link. Everything else is handed, whole and
 * before anything is changed, to the reference's own method for that one item
 * (Correlator._birth, _frame, _server_answers, _parent_in_process, _settle, _span), so the
 * tables, the order of their entries and the random draws stay the reference's.
 *
 * The Correlator stays a Python object: its tables (OrderedDicts, defaultdicts, lists) are
 * read from its attributes once per call and changed through the same container
 * operations the reference uses (an OrderedDict's items are set and deleted through its
 * mapping protocol, so its order is kept). Frames, requests, spans and connection infos
 * are read by slot (slots.h): exact classes (a Frame subclass whose fields are the base's
 * own slots), anything else goes to the reference.
 */
#include "slots.h"

static PyTypeObject *req_type, *info_type, *frame_type, *span_type, *task_new_type;
static PyObject *new_request;	     /* joiner._new_request (a maker) */
static PyObject *getrandbits;	     /* random.getrandbits */
static PyObject *random_id;	     /* correlate.ids.random_id (the reference's redraw) */
static PyObject *egress, *ingress, *client, *server; /* Direction / Role members */
static PyObject *attribute;	     /* "otel_ebpf.correlation" */
static PyObject *frame_ok;	     /* {frame class: True} checked to use Frame's slots */
static PyObject *s_wire, *s_thread, *s_sole, *s_datagram, *s_pipe;
static PyObject *m_birth, *m_frame, *m_answers, *m_in_process, *m_settle, *m_span, *m_evict;
static PyObject *a_requests, *a_clients, *a_waiting, *a_open, *a_unanswered, *a_max,
	*a_held, *a_decided;

enum { I_PID, I_FD, I_GEN, I_ROLE, I_TRANSPORT, I_FAMILY, I_LADDR, I_LPORT, I_RADDR, I_RPORT,
       I_NAT, I_N };
static struct slot info_slots[I_N] = {
	{"pid"},	{"fd"},		{"generation"},	 {"role"},	  {"transport"},
	{"family"},	{"local_addr"}, {"local_port"},	 {"remote_addr"}, {"remote_port"},
	{"nat"}};
enum { F_DIRECTION, F_START, F_END, F_POS, F_SEQ, F_TID, F_TASK, F_EXCHANGE, F_CARRIER, F_N };
static struct slot frame_slots[F_N] = {
	{"direction"}, {"start_ns"}, {"end_ns"},   {"stream_pos"}, {"tcp_seq"},
	{"tid"},       {"task"},     {"exchange"}, {"carrier"}};
enum { R_SPAN_ID, R_CONN_KEY, R_POS, R_PID, R_TID, R_TASK, R_EXCHANGE, R_ROLE, R_START,
       R_READY, R_DONE, R_WIRE_KEY, R_PARENT, R_REMOTE, R_TRACE, R_EVIDENCE, R_DECIDED,
       R_MATCHED, R_LINKS, R_N };
static struct slot req_slots[R_N] = {
	{"span_id"},   {"conn_key"},	  {"stream_pos"}, {"pid"},	{"tid"},
	{"task"},      {"exchange"},	  {"role"},	  {"start_ns"}, {"ready_ns"},
	{"done_ns"},   {"wire_key"},	  {"parent"},	  {"remote_parent"},
	{"trace_id"},  {"evidence"},	  {"decided"},	  {"matched"},	{"links"}};
enum { N_CONN, N_ATTRS, N_REQ_POS, N_TRACE, N_SPAN_ID, N_PARENT, N_MESSAGE, N_N };
static struct slot span_slots[N_N] = {
	{"conn"},    {"attributes"},	 {"request_pos"},   {"trace_id"},
	{"span_id"}, {"parent_span_id"}, {"message_id"}};

#define MAX_DEPTH 64 /* joiner.MAX_DEPTH */

static PyObject *setup(PyObject *self, PyObject *args)
{
	PyObject *req, *info, *frame, *span, *task_new, *maker, *bits, *rid, *eg, *in, *cl, *sv,
		*attr;
	if (!PyArg_ParseTuple(args, "O!O!O!O!O!OOOOOOOU", &PyType_Type, &req, &PyType_Type, &info,
			      &PyType_Type, &frame, &PyType_Type, &span, &PyType_Type, &task_new,
			      &maker, &bits, &rid, &eg, &in, &cl, &sv, &attr))
		return NULL;
	if (slots_of(req, req_slots, R_N) || slots_of(info, info_slots, I_N) ||
	    slots_of(frame, frame_slots, F_N) || slots_of(span, span_slots, N_N))
		return NULL;
	PyObject **keep[] = {(PyObject **)&req_type, (PyObject **)&info_type,
			     (PyObject **)&frame_type, (PyObject **)&span_type,
			     (PyObject **)&task_new_type, &new_request,
			     &getrandbits, &random_id, &egress, &ingress, &client, &server,
			     &attribute};
	PyObject *values[] = {req,  info, frame, span, task_new, maker, bits,
			      rid,  eg,	  in,	 cl,   sv,	 attr};
	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
		Py_INCREF(values[i]);
		Py_XSETREF(*keep[i], values[i]);
	}
	Py_XSETREF(frame_ok, PyDict_New());
	if (!frame_ok)
		return NULL;
	Py_RETURN_NONE;
}

/* 1 when a frame of this class keeps Frame's fields in Frame's slots (no property or
 * other descriptor of a subclass in their place), 0 when not, -1 on error */
static int frame_class_ok(PyTypeObject *t)
{
	if (t == frame_type)
		return 1;
	PyObject *known = PyDict_GetItemWithError(frame_ok, (PyObject *)t);
	if (known)
		return known == Py_True;
	if (PyErr_Occurred())
		return -1;
	int ok = PyType_IsSubtype(t, frame_type);
	for (int i = 0; ok && i < F_N; i++) {
		PyObject *mine = PyObject_GetAttrString((PyObject *)t, frame_slots[i].name);
		PyObject *base = PyObject_GetAttrString((PyObject *)frame_type, frame_slots[i].name);
		ok = mine && base && mine == base;
		Py_XDECREF(mine);
		Py_XDECREF(base);
		if (PyErr_Occurred())
			return -1;
	}
	if (PyDict_SetItem(frame_ok, (PyObject *)t, ok ? Py_True : Py_False))
		return -1;
	return ok;
}

/* the correlator's tables, read once per call (new references) */
struct tables {
	PyObject *requests, *clients, *waiting, *open, *unanswered, *held, *decided;
	Py_ssize_t max;
};

static void tables_clear(struct tables *t)
{
	Py_CLEAR(t->requests);
	Py_CLEAR(t->clients);
	Py_CLEAR(t->waiting);
	Py_CLEAR(t->open);
	Py_CLEAR(t->unanswered);
	Py_CLEAR(t->held);
	Py_CLEAR(t->decided);
}

/* -1 with an error set; the tables must be dicts (OrderedDict, defaultdict) and lists */
static int tables_of(PyObject *c, struct tables *t)
{
	memset(t, 0, sizeof(*t));
	PyObject **dst[] = {&t->requests, &t->clients, &t->waiting, &t->open, &t->unanswered,
			    &t->held, &t->decided};
	PyObject *names[] = {a_requests, a_clients, a_waiting, a_open, a_unanswered, a_held,
			     a_decided};
	for (int i = 0; i < 7; i++) {
		*dst[i] = PyObject_GetAttr(c, names[i]);
		if (!*dst[i])
			goto fail;
		int ok = i == 5 ? PyList_CheckExact(*dst[i]) : PyDict_Check(*dst[i]);
		if (!ok) {
			PyErr_Format(PyExc_TypeError, "correlator.%U is not what the C step reads",
				     names[i]);
			goto fail;
		}
	}
	PyObject *max = PyObject_GetAttr(c, a_max);
	if (!max)
		goto fail;
	t->max = PyLong_AsSsize_t(max);
	Py_DECREF(max);
	if (t->max == -1 && PyErr_Occurred())
		goto fail;
	return 0;
fail:
	tables_clear(t);
	return -1;
}

/* what the reference's method answers for this item (new reference), NULL on error */
static PyObject *call_method(PyObject *c, PyObject *name, PyObject *a, PyObject *b,
			     PyObject *d)
{
	PyObject *argv[] = {c, a, b, d};
	size_t n = 2 + (b != NULL) + (d != NULL);
	return PyObject_VectorcallMethod(name, argv, n | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
}

static int discard(PyObject *result)
{
	if (!result)
		return -1;
	Py_DECREF(result);
	return 0;
}

/* dict.pop(key, None) on a dict or an OrderedDict: the value (new reference), NULL with
 * no error when absent, NULL with an error set on failure */
static PyObject *pop_item(PyObject *d, PyObject *key)
{
	PyObject *v = PyDict_GetItemWithError(d, key);
	if (!v)
		return NULL;
	Py_INCREF(v);
	if (PyObject_DelItem(d, key)) {
		Py_DECREF(v);
		return NULL;
	}
	return v;
}

/* d[key] of a defaultdict of dicts/lists, made (as the defaultdict would) when missing;
 * borrowed */
static PyObject *default_item(PyObject *d, PyObject *key, int list)
{
	PyObject *v = PyDict_GetItemWithError(d, key);
	if (v || PyErr_Occurred())
		return v;
	v = list ? PyList_New(0) : PyDict_New();
	if (!v)
		return NULL;
	int err = PyDict_SetItem(d, key, v);
	Py_DECREF(v);
	return err ? NULL : v;
}

static PyObject *id_of(PyObject *o)
{
	return PyLong_FromVoidPtr(o);
}

static int set_bool(PyObject *o, const struct slot *s, int v)
{
	slot_set(o, s, v ? Py_True : Py_False);
	return 0;
}

/* ---- frames ------------------------------------------------------------------------ */

/* Correlator._server_answers; 1 done, 0 for the reference, -1 error */
static int server_answers(struct tables *t, PyObject *key, long long exchange,
			  PyObject *start_ns)
{
	PyObject *waiting = PyDict_GetItemWithError(t->unanswered, key);
	if (!waiting)
		return PyErr_Occurred() ? -1 : 1;
	if (!PyList_CheckExact(waiting))
		return 0;
	Py_ssize_t n = PyList_GET_SIZE(waiting);
	for (Py_ssize_t i = 0; i < n; i++) {
		if (!Py_IS_TYPE(PyList_GET_ITEM(waiting, i), req_type))
			return 0;
	}
	for (Py_ssize_t i = 0; i < n; i++) {
		PyObject *req = PyList_GET_ITEM(waiting, i);
		long long ex;
		if (exchange >= 0) {
			if (ll_of(slot_get(req, &req_slots[R_EXCHANGE]), &ex))
				return 0;
			if (ex != exchange)
				continue;
		}
		slot_set(req, &req_slots[R_DONE], start_ns);
		if (PyList_SetSlice(waiting, i, i + 1, NULL))
			return -1;
		if (PyList_GET_SIZE(waiting) == 0 && PyObject_DelItem(t->unanswered, key))
			return -1;
		return 1;
	}
	return 1;
}

/* Correlator._parent_in_process without task evidence (req.task is 0): 1 done, 0 for the
 * reference (an ambiguous parent is counted there), -1 error */
static int parent_in_process(struct tables *t, PyObject *req, PyObject *pid)
{
	PyObject *reqs = PyDict_GetItemWithError(t->open, pid);
	if (!reqs)
		return PyErr_Occurred() ? -1 : 1;
	if (!PyDict_CheckExact(reqs))
		return 0;
	long long start, tid;
	if (ll_of(slot_get(req, &req_slots[R_START]), &start) ||
	    ll_of(slot_get(req, &req_slots[R_TID]), &tid))
		return 0;
	Py_ssize_t pos = 0, candidates = 0, same = 0;
	PyObject *k, *s, *only = NULL, *mine = NULL;
	while (PyDict_Next(reqs, &pos, &k, &s)) {
		long long ready, done, stid;
		if (!Py_IS_TYPE(s, req_type) || ll_of(slot_get(s, &req_slots[R_READY]), &ready) ||
		    ll_of(slot_get(s, &req_slots[R_DONE]), &done) ||
		    ll_of(slot_get(s, &req_slots[R_TID]), &stid))
			return 0;
		if (!(ready <= start && start < done))
			continue;
		if (candidates++ == 0)
			only = s;
		if (stid == tid && same++ == 0)
			mine = s;
	}
	if (candidates == 0)
		return 1;
	if (same == 1) {
		slot_set(req, &req_slots[R_PARENT], mine);
		slot_set(req, &req_slots[R_EVIDENCE], s_thread);
		return 1;
	}
	if (same == 0 && candidates == 1) {
		slot_set(req, &req_slots[R_PARENT], only);
		slot_set(req, &req_slots[R_EVIDENCE], s_sole);
		return 1;
	}
	return 0; /* ambiguous: the reference says so and counts it */
}

/* a request's span ID: random_id(8) with the reference's draw */
static PyObject *span_id_draw(void)
{
	PyObject *bits = PyObject_CallFunction(getrandbits, "i", 64);
	if (!bits)
		return NULL;
	unsigned long long v = PyLong_AsUnsignedLongLong(bits);
	Py_DECREF(bits);
	if (v == (unsigned long long)-1 && PyErr_Occurred())
		return NULL;
	if (!v)
		return PyObject_CallFunction(random_id, "i", 8);
	unsigned char b[8];
	for (int i = 7; i >= 0; i--, v >>= 8)
		b[i] = (unsigned char)v;
	return PyBytes_FromStringAndSize((const char *)b, 8);
}

/* one (conn, frame) of observe: 1 done, 0 for the reference's _frame, -1 error */
static int frame_step(PyObject *c, struct tables *t, PyObject *conn, PyObject *frame,
		      PyObject *now)
{
	if (!Py_IS_TYPE(conn, info_type))
		return 0;
	int ok = frame_class_ok(Py_TYPE(frame));
	if (ok <= 0)
		return ok;
	PyObject *v[I_N];
	for (int i = 0; i < I_N; i++)
		if (!(v[i] = slot_get(conn, &info_slots[i])))
			return 0;
	PyObject *f[F_N];
	for (int i = 0; i < F_N; i++)
		if (!(f[i] = slot_get(frame, &frame_slots[i])))
			return 0;
	if (!PyUnicode_CheckExact(v[I_TRANSPORT]) || !PyUnicode_CheckExact(v[I_FAMILY]))
		return 0;
	if (PyUnicode_Compare(v[I_TRANSPORT], s_datagram) == 0 ||
	    PyUnicode_Compare(v[I_FAMILY], s_pipe) == 0)
		return PyErr_Occurred() ? -1 : 1; /* messages, not requests */
	PyObject *role = v[I_ROLE], *dir = f[F_DIRECTION];
	if ((role != client && role != server) || (dir != egress && dir != ingress))
		return 0;
	int is_request = (dir == egress) == (role == client);
	PyObject *conn_key = PyTuple_Pack(3, v[I_PID], v[I_FD], v[I_GEN]);
	if (!conn_key)
		return -1;
	int rc = 0;
	PyObject *wire = NULL, *span_id = NULL, *req = NULL, *rkey = NULL;
	if (!is_request) {
		if (role == server) {
			long long exchange;
			if (ll_of(f[F_EXCHANGE], &exchange))
				goto out;
			rc = server_answers(t, conn_key, exchange, f[F_START]);
			if (rc == 0) {
				rc = discard(call_method(c, m_answers, conn, frame, NULL)) ? -1 : 1;
			}
		} else {
			rc = 1;
		}
		goto out;
	}
	/* the reference reads the carrier (traceparent, correlation IDs) and the task */
	PyObject *carrier = f[F_CARRIER];
	long long task;
	if (!PyDict_CheckExact(carrier) || PyDict_GET_SIZE(carrier) != 0 ||
	    ll_of(f[F_TASK], &task))
		goto out;
	int rport = PyObject_IsTrue(v[I_RPORT]);
	if (rport < 0) {
		rc = -1;
		goto out;
	}
	if (f[F_SEQ] == Py_None || !rport) {
		wire = Py_NewRef(Py_None);
	} else if (role == server) {
		wire = PyTuple_Pack(5, v[I_RADDR], v[I_RPORT], v[I_LADDR], v[I_LPORT], f[F_SEQ]);
	} else if (v[I_NAT] != Py_None) { /* the connection as the server sees it (NAT) */
		PyObject *nat = v[I_NAT];
		if (!PyTuple_CheckExact(nat) || PyTuple_GET_SIZE(nat) != 4)
			goto out; /* the reference's */
		wire = PyTuple_Pack(5, PyTuple_GET_ITEM(nat, 0), PyTuple_GET_ITEM(nat, 1),
				    PyTuple_GET_ITEM(nat, 2), PyTuple_GET_ITEM(nat, 3), f[F_SEQ]);
	} else {
		wire = PyTuple_Pack(5, v[I_LADDR], v[I_LPORT], v[I_RADDR], v[I_RPORT], f[F_SEQ]);
	}
	rc = -1;
	if (!wire || !(span_id = span_id_draw()))
		goto out;
	PyObject *argv[] = {span_id,	 conn_key,     f[F_POS],      v[I_PID], f[F_TID],
			    f[F_TASK],	 f[F_EXCHANGE], role,	      f[F_START], f[F_END],
			    now,	 wire,		carrier};
	req = PyObject_Vectorcall(new_request, argv, 13, NULL);
	if (!req)
		goto out;
	if (!Py_IS_TYPE(req, req_type)) {
		PyErr_SetString(PyExc_TypeError, "correlate: the request maker made another class");
		goto out;
	}
	if (!(rkey = PyTuple_Pack(2, conn_key, f[F_POS])) ||
	    PyObject_SetItem(t->requests, rkey, req))
		goto out;
	if (PyDict_GET_SIZE(t->requests) > t->max &&
	    discard(PyObject_CallMethodNoArgs(c, m_evict)))
		goto out;
	if (role == server) { /* Correlator._server_request */
		PyObject *reqs = default_item(t->open, v[I_PID], 0);
		PyObject *ident = reqs ? id_of(req) : NULL;
		int err = !ident || PyObject_SetItem(reqs, ident, req);
		Py_XDECREF(ident);
		if (err)
			goto out;
		PyObject *waiting = default_item(t->unanswered, conn_key, 1);
		if (!waiting || PyList_Append(waiting, req))
			goto out;
		if (wire != Py_None) {
			PyObject *cl = pop_item(t->clients, wire);
			if (cl) {
				set_bool(cl, &req_slots[R_MATCHED], 1);
				slot_set(req, &req_slots[R_PARENT], cl);
				slot_set(req, &req_slots[R_EVIDENCE], s_wire);
				Py_DECREF(cl);
			} else if (PyErr_Occurred()) {
				goto out;
			} else {
				set_bool(req, &req_slots[R_DECIDED], 0);
				if (PyObject_SetItem(t->waiting, wire, req))
					goto out;
			}
		}
	} else { /* Correlator._client_request */
		int done = task ? 0 : parent_in_process(t, req, v[I_PID]);
		if (done < 0 || (done == 0 &&
				 discard(call_method(c, m_in_process, req, NULL, NULL))))
			goto out;
		if (wire != Py_None) {
			PyObject *sv = pop_item(t->waiting, wire);
			if (sv) {
				set_bool(req, &req_slots[R_MATCHED], 1);
				slot_set(sv, &req_slots[R_PARENT], req);
				slot_set(sv, &req_slots[R_EVIDENCE], s_wire);
				set_bool(sv, &req_slots[R_DECIDED], 1);
				Py_DECREF(sv);
			} else if (PyErr_Occurred()) {
				goto out;
			} else if (PyObject_SetItem(t->clients, wire, req)) {
				goto out;
			}
		}
	}
	rc = 1;
out:
	Py_DECREF(conn_key);
	Py_XDECREF(wire);
	Py_XDECREF(span_id);
	Py_XDECREF(req);
	Py_XDECREF(rkey);
	return rc;
}

static PyObject *observe(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 3 || !PyList_CheckExact(args[1])) {
		PyErr_SetString(PyExc_TypeError, "observe(correlator, observed: list, now_ns)");
		return NULL;
	}
	PyObject *c = args[0], *observed = args[1], *now = args[2];
	struct tables t;
	if (tables_of(c, &t))
		return NULL;
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(observed); i++) {
		PyObject *pair = PyList_GET_ITEM(observed, i);
		if (!PyTuple_CheckExact(pair) || PyTuple_GET_SIZE(pair) != 2) {
			PyErr_SetString(PyExc_TypeError, "observe: (first, second) pairs");
			goto fail;
		}
		PyObject *first = PyTuple_GET_ITEM(pair, 0), *second = PyTuple_GET_ITEM(pair, 1);
		Py_INCREF(pair); /* the reference's method may change the list */
		int rc = 0;
		if (Py_IS_TYPE(first, task_new_type)) /* a task birth: the reference's */
			rc = discard(call_method(c, m_birth, first, second, NULL)) ? -1 : 1;
		else if (Py_IS_TYPE(first, info_type))
			rc = frame_step(c, &t, first, second, now);
		if (rc == 0) /* a frame the reference takes */
			rc = discard(call_method(c, m_frame, first, second, now)) ? -1 : 1;
		Py_DECREF(pair);
		if (rc < 0)
			goto fail;
	}
	tables_clear(&t);
	Py_RETURN_NONE;
fail:
	tables_clear(&t);
	return NULL;
}

/* ---- spans ------------------------------------------------------------------------- */

/* Correlator._close_server for a server request; -1 error */
static int close_server(struct tables *t, PyObject *req)
{
	PyObject *pid = slot_get(req, &req_slots[R_PID]);
	PyObject *conn_key = slot_get(req, &req_slots[R_CONN_KEY]);
	PyObject *reqs = PyDict_GetItemWithError(t->open, pid);
	if (reqs) {
		PyObject *ident = id_of(req);
		if (!ident)
			return -1;
		Py_INCREF(reqs);
		PyObject *gone = pop_item(reqs, ident);
		Py_DECREF(ident);
		int err = !gone && PyErr_Occurred();
		if (gone && PyObject_Length(reqs) == 0 && PyObject_DelItem(t->open, pid))
			err = 1;
		Py_XDECREF(gone);
		Py_DECREF(reqs);
		if (err)
			return -1;
	} else if (PyErr_Occurred()) {
		return -1;
	}
	PyObject *waiting = PyDict_GetItemWithError(t->unanswered, conn_key);
	if (!waiting)
		return PyErr_Occurred() ? -1 : 0;
	if (!PyList_CheckExact(waiting)) {
		PyErr_SetString(PyExc_TypeError, "correlate: unanswered holds lists");
		return -1;
	}
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(waiting); i++) {
		if (PyList_GET_ITEM(waiting, i) == req) { /* Request compares by identity */
			if (PyList_SetSlice(waiting, i, i + 1, NULL))
				return -1;
			if (PyList_GET_SIZE(waiting) == 0 && PyObject_DelItem(t->unanswered, conn_key))
				return -1;
			break;
		}
	}
	return 0;
}

/* _trace_of: the trace (borrowed) or NULL while an ancestor waits; -1 in *err on error, 0
 * for the reference (an object of another class in the chain) */
static PyObject *trace_of(PyObject *req, int *err)
{
	PyObject *r = req;
	for (int i = 0; i < MAX_DEPTH; i++) {
		PyObject *remote = slot_get(r, &req_slots[R_REMOTE]);
		if (remote != Py_None) {
			if (!remote || !PyTuple_CheckExact(remote) || PyTuple_GET_SIZE(remote) != 2) {
				*err = 0;
				return NULL;
			}
			return PyTuple_GET_ITEM(remote, 0);
		}
		PyObject *decided = slot_get(r, &req_slots[R_DECIDED]);
		if (decided != Py_True) {
			*err = decided == Py_False ? 1 : 0;
			return NULL;
		}
		PyObject *parent = slot_get(r, &req_slots[R_PARENT]);
		if (parent == Py_None)
			break;
		if (!parent || !Py_IS_TYPE(parent, req_type)) {
			*err = 0;
			return NULL;
		}
		r = parent;
	}
	PyObject *trace = slot_get(r, &req_slots[R_TRACE]);
	if (!trace || !PyBytes_CheckExact(trace)) {
		*err = 0;
		return NULL;
	}
	if (PyBytes_GET_SIZE(trace) == 0) {
		/* random_id(16): a draw of 128 bits, redrawn by the reference when zero */
		PyObject *bits = PyObject_CallFunction(getrandbits, "i", 128), *id = NULL;
		if (!bits) {
			*err = -1;
			return NULL;
		}
		int zero = !PyObject_IsTrue(bits);
		if (zero) {
			id = PyObject_CallFunction(random_id, "i", 16);
		} else {
			unsigned char b[16];
#if PY_VERSION_HEX >= 0x030D0000
			int bad = _PyLong_AsByteArray((PyLongObject *)bits, b, 16, 0, 0, 1);
#else
			int bad = _PyLong_AsByteArray((PyLongObject *)bits, b, 16, 0, 0);
#endif
			if (!bad)
				id = PyBytes_FromStringAndSize((const char *)b, 16);
		}
		Py_DECREF(bits);
		if (!id) {
			*err = -1;
			return NULL;
		}
		slot_set(r, &req_slots[R_TRACE], id);
		Py_DECREF(id);
		trace = slot_get(r, &req_slots[R_TRACE]);
	}
	return trace;
}

/* Correlator._settle without links: 1 settled, 2 waits (held), 0 for the reference's
 * _settle, -1 error */
static int settle(struct tables *t, PyObject *span, PyObject *req)
{
	PyObject *links = slot_get(req, &req_slots[R_LINKS]);
	PyObject *role = slot_get(req, &req_slots[R_ROLE]);
	PyObject *remote = slot_get(req, &req_slots[R_REMOTE]);
	PyObject *wire = slot_get(req, &req_slots[R_WIRE_KEY]);
	PyObject *matched = slot_get(req, &req_slots[R_MATCHED]);
	PyObject *evidence = slot_get(req, &req_slots[R_EVIDENCE]);
	PyObject *parent = slot_get(req, &req_slots[R_PARENT]);
	PyObject *attrs = slot_get(span, &span_slots[N_ATTRS]);
	if (!links || !PyList_CheckExact(links) || PyList_GET_SIZE(links) || !role || !remote ||
	    !wire || !matched || !evidence || !PyUnicode_CheckExact(evidence) || !parent ||
	    !attrs || !PyDict_CheckExact(attrs))
		return 0;
	/* a client request never matched here gets a derived link: the reference makes it */
	if (role == client && matched != Py_True && wire != Py_None && remote == Py_None)
		return 0;
	if (parent != Py_None && !Py_IS_TYPE(parent, req_type))
		return 0;
	int err = 0;
	PyObject *trace = trace_of(req, &err);
	if (!trace)
		return err < 0 ? -1 : err == 1 ? 2 : 0;
	PyObject *parent_id = NULL;
	if (parent != Py_None) {
		parent_id = slot_get(parent, &req_slots[R_SPAN_ID]);
	} else if (remote != Py_None) {
		if (!PyTuple_CheckExact(remote) || PyTuple_GET_SIZE(remote) != 2)
			return 0;
		parent_id = PyTuple_GET_ITEM(remote, 1);
	}
	PyObject *span_id = slot_get(req, &req_slots[R_SPAN_ID]);
	if (!span_id || (parent != Py_None && !parent_id))
		return 0;
	slot_set(span, &span_slots[N_TRACE], trace);
	slot_set(span, &span_slots[N_SPAN_ID], span_id);
	if (parent_id)
		slot_set(span, &span_slots[N_PARENT], parent_id);
	if (PyUnicode_GET_LENGTH(evidence)) {
		if (PyDict_SetItem(attrs, attribute, evidence))
			return -1;
		PyObject *n = PyDict_GetItemWithError(t->decided, evidence);
		long long count = 0;
		if (n) {
			if (ll_of(n, &count)) {
				PyErr_SetString(PyExc_TypeError, "correlate: decided holds counts");
				return -1;
			}
		} else if (PyErr_Occurred()) {
			return -1;
		}
		PyObject *m = PyLong_FromLongLong(count + 1);
		if (!m || PyDict_SetItem(t->decided, evidence, m)) {
			Py_XDECREF(m);
			return -1;
		}
		Py_DECREF(m);
	}
	return 1;
}

/* one span of on_spans: 1 done, 0 for the reference's _span, -1 error */
static int span_step(PyObject *c, struct tables *t, PyObject *span, PyObject *ready)
{
	if (!Py_IS_TYPE(span, span_type))
		return 0;
	PyObject *message = slot_get(span, &span_slots[N_MESSAGE]);
	PyObject *pos = slot_get(span, &span_slots[N_REQ_POS]);
	PyObject *conn = slot_get(span, &span_slots[N_CONN]);
	if (!message || !PyUnicode_CheckExact(message) || PyUnicode_GET_LENGTH(message) || !pos)
		return 0;
	if (pos == Py_None)
		return PyList_Append(ready, span) ? -1 : 1;
	if (!conn || !Py_IS_TYPE(conn, info_type))
		return 0;
	PyObject *pid = slot_get(conn, &info_slots[I_PID]), *fd = slot_get(conn, &info_slots[I_FD]),
		 *gen = slot_get(conn, &info_slots[I_GEN]);
	if (!pid || !fd || !gen)
		return 0;
	PyObject *key = Py_BuildValue("((OOO)O)", pid, fd, gen, pos);
	if (!key)
		return -1;
	PyObject *req = pop_item(t->requests, key);
	Py_DECREF(key);
	if (!req) {
		if (PyErr_Occurred())
			return -1;
		return PyList_Append(ready, span) ? -1 : 1; /* nothing seen of its request */
	}
	int rc = -1;
	if (!Py_IS_TYPE(req, req_type)) {
		PyErr_SetString(PyExc_TypeError, "correlate: requests holds Request objects");
		goto out;
	}
	if (slot_get(req, &req_slots[R_ROLE]) == server && close_server(t, req))
		goto out;
	int s = settle(t, span, req);
	if (s == 0) { /* the reference's _settle, on what it would be given */
		PyObject *r = call_method(c, m_settle, span, req, NULL);
		if (!r)
			goto out;
		s = PyObject_IsTrue(r) ? 1 : 2;
		Py_DECREF(r);
	}
	if (s < 0)
		goto out;
	if (s == 1) {
		rc = PyList_Append(ready, span) ? -1 : 1;
	} else {
		PyObject *pair = PyTuple_Pack(2, span, req);
		rc = (!pair || PyList_Append(t->held, pair)) ? -1 : 1;
		Py_XDECREF(pair);
	}
out:
	Py_DECREF(req);
	return rc;
}

static PyObject *on_spans(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 3 || !PyList_CheckExact(args[1])) {
		PyErr_SetString(PyExc_TypeError, "on_spans(correlator, spans: list, now_ns)");
		return NULL;
	}
	PyObject *c = args[0], *spans = args[1];
	struct tables t;
	if (tables_of(c, &t))
		return NULL;
	PyObject *ready = PyList_New(0);
	if (!ready)
		goto fail;
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(spans); i++) {
		PyObject *span = PyList_GET_ITEM(spans, i);
		Py_INCREF(span);
		int rc = span_step(c, &t, span, ready);
		if (rc == 0)
			rc = discard(call_method(c, m_span, span, ready, NULL)) ? -1 : 1;
		Py_DECREF(span);
		if (rc < 0)
			goto fail;
	}
	tables_clear(&t);
	return ready;
fail:
	Py_XDECREF(ready);
	tables_clear(&t);
	return NULL;
}

static PyMethodDef correlate_methods[] = {
	{"observe", (PyCFunction)(void (*)(void))observe, METH_FASTCALL,
	 "observe(correlator, observed, now_ns): Correlator.observe's loop, the usual frames in "
	 "C, everything else through the correlator's own methods"},
	{"on_spans", (PyCFunction)(void (*)(void))on_spans, METH_FASTCALL,
	 "on_spans(correlator, spans, now_ns) -> the spans settled now (Correlator.on_spans' "
	 "loop; the caller adds what expire() releases)"},
	{"setup", setup, METH_VARARGS,
	 "setup(Request, ConnInfo, Frame, NeutralSpan, TaskNew, new_request, getrandbits, "
	 "random_id, "
	 "EGRESS, INGRESS, CLIENT, SERVER, attribute)"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef correlate_module = {
	PyModuleDef_HEAD_INIT, "otel_ebpf._fast.correlate",
	"The correlator's usual frames and spans in C; otel_ebpf/correlate/joiner.py is the "
	"reference.",
	-1, correlate_methods,
};

PyMODINIT_FUNC PyInit_correlate(void)
{
	struct {
		PyObject **dst;
		const char *s;
	} names[] = {
		{&s_wire, "wire"},	       {&s_thread, "thread"},
		{&s_sole, "sole_request"},     {&s_datagram, "datagram"},
		{&s_pipe, "pipe"},
		{&m_birth, "_birth"},	       {&m_frame, "_frame"},
		{&m_answers, "_server_answers"}, {&m_in_process, "_parent_in_process"},
		{&m_settle, "_settle"},	       {&m_span, "_span"},
		{&m_evict, "_evict"},	       {&a_requests, "requests"},
		{&a_clients, "clients"},       {&a_waiting, "waiting"},
		{&a_open, "open"},	       {&a_unanswered, "unanswered"},
		{&a_max, "max_requests"},      {&a_held, "held"},
		{&a_decided, "decided"},
	};
	for (size_t i = 0; i < sizeof(names) / sizeof(names[0]); i++)
		if (!(*names[i].dst = PyUnicode_InternFromString(names[i].s)))
			return NULL;
	return PyModule_Create(&correlate_module);
}
