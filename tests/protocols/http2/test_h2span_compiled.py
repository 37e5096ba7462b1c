"""The compiled pairing and gRPC span (protocols/http2/_stitch.c pair and span) against
their references (protocols/http2/stitch.py pair, spans.py to_spans): drawn requests and
responses (timing leads in and out of their epoch, sequence numbers near the 32-bit wrap,
resets, refusals, stale requests, a closed connection, a small stream table, orphans) paired
by both give the same records, the same frames after and the same state (the waiting
table in its order, last_ns, the orphan count, the streams); drawn gRPC records (status
codes in and out of the code table, messages, content types, roles, paths and authorities
repeated and not) give the same span field for field, attributes in their order. Through
the agent's path, the recorded grpcio traffic and random frame sequences give the same
spans with the compiled steps and without them."""

from __future__ import annotations

import copy
import random
from collections import OrderedDict

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.base import Role, SmallDeque
from otel_ebpf.protocols.http2 import spans as h2spans
from otel_ebpf.protocols.http2 import stitch as h2stitch
from otel_ebpf.protocols.http2.grpc import Messages
from otel_ebpf.protocols.http2.parse import H2Request, H2Response, HTTP2State, _Stream
from otel_ebpf.protocols.testing import conn_info

from bench import stream_pipeline as sp
from tests.unit.span_traffic import plain

from .test_http2_compiled import _plain
from .test_http2_fuzz import FRAGMENTS
from .wire import PREFACE
from .wire import settings as settings_frame

pytestmark = pytest.mark.skipif(h2stitch.compiled is None, reason="no compiled HTTP/2 pairing")
fuzz = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])

ints = st.integers(0, 2**40)
seqs = st.one_of(st.none(), st.integers(0, 2**32 - 1), st.integers(2**32 - 64, 2**32 - 1))


def _messages(draw) -> Messages:
    m = Messages()
    m.count, m.size = draw(st.integers(0, 5)), draw(st.integers(0, 10**6))
    m.exact = draw(st.booleans())
    return m


@st.composite
def messages(draw, cls, stream_id: int):  # noqa: ANN001, ANN201
    head = draw(ints)
    epoch = draw(st.integers(0, 2))
    fields = dict(
        stream_id=stream_id, head=head, mark=draw(st.one_of(st.just(head), ints)),
        epoch=epoch, head_epoch=draw(st.sampled_from([epoch, epoch, epoch + 1])),
        exact=draw(st.booleans()), stream_pos=draw(ints), tcp_seq=draw(seqs),
        start_ns=draw(ints), end_ns=draw(ints), tid=draw(st.integers(0, 9)),
        task=draw(st.integers(0, 9)), ended=draw(st.booleans()),
        data_size=draw(st.integers(0, 50)), messages=_messages(draw))
    if cls is H2Request:
        fields.update(reset=draw(st.sampled_from([None, None, None, 0, 8])),
                      refused=draw(st.booleans()) and draw(st.booleans()),
                      stale=draw(st.booleans()), response_started=draw(st.booleans()))
    return cls(**fields)


@st.composite
def pairings(draw):  # noqa: ANN201
    ids = draw(st.lists(st.integers(1, 12).map(lambda i: 2 * i - 1), max_size=8))
    state = HTTP2State(conn_info(draw(st.sampled_from([Role.CLIENT, Role.SERVER]))),
                       max_streams=draw(st.sampled_from([2, 4, 1024])))
    state.closed = draw(st.booleans()) and draw(st.booleans())
    state.last_ns = draw(ints)
    state.orphan_responses = draw(st.integers(0, 3))
    for i in draw(st.lists(st.integers(13, 20).map(lambda i: 2 * i - 1), max_size=3,
                           unique=True)):  # waiting from an earlier stitch
        state.waiting[i] = draw(messages(H2Request, i))
    requests = SmallDeque(draw(messages(H2Request, i)) for i in ids)
    responses = SmallDeque(draw(messages(H2Response, i))
                           for i in draw(st.lists(st.sampled_from(ids or [1]) |
                                                  st.integers(1, 40), max_size=8)))
    for r in requests:  # some streams still open, with a partial answer
        if draw(st.booleans()):
            state.streams[r.stream_id] = _Stream(r)
            if draw(st.booleans()):
                state.streams[r.stream_id].response = draw(messages(H2Response, r.stream_id))
    return requests, responses, state, draw(ints), draw(st.sampled_from([10, 10**9, 2**40]))


def _state(state: HTTP2State) -> dict:
    return {"waiting": [(k, _plain(v)) for k, v in state.waiting.items()],
            "last_ns": state.last_ns, "orphans": state.orphan_responses,
            "streams": [(k, _plain(v)) for k, v in state.streams.items()]}


@fuzz
@given(case=pairings())
def test_pairing_alike(case):
    requests, responses, state, now_ns, timeout_ns = case
    twin = copy.deepcopy((requests, responses, state))
    with pytest.MonkeyPatch.context() as m:
        m.setattr(h2stitch, "COMPILED", False)
        expected = h2stitch.pair(*twin[:2], now_ns, twin[2], timeout_ns)
    got = h2stitch.compiled.pair(requests, responses, now_ns, state, timeout_ns)
    assert got is not None
    assert [_plain(r) for r in got] == [_plain(r) for r in expected]
    assert requests == responses == twin[0] == twin[1] == []
    assert _state(state) == _state(twin[2])


def test_pairing_leaves_what_it_cannot_read_to_the_reference():
    state = HTTP2State(conn_info(Role.CLIENT))
    request = H2Request(stream_id=1, stream_pos=2**70)  # past 64 bits
    assert h2stitch.compiled.pair([request], [], 0, state, 10) is None
    assert h2stitch.compiled.pair([object()], [], 0, state, 10) is None
    assert not state.waiting


CONTENT_TYPES = ["application/grpc", "application/grpc+proto", "application/grpc+json",
                 "application/grpc; charset=x", "Application/gRPC", "application/grpc-web",
                 "application/grpc+Proto", " application/grpc", "application/json", None]


@st.composite
def records(draw):  # noqa: ANN201
    request = draw(messages(H2Request, 1))
    request.content_type = draw(st.sampled_from(CONTENT_TYPES))
    request.path = draw(st.sampled_from(["/pkg.Svc/Call", "/pkg.Svc/Other", "/bad", None]))
    request.authority = draw(st.sampled_from(["svc:50051", "svc", "", None]))
    response = None
    if draw(st.integers(0, 5)):
        response = draw(messages(H2Response, 1))
        response.grpc_status = draw(st.sampled_from([0, 0, 1, 2, 5, 13, 14, 16, 17, 99, None]))
        response.grpc_message = draw(st.sampled_from([None, None, "", "bad%20thing"]))
        response.status = draw(st.sampled_from([200, 503, None]))
        response.content_type = draw(st.sampled_from(CONTENT_TYPES))
    record = h2stitch.H2Record(request=request, response=response,
                               error=draw(st.sampled_from([None, None, "timeout", "reset"])),
                               end_ns=draw(ints))
    return record


CONNS = [conn_info(Role.CLIENT), conn_info(Role.SERVER), conn_info(Role.SERVER, fd=9)]


@fuzz
@given(batch=st.lists(st.tuples(records(), st.sampled_from(CONNS)), min_size=1, max_size=6))
def test_grpc_spans_alike(batch):
    for record, conn in batch:
        twin = copy.deepcopy(record)
        got = h2stitch.compiled.span(record, conn)
        with pytest.MonkeyPatch.context() as m:
            m.setattr(h2spans, "COMPILED", False)
            expected = h2spans.to_spans(twin, conn)
        if got is not None:
            assert plain([got]) == plain(expected)
        assert _plain(record) == _plain(twin)  # the record is read, never changed


def test_the_usual_calls_take_the_compiled_span():
    rng = random.Random(5)
    taken = 0
    for _ in range(200):
        request = H2Request(stream_id=1, content_type="application/grpc",
                            path="/pkg.Svc/Call", authority="svc", ended=True,
                            start_ns=rng.randrange(100), end_ns=200)
        response = H2Response(stream_id=1, grpc_status=rng.choice([0, 2, 14]), ended=True,
                              end_ns=300)
        span = h2stitch.compiled.span(h2stitch.H2Record(request=request, response=response,
                                                    end_ns=300), CONNS[rng.randrange(3)])
        taken += span is not None
    assert taken == 200


@pytest.mark.parametrize("seed", [None, 1, 2, 3])
def test_recorded_spans_alike_through_the_agents_path(monkeypatch, seed):
    chunks = sp.recording("grpc")

    def spans() -> list:
        rng = None if seed is None else random.Random(seed)
        return plain(sp.spans_of(sp.events(chunks, 2, rng), rng))

    compiled = spans()
    monkeypatch.setattr(h2stitch, "COMPILED", False)
    monkeypatch.setattr(h2spans, "COMPILED", False)
    assert spans() == compiled
    assert len(compiled) == 800 if seed is None else len(compiled) > 700


frames = st.one_of(st.sampled_from(FRAGMENTS), st.sampled_from(FRAGMENTS), st.binary(max_size=24))


@fuzz
@given(chunks=st.lists(st.tuples(st.booleans(), st.lists(frames, min_size=1, max_size=6)
                                 .map(b"".join)), max_size=16), seed=st.integers(0, 2**32))
def test_random_frames_through_the_agents_path_alike(chunks, seed):
    chunks = [(True, PREFACE + settings_frame()), (False, settings_frame()), *chunks]

    def spans() -> list:
        rng = random.Random(seed)
        return plain(sp.spans_of(sp.events(chunks, 1, rng), rng))

    compiled = spans()
    with pytest.MonkeyPatch.context() as m:
        m.setattr(h2stitch, "COMPILED", False)
        m.setattr(h2spans, "COMPILED", False)
        assert spans() == compiled


def test_waiting_order_kept():
    """The waiting table is an OrderedDict changed through its own operations."""
    state = HTTP2State(conn_info(Role.CLIENT))
    assert isinstance(state.waiting, OrderedDict)
    requests = SmallDeque(H2Request(stream_id=i) for i in (5, 1, 3))
    h2stitch.compiled.pair(requests, SmallDeque([H2Response(stream_id=1)]), 0, state, 10**9)
    assert list(state.waiting) == [5, 3]
