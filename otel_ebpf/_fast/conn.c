/* SPDX-License-Identifier: Apache-2.0 */
/* A connection's data event on the common path, in one call.
 *
 * data(conn, direction, pos, msg_len, payload, start_ns, end_ns, tcp_seq, tid, task, tail,
 *      tls, stats) -> bool
 *
 * What otel_ebpf/conntrack/connection.py Connection.on_data does (the reference) when the
 * event is the usual one: a syscall's every byte, no tail, right where an empty stream
 * stands, on a connection whose parser has a one-call step for it (`conn.whole`, HTTP/1's
 * otel_ebpf/_fast/http1.c whole). The step's frame is finished here as on_data finishes
 * it; when the step declines, Connection._whole runs the general path, as on_data would.
 * False, with nothing changed, for every other event: the caller runs on_data.
 */
#include "slots.h"

/* set by setup(): the classes whose objects data() reads by slot, and Chunk */
static PyTypeObject *conn_type, *stream_type, *info_type, *state_type;
static PyObject *chunk_type, *s__whole;
static PyObject *time_at_func; /* Connection._time_at, the function */
enum { C_WHOLE, C_UNPARSED, C_INFO, C_STREAMS, C_RESYNC, C_FRAME_START, C_PENDING, C_LAST_NS,
       C_TCP, C_STATE, C_FRAMES_OUT, C_PARSER, C_N };
static struct slot conn_slots[C_N] = {
	{"whole"}, {"unparsed"}, {"info"}, {"streams"}, {"resync"}, {"frame_start"},
	{"pending"}, {"last_ns"}, {"tcp"}, {"state"}, {"frames_out"}, {"parser"}};
enum { S_STARTED, S_KNOWN_END, S_HEAD, S_BUF, S_QUEUE, S_TIMES, S_LAST_END_NS, S_N };
static struct slot stream_slots[S_N] = {
	{"started"}, {"known_end"}, {"head"}, {"buf"}, {"queue"}, {"times"}, {"last_end_ns"}};
static struct slot info_tls = {"tls"}, state_frames = {"frames"}, state_time_at = {"time_at"};

static PyObject *setup(PyObject *self, PyObject *args)
{
	PyObject *conn, *stream, *info, *state, *chunk;
	if (!PyArg_ParseTuple(args, "O!O!O!O!O!", &PyType_Type, &conn, &PyType_Type, &stream,
			      &PyType_Type, &info, &PyType_Type, &state, &PyType_Type, &chunk))
		return NULL;
	if (!PyType_IsSubtype((PyTypeObject *)chunk, &PyTuple_Type)) {
		PyErr_SetString(PyExc_TypeError, "setup: Chunk must be a named tuple");
		return NULL;
	}
	if (slots_of(conn, conn_slots, C_N) || slots_of(stream, stream_slots, S_N) ||
	    slots_of(info, &info_tls, 1) || slots_of(state, &state_frames, 1) ||
	    slots_of(state, &state_time_at, 1))
		return NULL;
	PyObject *time_at = PyObject_GetAttrString(conn, "_time_at");
	if (!time_at)
		return NULL;
	Py_XSETREF(time_at_func, time_at);
	PyObject **keep[] = {(PyObject **)&conn_type, (PyObject **)&stream_type,
			     (PyObject **)&info_type, (PyObject **)&state_type, &chunk_type};
	PyObject *values[] = {conn, stream, info, state, chunk};
	for (int i = 0; i < 5; i++) {
		Py_INCREF(values[i]);
		Py_XSETREF(*keep[i], values[i]);
	}
	Py_RETURN_NONE;
}

/* item d of a tuple or list, borrowed; NULL (no error set) when it is not one of 2 */
static inline PyObject *item_of(PyObject *pair, long d)
{
	if (pair && PyTuple_CheckExact(pair) && PyTuple_GET_SIZE(pair) == 2)
		return PyTuple_GET_ITEM(pair, d);
	if (pair && PyList_CheckExact(pair) && PyList_GET_SIZE(pair) == 2)
		return PyList_GET_ITEM(pair, d);
	return NULL;
}

/* the length of a list (a SmallDeque) or bytearray slot; -1: neither */
static inline Py_ssize_t held(PyObject *v)
{
	if (v && PyList_Check(v))
		return PyList_GET_SIZE(v);
	if (v && PyByteArray_Check(v))
		return PyByteArray_GET_SIZE(v);
	return -1;
}

/* a Chunk of these fields, built as tuple.__new__ builds it */
static PyObject *new_chunk(PyObject *const *fields)
{
	PyObject *t = ((PyTypeObject *)chunk_type)->tp_alloc((PyTypeObject *)chunk_type, 8);
	if (!t)
		return NULL;
	for (int i = 0; i < 8; i++) {
		Py_INCREF(fields[i]);
		PyTuple_SET_ITEM(t, i, fields[i]);
	}
	return t;
}

/* what Stream.add notes of bytes up to `end`, the last at `end_ns`: the furthest byte
 * seen and the last time; 0 or -1 */
static int note_end(PyObject *stream, PyObject *end, PyObject *end_ns)
{
	PyObject *known_end = slot_get(stream, &stream_slots[S_KNOWN_END]);
	int further = known_end ? PyObject_RichCompareBool(end, known_end, Py_GT) : 1;
	if (further < 0)
		return -1;
	if (further)
		slot_set(stream, &stream_slots[S_KNOWN_END], end);
	slot_set(stream, &stream_slots[S_LAST_END_NS], end_ns);
	return 0;
}

/* a finished frame into the state's frames and, where the connection keeps them, its
 * (info, frame) list; 0 or -1 */
static int finish_frame(PyObject *frames, PyObject *out, PyObject *info, PyObject *frame)
{
	if (PyList_Append(frames, frame) < 0)
		return -1;
	if (out == Py_None)
		return 0;
	PyObject *finished = PyTuple_Pack(2, info, frame);
	if (!finished)
		return -1;
	int r = PyList_Append(out, finished);
	Py_DECREF(finished);
	return r;
}

/* ---- the step of a stream parser with no `whole` (HTTP/2) ----------------------------
 * Connection._whole for a syscall at the head of an empty stream, not inside a message
 * (data() checked both): the parser's answer to the payload; a FRAME of exactly these
 * bytes is stamped and finished here, any other answer goes on in Connection._parse and
 * _finish_pending, as _whole does. Only for parsers of the exact types given to
 * stream_parsers() (HTTP2Parser, when its frame loop is compiled). */
static PyObject *stepped_types, *frame_result, *s_parser, *s_parse, *s_release, *s__parse,
	*s__finish_pending, *s_direction, *s_stream_pos, *s_start_ns, *s_end_ns, *s_tid,
	*s_task, *s_tcp_seq, *s_size, *mask32;

static PyObject *stream_parsers(PyObject *self, PyObject *args)
{
	PyObject *types, *frame;
	if (!PyArg_ParseTuple(args, "O!O", &PyTuple_Type, &types, &frame))
		return NULL;
	if (!conn_type) {
		PyErr_SetString(PyExc_RuntimeError, "stream_parsers: setup() was not called");
		return NULL;
	}
	if (!s_parser) {
		const char *names[] = {"parser", "parse", "release", "_parse", "_finish_pending",
				       "direction", "stream_pos", "start_ns", "end_ns", "tid",
				       "task", "tcp_seq", "size"};
		PyObject **keep[] = {&s_parser, &s_parse, &s_release, &s__parse, &s__finish_pending,
				     &s_direction, &s_stream_pos, &s_start_ns, &s_end_ns, &s_tid,
				     &s_task, &s_tcp_seq, &s_size};
		for (int i = 0; i < 13; i++)
			if (!(*keep[i] = PyUnicode_InternFromString(names[i])))
				return NULL;
		if (!(mask32 = PyLong_FromUnsignedLong(0xFFFFFFFFUL)))
			return NULL;
	}
	Py_INCREF(types);
	Py_XSETREF(stepped_types, types);
	Py_INCREF(frame);
	Py_XSETREF(frame_result, frame);
	Py_RETURN_NONE;
}

/* the connection's parser is one whose step is taken here */
static int stepped_here(PyObject *conn)
{
	if (!stepped_types || !Py_IS_TYPE(conn, conn_type))
		return 0;
	PyObject *parser = slot_get(conn, &conn_slots[C_PARSER]);
	if (!parser)
		return 0;
	for (Py_ssize_t i = 0; i < PyTuple_GET_SIZE(stepped_types); i++)
		if ((PyObject *)Py_TYPE(parser) == PyTuple_GET_ITEM(stepped_types, i))
			return 1;
	return 0;
}

/* fields: the Chunk's (pos, end, payload, start_ns, end_ns, tcp_seq, tid, task); 0 or -1 */
static int stream_step(PyObject *conn, PyObject *stream, PyObject *state, PyObject *info,
		       PyObject *frames, PyObject *out, PyObject *direction, Py_ssize_t n,
		       PyObject *const *fields, PyObject *stats)
{
	PyObject *pos = fields[0], *end = fields[1], *payload = fields[2], *start_ns = fields[3],
		 *end_ns = fields[4], *seq = fields[5];
	if (note_end(stream, end, end_ns) < 0)
		return -1;
	PyObject *times = slot_get(stream, &stream_slots[S_TIMES]);
	PyObject *chunk = new_chunk(fields);
	if (!chunk)
		return -1;
	int r = times && PyList_Check(times) ? PyList_Append(times, chunk) : -1;
	Py_DECREF(chunk);
	if (r < 0) {
		if (!PyErr_Occurred())
			PyErr_SetString(PyExc_TypeError, "stream_step: times must be a list");
		return -1;
	}
	PyObject *parser = slot_get(conn, &conn_slots[C_PARSER]);
	PyObject *parse = parser ? PyObject_GetAttr(parser, s_parse) : NULL;
	if (!parse)
		return -1;
	PyObject *view = PyMemoryView_FromObject(payload);
	if (!view) {
		Py_DECREF(parse);
		return -1;
	}
	PyObject *call[3] = {direction, view, state};
	PyObject *step = PyObject_Vectorcall(parse, call, 3, NULL);
	Py_DECREF(parse);
	PyObject *released = PyObject_CallMethodNoArgs(view, s_release);
	Py_DECREF(view);
	if (!released) {
		Py_XDECREF(step);
		return -1;
	}
	Py_DECREF(released);
	if (!step)
		return -1;
	int ret = -1;
	if (!PyTuple_Check(step) || PyTuple_GET_SIZE(step) != 3) {
		PyErr_SetString(PyExc_TypeError, "parse must return (result, frame, consumed)");
		goto out;
	}
	PyObject *result = PyTuple_GET_ITEM(step, 0), *frame = PyTuple_GET_ITEM(step, 1),
		 *consumed = PyTuple_GET_ITEM(step, 2);
	Py_ssize_t c = PyLong_Check(consumed) ? PyLong_AsSsize_t(consumed) : -1;
	if (c == -1 && PyErr_Occurred())
		PyErr_Clear(); /* not this case: _parse judges it */
	if (c == n && result == frame_result && frame != Py_None) {
		/* stamped as _stamp_start and _finish_pending do: first and last byte its own */
		PyObject *tcp_seq = seq == Py_None ? (Py_INCREF(Py_None), Py_None) :
						     PyNumber_And(seq, mask32);
		if (!tcp_seq)
			goto out;
		int bad = PyObject_SetAttr(frame, s_direction, direction) < 0 ||
			  PyObject_SetAttr(frame, s_stream_pos, pos) < 0 ||
			  PyObject_SetAttr(frame, s_start_ns, start_ns) < 0 ||
			  PyObject_SetAttr(frame, s_tid, fields[6]) < 0 ||
			  PyObject_SetAttr(frame, s_task, fields[7]) < 0 ||
			  PyObject_SetAttr(frame, s_tcp_seq, tcp_seq) < 0;
		Py_DECREF(tcp_seq);
		if (bad)
			goto out;
		slot_set(stream, &stream_slots[S_HEAD], end);
		if (PyList_SetSlice(times, 0, PyList_GET_SIZE(times), NULL) < 0)
			goto out;
		PyObject *first = PyObject_GetAttr(frame, s_start_ns);
		if (!first)
			goto out;
		int later = PyObject_RichCompareBool(first, end_ns, Py_GT);
		bad = later < 0 || PyObject_SetAttr(frame, s_end_ns, later ? first : end_ns) < 0;
		Py_DECREF(first);
		if (bad)
			goto out;
		PyObject *size = PyObject_GetAttr(frame, s_size);
		int truth = size ? PyObject_IsTrue(size) : -1;
		Py_XDECREF(size);
		if (truth < 0 || (!truth && PyObject_SetAttr(frame, s_size, consumed) < 0))
			goto out;
		if (finish_frame(frames, out, info, frame) < 0)
			goto out;
		ret = 0;
		goto out;
	}
	/* the general loop goes on from the parser's answer */
	PyObject *buf = slot_get(stream, &stream_slots[S_BUF]);
	if (!buf || !PyByteArray_Check(buf)) {
		PyErr_SetString(PyExc_TypeError, "stream_step: buf must be a bytearray");
		goto out;
	}
	if (PyByteArray_Resize(buf, PyByteArray_GET_SIZE(buf) + n) < 0)
		goto out;
	memcpy(PyByteArray_AS_STRING(buf) + PyByteArray_GET_SIZE(buf) - n,
	       PyBytes_AS_STRING(payload), n);
	PyObject *pargs[4] = {conn, direction, stats, step};
	PyObject *v = PyObject_VectorcallMethod(s__parse, pargs,
						4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
	if (!v)
		goto out;
	Py_DECREF(v);
	PyObject *fargs[2] = {conn, direction};
	v = PyObject_VectorcallMethod(s__finish_pending, fargs,
				      2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
	if (!v)
		goto out;
	Py_DECREF(v);
	ret = 0;
out:
	Py_DECREF(step);
	return ret;
}

/* ---- a body piece: Connection._whole with `inside` ------------------------------------
 *
 * A syscall's every byte, at the head of a stream holding nothing, inside a message whose
 * head is past (frame_start set): when the parser's class has a compiled `piece` step
 * (HTTP/1's otel_ebpf/_fast/http1.c chunks) and that step takes every byte without ending
 * a frame, what _whole leaves after such a piece is done here (the head moves on, the
 * timing chunk is pruned, frame_start stays); when it takes every byte and ends the
 * message (returning its frame), Connection._piece_done finishes the frame as _parse,
 * _frame_done and _finish_pending would. The step times what it keeps by the
 * syscall's time, which is what the tracker's time_at answers for every byte of it: so
 * only with the state's time_at the connection's own. False, nothing changed, otherwise.
 */
static PyObject *s_piece, *s__piece_done;

static PyObject *piece(PyObject *conn, PyObject *stream, PyObject *state, PyObject *direction,
		       PyObject *pos, PyObject *msg_len, PyObject *payload, PyObject *start_ns,
		       PyObject *end_ns)
{
	PyObject *parser = slot_get(conn, &conn_slots[C_PARSER]);
	PyObject *step = parser ? _PyType_Lookup(Py_TYPE(parser), s_piece) : NULL;
	PyObject *time_at = slot_get(state, &state_time_at);
	if (!step || step == Py_None || !time_at || !PyMethod_Check(time_at) ||
	    PyMethod_GET_SELF(time_at) != conn || PyMethod_GET_FUNCTION(time_at) != time_at_func)
		Py_RETURN_FALSE;
	PyObject *end = PyNumber_Add(pos, msg_len);
	if (!end)
		return NULL;
	Py_INCREF(step); /* held while the step runs */
	Py_INCREF(conn);
	Py_INCREF(stream);
	Py_INCREF(state);
	PyObject *call[4] = {direction, payload, state, start_ns};
	PyObject *took = PyObject_Vectorcall(step, call, 4, NULL);
	PyObject *result = NULL;
	if (!took)
		goto done;
	if (took == Py_False) { /* on_data takes it, the parser untouched */
		result = Py_False;
		goto done;
	}
	/* on_data's and _whole's, for a piece */
	slot_set(conn, &conn_slots[C_LAST_NS], end_ns);
	if (note_end(stream, end, end_ns) < 0)
		goto done;
	if (took != Py_True) { /* the message's frame: it ended with this piece */
		PyObject *margs[5] = {conn, direction, took, end, end_ns};
		PyObject *v = PyObject_VectorcallMethod(s__piece_done, margs,
							5 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
		if (!v)
			goto done;
		Py_DECREF(v);
		result = Py_True;
		goto done;
	}
	slot_set(stream, &stream_slots[S_HEAD], end);
	result = Py_True;
done:
	Py_XINCREF(result);
	Py_XDECREF(took);
	Py_DECREF(end);
	Py_DECREF(step);
	Py_DECREF(conn);
	Py_DECREF(stream);
	Py_DECREF(state);
	return result;
}

static PyObject *data(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 13) {
		PyErr_SetString(PyExc_TypeError,
				"data(conn, direction, pos, msg_len, payload, start_ns, end_ns, "
				"tcp_seq, tid, task, tail, tls, stats)");
		return NULL;
	}
	if (!chunk_type) {
		PyErr_SetString(PyExc_RuntimeError, "data: setup() was not called");
		return NULL;
	}
	PyObject *conn = args[0], *direction = args[1], *pos = args[2], *msg_len = args[3],
		 *payload = args[4], *start_ns = args[5], *end_ns = args[6], *tail = args[10];
	if (!Py_IS_TYPE(conn, conn_type) || !PyBytes_Check(payload) || !PyBytes_Check(tail) ||
	    PyBytes_GET_SIZE(tail))
		Py_RETURN_FALSE; /* a tail: two chunks, on_data's */
	PyObject *whole = slot_get(conn, &conn_slots[C_WHOLE]);
	PyObject *info = slot_get(conn, &conn_slots[C_INFO]);
	PyObject *state = slot_get(conn, &conn_slots[C_STATE]);
	if (!whole || (whole == Py_None && !stepped_here(conn)) ||
	    slot_get(conn, &conn_slots[C_UNPARSED]) != Py_False ||
	    !info || !Py_IS_TYPE(info, info_type) || !state || !PyObject_TypeCheck(state, state_type))
		Py_RETURN_FALSE;
	PyObject *tls = slot_get(info, &info_tls);
	if (!tls || !PyBool_Check(tls) || !PyBool_Check(args[11]) || tls != args[11])
		Py_RETURN_FALSE; /* TLS plaintext starting, or ciphertext after it */
	long d = direction == Py_False || direction == Py_True ? -1 : PyLong_AsLong(direction);
	if (d == -1 && PyErr_Occurred())
		return NULL;
	if (d != 0 && d != 1)
		Py_RETURN_FALSE;
	if (d == 1) /* INGRESS: a read's bytes are there when it returns */
		start_ns = end_ns;
	PyObject *stream = item_of(slot_get(conn, &conn_slots[C_STREAMS]), d);
	if (!stream || !Py_IS_TYPE(stream, stream_type) ||
	    slot_get(stream, &stream_slots[S_STARTED]) != Py_True)
		Py_RETURN_FALSE;
	PyObject *known_end = slot_get(stream, &stream_slots[S_KNOWN_END]);
	PyObject *head = slot_get(stream, &stream_slots[S_HEAD]);
	if (!known_end || !head || !PyLong_CheckExact(pos) || !PyLong_CheckExact(msg_len))
		Py_RETURN_FALSE;
	/* past the furthest byte seen: on_data counts the gap */
	int past = PyObject_RichCompareBool(pos, known_end, Py_GT);
	int at = past ? 0 : PyObject_RichCompareBool(pos, head, Py_EQ);
	if (past < 0 || at < 0)
		return NULL;
	Py_ssize_t n = PyLong_AsSsize_t(msg_len);
	if (n == -1 && PyErr_Occurred())
		return NULL;
	/* pos == stream.head, every byte captured, the stream holding nothing */
	if (past || !at || n <= 0 || PyBytes_GET_SIZE(payload) != n ||
	    held(slot_get(stream, &stream_slots[S_BUF])) != 0 ||
	    held(slot_get(stream, &stream_slots[S_QUEUE])) != 0 ||
	    held(slot_get(stream, &stream_slots[S_TIMES])) != 0)
		Py_RETURN_FALSE;
	PyObject *resync = item_of(slot_get(conn, &conn_slots[C_RESYNC]), d);
	PyObject *frame_start = item_of(slot_get(conn, &conn_slots[C_FRAME_START]), d);
	PyObject *pending = item_of(slot_get(conn, &conn_slots[C_PENDING]), d);
	PyObject *tcp = slot_get(conn, &conn_slots[C_TCP]);
	PyObject *out = slot_get(conn, &conn_slots[C_FRAMES_OUT]);
	PyObject *frames = item_of(slot_get(state, &state_frames), d);
	if (resync != Py_False || !frame_start || held(pending) != 0 || !tcp ||
	    !PyBool_Check(tcp) || !out || (out != Py_None && !PyList_Check(out)) || !frames ||
	    !PyList_Check(frames))
		Py_RETURN_FALSE;
	if (frame_start != Py_None) /* inside a message: a body piece, or on_data's */
		return piece(conn, stream, state, direction, pos, msg_len, payload, start_ns,
			     end_ns);

	/* on_data's fast case, from here on */
	slot_set(conn, &conn_slots[C_LAST_NS], end_ns);
	PyObject *seq = tcp == Py_True ? args[7] : Py_None;
	PyObject *end = PyNumber_Add(pos, msg_len);
	if (!end)
		return NULL;
	Py_INCREF(conn); /* held while Python code runs */
	Py_INCREF(stream);
	Py_INCREF(info);
	Py_INCREF(frames);
	PyObject *result = NULL, *call[9] = {direction, payload, state, pos, start_ns, end_ns,
					    seq, args[8], args[9]};
	PyObject *frame = NULL;
	if (whole == Py_None) { /* a stream parser that registered (stream_parsers) */
		PyObject *fields[8] = {pos, end, payload, start_ns, end_ns, seq, args[8], args[9]};
		if (!stream_step(conn, stream, state, info, frames, out, direction, n, fields,
				 args[12]))
			result = Py_True;
		goto done;
	}
	frame = PyObject_Vectorcall(whole, call, 9, NULL);
	if (!frame)
		goto done;
	if (frame == Py_None) { /* the general path: Connection._whole with the Chunk */
		PyObject *fields[8] = {pos, end, payload, start_ns, end_ns, seq, args[8], args[9]};
		PyObject *chunk = new_chunk(fields);
		if (!chunk)
			goto done;
		PyObject *margs[4] = {conn, direction, chunk, args[12]};
		PyObject *v = PyObject_VectorcallMethod(s__whole, margs,
							4 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
		Py_DECREF(chunk);
		if (!v)
			goto done;
		Py_DECREF(v);
		result = Py_True;
		goto done;
	}
	/* what _whole leaves for such a frame */
	if (note_end(stream, end, end_ns) < 0)
		goto done;
	slot_set(stream, &stream_slots[S_HEAD], end);
	if (finish_frame(frames, out, info, frame) < 0)
		goto done;
	result = Py_True;
done:
	Py_XINCREF(result);
	Py_XDECREF(frame);
	Py_DECREF(end);
	Py_DECREF(conn);
	Py_DECREF(stream);
	Py_DECREF(info);
	Py_DECREF(frames);
	return result;
}

static PyMethodDef conn_methods[] = {
	{"data", (PyCFunction)(void (*)(void))data, METH_FASTCALL,
	 "data(conn, direction, pos, msg_len, payload, start_ns, end_ns, tcp_seq, tid, task, "
	 "tail, tls, stats) -> True when the event was the usual one and is done, False (nothing "
	 "changed) when Connection.on_data must take it"},
	{"stream_parsers", stream_parsers, METH_VARARGS,
	 "stream_parsers((ParserClass, ...), ParseResult.FRAME): the stream parsers without a "
	 "`whole` whose syscall step data() takes (Connection._whole the reference)"},
	{"setup", setup, METH_VARARGS,
	 "setup(Connection, Stream, ConnInfo, ParserState, Chunk): the classes data() reads "
	 "by slot, and the chunk type it builds"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef conn_module = {
	PyModuleDef_HEAD_INIT, "otel_ebpf._fast.conn",
	"A connection's usual data event in C; otel_ebpf/conntrack/connection.py is the reference.",
	-1, conn_methods,
};

PyMODINIT_FUNC PyInit_conn(void)
{
	if (!(s__whole = PyUnicode_InternFromString("_whole")) ||
	    !(s_piece = PyUnicode_InternFromString("piece")) ||
	    !(s__piece_done = PyUnicode_InternFromString("_piece_done")))
		return NULL;
	return PyModule_Create(&conn_module);
}
