/* SPDX-License-Identifier: Apache-2.0 */
/* HTTP/2 streams paired into records, and a gRPC call's record into its span, in C.
 *
 * pair(requests, responses, now_ns, state, timeout_ns) -> list | None
 *   protocols/http2/stitch.py pair (the reference): each frame's lead settled (_settle),
 *   requests kept by stream id, each response met with its request in a record. Where a
 *   waiting request may have ended without an answer (a reset, a GOAWAY, the close, a
 *   timeout, more than the stream table holds) the reference's own _expire decides, as
 *   pair calls it. None, with nothing changed, when a frame is not an exact H2Request /
 *   H2Response with int fields of 64 bits: the caller runs the reference.
 *
 * span(record, conn) -> NeutralSpan | None
 *   protocols/http2/spans.py to_spans (the reference) for the usual gRPC call: an answer
 *   with a grpc-status the code table names and no grpc-message, a request whose
 *   content-type is application/grpc (or application/grpc+ a lower-case suffix), no layer.
 *   The name and first attributes are the reference's _grpc_head's (kept here for the last
 *   connection, path and authority, as it keeps them), then the message counts, the status
 *   code and the error type in the reference's order. None for every other record: the
 *   caller runs the reference.
 *
 * Objects are read by slot (slots.h), their exact classes checked first. */
#include "slots.h"

static PyTypeObject *record_type, *request_type, *response_type, *state_type, *messages_type,
	*info_type;
static PyObject *new_record, *new_span, *grpc_head, *expire, *role_server, *kind_server,
	*kind_client, *status_unset, *status_error, *codes, *server_errors, *protocol,
	*empty_str, *s_pop, *k_req_count, *k_req_size, *k_resp_count, *k_resp_size, *k_status,
	*k_error;

/* the fields both H2Request and H2Response have, then each one's own */
enum { F_STREAM_ID, F_HEAD, F_MARK, F_EPOCH, F_HEAD_EPOCH, F_STREAM_POS, F_TCP_SEQ, F_START_NS,
       F_END_NS, F_TID, F_TASK, F_EXACT, F_MESSAGES, F_DATA_SIZE, F_ENDED, F_COMMON };
#define COMMON_NAMES                                                                          \
	{"stream_id"}, {"head"}, {"mark"}, {"epoch"}, {"head_epoch"}, {"stream_pos"},          \
		{"tcp_seq"}, {"start_ns"}, {"end_ns"}, {"tid"}, {"task"}, {"exact"},           \
		{"messages"}, {"data_size"}, {"ended"}
enum { Q_RESET = F_COMMON, Q_REFUSED, Q_STALE, Q_RESPONSE_STARTED, Q_LAYER, Q_CONTENT_TYPE,
       Q_PATH, Q_AUTHORITY, Q_N };
static struct slot request_slots[Q_N] = {COMMON_NAMES,	{"reset"}, {"refused"},
					 {"stale"},	{"response_started"},
					 {"layer"},	{"content_type"},
					 {"path"},	{"authority"}};
enum { P_GRPC_STATUS = F_COMMON, P_GRPC_MESSAGE, P_N };
static struct slot response_slots[P_N] = {COMMON_NAMES, {"grpc_status"}, {"grpc_message"}};
enum { ST_WAITING, ST_LAST_NS, ST_ORPHANS, ST_CLOSED, ST_MAX_STREAMS, ST_N };
static struct slot state_slots[ST_N] = {
	{"waiting"}, {"last_ns"}, {"orphan_responses"}, {"closed"}, {"max_streams"}};
enum { R_REQUEST, R_RESPONSE, R_END_NS, R_N };
static struct slot record_slots[R_N] = {{"request"}, {"response"}, {"end_ns"}};
enum { M_EXACT, M_COUNT, M_SIZE, M_N };
static struct slot messages_slots[M_N] = {{"exact"}, {"count"}, {"size"}};
static struct slot info_role = {"role"};

static int keep(PyObject **where, PyObject *v)
{
	Py_INCREF(v);
	Py_XSETREF(*where, v);
	return 0;
}

static PyObject *setup_pair(PyObject *self, PyObject *args)
{
	PyObject *req, *resp, *state, *make, *exp;
	if (!PyArg_ParseTuple(args, "O!O!O!OO", &PyType_Type, &req, &PyType_Type, &resp,
			      &PyType_Type, &state, &make, &exp))
		return NULL;
	if (slots_of(req, request_slots, Q_N) || slots_of(resp, response_slots, P_N) ||
	    slots_of(state, state_slots, ST_N))
		return NULL;
	if (!s_pop && !(s_pop = PyUnicode_InternFromString("pop")))
		return NULL;
	keep((PyObject **)&request_type, req);
	keep((PyObject **)&response_type, resp);
	keep((PyObject **)&state_type, state);
	keep(&new_record, make);
	keep(&expire, exp);
	Py_RETURN_NONE;
}

/* the int fields _settle reads, each of 64 bits (else the reference takes the call) */
struct timing {
	long long head, mark, epoch, head_epoch, stream_pos, tcp_seq, end_ns;
	int has_seq;
};

static int timing_of(PyObject *frame, const struct slot *slots, struct timing *t)
{
	PyObject *seq = slot_get(frame, &slots[F_TCP_SEQ]);
	PyObject *start = slot_get(frame, &slots[F_START_NS]);
	long long ignored;
	if (!seq || !start || ll_of(start, &ignored) < 0 ||
	    ll_of(slot_get(frame, &slots[F_HEAD]), &t->head) < 0 ||
	    ll_of(slot_get(frame, &slots[F_MARK]), &t->mark) < 0 ||
	    ll_of(slot_get(frame, &slots[F_EPOCH]), &t->epoch) < 0 ||
	    ll_of(slot_get(frame, &slots[F_HEAD_EPOCH]), &t->head_epoch) < 0 ||
	    ll_of(slot_get(frame, &slots[F_STREAM_POS]), &t->stream_pos) < 0 ||
	    ll_of(slot_get(frame, &slots[F_END_NS]), &t->end_ns) < 0 ||
	    !PyBool_Check(slot_get(frame, &slots[F_EXACT]) ? slot_get(frame, &slots[F_EXACT]) :
							     Py_None) ||
	    !slot_get(frame, &slots[F_STREAM_ID]))
		return -1;
	t->has_seq = seq != Py_None;
	if (t->has_seq && ll_of(seq, &t->tcp_seq) < 0)
		return -1;
	/* head - mark, stream_pos + lead and tcp_seq + lead stay far inside 64 bits */
	if (t->head < -(1LL << 60) || t->head > (1LL << 60) || t->mark < -(1LL << 60) ||
	    t->mark > (1LL << 60) || t->stream_pos < -(1LL << 61) ||
	    t->stream_pos > (1LL << 61) || (t->has_seq && (t->tcp_seq < -(1LL << 61) ||
							   t->tcp_seq > (1LL << 61))))
		return -1;
	return 0;
}

/* _settle: the frame's timing moved from its lead to its message's first HEADERS byte;
 * *last_ns as state.last_ns becomes; 0 or -1 */
static int settle(PyObject *frame, const struct slot *slots, const struct timing *t,
		  int request, long long *last_ns)
{
	if (t->epoch != t->head_epoch) {
		slot_set(frame, &slots[F_TCP_SEQ], Py_None);
	} else {
		long long lead = t->head - t->mark;
		if (lead) {
			if (set_ll(frame, &slots[F_STREAM_POS], t->stream_pos + lead) < 0)
				return -1;
			if (t->has_seq &&
			    set_ll(frame, &slots[F_TCP_SEQ], (t->tcp_seq + lead) & 0xFFFFFFFFLL) < 0)
				return -1;
			if (request && slot_get(frame, &slots[F_EXACT]) == Py_False) {
				/* the lead came in an earlier syscall: its time, thread, task not ours */
				slot_set(frame, &slots[F_START_NS], slot_get(frame, &slots[F_END_NS]));
				if (set_ll(frame, &slots[F_TID], 0) < 0 ||
				    set_ll(frame, &slots[F_TASK], 0) < 0)
					return -1;
			}
		}
	}
	if (t->end_ns > *last_ns)
		*last_ns = t->end_ns;
	return 0;
}

/* a waiting request that _expire would leave waiting (no reset, not refused, the
 * connection open, not timed out): 1; 0 otherwise or when it is not ours to read */
static int still_waiting(PyObject *request, long long now_ns, long long timeout_ns)
{
	long long end_ns;
	if (!Py_IS_TYPE(request, request_type) ||
	    slot_get(request, &request_slots[Q_RESET]) != Py_None ||
	    slot_get(request, &request_slots[Q_REFUSED]) != Py_False ||
	    ll_of(slot_get(request, &request_slots[F_END_NS]), &end_ns) < 0)
		return 0;
	PyObject *stale = slot_get(request, &request_slots[Q_STALE]);
	PyObject *started = slot_get(request, &request_slots[Q_RESPONSE_STARTED]);
	if (!stale || !started || !PyBool_Check(stale) || !PyBool_Check(started))
		return 0;
	/* now_ns - end_ns > timeout_ns (past 64 bits, as at the close's now: _expire's) */
	long long waited;
	if (__builtin_sub_overflow(now_ns, end_ns, &waited))
		return 0;
	if (waited > timeout_ns && (stale == Py_True || started == Py_False))
		return 0;
	return 1;
}

/* max(a, b) as Python's max picks it: a unless b is greater; a new reference */
static PyObject *larger(PyObject *a, PyObject *b)
{
	int greater = PyObject_RichCompareBool(b, a, Py_GT);
	if (greater < 0)
		return NULL;
	return Py_NewRef(greater ? b : a);
}

static PyObject *pair(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 5) {
		PyErr_SetString(PyExc_TypeError,
				"pair(requests, responses, now_ns, state, timeout_ns)");
		return NULL;
	}
	if (!state_type) {
		PyErr_SetString(PyExc_RuntimeError, "pair: setup_pair() was not called");
		return NULL;
	}
	PyObject *requests = args[0], *responses = args[1], *state = args[3];
	long long now_ns, timeout_ns, last_ns, orphans;
	if (!PyList_Check(requests) || !PyList_Check(responses) ||
	    !Py_IS_TYPE(state, state_type) || ll_of(args[2], &now_ns) < 0 ||
	    ll_of(args[4], &timeout_ns) < 0 ||
	    ll_of(slot_get(state, &state_slots[ST_LAST_NS]), &last_ns) < 0 ||
	    ll_of(slot_get(state, &state_slots[ST_ORPHANS]), &orphans) < 0)
		Py_RETURN_NONE;
	PyObject *waiting = slot_get(state, &state_slots[ST_WAITING]);
	if (!waiting || !PyDict_Check(waiting))
		Py_RETURN_NONE;
	Py_ssize_t nq = PyList_GET_SIZE(requests), np = PyList_GET_SIZE(responses);
	struct timing t;
	for (Py_ssize_t i = 0; i < nq; i++) {
		PyObject *f = PyList_GET_ITEM(requests, i);
		if (!Py_IS_TYPE(f, request_type) || timing_of(f, request_slots, &t) < 0)
			Py_RETURN_NONE;
	}
	for (Py_ssize_t i = 0; i < np; i++) {
		PyObject *f = PyList_GET_ITEM(responses, i);
		if (!Py_IS_TYPE(f, response_type) || timing_of(f, response_slots, &t) < 0)
			Py_RETURN_NONE;
	}
	/* from here on, the reference's steps; the lists are held while Python code runs */
	Py_INCREF(requests);
	Py_INCREF(responses);
	Py_INCREF(state);
	Py_INCREF(waiting);
	PyObject *records = PyList_New(0), *result = NULL;
	if (!records)
		goto done;
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(requests); i++) {
		PyObject *f = PyList_GET_ITEM(requests, i);
		if (timing_of(f, request_slots, &t) < 0) {
			PyErr_SetString(PyExc_TypeError, "pair: a request changed while paired");
			goto done;
		}
		if (settle(f, request_slots, &t, 1, &last_ns) < 0 ||
		    PyObject_SetItem(waiting, slot_get(f, &request_slots[F_STREAM_ID]), f) < 0)
			goto done;
	}
	if (PyList_SetSlice(requests, 0, PyList_GET_SIZE(requests), NULL) < 0)
		goto done;
	for (Py_ssize_t i = 0; i < PyList_GET_SIZE(responses); i++) {
		PyObject *f = PyList_GET_ITEM(responses, i);
		if (timing_of(f, response_slots, &t) < 0) {
			PyErr_SetString(PyExc_TypeError, "pair: a response changed while paired");
			goto done;
		}
		if (settle(f, response_slots, &t, 0, &last_ns) < 0)
			goto done;
		PyObject *request = PyObject_CallMethodObjArgs(
			waiting, s_pop, slot_get(f, &response_slots[F_STREAM_ID]), Py_None, NULL);
		if (!request)
			goto done;
		if (request == Py_None) { /* its request was lost, or came before capture */
			Py_DECREF(request);
			orphans++;
			continue;
		}
		PyObject *start = PyObject_GetAttrString(request, "start_ns");
		PyObject *end = start ? larger(slot_get(f, &response_slots[F_END_NS]), start) : NULL;
		Py_XDECREF(start);
		PyObject *record = NULL;
		if (end) {
			PyObject *margs[3] = {request, f, end};
			record = PyObject_Vectorcall(new_record, margs, 3, NULL);
			Py_DECREF(end);
		}
		Py_DECREF(request);
		int bad = !record || PyList_Append(records, record) < 0;
		Py_XDECREF(record);
		if (bad)
			goto done;
	}
	if (PyList_SetSlice(responses, 0, PyList_GET_SIZE(responses), NULL) < 0 ||
	    set_ll(state, &state_slots[ST_LAST_NS], last_ns) < 0 ||
	    set_ll(state, &state_slots[ST_ORPHANS], orphans) < 0)
		goto done;
	/* the requests still waiting: _expire's unless each of them simply waits on */
	long long max_streams;
	PyObject *closed = slot_get(state, &state_slots[ST_CLOSED]);
	Py_ssize_t left = PyObject_Size(waiting);
	if (left < 0)
		goto done;
	int settled = closed == Py_False &&
		      ll_of(slot_get(state, &state_slots[ST_MAX_STREAMS]), &max_streams) == 0 &&
		      left <= max_streams;
	Py_ssize_t at = 0;
	PyObject *key, *value;
	while (settled && PyDict_Next(waiting, &at, &key, &value))
		settled = still_waiting(value, now_ns, timeout_ns);
	if (!settled && left) {
		PyObject *eargs[4] = {records, args[2], state, args[4]};
		PyObject *v = PyObject_Vectorcall(expire, eargs, 4, NULL);
		if (!v)
			goto done;
		Py_DECREF(v);
	}
	result = Py_NewRef(records);
done:
	Py_XDECREF(records);
	Py_DECREF(requests);
	Py_DECREF(responses);
	Py_DECREF(state);
	Py_DECREF(waiting);
	return result;
}

/* ---- a gRPC call's span ------------------------------------------------------------- */

/* the last call's name and first attributes (the reference's _grpc_head keeps its own) */
static PyObject *last_conn, *last_path, *last_authority, *last_name, *last_attrs;

static PyObject *setup_span(PyObject *self, PyObject *args)
{
	PyObject *record, *messages, *info, *make, *head, *roles, *kinds, *statuses, *names,
		*errors, *proto;
	if (!PyArg_ParseTuple(args, "O!O!O!OOO!O!O!O!O!U", &PyType_Type, &record, &PyType_Type,
			      &messages, &PyType_Type, &info, &make, &head, &PyTuple_Type, &roles,
			      &PyTuple_Type, &kinds, &PyTuple_Type, &statuses, &PyTuple_Type,
			      &names, &PyFrozenSet_Type, &errors, &proto))
		return NULL;
	if (PyTuple_GET_SIZE(roles) != 1 || PyTuple_GET_SIZE(kinds) != 2 ||
	    PyTuple_GET_SIZE(statuses) != 2) {
		PyErr_SetString(PyExc_TypeError,
				"setup_span: (Role.SERVER,), (SERVER, CLIENT), (UNSET, ERROR)");
		return NULL;
	}
	if (!request_type) {
		PyErr_SetString(PyExc_RuntimeError, "setup_span: setup_pair() first");
		return NULL;
	}
	if (slots_of(record, record_slots, R_N) || slots_of(messages, messages_slots, M_N) ||
	    slots_of(info, &info_role, 1))
		return NULL;
	if (!k_error) {
		const char *strs[] = {"rpc.request.message.count", "rpc.request.size",
				      "rpc.response.message.count", "rpc.response.size",
				      "rpc.response.status_code", "error.type", ""};
		PyObject **to[] = {&k_req_count, &k_req_size, &k_resp_count, &k_resp_size,
				   &k_status, &k_error, &empty_str};
		for (int i = 0; i < 7; i++)
			if (!(*to[i] = PyUnicode_InternFromString(strs[i])))
				return NULL;
	}
	keep((PyObject **)&record_type, record);
	keep((PyObject **)&messages_type, messages);
	keep((PyObject **)&info_type, info);
	keep(&new_span, make);
	keep(&grpc_head, head);
	keep(&role_server, PyTuple_GET_ITEM(roles, 0));
	keep(&kind_server, PyTuple_GET_ITEM(kinds, 0));
	keep(&kind_client, PyTuple_GET_ITEM(kinds, 1));
	keep(&status_unset, PyTuple_GET_ITEM(statuses, 0));
	keep(&status_error, PyTuple_GET_ITEM(statuses, 1));
	keep(&codes, names);
	keep(&server_errors, errors);
	keep(&protocol, proto);
	Py_CLEAR(last_conn);
	Py_CLEAR(last_path);
	Py_CLEAR(last_authority);
	Py_CLEAR(last_name);
	Py_CLEAR(last_attrs);
	Py_RETURN_NONE;
}

/* grpc.is_grpc's yes, for the content-types it is sure of: application/grpc, or that and
 * "+" and a lower-case suffix (no parameters, no spaces, no upper case to fold) */
static int plain_grpc(PyObject *ct)
{
	static const char name[] = "application/grpc";
	const Py_ssize_t n = sizeof(name) - 1;
	if (!ct || !PyUnicode_CheckExact(ct) || !PyUnicode_IS_ASCII(ct))
		return 0;
	Py_ssize_t len = PyUnicode_GET_LENGTH(ct);
	const char *s = (const char *)PyUnicode_DATA(ct);
	if (len < n || memcmp(s, name, n))
		return 0;
	if (len == n)
		return 1;
	if (s[n] != '+')
		return 0;
	for (Py_ssize_t i = n + 1; i < len; i++)
		if (!((s[i] >= 'a' && s[i] <= 'z') || (s[i] >= '0' && s[i] <= '9') ||
		      s[i] == '-' || s[i] == '.' || s[i] == '_'))
			return 0;
	return 1;
}

/* _grpc's message counts of one side, when they are exact; 0 or -1 */
static int counts(PyObject *attrs, PyObject *message, const struct slot *slots, PyObject *kcount,
		  PyObject *ksize)
{
	PyObject *messages = slot_get(message, &slots[F_MESSAGES]);
	int exact = PyObject_IsTrue(slot_get(messages, &messages_slots[M_EXACT]));
	if (exact <= 0)
		return exact;
	int some = PyObject_IsTrue(slot_get(message, &slots[F_DATA_SIZE]));
	if (some == 0)
		some = PyObject_IsTrue(slot_get(message, &slots[F_ENDED]));
	if (some <= 0)
		return some;
	PyObject *count = slot_get(messages, &messages_slots[M_COUNT]);
	PyObject *size = slot_get(messages, &messages_slots[M_SIZE]);
	if (!count || !size) {
		PyErr_SetString(PyExc_AttributeError, "span: Messages without its counts");
		return -1;
	}
	if (PyDict_SetItem(attrs, kcount, count) < 0 || PyDict_SetItem(attrs, ksize, size) < 0)
		return -1;
	return 0;
}

static PyObject *span(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 2) {
		PyErr_SetString(PyExc_TypeError, "span(record, conn)");
		return NULL;
	}
	if (!record_type) {
		PyErr_SetString(PyExc_RuntimeError, "span: setup_span() was not called");
		return NULL;
	}
	PyObject *record = args[0], *conn = args[1];
	if (!Py_IS_TYPE(record, record_type) || !Py_IS_TYPE(conn, info_type))
		Py_RETURN_NONE;
	PyObject *request = slot_get(record, &record_slots[R_REQUEST]);
	PyObject *response = slot_get(record, &record_slots[R_RESPONSE]);
	PyObject *record_end = slot_get(record, &record_slots[R_END_NS]);
	PyObject *role = slot_get(conn, &info_role);
	if (!request || !response || !record_end || !role || !Py_IS_TYPE(request, request_type) ||
	    !Py_IS_TYPE(response, response_type) ||
	    slot_get(request, &request_slots[Q_LAYER]) != Py_None ||
	    !plain_grpc(slot_get(request, &request_slots[Q_CONTENT_TYPE])))
		Py_RETURN_NONE;
	/* every slot read below is set (slots_of checked they are slots; dataclasses set all) */
	for (int i = 0; i < Q_N; i++)
		if (!slot_get(request, &request_slots[i]))
			Py_RETURN_NONE;
	for (int i = 0; i < P_N; i++)
		if (!slot_get(response, &response_slots[i]))
			Py_RETURN_NONE;
	PyObject *code = slot_get(response, &response_slots[P_GRPC_STATUS]);
	PyObject *text = slot_get(response, &response_slots[P_GRPC_MESSAGE]);
	long long c;
	if (ll_of(code, &c) < 0 || c < 0 || c >= PyTuple_GET_SIZE(codes) ||
	    !(text == Py_None || (PyUnicode_CheckExact(text) && !PyUnicode_GET_LENGTH(text))))
		Py_RETURN_NONE; /* a code named by number, or a message to decode: the reference */
	PyObject *rm = slot_get(request, &request_slots[F_MESSAGES]);
	PyObject *pm = slot_get(response, &response_slots[F_MESSAGES]);
	if (!Py_IS_TYPE(rm, messages_type) || !Py_IS_TYPE(pm, messages_type))
		Py_RETURN_NONE;
	for (int i = 0; i < M_N; i++)
		if (!slot_get(rm, &messages_slots[i]) || !slot_get(pm, &messages_slots[i]))
			Py_RETURN_NONE;
	int server = PyObject_RichCompareBool(role, role_server, Py_EQ);
	if (server < 0)
		return NULL;
	PyObject *kind = server ? kind_server : kind_client;
	PyObject *path = slot_get(request, &request_slots[Q_PATH]);
	PyObject *authority = slot_get(request, &request_slots[Q_AUTHORITY]);

	/* _grpc_head: the last call's, when its connection, path and authority are this one's */
	PyObject *name = NULL, *attrs = NULL, *result = NULL;
	int same = last_conn == conn;
	if (same)
		same = PyObject_RichCompareBool(last_path, path, Py_EQ);
	if (same > 0)
		same = PyObject_RichCompareBool(last_authority, authority, Py_EQ);
	if (same < 0)
		return NULL;
	if (same) {
		name = Py_NewRef(last_name);
		if (!(attrs = PyDict_Copy(last_attrs)))
			goto done;
	} else {
		PyObject *hargs[3] = {request, conn, kind};
		PyObject *head = PyObject_Vectorcall(grpc_head, hargs, 3, NULL);
		if (!head)
			goto done;
		if (!PyTuple_CheckExact(head) || PyTuple_GET_SIZE(head) != 2 ||
		    !PyDict_CheckExact(PyTuple_GET_ITEM(head, 1))) {
			Py_DECREF(head);
			PyErr_SetString(PyExc_TypeError, "span: _grpc_head gives (name, attributes)");
			goto done;
		}
		name = Py_NewRef(PyTuple_GET_ITEM(head, 0));
		attrs = Py_NewRef(PyTuple_GET_ITEM(head, 1));
		Py_DECREF(head);
		PyObject *kept = PyDict_Copy(attrs); /* the caller's copy may be changed */
		if (!kept)
			goto done;
		Py_INCREF(conn);
		Py_XSETREF(last_conn, conn);
		Py_INCREF(path);
		Py_XSETREF(last_path, path);
		Py_INCREF(authority);
		Py_XSETREF(last_authority, authority);
		Py_INCREF(name);
		Py_XSETREF(last_name, name);
		Py_XSETREF(last_attrs, kept);
	}

	/* _grpc: the messages of each side, the status code, the error */
	if (counts(attrs, request, request_slots, k_req_count, k_req_size) < 0 ||
	    counts(attrs, response, response_slots, k_resp_count, k_resp_size) < 0)
		goto done;
	PyObject *code_name = PyTuple_GET_ITEM(codes, c);
	if (PyDict_SetItem(attrs, k_status, code_name) < 0)
		goto done;
	int error = server ? PySet_Contains(server_errors, code_name) : c != 0;
	if (error < 0 || (error && PyDict_SetItem(attrs, k_error, code_name) < 0))
		goto done;

	PyObject *start = slot_get(request, &request_slots[F_START_NS]);
	PyObject *end = larger(record_end, start);
	if (!end)
		goto done;
	int ended = PyObject_IsTrue(slot_get(response, &response_slots[F_ENDED]));
	if (ended < 0) {
		Py_DECREF(end);
		goto done;
	}
	PyObject *sargs[12] = {name,
			       kind,
			       start,
			       end,
			       conn,
			       attrs,
			       error ? status_error : status_unset,
			       empty_str,
			       protocol,
			       slot_get(request, &request_slots[F_TCP_SEQ]),
			       slot_get(request, &request_slots[F_STREAM_POS]),
			       ended ? slot_get(response, &response_slots[F_TCP_SEQ]) : Py_None};
	result = PyObject_Vectorcall(new_span, sargs, 12, NULL);
	Py_DECREF(end);
done:
	Py_XDECREF(name);
	Py_XDECREF(attrs);
	return result;
}

static PyMethodDef stitch_methods[] = {
	{"setup_pair", setup_pair, METH_VARARGS,
	 "setup_pair(H2Request, H2Response, HTTP2State, new_record, expire)"},
	{"setup_span", setup_span, METH_VARARGS,
	 "setup_span(H2Record, Messages, ConnInfo, new_span, grpc_head, (Role.SERVER,), "
	 "(SpanKind.SERVER, SpanKind.CLIENT), (StatusCode.UNSET, StatusCode.ERROR), CODES, "
	 "SERVER_ERRORS, protocol)"},
	{"pair", (PyCFunction)(void (*)(void))pair, METH_FASTCALL,
	 "pair(requests, responses, now_ns, state, timeout_ns) -> list or None"},
	{"span", (PyCFunction)(void (*)(void))span, METH_FASTCALL,
	 "span(record, conn) -> NeutralSpan or None"},
	{NULL, NULL, 0, NULL}};

static struct PyModuleDef stitch_module = {
	PyModuleDef_HEAD_INIT, "otel_ebpf.protocols.http2._stitch",
	"HTTP/2 streams paired and gRPC calls' spans (protocols/http2 stitch and spans)", -1,
	stitch_methods};

PyMODINIT_FUNC PyInit__stitch(void)
{
	return PyModule_Create(&stitch_module);
}
