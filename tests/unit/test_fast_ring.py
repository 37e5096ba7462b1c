"""The compiled record decoder (otel_ebpf/_fast/ring.c) against abi.decode, the reference:
the same records, the same events in the same order, the same malformed ones left out."""

from __future__ import annotations

import dataclasses

import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from otel_ebpf import _fast
from otel_ebpf.kernel import abi

if _fast.PURE_PYTHON:
    pytest.skip("OTEL_EBPF_PURE_PYTHON=1: no compiled path to compare", allow_module_level=True)

U64, U32 = st.integers(0, 2**64 - 1), st.integers(0, 2**32 - 1)


@st.composite
def data_record(draw) -> bytes:
    captured = draw(st.integers(0, 300))
    payload = draw(st.binary(min_size=0, max_size=captured + 8))  # may be short of captured
    flags = draw(st.integers(0, 31))
    family = draw(st.sampled_from([0, 2, 10, 1]))
    peer = draw(st.binary(min_size=16, max_size=16))
    head = abi.DATA.pack(abi.EV_DATA, draw(U32), draw(U64), draw(U32),
                         draw(st.integers(-(2**31), 2**31 - 1)), draw(U64), draw(U64), draw(U64),
                         draw(U32), captured, draw(U32), draw(st.integers(0, 255)), flags,
                         draw(st.integers(0, 65535) | st.integers(0, captured)), peer,
                         draw(st.integers(0, 65535)), family, draw(U64))
    return head + payload


@st.composite
def close_record(draw) -> bytes:
    return abi.CONN_CLOSE.pack(abi.EV_CONN_CLOSE, draw(U32), draw(U64), draw(U32),
                               draw(st.integers(-(2**31), 2**31 - 1)), draw(U64), draw(U64),
                               draw(U64))


@st.composite
def open_record(draw) -> bytes:
    addr = st.binary(min_size=16, max_size=16)
    return abi.CONN_OPEN.pack(abi.EV_CONN_OPEN, draw(U32), draw(U64), draw(U32), 7, draw(U64),
                              draw(addr), 8000, 2, draw(addr), 40000, 2, draw(st.integers(0, 3)),
                              draw(st.integers(0, 15)), b"python\0")


@st.composite
def task_record(draw) -> bytes:
    return abi.TASK_NEW.pack(abi.EV_TASK_NEW, draw(U32), draw(U64), draw(U32), draw(U64),
                             draw(U64), draw(U64), draw(U64))


@st.composite
def any_record(draw) -> bytes:
    record = draw(st.one_of(data_record(), data_record(), close_record(), open_record(),
                            task_record(), st.binary(max_size=120)))
    if draw(st.integers(0, 9)) == 0:  # cut short: a malformed record
        record = record[: draw(st.integers(0, len(record)))]
    return record


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(records=st.lists(any_record(), max_size=20))
@example(records=[abi.PROC_EXIT.pack(abi.EV_PROC_EXIT, 7, 123, 0)])  # a dataclass event
def test_same_events_as_abi_decode(records):
    assert _fast.ring is not None, "otel_ebpf._fast.ring is not built (make install)"
    want = abi.decode_each(records)
    got = abi.decode_batch(records)
    assert got == want
    # the named tuples are the same classes, field for field (not merely equal tuples)
    assert [type(e) for e in got[0]] == [type(e) for e in want[0]]
    for g, w in zip(got[0], want[0], strict=True):
        # process events are dataclasses, the rest named tuples: compare their fields' types
        g, w = (dataclasses.astuple(e) if dataclasses.is_dataclass(e) else e for e in (g, w))
        assert [type(x) for x in g] == [type(x) for x in w]


def test_data_close_and_task_are_built_in_c():
    """Not vacuous: the records that come by the thousand are not handed back as bytes."""
    payload = b"GET / HTTP/1.1\r\n\r\n"
    data = abi.DATA.pack(abi.EV_DATA, 11, 100, 42, 7, 1, 200, 0, len(payload), len(payload), 5,
                         1, 0, 0, b"\0" * 16, 0, 0, 0xABC) + payload
    close = abi.CONN_CLOSE.pack(abi.EV_CONN_CLOSE, 11, 300, 42, 7, 1, 10, 20)
    task = abi.TASK_NEW.pack(abi.EV_TASK_NEW, 12, 400, 42, 2**64 - 1, 0xDEF, 0xDEF, 390)
    events, raw = _fast.ring.decode([data, close, task])
    assert raw == 0
    assert events == [abi.decode(data), abi.decode(close), abi.decode(task)]
    assert type(events[2]) is abi.TaskNew and events[2].task == 2**64 - 1
    assert (events[2].entered, events[2].entered_ns) == (0xDEF, 390)
    assert events[0].payload == payload and events[0].task == 0xABC
    assert _fast.ring.DATA_SIZE == abi.DATA.size


def test_a_datagram_with_its_peer_is_built_in_c():
    """A DDS datagram's record carries its peer: built here too, and the tuple made for a
    peer handed out again for its next records (equal to the reference's either way)."""
    def record(addr: bytes, family: int, port: int) -> bytes:
        return abi.DATA.pack(abi.EV_DATA, 11, 100, 42, 7, 1, 200, 0, 4, 4, 0, 1,
                             abi.DATA_F_NO_SEQ | abi.DATA_F_HAS_PEER, 0, addr, port, family,
                             0) + b"RTPS"

    v4 = record(bytes([127, 0, 0, 1]) + bytes(12), 2, 7410)
    v6 = record(bytes(15) + b"\x01", 10, 7411)
    mapped = record(bytes(10) + b"\xff\xff" + bytes([10, 1, 2, 3]), 10, 7412)
    events, raw = _fast.ring.decode([v4, v6, v4, mapped])
    assert raw == 0
    assert events == [abi.decode(v4), abi.decode(v6), abi.decode(v4), abi.decode(mapped)]
    assert [e.peer for e in events] == [("127.0.0.1", 7410), ("::1", 7411),
                                        ("127.0.0.1", 7410), ("10.1.2.3", 7412)]
    assert events[0].peer is events[2].peer
