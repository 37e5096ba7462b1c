/* SPDX-License-Identifier: Apache-2.0 */
/* A connection's data event on the common path, in one call.
 *
 * data(conn, direction, pos, msg_len, payload, start_ns, end_ns, tcp_seq, tid, task, tail,
 *      tls, stats) -> bool
 *
 * What otel_ebpf/conntrack/connection.py Connection.on_data does (the reference) when the
 * event is the usual one: a syscall's every byte, no tail, right where an empty stream
 * stands, on a connection whose parser has a one-call step for it (`conn.whole`: a
 * parser's compiled step, e.g. HTTP/1's protocols/http1/_parse.c whole). The step's frame
 * is finished here as on_data finishes it; when the step declines, Connection._whole runs
 * the general path, as on_data would.
 * False, with nothing changed, for every other event: the caller runs on_data.
 */
#include "slots.h"

/* set by setup(): the classes whose objects data() reads by slot, and Chunk */
static PyTypeObject *conn_type, *stream_type, *info_type, *state_type;
static PyObject *chunk_type, *s__whole, *s_size_attr; /* "size": a whole() frame's */
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

/* ---- the step of a stream parser with no `whole` (e.g. HTTP/2) -----------------------
 * Connection._whole, _parse and _finish_pending for a syscall at the head of an empty
 * stream (data() checked it), all its bytes captured: the parser is asked as _parse asks
 * it, first the whole payload, then what its answers left, and each answer is taken as
 * _parse takes it while it is the usual one (a FRAME, or NEED_MORE having consumed bytes,
 * within the syscall's bytes): a FRAME is stamped with where its first byte was (the
 * frame start a NEED_MORE of this or an earlier syscall left, else its own first byte),
 * a NEED_MORE leaves that frame start, and once every byte is consumed the frames end on
 * the syscall's last byte, as _finish_pending ends them. The usual gRPC syscalls are all
 * of this: a request with its DATA and WINDOW_UPDATEs (one FRAME), an answer's headers,
 * DATA and trailers (a FRAME) with the connection's WINDOW_UPDATE or PING after it (a
 * NEED_MORE that leads the next answer). Any other answer (INVALID, nothing consumed, a
 * skip past the syscall, a FRAME without a frame) goes on in Connection._parse and
 * _finish_pending from that answer, with the stream, the frames done so far and the
 * frame start as _parse would have left them. Only for parsers of the exact types given
 * to stream_parsers() (those whose class sets compiled_stream_step). */
static PyObject *stepped_types, *frame_result, *need_result, *frame_start_type, *s_parser,
	*s_parse, *s_release, *s__parse, *s__finish_pending, *s_direction, *s_stream_pos,
	*s_start_ns, *s_end_ns, *s_tid, *s_task, *s_tcp_seq, *s_size, *mask32;
static Py_ssize_t max_steps = 1; /* connection.MAX_PARSE_STEPS */
/* the timing fields of protocols.base.Frame, set by slot on a frame whose class has them
 * as Frame's own slots (checked once per class); any other frame by attribute */
enum { FR_DIRECTION, FR_STREAM_POS, FR_START_NS, FR_TCP_SEQ, FR_TID, FR_TASK, FR_END_NS,
       FR_SIZE, FR_N };
static struct slot frame_slots[FR_N] = {{"direction"}, {"stream_pos"}, {"start_ns"},
					{"tcp_seq"},   {"tid"},	       {"task"},
					{"end_ns"},    {"size"}};
static PyTypeObject *frame_base;
static PyObject *frame_descrs[FR_N];
#define FRAME_CLASSES 8
static PyTypeObject *frame_classes[FRAME_CLASSES]; /* checked: Frame's slots are theirs */

static int by_slot(PyObject *frame)
{
	PyTypeObject *t = Py_TYPE(frame);
	if (!frame_base)
		return 0;
	for (int i = 0; i < FRAME_CLASSES && frame_classes[i]; i++)
		if (frame_classes[i] == t)
			return 1;
	if (!PyType_IsSubtype(t, frame_base))
		return 0;
	for (int i = 0; i < FR_N; i++)
		if (_PyType_Lookup(t, PyDescr_NAME(frame_descrs[i])) != frame_descrs[i])
			return 0;
	for (int i = 0; i < FRAME_CLASSES; i++)
		if (!frame_classes[i]) {
			Py_INCREF(t);
			frame_classes[i] = t;
			break;
		}
	return 1;
}
/* frames one syscall may end here; more go on in _parse (a burst of answers in one write) */
#define STEP_FRAMES 16

static PyObject *stream_parsers(PyObject *self, PyObject *args)
{
	PyObject *types, *frame, *need, *start_type, *base;
	Py_ssize_t steps;
	if (!PyArg_ParseTuple(args, "O!OOO!nO!", &PyTuple_Type, &types, &frame, &need,
			      &PyType_Type, &start_type, &steps, &PyType_Type, &base))
		return NULL;
	if (!conn_type) {
		PyErr_SetString(PyExc_RuntimeError, "stream_parsers: setup() was not called");
		return NULL;
	}
	if (!PyType_IsSubtype((PyTypeObject *)start_type, &PyTuple_Type) || steps < 1) {
		PyErr_SetString(PyExc_TypeError,
				"stream_parsers: FrameStart must be a named tuple, steps >= 1");
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
	PyObject **keep[] = {&stepped_types, &frame_result, &need_result, &frame_start_type};
	PyObject *values[] = {types, frame, need, start_type};
	for (int i = 0; i < 4; i++) {
		Py_INCREF(values[i]);
		Py_XSETREF(*keep[i], values[i]);
	}
	if (!frame_base) {
		if (slots_of(base, frame_slots, FR_N))
			return NULL;
		for (int i = 0; i < FR_N; i++) {
			PyObject *name = PyUnicode_InternFromString(frame_slots[i].name);
			if (!name)
				return NULL;
			PyObject *d = _PyType_Lookup((PyTypeObject *)base, name);
			Py_DECREF(name);
			if (!d) {
				PyErr_SetString(PyExc_TypeError, "stream_parsers: Frame's slots");
				return NULL;
			}
			Py_INCREF(d);
			frame_descrs[i] = d;
		}
		Py_INCREF(base);
		frame_base = (PyTypeObject *)base;
	} else if (base != (PyObject *)frame_base) {
		PyErr_SetString(PyExc_TypeError, "stream_parsers: another Frame class");
		return NULL;
	}
	max_steps = steps;
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

/* a + b, a new reference */
static PyObject *plus(PyObject *a, Py_ssize_t b)
{
	PyObject *x = PyLong_FromSsize_t(b);
	if (!x)
		return NULL;
	PyObject *r = PyNumber_Add(a, x);
	Py_DECREF(x);
	return r;
}

/* Stream._start_at(head) with the syscall's chunk the only one held: the FrameStart of
 * the byte `off` bytes into it (time_of_first's sequence number: the chunk's, plus off) */
static PyObject *start_at(PyObject *const *fields, Py_ssize_t off)
{
	PyObject *at = plus(fields[0], off);
	if (!at)
		return NULL;
	PyObject *seq = Py_None;
	if (fields[5] != Py_None) {
		PyObject *sum = plus(fields[5], off);
		seq = sum ? PyNumber_And(sum, mask32) : NULL;
		Py_XDECREF(sum);
		if (!seq) {
			Py_DECREF(at);
			return NULL;
		}
	} else
		Py_INCREF(seq);
	PyObject *t = ((PyTypeObject *)frame_start_type)
			      ->tp_alloc((PyTypeObject *)frame_start_type, 5);
	if (!t) {
		Py_DECREF(at);
		Py_DECREF(seq);
		return NULL;
	}
	PyTuple_SET_ITEM(t, 0, at);
	Py_INCREF(fields[3]);
	PyTuple_SET_ITEM(t, 1, fields[3]);
	PyTuple_SET_ITEM(t, 2, seq);
	Py_INCREF(fields[6]);
	PyTuple_SET_ITEM(t, 3, fields[6]);
	Py_INCREF(fields[7]);
	PyTuple_SET_ITEM(t, 4, fields[7]);
	return t;
}

/* _stamp_start's: the frame begins where `start` (a FrameStart) says; 0 or -1 */
static int stamp(PyObject *frame, PyObject *direction, PyObject *start)
{
	if (!PyTuple_Check(start) || PyTuple_GET_SIZE(start) != 5) {
		PyErr_SetString(PyExc_TypeError, "stream_step: a frame start of 5 fields");
		return -1;
	}
	if (by_slot(frame)) {
		slot_set(frame, &frame_slots[FR_DIRECTION], direction);
		for (int i = 0; i < 5; i++) /* pos, ns, tcp_seq, tid, task: FrameStart's order */
			slot_set(frame, &frame_slots[FR_STREAM_POS + i], PyTuple_GET_ITEM(start, i));
		return 0;
	}
	return PyObject_SetAttr(frame, s_direction, direction) < 0 ||
			       PyObject_SetAttr(frame, s_stream_pos, PyTuple_GET_ITEM(start, 0)) < 0 ||
			       PyObject_SetAttr(frame, s_start_ns, PyTuple_GET_ITEM(start, 1)) < 0 ||
			       PyObject_SetAttr(frame, s_tcp_seq, PyTuple_GET_ITEM(start, 2)) < 0 ||
			       PyObject_SetAttr(frame, s_tid, PyTuple_GET_ITEM(start, 3)) < 0 ||
			       PyObject_SetAttr(frame, s_task, PyTuple_GET_ITEM(start, 4)) < 0 ?
		       -1 :
		       0;
}

/* _finish_pending's for a frame whose last byte, `end`, came with the syscall ending at
 * end_ns: its end and size, then into the state's frames; 0 or -1 */
static int end_frame(PyObject *frame, PyObject *end, PyObject *end_ns, PyObject *frames,
		     PyObject *out, PyObject *info)
{
	if (by_slot(frame) && slot_get(frame, &frame_slots[FR_START_NS]) &&
	    slot_get(frame, &frame_slots[FR_SIZE]) && slot_get(frame, &frame_slots[FR_STREAM_POS])) {
		PyObject *first = slot_get(frame, &frame_slots[FR_START_NS]);
		int later = PyObject_RichCompareBool(first, end_ns, Py_GT);
		if (later < 0)
			return -1;
		slot_set(frame, &frame_slots[FR_END_NS], later ? first : end_ns);
		int truth = PyObject_IsTrue(slot_get(frame, &frame_slots[FR_SIZE]));
		if (truth < 0)
			return -1;
		if (!truth) { /* frame.size or end - frame.stream_pos */
			PyObject *length = PyNumber_Subtract(
				end, slot_get(frame, &frame_slots[FR_STREAM_POS]));
			if (!length)
				return -1;
			slot_set(frame, &frame_slots[FR_SIZE], length);
			Py_DECREF(length);
		}
		return finish_frame(frames, out, info, frame);
	}
	PyObject *first = PyObject_GetAttr(frame, s_start_ns);
	if (!first)
		return -1;
	int later = PyObject_RichCompareBool(first, end_ns, Py_GT);
	int bad = later < 0 || PyObject_SetAttr(frame, s_end_ns, later ? first : end_ns) < 0;
	Py_DECREF(first);
	if (bad)
		return -1;
	PyObject *size = PyObject_GetAttr(frame, s_size);
	int truth = size ? PyObject_IsTrue(size) : -1;
	Py_XDECREF(size);
	if (truth < 0)
		return -1;
	if (!truth) { /* frame.size or end - frame.stream_pos */
		PyObject *from = PyObject_GetAttr(frame, s_stream_pos);
		PyObject *length = from ? PyNumber_Subtract(end, from) : NULL;
		Py_XDECREF(from);
		bad = !length || PyObject_SetAttr(frame, s_size, length) < 0;
		Py_XDECREF(length);
		if (bad)
			return -1;
	}
	return finish_frame(frames, out, info, frame);
}

/* the parser's answer to the syscall's bytes from `off` on, as _parse asks for them (the
 * stream's head there: time_at reads it) */
static PyObject *ask(PyObject *parse, PyObject *stream, PyObject *direction, PyObject *state,
		     PyObject *const *fields, Py_ssize_t off, Py_ssize_t n)
{
	PyObject *view;
	if (off) {
		PyObject *head = plus(fields[0], off);
		if (!head)
			return NULL;
		slot_set(stream, &stream_slots[S_HEAD], head);
		Py_DECREF(head);
		view = PyMemoryView_FromMemory(PyBytes_AS_STRING(fields[2]) + off, n - off,
					       PyBUF_READ);
	} else
		view = PyMemoryView_FromObject(fields[2]);
	if (!view)
		return NULL;
	PyObject *call[3] = {direction, view, state};
	PyObject *step = PyObject_Vectorcall(parse, call, 3, NULL);
	PyObject *released = PyObject_CallMethodNoArgs(view, s_release);
	Py_DECREF(view);
	if (!released) {
		Py_XDECREF(step);
		return NULL;
	}
	Py_DECREF(released);
	return step;
}

/* fields: the Chunk's (pos, end, payload, start_ns, end_ns, tcp_seq, tid, task); 0 or -1 */
static int stream_step(PyObject *conn, PyObject *stream, PyObject *state, PyObject *info,
		       PyObject *frames, PyObject *out, PyObject *direction, long d, Py_ssize_t n,
		       PyObject *const *fields, PyObject *stats)
{
	PyObject *end = fields[1], *end_ns = fields[4];
	PyObject *starts = slot_get(conn, &conn_slots[C_FRAME_START]);
	PyObject *pending = item_of(slot_get(conn, &conn_slots[C_PENDING]), d);
	if (!starts || !PyList_CheckExact(starts) || PyList_GET_SIZE(starts) != 2 || !pending ||
	    !PyList_Check(pending)) {
		PyErr_SetString(PyExc_TypeError, "stream_step: frame_start and pending lists");
		return -1;
	}
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
	PyObject *start = PyList_GET_ITEM(starts, d); /* the frame start held */
	Py_INCREF(start);
	PyObject *done[STEP_FRAMES]; /* frames ended, waiting for _finish_pending */
	Py_ssize_t done_end[STEP_FRAMES];
	int ndone = 0, ret = -1, finish = 1;
	Py_ssize_t off = 0, asked = 1;
	PyObject *step = ask(parse, stream, direction, state, fields, 0, n);
	for (;;) {
		if (!step)
			goto out;
		if (!PyTuple_Check(step) || PyTuple_GET_SIZE(step) != 3)
			break; /* _parse says what is wrong with it */
		PyObject *result = PyTuple_GET_ITEM(step, 0), *frame = PyTuple_GET_ITEM(step, 1),
			 *consumed = PyTuple_GET_ITEM(step, 2);
		Py_ssize_t c = PyLong_CheckExact(consumed) ? PyLong_AsSsize_t(consumed) : -1;
		if (c == -1 && PyErr_Occurred())
			PyErr_Clear(); /* not this case: _parse judges it */
		if (c <= 0 || c > n - off)
			break;
		if (result == frame_result && frame != Py_None && ndone < STEP_FRAMES) {
			/* _frame_done: stamped, then pending until its last byte's time */
			if (start == Py_None) {
				Py_DECREF(start);
				if (!(start = start_at(fields, off)))
					goto out;
			}
			if (stamp(frame, direction, start) < 0)
				goto out;
			Py_SETREF(start, Py_NewRef(Py_None));
			done[ndone] = Py_NewRef(frame);
			done_end[ndone++] = off + c;
		} else if (result == need_result) {
			if (start == Py_None) { /* the next frame begins here */
				Py_DECREF(start);
				if (!(start = start_at(fields, off)))
					goto out;
			}
		} else
			break;
		off += c;
		Py_CLEAR(step);
		if (off == n)
			break; /* _parse: nothing buffered, no hole ahead */
		if (asked++ >= max_steps) {
			finish = 0; /* _parse's loop ends; _finish_pending */
			break;
		}
		step = ask(parse, stream, direction, state, fields, off, n);
	}
	if (off == n && !step) { /* every byte consumed: _finish_pending, the chunk pruned */
		slot_set(stream, &stream_slots[S_HEAD], end);
		for (int i = 0; i < ndone; i++) {
			PyObject *last = plus(fields[0], done_end[i]);
			int bad = !last || end_frame(done[i], last, end_ns, frames, out, info) < 0;
			Py_XDECREF(last);
			if (bad)
				goto out;
		}
		if (PyList_SetSlice(times, 0, PyList_GET_SIZE(times), NULL) < 0)
			goto out;
		PyList_SetItem(starts, d, Py_NewRef(start));
		ret = 0;
		goto out;
	}
	/* the stream as _parse leaves it before this answer: head, buffer, pending, start */
	PyObject *head = plus(fields[0], off);
	if (!head)
		goto out;
	slot_set(stream, &stream_slots[S_HEAD], head);
	Py_DECREF(head);
	PyObject *buf = slot_get(stream, &stream_slots[S_BUF]);
	if (!buf || !PyByteArray_Check(buf)) {
		PyErr_SetString(PyExc_TypeError, "stream_step: buf must be a bytearray");
		goto out;
	}
	Py_ssize_t had = PyByteArray_GET_SIZE(buf);
	if (PyByteArray_Resize(buf, had + n - off) < 0)
		goto out;
	memcpy(PyByteArray_AS_STRING(buf) + had, PyBytes_AS_STRING(fields[2]) + off, n - off);
	for (int i = 0; i < ndone; i++) {
		PyObject *last = plus(fields[0], done_end[i]);
		PyObject *item = last ? PyTuple_Pack(2, done[i], last) : NULL;
		Py_XDECREF(last);
		int bad = !item || PyList_Append(pending, item) < 0;
		Py_XDECREF(item);
		if (bad)
			goto out;
	}
	PyList_SetItem(starts, d, Py_NewRef(start));
	PyObject *v;
	if (finish && step) {
		PyObject *pargs[4] = {conn, direction, stats, step};
		v = PyObject_VectorcallMethod(s__parse, pargs, 4 | PY_VECTORCALL_ARGUMENTS_OFFSET,
					      NULL);
		if (!v)
			goto out;
		Py_DECREF(v);
	}
	PyObject *fargs[2] = {conn, direction};
	v = PyObject_VectorcallMethod(s__finish_pending, fargs,
				      2 | PY_VECTORCALL_ARGUMENTS_OFFSET, NULL);
	if (!v)
		goto out;
	Py_DECREF(v);
	ret = 0;
out:
	for (int i = 0; i < ndone; i++)
		Py_DECREF(done[i]);
	Py_XDECREF(step);
	Py_DECREF(start);
	Py_DECREF(parse);
	return ret;
}

/* ---- a body piece: Connection._whole with `inside` ------------------------------------
 *
 * A syscall's every byte, at the head of a stream holding nothing, inside a message whose
 * head is past (frame_start set): when the parser's class has a compiled `piece` step
 * (e.g. HTTP/1's protocols/http1/_parse.c chunks) and that step takes every byte without
 * ending a frame, what _whole leaves after such a piece is done here (the head moves on, the
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

/* The stream holds nothing buffered, queued or timed: every byte it was given is parsed. */
static int stream_empty(PyObject *stream)
{
	return held(slot_get(stream, &stream_slots[S_BUF])) == 0 &&
	       held(slot_get(stream, &stream_slots[S_QUEUE])) == 0 &&
	       held(slot_get(stream, &stream_slots[S_TIMES])) == 0;
}

/* One direction's tracker state (borrowed): its pending frames, the frame begun, where
 * finished frames go (the parser state's list, the connection's frames_out or None). */
struct side {
	PyObject *pending, *frame_start, *frames, *out;
};

/* 1 when the direction is in step (not resyncing) and its state has the types the steps
 * here take, 0 otherwise (on_data's then) */
static int read_side(PyObject *conn, PyObject *state, long d, struct side *s)
{
	PyObject *resync = item_of(slot_get(conn, &conn_slots[C_RESYNC]), d);
	s->pending = item_of(slot_get(conn, &conn_slots[C_PENDING]), d);
	s->frame_start = item_of(slot_get(conn, &conn_slots[C_FRAME_START]), d);
	s->out = slot_get(conn, &conn_slots[C_FRAMES_OUT]);
	s->frames = item_of(slot_get(state, &state_frames), d);
	return resync == Py_False && s->pending && PyList_Check(s->pending) && s->frame_start &&
	       s->out && (s->out == Py_None || PyList_Check(s->out)) && s->frames &&
	       PyList_Check(s->frames);
}

/* ---- the bytes of a body skipped by length ----------------------------------------------
 *
 * A parser that ends a message's frame at its head, its body skipped by length (HTTP/1's
 * Content-Length, uncaptured bytes need not be read), leaves the frame pending until its
 * last byte comes and the stream's head past the body. A server that writes the head and
 * then the body (uvicorn), or a client that reads them as they come, makes the body a
 * syscall of its own: what on_data does with it (Stream.add, _parse with nothing to read,
 * _finish_pending) is done here when it continues the stream and stays inside the one
 * pending frame's bytes: the stream's known end and time move on, and the frame ends on the
 * syscall's last byte when that is the frame's. 1 done, 0 not this case (nothing changed),
 * -1 an error.
 */
static int skipped_body(PyObject *conn, PyObject *stream, PyObject *state, PyObject *info,
			PyObject *pos, Py_ssize_t n, PyObject *known_end, PyObject *head,
			PyObject *end_ns, long d)
{
	if (!s_start_ns || !frame_base)
		return 0; /* end_frame's names and Frame's slots: stream_parsers() not called */
	int cont = PyObject_RichCompareBool(pos, known_end, Py_EQ);
	if (cont <= 0)
		return cont;
	struct side side;
	if (!stream_empty(stream) || !read_side(conn, state, d, &side) ||
	    PyList_GET_SIZE(side.pending) != 1 || side.frame_start != Py_None)
		return 0;
	PyObject *pending = side.pending, *frames = side.frames, *out = side.out;
	PyObject *entry = PyList_GET_ITEM(pending, 0);
	if (!PyTuple_CheckExact(entry) || PyTuple_GET_SIZE(entry) != 2 ||
	    !PyLong_CheckExact(PyTuple_GET_ITEM(entry, 1)))
		return 0;
	PyObject *frame = PyTuple_GET_ITEM(entry, 0), *last = PyTuple_GET_ITEM(entry, 1);
	int ahead = PyObject_RichCompareBool(head, last, Py_EQ); /* the head past the body */
	if (ahead <= 0)
		return ahead;
	PyObject *end = plus(pos, n);
	if (!end)
		return -1;
	int beyond = PyObject_RichCompareBool(end, last, Py_GT);
	int reaches = beyond ? 0 : PyObject_RichCompareBool(end, last, Py_EQ);
	if (beyond || reaches < 0) { /* the next message's bytes too: on_data's */
		Py_DECREF(end);
		return beyond < 0 || reaches < 0 ? -1 : 0;
	}
	slot_set(conn, &conn_slots[C_LAST_NS], end_ns);
	int r = note_end(stream, end, end_ns);
	Py_DECREF(end);
	if (r < 0)
		return -1;
	if (reaches) { /* _finish_pending: its last byte's time is this syscall's end */
		PyObject *held_refs[] = {entry, pending, frames, out, info}; /* while code runs */
		for (int i = 0; i < 5; i++)
			Py_INCREF(held_refs[i]);
		r = end_frame(frame, last, end_ns, frames, out, info);
		if (r == 0)
			r = PyList_SetSlice(pending, 0, 1, NULL);
		for (int i = 0; i < 5; i++)
			Py_DECREF(held_refs[i]);
		if (r < 0)
			return -1;
	}
	return 1;
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
	if (!past && !at && n > 0 && PyBytes_GET_SIZE(payload) <= n) { /* behind the head */
		int r = skipped_body(conn, stream, state, info, pos, n, known_end, head, end_ns, d);
		if (r < 0)
			return NULL;
		if (r)
			Py_RETURN_TRUE;
		Py_RETURN_FALSE;
	}
	/* pos == stream.head, every byte captured, the stream holding nothing */
	struct side side;
	if (past || !at || n <= 0 || PyBytes_GET_SIZE(payload) != n || !stream_empty(stream) ||
	    !read_side(conn, state, d, &side) || PyList_GET_SIZE(side.pending) != 0)
		Py_RETURN_FALSE;
	PyObject *tcp = slot_get(conn, &conn_slots[C_TCP]);
	if (!tcp || !PyBool_Check(tcp))
		Py_RETURN_FALSE;
	PyObject *frame_start = side.frame_start, *out = side.out, *frames = side.frames;
	/* inside a message: a body piece, or on_data's (a stepped parser's step takes both) */
	if (frame_start != Py_None && whole != Py_None)
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
		if (!stream_step(conn, stream, state, info, frames, out, direction, d, n, fields,
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
	/* by slot where Frame's slots are known (the agent's case), else by name */
	PyObject *size = by_slot(frame) ? slot_get(frame, &frame_slots[FR_SIZE]) : NULL;
	size = size ? Py_NewRef(size) : PyObject_GetAttr(frame, s_size_attr);
	if (!size)
		goto done;
	int runs_on = PyLong_CheckExact(size) ? PyObject_RichCompareBool(size, msg_len, Py_GT) : 0;
	if (runs_on) { /* its body skipped by length runs on: _frame_done's head and pending */
		/* read again: whole() ran Python code (first_wanting, the maker) */
		PyObject *waiting = item_of(slot_get(conn, &conn_slots[C_PENDING]), d);
		PyObject *last = runs_on > 0 && waiting && PyList_Check(waiting) ?
			PyNumber_Add(pos, size) : NULL;
		PyObject *entry = last ? PyTuple_Pack(2, frame, last) : NULL;
		if (entry)
			slot_set(stream, &stream_slots[S_HEAD], last);
		int bad = !entry || PyList_Append(waiting, entry) < 0;
		if (bad && !PyErr_Occurred())
			PyErr_SetString(PyExc_TypeError, "data: the connection's pending lists");
		Py_XDECREF(entry);
		Py_XDECREF(last);
		Py_DECREF(size);
		if (!bad)
			result = Py_True;
		goto done;
	}
	Py_DECREF(size);
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
	    !(s_size_attr = PyUnicode_InternFromString("size")) ||
	    !(s_piece = PyUnicode_InternFromString("piece")) ||
	    !(s__piece_done = PyUnicode_InternFromString("_piece_done")))
		return NULL;
	return PyModule_Create(&conn_module);
}
