/* SPDX-License-Identifier: Apache-2.0 */
/* HTTP/2's frame loop in C.
 *
 * parse(direction, buf, state) -> (ParseResult, frame or None, consumed)
 *
 * What protocols/http2/parse.py parse does (the reference, kept behind its COMPILED flag):
 * for a direction already aligned on frames (the preface and a first frame judged), the
 * bytes are split into frames here, with the frame checks of `_frames`, the usual gRPC
 * DATA frame (whole, one length-prefixed message, no body wanted) counted here, and the
 * byte counts and marks of `_done`. A whole header block found in its decoder's
 * reused-block table goes to `_request_block` / `_response_block` from here; any other
 * goes to the Python `_block` (the HPACK walk, which fills that table), every other DATA
 * frame to
 * `_data`, every other frame with a handler to its handler. Anything the loop does not
 * know (the preface, a direction not aligned, an object of another type) goes to the
 * Python `parse` with nothing changed.
 */
#include "slots.h"

static PyTypeObject *state_type, *side_type, *stream_type, *req_type, *resp_type, *msgs_type;
static PyObject *head_type, *hyper_error, *py_parse, *py_data, *py_block, *handlers, *py_ignore;
static PyObject *r_need, *r_frame, *r_invalid;

enum { T_SIDES, T_STREAMS, T_REQUESTS, T_N };
static struct slot state_slots[T_N] = {{"sides"}, {"streams"}, {"requests"}};
enum { D_BLOCK, D_BLOCK_STREAM, D_BLOCK_FLAGS, D_BLOCK_TYPE, D_BLOCK_HEAD, D_BLOCK_ARRIVAL,
       D_BLOCK_WIRE, D_OFFSET, D_EPOCH, D_MARK, D_MARK_ARRIVAL, D_ALIGNED, D_MAX_FRAME,
       D_EXPECT, D_OLD, D_ARRIVAL, D_PREFACE, D_TRUST, D_N };
static struct slot side_slots[D_N] = {
	{"block"}, {"block_stream"}, {"block_flags"}, {"block_type"}, {"block_head"},
	{"block_arrival"}, {"block_wire"}, {"offset"}, {"epoch"}, {"mark"}, {"mark_arrival"},
	{"aligned"}, {"max_frame"}, {"expect"}, {"old"}, {"arrival"}, {"preface"}, {"trust"}};
static struct slot stream_request = {"request"}, stream_response = {"response"};
enum { M_SIZE, M_DATA_SIZE, M_MESSAGES, M_BODY, M_ENDED, M_MARK, M_EPOCH, M_EXACT, M_HEAD,
       M_HEAD_ARRIVAL, M_N };
#define MESSAGE_SLOTS                                                                     \
	{{"size"}, {"data_size"}, {"messages"}, {"body"}, {"ended"}, {"mark"}, {"epoch"},  \
	 {"exact"}, {"head"}, {"head_arrival"}}
static struct slot req_slots[M_N] = MESSAGE_SLOTS, resp_slots[M_N] = MESSAGE_SLOTS;
enum { G_COUNT, G_SIZE, G_BODY_LEFT, G_PREFIX, G_EXACT, G_N };
static struct slot msgs_slots[G_N] = {{"count"}, {"size"}, {"body_left"}, {"prefix"}, {"exact"}};
static const char *const message_names[M_N] = {"size", "data_size", "messages", "body", "ended",
					       "mark", "epoch", "exact", "head", "head_arrival"};

#define HEADER_LEN 9
#define PREFIX_LEN 5
enum { DATA, HEADERS, PRIORITY, RST_STREAM, SETTINGS, PUSH_PROMISE, PING, GOAWAY,
       WINDOW_UPDATE, CONTINUATION };
enum { END_STREAM = 0x01, END_HEADERS = 0x04, PADDED = 0x08, HAS_PRIORITY = 0x20 };

static PyObject *setup(PyObject *self, PyObject *args)
{
	PyObject *st, *sd, *sm, *rq, *rs, *ms, *hd, *he, *pp, *pd, *pb, *hs, *pi, *rn, *rf, *ri;
	if (!PyArg_ParseTuple(args, "O!O!O!O!O!O!O!OOOOO!OOOO", &PyType_Type, &st, &PyType_Type,
			      &sd, &PyType_Type, &sm, &PyType_Type, &rq, &PyType_Type, &rs,
			      &PyType_Type, &ms, &PyType_Type, &hd, &he, &pp, &pd, &pb,
			      &PyDict_Type, &hs, &pi, &rn, &rf, &ri))
		return NULL;
	if (!PyType_IsSubtype((PyTypeObject *)hd, &PyTuple_Type)) {
		PyErr_SetString(PyExc_TypeError, "setup: Head must be a named tuple");
		return NULL;
	}
	if (slots_of(st, state_slots, T_N) || slots_of(sd, side_slots, D_N) ||
	    slots_of(sm, &stream_request, 1) || slots_of(sm, &stream_response, 1) ||
	    slots_of(rq, req_slots, M_N) || slots_of(rs, resp_slots, M_N) ||
	    slots_of(ms, msgs_slots, G_N))
		return NULL;
	PyObject **keep[] = {(PyObject **)&state_type, (PyObject **)&side_type,
			     (PyObject **)&stream_type, (PyObject **)&req_type,
			     (PyObject **)&resp_type, (PyObject **)&msgs_type, &head_type,
			     &hyper_error, &py_parse, &py_data, &py_block, &handlers, &py_ignore,
			     &r_need, &r_frame, &r_invalid};
	PyObject *values[] = {st, sd, sm, rq, rs, ms, hd, he, pp, pd, pb, hs, pi, rn, rf, ri};
	for (size_t i = 0; i < sizeof(values) / sizeof(values[0]); i++) {
		Py_INCREF(values[i]);
		Py_XSETREF(*keep[i], values[i]);
	}
	Py_RETURN_NONE;
}

/* a frame's slots when it is one of the two message types; NULL: another object */
static inline struct slot *message_slots(PyObject *o)
{
	if (Py_IS_TYPE(o, req_type))
		return req_slots;
	if (Py_IS_TYPE(o, resp_type))
		return resp_slots;
	return NULL;
}

/* field i of a message (new reference), by slot where its type is known */
static PyObject *field_get(PyObject *o, int i)
{
	struct slot *s = message_slots(o);
	if (s) {
		PyObject *v = slot_get(o, &s[i]);
		if (!v) {
			PyErr_Format(PyExc_AttributeError, "%s", message_names[i]);
			return NULL;
		}
		Py_INCREF(v);
		return v;
	}
	return PyObject_GetAttrString(o, message_names[i]);
}

static int field_set(PyObject *o, int i, PyObject *v)
{
	struct slot *s = message_slots(o);
	if (s) {
		slot_set(o, &s[i], v);
		return 0;
	}
	return PyObject_SetAttrString(o, message_names[i], v);
}

/* f.sane for a frame that is not DATA, HEADERS or WINDOW_UPDATE */
static int sane(long long length, int kind, int flags, unsigned long stream, long long max_len)
{
	if (kind <= HEADERS)
		return length <= max_len && stream != 0;
	if (length > max_len)
		return 0;
	int on_stream = kind == DATA || kind == HEADERS || kind == PRIORITY ||
			kind == RST_STREAM || kind == PUSH_PROMISE || kind == CONTINUATION;
	int on_conn = kind == SETTINGS || kind == PING || kind == GOAWAY;
	if ((on_stream && !stream) || (on_conn && stream))
		return 0;
	long long fixed = kind == PRIORITY ? 5 : kind == RST_STREAM ? 4 : kind == PING ? 8 :
			  kind == WINDOW_UPDATE ? 4 : -1;
	if (fixed >= 0 && length != fixed)
		return 0;
	if (kind == SETTINGS)
		return length % 6 == 0 && !((flags & 0x01) && length);
	return kind != GOAWAY || length >= 8;
}

/* _done: the marks and counts of the direction; steals `frame` (may be NULL: none) */
static PyObject *done(PyObject *side, Py_ssize_t n, PyObject *result, PyObject *frame,
		      long long consumed)
{
	PyObject *out = NULL;
	if (result == r_invalid) {
		slot_set(side, &side_slots[D_TRUST], Py_False);
		Py_XDECREF(frame);
		return Py_BuildValue("(OOL)", r_invalid, Py_None, consumed);
	}
	slot_set(side, &side_slots[D_TRUST], Py_True);
	long long offset, old;
	if (ll_of(slot_get(side, &side_slots[D_OFFSET]), &offset) ||
	    ll_of(slot_get(side, &side_slots[D_OLD]), &old)) {
		PyErr_SetString(PyExc_TypeError, "parse: a side's offset and old must be ints");
		goto fail;
	}
	if (consumed) {
		PyObject *mark = slot_get(side, &side_slots[D_MARK]);
		if (!mark || mark == Py_None) {
			if (set_ll(side, &side_slots[D_MARK], offset))
				goto fail;
			PyObject *arrival = slot_get(side, &side_slots[D_ARRIVAL]);
			slot_set(side, &side_slots[D_MARK_ARRIVAL],
				 old <= 0 && arrival ? arrival : Py_None);
		}
		offset += consumed;
		if (set_ll(side, &side_slots[D_OFFSET], offset) ||
		    set_ll(side, &side_slots[D_OLD], old - consumed > 0 ? old - consumed : 0))
			goto fail;
	}
	if (set_ll(side, &side_slots[D_EXPECT], consumed <= n ? n - consumed : 0))
		goto fail;
	if (frame) {
		PyObject *mark = slot_get(side, &side_slots[D_MARK]);
		PyObject *m = mark && mark != Py_None ? (Py_INCREF(mark), mark) :
							PyLong_FromLongLong(offset);
		if (!m)
			goto fail;
		PyObject *epoch = slot_get(side, &side_slots[D_EPOCH]);
		if (field_set(frame, M_MARK, m) < 0 ||
		    field_set(frame, M_EPOCH, epoch ? epoch : Py_None) < 0) {
			Py_DECREF(m);
			goto fail;
		}
		PyObject *head = field_get(frame, M_HEAD);
		int exact = head ? PyObject_RichCompareBool(head, m, Py_EQ) : -1;
		Py_XDECREF(head);
		Py_DECREF(m);
		if (exact < 0)
			goto fail;
		PyObject *mark_arrival = slot_get(side, &side_slots[D_MARK_ARRIVAL]);
		if (!exact && mark_arrival && mark_arrival != Py_None) {
			PyObject *ha = field_get(frame, M_HEAD_ARRIVAL);
			exact = ha ? PyObject_RichCompareBool(mark_arrival, ha, Py_EQ) : -1;
			Py_XDECREF(ha);
			if (exact < 0)
				goto fail;
		}
		if (field_set(frame, M_EXACT, exact ? Py_True : Py_False) < 0)
			goto fail;
		slot_set(side, &side_slots[D_MARK], Py_None);
	}
	out = Py_BuildValue("(OOL)", result, frame ? frame : Py_None, consumed);
fail:
	Py_XDECREF(frame);
	return out;
}

/* an int slot added to by delta; the slot is known to hold an exact int */
static inline int slot_add(PyObject *o, const struct slot *s, long long delta)
{
	long long v;
	if (ll_of(slot_get(o, s), &v)) {
		PyErr_SetString(PyExc_TypeError, "parse: an int was expected");
		return -1;
	}
	return set_ll(o, s, v + delta);
}

/* the usual gRPC DATA frame, counted as _data counts it. 1: done, *message set to the
 * response it ends (new reference) or NULL; 0: not the usual one, nothing changed (the
 * Python _data takes it); -1: error */
static int data_fast(const unsigned char *b, Py_ssize_t n, Py_ssize_t pos, long long length,
		     int flags, unsigned long stream_id, PyObject *streams, int requests,
		     PyObject **message)
{
	*message = NULL;
	if (flags & PADDED || length < PREFIX_LEN || pos + HEADER_LEN + length > n)
		return 0;
	PyObject *key = PyLong_FromUnsignedLong(stream_id);
	if (!key)
		return -1;
	PyObject *st = PyDict_GetItemWithError(streams, key); /* borrowed */
	if (!st) {
		Py_DECREF(key);
		return PyErr_Occurred() ? -1 : 1; /* no such stream: nothing to count */
	}
	if (!Py_IS_TYPE(st, stream_type))
		goto other;
	PyObject *m = slot_get(st, requests ? &stream_request : &stream_response);
	if (!m)
		goto other;
	if (m == Py_None) {
		Py_DECREF(key);
		return 1;
	}
	struct slot *s = message_slots(m);
	if (!s)
		goto other;
	PyObject *ended = slot_get(m, &s[M_ENDED]);
	if (ended != Py_True && ended != Py_False)
		goto other;
	if (requests && ended == Py_True) {
		Py_DECREF(key);
		return 1;
	}
	PyObject *msgs = slot_get(m, &s[M_MESSAGES]);
	if (slot_get(m, &s[M_BODY]) != Py_None || !msgs || !Py_IS_TYPE(msgs, msgs_type))
		goto other;
	PyObject *prefix = slot_get(msgs, &msgs_slots[G_PREFIX]);
	PyObject *body_left = slot_get(msgs, &msgs_slots[G_BODY_LEFT]);
	long long left;
	if (slot_get(msgs, &msgs_slots[G_EXACT]) != Py_True || !prefix ||
	    !PyByteArray_CheckExact(prefix) || PyByteArray_GET_SIZE(prefix) ||
	    ll_of(body_left, &left) || left)
		goto other;
	const unsigned char *p = b + pos + HEADER_LEN;
	unsigned long prefixed = (unsigned long)p[1] << 24 | (unsigned long)p[2] << 16 |
				 (unsigned long)p[3] << 8 | p[4];
	long long v;
	if (p[0] > 1 || (long long)prefixed != length - PREFIX_LEN ||
	    ll_of(slot_get(m, &s[M_SIZE]), &v) || ll_of(slot_get(m, &s[M_DATA_SIZE]), &v) ||
	    ll_of(slot_get(msgs, &msgs_slots[G_COUNT]), &v) ||
	    ll_of(slot_get(msgs, &msgs_slots[G_SIZE]), &v))
		goto other;
	if (slot_add(m, &s[M_SIZE], HEADER_LEN + length) ||
	    slot_add(m, &s[M_DATA_SIZE], length) || slot_add(msgs, &msgs_slots[G_COUNT], 1) ||
	    slot_add(msgs, &msgs_slots[G_SIZE], (long long)prefixed)) {
		Py_DECREF(key);
		return -1;
	}
	if (flags & END_STREAM) { /* _end */
		slot_set(m, &s[M_ENDED], Py_True);
		if (!requests) {
			Py_INCREF(m); /* the table held it through its stream */
			if (PyObject_DelItem(streams, key) < 0) {
				Py_DECREF(m);
				Py_DECREF(key);
				return -1;
			}
			*message = m;
		}
	}
	Py_DECREF(key);
	return 1;
other:
	Py_DECREF(key);
	return 0;
}

/* ---- a header block the decoder has seen before, as _block and decode_block read it ----
 * set by setup_blocks(): the decoder's reused-block table (HeaderDecoder.decoded;
 * docs/decisions.md, "gRPC unary calls in compiled steps") is looked up here; a block
 * found there for the table's version is handed to _request_block / _response_block, any
 * other goes to the Python _block (the HPACK walk, which keeps the table). */
static PyTypeObject *decoder_type, *block_type;
static PyObject *py_request_block, *py_response_block;
enum { H_DECODED, H_VERSION, H_UNKNOWN_FIELDS, H_N };
static struct slot decoder_slots[H_N] = {{"decoded"}, {"version"}, {"unknown_fields"}};
static struct slot block_unknown = {"unknown"}, side_decoder = {"decoder"};

static PyObject *setup_blocks(PyObject *self, PyObject *args)
{
	PyObject *dec, *blk, *rq, *rs;
	if (!PyArg_ParseTuple(args, "O!O!OO", &PyType_Type, &dec, &PyType_Type, &blk, &rq, &rs))
		return NULL;
	if (!side_type) {
		PyErr_SetString(PyExc_RuntimeError, "setup_blocks: setup() was not called");
		return NULL;
	}
	if (slots_of(dec, decoder_slots, H_N) || slots_of(blk, &block_unknown, 1) ||
	    slots_of((PyObject *)side_type, &side_decoder, 1))
		return NULL;
	PyObject **keep[] = {(PyObject **)&decoder_type, (PyObject **)&block_type,
			     &py_request_block, &py_response_block};
	PyObject *values[] = {dec, blk, rq, rs};
	for (int i = 0; i < 4; i++) {
		Py_INCREF(values[i]);
		Py_XSETREF(*keep[i], values[i]);
	}
	Py_RETURN_NONE;
}

/* ---- an answer's header block, as _response_block reads it ---------------------------
 * set by setup_answers(): for a reused block whose reader already derived its fields
 * (Block.derived: status, whether grpc-status came, grpc-status, grpc-message), on an open
 * stream whose request wants no layer, on a connection that keeps no header fields: the
 * answer's first (non-1xx) block or a later one (trailers), the answer made by the
 * reader's own maker (_new_response) when it is the first, and the stream ended with
 * END_STREAM, in _response_block's order. Every other block is _response_block's, before
 * anything is changed for it. */
static PyObject *new_response;
static struct slot block_known = {"known"}, block_derived = {"derived"},
		   state_capture = {"capture_headers"};
enum { A_LAYER, A_FINAL, A_STATUS, A_CONTENT_TYPE, A_USER_AGENT, A_UNKNOWN_FIELDS, A_TRAILERS,
       A_GRPC_STATUS, A_GRPC_MESSAGE, A_N };
static struct slot answer_slots[A_N] = {
	{"layer"}, {"final"}, {"status"}, {"content_type"}, {"user_agent"}, {"unknown_fields"},
	{"trailers"}, {"grpc_status"}, {"grpc_message"}};
static struct slot request_layer = {"layer"}, request_started = {"response_started"};
static PyObject *k_content_type, *k_user_agent;

static PyObject *new_request, *k_status;
static struct slot state_last_request = {"last_request_id"}, state_max_streams = {"max_streams"};

static PyObject *setup_answers(PyObject *self, PyObject *args)
{
	PyObject *make, *make_request;
	if (!PyArg_ParseTuple(args, "OO", &make, &make_request))
		return NULL;
	if (!block_type || !resp_type) {
		PyErr_SetString(PyExc_RuntimeError, "setup_answers: setup_blocks() first");
		return NULL;
	}
	if (slots_of((PyObject *)block_type, &block_known, 1) ||
	    slots_of((PyObject *)block_type, &block_derived, 1) ||
	    slots_of((PyObject *)state_type, &state_capture, 1) ||
	    slots_of((PyObject *)resp_type, answer_slots, A_N) ||
	    slots_of((PyObject *)req_type, &request_layer, 1) ||
	    slots_of((PyObject *)req_type, &request_started, 1) ||
	    slots_of((PyObject *)state_type, &state_last_request, 1) ||
	    slots_of((PyObject *)state_type, &state_max_streams, 1))
		return NULL;
	if (!k_content_type && (!(k_content_type = PyUnicode_InternFromString("content-type")) ||
				!(k_user_agent = PyUnicode_InternFromString("user-agent")) ||
				!(k_status = PyUnicode_InternFromString(":status"))))
		return NULL;
	Py_INCREF(make);
	Py_XSETREF(new_response, make);
	Py_INCREF(make_request);
	Py_XSETREF(new_request, make_request);
	Py_RETURN_NONE;
}

/* Messages(): what its __init__ sets (no counts yet, an empty prefix, exact), without a
 * Python frame; a new reference */
static PyObject *new_messages(void)
{
	PyObject *m = msgs_type->tp_alloc(msgs_type, 0);
	if (!m)
		return NULL;
	PyObject *prefix = PyByteArray_FromStringAndSize(NULL, 0);
	if (!prefix || set_ll(m, &msgs_slots[G_COUNT], 0) < 0 ||
	    set_ll(m, &msgs_slots[G_SIZE], 0) < 0 || set_ll(m, &msgs_slots[G_BODY_LEFT], 0) < 0) {
		Py_XDECREF(prefix);
		Py_DECREF(m);
		return NULL;
	}
	slot_set(m, &msgs_slots[G_PREFIX], prefix);
	Py_DECREF(prefix);
	slot_set(m, &msgs_slots[G_EXACT], Py_True);
	return m;
}

/* self += more, for an int slot; 0 or -1 */
static int add_to(PyObject *o, const struct slot *s, PyObject *more)
{
	PyObject *sum = PyNumber_Add(slot_get(o, s), more);
	if (!sum)
		return -1;
	Py_XSETREF(*(PyObject **)((char *)o + s->offset), sum);
	return 0;
}

/* _response_block's usual case: a new reference (None, or the answer it ends), *taken 1;
 * NULL with *taken 0 (no error set): the block is _response_block's */
static PyObject *answer_block(PyObject *state, PyObject *side, PyObject *block, int *taken)
{
	*taken = 0;
	if (!new_response || slot_get(state, &state_capture) != Py_False)
		return NULL;
	PyObject *derived = slot_get(block, &block_derived);
	PyObject *known = slot_get(block, &block_known);
	PyObject *unknown = slot_get(block, &block_unknown);
	PyObject *streams = slot_get(state, &state_slots[T_STREAMS]);
	PyObject *id = slot_get(side, &side_slots[D_BLOCK_STREAM]);
	long long flags;
	if (!derived || !PyTuple_CheckExact(derived) || PyTuple_GET_SIZE(derived) != 4 ||
	    !known || !PyDict_CheckExact(known) || !unknown || !PyLong_CheckExact(unknown) ||
	    !streams || !PyDict_Check(streams) || !id || !PyLong_CheckExact(id) ||
	    ll_of(slot_get(side, &side_slots[D_BLOCK_FLAGS]), &flags) < 0)
		return NULL;
	PyObject *stream = PyDict_GetItemWithError(streams, id);
	if (!stream) {
		if (PyErr_Occurred())
			*taken = 1; /* the error is the call's */
		return NULL;
	}
	if (!Py_IS_TYPE(stream, stream_type))
		return NULL;
	PyObject *request = slot_get(stream, &stream_request);
	PyObject *response = slot_get(stream, &stream_response);
	if (!request || !response || !Py_IS_TYPE(request, req_type))
		return NULL;
	PyObject *status = PyTuple_GET_ITEM(derived, 0);
	PyObject *has_grpc = PyTuple_GET_ITEM(derived, 1);
	int first = 1;
	if (response == Py_None) {
		if (slot_get(request, &request_layer) != Py_None)
			return NULL; /* the answer's body is read for a layer */
	} else {
		if (!Py_IS_TYPE(response, resp_type))
			return NULL;
		for (int i = 0; i < A_N; i++)
			if (!slot_get(response, &answer_slots[i]))
				return NULL;
		PyObject *final = slot_get(response, &answer_slots[A_FINAL]);
		if (slot_get(response, &answer_slots[A_LAYER]) != Py_None || !PyBool_Check(final) ||
		    !slot_get(response, &resp_slots[M_SIZE]))
			return NULL;
		first = final == Py_False;
	}
	if (!PyBool_Check(has_grpc) || (status != Py_None && !PyLong_CheckExact(status)))
		return NULL;
	if (first && status != Py_None) { /* a 1xx is an interim answer: the reference's */
		long long code;
		if (ll_of(status, &code) < 0)
			return NULL;
		if (code >= 100 && code < 200)
			return NULL;
	}
	/* from here on, _response_block's steps */
	*taken = 1;
	Py_INCREF(stream);
	PyObject *made = NULL, *result = NULL;
	if (response == Py_None) {
		PyObject *margs[7] = {id, id, slot_get(side, &side_slots[D_BLOCK_HEAD]),
				      slot_get(side, &side_slots[D_EPOCH]), Py_None, Py_None, NULL};
		for (int i = 2; i < 4; i++)
			if (!margs[i]) {
				PyErr_SetString(PyExc_AttributeError, "answer_block: side unset");
				goto done;
			}
		if (!(margs[6] = new_messages()))
			goto done;
		made = PyObject_Vectorcall(new_response, margs, 7, NULL);
		Py_DECREF(margs[6]);
		if (!made)
			goto done;
		if (!Py_IS_TYPE(made, resp_type)) {
			PyErr_SetString(PyExc_TypeError, "answer_block: the maker's answer");
			goto done;
		}
		slot_set(stream, &stream_response, made);
		slot_set(request, &request_started, Py_True);
		response = made;
	}
	PyObject *wire = slot_get(side, &side_slots[D_BLOCK_WIRE]);
	if (!wire) {
		PyErr_SetString(PyExc_AttributeError, "answer_block: block_wire unset");
		goto done;
	}
	if (add_to(response, &resp_slots[M_SIZE], wire) < 0)
		goto done;
	if (first) {
		slot_set(response, &answer_slots[A_FINAL], Py_True);
		slot_set(response, &answer_slots[A_STATUS], status);
		PyObject *ct = PyDict_GetItemWithError(known, k_content_type);
		if (!ct && PyErr_Occurred())
			goto done;
		slot_set(response, &answer_slots[A_CONTENT_TYPE], ct ? ct : Py_None);
		PyObject *ua = PyDict_GetItemWithError(known, k_user_agent);
		if (!ua && PyErr_Occurred())
			goto done;
		slot_set(response, &answer_slots[A_USER_AGENT], ua ? ua : Py_None);
	} else {
		slot_set(response, &answer_slots[A_TRAILERS], Py_True);
	}
	if (add_to(response, &answer_slots[A_UNKNOWN_FIELDS], unknown) < 0)
		goto done;
	if (has_grpc == Py_True) {
		slot_set(response, &answer_slots[A_GRPC_STATUS], PyTuple_GET_ITEM(derived, 2));
		slot_set(response, &answer_slots[A_GRPC_MESSAGE], PyTuple_GET_ITEM(derived, 3));
	}
	if (flags & END_STREAM) { /* _end: the stream is done */
		slot_set(response, &resp_slots[M_ENDED], Py_True);
		Py_INCREF(response);
		if (PyObject_DelItem(streams, id) < 0) {
			Py_DECREF(response);
			goto done;
		}
		result = response;
	} else
		result = Py_NewRef(Py_None);
done:
	Py_XDECREF(made);
	Py_DECREF(stream);
	return result;
}

/* ---- a request's header block, as _request_block reads it ----------------------------
 * set by setup_answers() too: for a reused block whose reader already derived the
 * request's fields (method, path, scheme, authority, layer, carrier), wanted by no layer,
 * opening a new stream (odd, past the last request's id, no END_STREAM: a request that
 * is all headers, trailers and the stream table's bound are the reference's), on a
 * connection that keeps no header fields: the request made by the reader's own maker
 * (_new_request), its stream opened. Every other block is _request_block's, before
 * anything is changed for it. */
static PyObject *request_block(PyObject *state, PyObject *side, PyObject *block, int *taken)
{
	*taken = 0;
	if (!new_request || slot_get(state, &state_capture) != Py_False)
		return NULL;
	PyObject *derived = slot_get(block, &block_derived);
	PyObject *known = slot_get(block, &block_known);
	PyObject *unknown = slot_get(block, &block_unknown);
	PyObject *streams = slot_get(state, &state_slots[T_STREAMS]);
	PyObject *id = slot_get(side, &side_slots[D_BLOCK_STREAM]);
	long long flags, stream_id, last, bound;
	if (!derived || !PyTuple_CheckExact(derived) || PyTuple_GET_SIZE(derived) != 6 ||
	    PyTuple_GET_ITEM(derived, 4) != Py_None || !known || !PyDict_CheckExact(known) ||
	    !unknown || !streams || !PyDict_Check(streams) || ll_of(id, &stream_id) < 0 ||
	    ll_of(slot_get(side, &side_slots[D_BLOCK_FLAGS]), &flags) < 0 ||
	    ll_of(slot_get(state, &state_last_request), &last) < 0 ||
	    ll_of(slot_get(state, &state_max_streams), &bound) < 0 || flags & END_STREAM ||
	    !(stream_id % 2) || stream_id <= last)
		return NULL;
	PyObject *carrier = PyTuple_GET_ITEM(derived, 5);
	if (!PyDict_CheckExact(carrier))
		return NULL;
	Py_ssize_t open = PyObject_Size(streams);
	if (open < 0) {
		*taken = 1;
		return NULL;
	}
	if (open + 1 > bound)
		return NULL; /* the oldest stream is dropped: the reference's */
	int in = PyDict_Contains(streams, id);
	int answer = in ? in : PyDict_Contains(known, k_status);
	if (in < 0 || answer < 0) {
		*taken = 1;
		return NULL;
	}
	if (in || answer)
		return NULL; /* trailers of an open stream, or not a request */
	PyObject *fields[5] = {slot_get(side, &side_slots[D_BLOCK_WIRE]),
			       slot_get(side, &side_slots[D_BLOCK_HEAD]),
			       slot_get(side, &side_slots[D_EPOCH]),
			       slot_get(side, &side_slots[D_BLOCK_ARRIVAL]), NULL};
	for (int i = 0; i < 4; i++)
		if (!fields[i])
			return NULL;
	/* from here on, _request_block's steps */
	*taken = 1;
	PyObject *ct = PyDict_GetItemWithError(known, k_content_type);
	if (!ct && PyErr_Occurred())
		return NULL;
	PyObject *ua = PyDict_GetItemWithError(known, k_user_agent);
	if (!ua && PyErr_Occurred())
		return NULL;
	PyObject *copy = PyDict_GET_SIZE(carrier) ? PyDict_Copy(carrier) : PyDict_New();
	if (!copy)
		return NULL;
	PyObject *messages = new_messages();
	if (!messages) {
		Py_DECREF(copy);
		return NULL;
	}
	PyObject *margs[18] = {id,
			       id,
			       Py_None,
			       Py_None,
			       PyTuple_GET_ITEM(derived, 0),
			       PyTuple_GET_ITEM(derived, 1),
			       PyTuple_GET_ITEM(derived, 2),
			       PyTuple_GET_ITEM(derived, 3),
			       Py_False,
			       fields[0],
			       fields[1],
			       fields[2],
			       copy,
			       ct ? ct : Py_None,
			       ua ? ua : Py_None,
			       unknown,
			       fields[3],
			       messages};
	PyObject *request = PyObject_Vectorcall(new_request, margs, 18, NULL);
	Py_DECREF(copy);
	Py_DECREF(messages);
	if (!request)
		return NULL;
	/* _Stream(request): its __init__ sets these two slots and nothing else */
	PyObject *stream = stream_type->tp_alloc(stream_type, 0);
	if (!stream) {
		Py_DECREF(request);
		return NULL;
	}
	slot_set(stream, &stream_request, request);
	slot_set(stream, &stream_response, Py_None);
	slot_set(state, &state_last_request, id);
	int bad = PyObject_SetItem(streams, id, stream);
	Py_DECREF(stream);
	if (bad) {
		Py_DECREF(request);
		return NULL;
	}
	return request;
}

/* _block for a HEADERS block (not PUSH_PROMISE): new reference (None, a message), NULL on
 * error */
static PyObject *header_block(PyObject *state, PyObject *side, int requests, PyObject *bytes)
{
	PyObject *reqflag = requests ? Py_True : Py_False;
	PyObject *decoder = slot_get(side, &side_decoder);
	if (decoder_type && decoder && Py_IS_TYPE(decoder, decoder_type)) {
		PyObject *decoded = slot_get(decoder, &decoder_slots[H_DECODED]);
		PyObject *seen = decoded && PyDict_CheckExact(decoded) ?
					 PyDict_GetItemWithError(decoded, bytes) : NULL;
		if (!seen && PyErr_Occurred())
			return NULL;
		PyObject *version = slot_get(decoder, &decoder_slots[H_VERSION]);
		if (seen && PyTuple_CheckExact(seen) && PyTuple_GET_SIZE(seen) == 2 && version &&
		    Py_IS_TYPE(PyTuple_GET_ITEM(seen, 1), block_type)) {
			PyObject *block = PyTuple_GET_ITEM(seen, 1);
			int same = PyObject_RichCompareBool(PyTuple_GET_ITEM(seen, 0), version, Py_EQ);
			if (same < 0)
				return NULL;
			PyObject *unknown = slot_get(block, &block_unknown);
			PyObject *fields = slot_get(decoder, &decoder_slots[H_UNKNOWN_FIELDS]);
			if (same && unknown && fields) {
				PyObject *sum = PyNumber_Add(fields, unknown);
				if (!sum)
					return NULL;
				Py_XSETREF(*(PyObject **)((char *)decoder +
							  decoder_slots[H_UNKNOWN_FIELDS].offset),
					   sum);
				slot_set(side, &side_slots[D_BLOCK], Py_None);
				Py_INCREF(block); /* the table may drop it while it is read */
				int taken = 0;
				PyObject *m = requests ? request_block(state, side, block, &taken) :
							 answer_block(state, side, block, &taken);
				if (!taken) {
					PyObject *call[3] = {state, side, block};
					m = PyObject_Vectorcall(requests ? py_request_block :
									   py_response_block,
								call, 3, NULL);
				}
				Py_DECREF(block);
				return m;
			}
		}
	}
	PyObject *call[4] = {state, side, reqflag, bytes};
	return PyObject_Vectorcall(py_block, call, 4, NULL);
}

static PyObject *parse(PyObject *self, PyObject *const *args, Py_ssize_t nargs)
{
	if (nargs != 3) {
		PyErr_SetString(PyExc_TypeError, "parse(direction, buf, state)");
		return NULL;
	}
	if (!py_parse) {
		PyErr_SetString(PyExc_RuntimeError, "parse: setup() was not called");
		return NULL;
	}
	PyObject *direction = args[0], *bufobj = args[1], *state = args[2];
	if (!Py_IS_TYPE(state, state_type) || !PyLong_Check(direction))
		goto python;
	long d = PyLong_AsLong(direction);
	if (d == -1 && PyErr_Occurred())
		return NULL;
	PyObject *sides = slot_get(state, &state_slots[T_SIDES]);
	PyObject *streams = slot_get(state, &state_slots[T_STREAMS]);
	PyObject *req_dir = slot_get(state, &state_slots[T_REQUESTS]);
	if ((d != 0 && d != 1) || !sides || !PyTuple_CheckExact(sides) ||
	    PyTuple_GET_SIZE(sides) != 2 || !streams || !PyDict_Check(streams) || !req_dir ||
	    !PyLong_Check(req_dir))
		goto python;
	PyObject *side = PyTuple_GET_ITEM(sides, d);
	long long expect, arrival, old, offset, max_frame;
	if (!Py_IS_TYPE(side, side_type) || slot_get(side, &side_slots[D_PREFACE]) != Py_False ||
	    slot_get(side, &side_slots[D_ALIGNED]) != Py_True ||
	    ll_of(slot_get(side, &side_slots[D_EXPECT]), &expect) ||
	    ll_of(slot_get(side, &side_slots[D_ARRIVAL]), &arrival) ||
	    ll_of(slot_get(side, &side_slots[D_OLD]), &old) ||
	    ll_of(slot_get(side, &side_slots[D_OFFSET]), &offset) ||
	    ll_of(slot_get(side, &side_slots[D_MAX_FRAME]), &max_frame) ||
	    !slot_get(side, &side_slots[D_BLOCK]) || !slot_get(side, &side_slots[D_BLOCK_STREAM]))
		goto python;
	long rd = PyLong_AsLong(req_dir);
	if (rd == -1 && PyErr_Occurred())
		return NULL;
	int requests = rd == d;
	Py_buffer view;
	if (PyObject_GetBuffer(bufobj, &view, PyBUF_SIMPLE) < 0) {
		PyErr_Clear();
		goto python;
	}
	Py_INCREF(side); /* held while Python code runs */
	Py_INCREF(streams);
	const unsigned char *b = view.buf;
	Py_ssize_t n = view.len;
	PyObject *result = NULL, *emitted = NULL, *reqflag = requests ? Py_True : Py_False;
	/* side.arrived(n) */
	if (n != expect) {
		arrival += 1;
		old = 0 <= expect && expect <= n ? expect : n;
		if (set_ll(side, &side_slots[D_ARRIVAL], arrival) ||
		    set_ll(side, &side_slots[D_OLD], old))
			goto out;
	}
	Py_ssize_t pos = 0;
	while (pos + HEADER_LEN <= n) {
		const unsigned char *h = b + pos;
		long long length = (long long)h[0] << 16 | h[1] << 8 | h[2];
		int kind = h[3], flags = h[4];
		unsigned long stream = (unsigned long)h[5] << 24 | (unsigned long)h[6] << 16 |
				       (unsigned long)h[7] << 8 | h[8];
		int reserved = stream > 0x7FFFFFFFUL;
		stream &= 0x7FFFFFFFUL;
		PyObject *block = slot_get(side, &side_slots[D_BLOCK]);
		int bad;
		if (kind <= HEADERS)
			bad = length > max_frame || !stream || block != Py_None;
		else if (kind == WINDOW_UPDATE)
			bad = length != 4 || length > max_frame || block != Py_None;
		else {
			bad = !sane(length, kind, flags, stream, max_frame) ||
			      (block != Py_None) != (kind == CONTINUATION);
			if (!bad && kind == CONTINUATION) {
				long long bs;
				if (ll_of(slot_get(side, &side_slots[D_BLOCK_STREAM]), &bs)) {
					PyErr_SetString(PyExc_TypeError,
							"parse: block_stream must be an int");
					goto out;
				}
				bad = (long long)stream != bs;
			}
		}
		if (bad) {
			if (!emitted && !pos) {
				result = done(side, n, r_invalid, NULL, 0);
				goto out;
			}
			break; /* judged again at the front of the next call */
		}
		Py_ssize_t end = pos + HEADER_LEN + (Py_ssize_t)length;
		if (emitted && (kind == HEADERS || kind == PUSH_PROMISE || end > n))
			break; /* a request frame takes what follows it only up to the next message */
		if (kind == DATA) {
			if (flags & PADDED && length && pos + HEADER_LEN >= n)
				break; /* its pad length tells the data's size */
			PyObject *message = NULL;
			int r = data_fast(b, n, pos, length, flags, stream, streams, requests,
					  &message);
			if (r < 0)
				goto out;
			if (!r) {
				PyObject *call[8] = {direction, bufobj, NULL, NULL, NULL, NULL, state,
						     reqflag};
				call[2] = PyLong_FromSsize_t(pos);
				call[3] = PyLong_FromLongLong(length);
				call[4] = PyLong_FromLong(flags);
				call[5] = PyLong_FromUnsignedLong(stream);
				if (call[2] && call[3] && call[4] && call[5])
					message = PyObject_Vectorcall(py_data, call, 8, NULL);
				for (int i = 2; i < 6; i++)
					Py_XDECREF(call[i]);
				if (!message)
					goto out;
				if (message == Py_None)
					Py_CLEAR(message);
			}
			pos = end;
			if (message) {
				emitted = message;
				break;
			}
			if (end > n)
				break; /* skipped by length: nothing after it is in buf */
			continue;
		}
		if (end > n)
			break; /* wait for the whole frame */
		if (kind == WINDOW_UPDATE) {
			pos = end;
			continue;
		}
		PyObject *message;
		if (kind == HEADERS && (flags & (END_HEADERS | PADDED | HAS_PRIORITY)) == END_HEADERS) {
			/* _headers' common case, inlined: a whole block, no field to strip */
			PyObject *arr = pos >= old ? PyLong_FromLongLong(arrival) : Py_NewRef(Py_None);
			if (!arr)
				goto out;
			Py_XSETREF(*(PyObject **)((char *)side + side_slots[D_BLOCK_ARRIVAL].offset),
				   arr);
			if (set_ll(side, &side_slots[D_BLOCK_STREAM], (long long)stream) ||
			    set_ll(side, &side_slots[D_BLOCK_FLAGS], flags) ||
			    set_ll(side, &side_slots[D_BLOCK_TYPE], kind) ||
			    set_ll(side, &side_slots[D_BLOCK_HEAD], offset + pos) ||
			    set_ll(side, &side_slots[D_BLOCK_WIRE], HEADER_LEN + length))
				goto out;
			PyObject *bytes = PyBytes_FromStringAndSize((const char *)h + HEADER_LEN,
								    (Py_ssize_t)length);
			if (!bytes)
				goto out;
			message = header_block(state, side, requests, bytes);
			Py_DECREF(bytes);
			if (!message)
				goto out;
		} else {
			PyObject *key = PyLong_FromLong(kind);
			if (!key)
				goto out;
			PyObject *handler = PyDict_GetItemWithError(handlers, key);
			Py_DECREF(key);
			if (!handler && PyErr_Occurred())
				goto out;
			if (!handler || handler == py_ignore) { /* _ignore: PRIORITY, PING, ... */
				pos = end;
				continue;
			}
			PyObject *head = ((PyTypeObject *)head_type)->tp_alloc(
				(PyTypeObject *)head_type, 5);
			if (!head)
				goto out;
			PyObject *fields[5] = {PyLong_FromLongLong(length), PyLong_FromLong(kind),
					       PyLong_FromLong(flags),
					       PyLong_FromUnsignedLong(stream),
					       Py_NewRef(reserved ? Py_True : Py_False)};
			int ok = 1;
			for (int i = 0; i < 5; i++) {
				if (!fields[i])
					ok = 0;
				PyTuple_SET_ITEM(head, i, fields[i]);
			}
			PyObject *p = ok ? PyLong_FromSsize_t(pos) : NULL;
			if (!p) {
				Py_DECREF(head);
				goto out;
			}
			Py_INCREF(handler);
			PyObject *call[6] = {bufobj, p, head, state, side, reqflag};
			message = PyObject_Vectorcall(handler, call, 6, NULL);
			Py_DECREF(handler);
			Py_DECREF(p);
			Py_DECREF(head);
			if (!message) {
				if (!PyErr_ExceptionMatches(hyper_error))
					goto out;
				PyErr_Clear();
				if (!emitted && !pos) {
					result = done(side, n, r_invalid, NULL, 0);
					goto out;
				}
				break;
			}
		}
		pos = end;
		if (message == Py_None) {
			Py_DECREF(message);
			continue;
		}
		Py_XSETREF(emitted, message);
		if (!requests)
			break; /* a response ends with this frame */
	}
	result = emitted ? done(side, n, r_frame, emitted, pos) : done(side, n, r_need, NULL, pos);
	emitted = NULL; /* done() took it */
out:
	Py_XDECREF(emitted);
	PyBuffer_Release(&view);
	Py_DECREF(side);
	Py_DECREF(streams);
	return result;
python:
	return PyObject_Vectorcall(py_parse, args, 3, NULL);
}

static PyMethodDef h2_methods[] = {
	{"parse", (PyCFunction)(void (*)(void))parse, METH_FASTCALL,
	 "parse(direction, buf, state) -> (ParseResult, frame or None, consumed): "
	 "protocols/http2/parse.py parse with its frame loop in C"},
	{"setup_answers", setup_answers, METH_VARARGS,
	 "setup_answers(new_response, new_request): an answer's and a request's usual header "
	 "block read here (_response_block's and _request_block's usual cases)"},
	{"setup_blocks", setup_blocks, METH_VARARGS,
	 "setup_blocks(HeaderDecoder, Block, _request_block, _response_block): header blocks "
	 "found in the decoder's reused-block table handed to their reader from here"},
	{"setup", setup, METH_VARARGS,
	 "setup(HTTP2State, _Side, _Stream, H2Request, H2Response, Messages, Head, "
	 "HyperframeError, parse, _data, _block, handlers, _ignore, NEED_MORE, FRAME, INVALID)"},
	{NULL, NULL, 0, NULL},
};

static struct PyModuleDef h2_module = {
	PyModuleDef_HEAD_INIT, "otel_ebpf.protocols.http2._parse",
	"HTTP/2's frame loop in C; protocols/http2/parse.py is the reference.", -1, h2_methods,
};

PyMODINIT_FUNC PyInit__parse(void)
{
	return PyModule_Create(&h2_module);
}
