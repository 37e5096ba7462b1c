"""Property tests: no bytes make the RTPS parser raise, bare or through the real tracker with
stitch and to_spans, for any mix of valid, cut and random datagrams on shared sockets."""

from __future__ import annotations

import struct

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.base import Direction, Role
from otel_ebpf.protocols.rtps import RTPSParser
from otel_ebpf.protocols.rtps import parse as P

from . import wire as w

fuzz = settings(max_examples=300, deadline=None, suppress_health_check=[HealthCheck.too_slow])
A, B = w.Participant(1), w.Participant(2, w.FASTDDS, little=False)
HEADER = w.header(A.prefix)


def _datagrams() -> list[bytes]:
    """Valid datagrams of every kind, so random mixes reach deep into stitch."""
    out = [A.announce(0x1103, "rt/chatter", "std_msgs::msg::dds_::String_"),
           A.announce(0x1303, "rq/sRequest", "p::srv::dds_::S_Request_"),
           B.announce(0x1403, "rr/sReply", "p::srv::dds_::S_Response_"),
           A.announce(0x1504, "rt/chatter", "std_msgs::msg::dds_::String_", writer=False),
           A.message(w.data(w.SPDP_WRITER, 1, w.spdp(A.prefix, "/n")))]
    for n in (1, 2, 2**32 + 1):
        out += [A.sample(0x1103, n, w.string_sample("hi")),
                A.sample(0x1303, n, w.cyclone_request(7, n, bytes(16)), dst=B.prefix),
                B.sample(0x1403, n, w.cyclone_request(7, n, bytes(8), little=False),
                         qos=[(w.PID_RELATED_SAMPLE_IDENTITY, w.identity(A.guid(0x1303), n,
                                                                          little=False))])]
    big = w.encapsulated(bytes(2500), 1)
    for start in (1, 2, 3):
        out.append(A.message(w.data_frag(0x1103, 9, start, big[(start - 1) * 1000:start * 1000],
                                         fragment_size=1000, sample_size=len(big))))
    out += [A.message(w.heartbeat(0x1103, 1, 3), w.gap(0x1103, 1, 2, [3]), w.info_ts(None)),
            B.message(w.info_dst(A.prefix, False), w.acknack(0x1103, 1, [1, 2], little=False),
                      w.nack_frag(0x1103, 9, [2], little=False)),
            A.message(w.info_src(B.prefix), w.heartbeat_frag(0x1103, 9, 3), w.pad(), w.unknown()),
            A.message(w.data(0x1103, 4, w.encapsulated(bytes(16), 1), key=True)),
            A.message(w.data(0x1103, 5, w.string_sample("last"), last=True))]
    return out


DATAGRAMS = _datagrams()
submessage = st.builds(
    lambda sub_id, flags, length, body: struct.pack("<BBH" if flags & 1 else ">BBH", sub_id,
                                                    flags, length) + body,
    st.sampled_from([0x01, 0x06, 0x07, 0x08, 0x09, 0x0C, 0x0E, 0x12, 0x13, 0x15, 0x16, 0x7F]),
    st.integers(0, 255), st.one_of(st.integers(0, 80), st.integers(0, 65535)),
    st.binary(max_size=80))
soup = st.lists(submessage, max_size=6).map(lambda subs: HEADER + b"".join(subs))
datagram = st.one_of(
    st.sampled_from(DATAGRAMS),
    st.sampled_from(DATAGRAMS).flatmap(lambda d: st.integers(0, len(d)).map(lambda n: d[:n])),
    soup,
    st.binary(max_size=60),
    st.binary(max_size=60).map(lambda b: HEADER + b),
)
events = st.lists(st.tuples(
    st.integers(0, 2),  # which socket
    st.booleans(),  # send or receive
    datagram,
    st.integers(0, 400_000_000),  # time step
    st.sampled_from([None, None, 40, 100]),  # capture size
    st.sampled_from([0, 0, 3000]),  # bytes beyond the datagram's captured length
), max_size=25)


@fuzz
@given(datagram)
def test_parse_never_raises(data: bytes) -> None:
    message = P.parse(data)
    assert message is None or message.captured == len(data)
    role = RTPSParser().infer(Direction.EGRESS, data, None)  # type: ignore[arg-type]
    assert role is (None if message is None else Role.UNKNOWN)


@fuzz
@given(events, st.booleans())
def test_the_tracker_never_raises(evs, close: bool) -> None:
    parser = RTPSParser({"max_reassemblies": 2, "max_waiting": 4, "max_tracked": 16,
                         "discovery_max_entries": 2, "pairing_timeout_s": 0.5})
    sockets = [w.Socket(parser, 100), w.Socket(parser, 200), w.Socket(parser, 100, fd=6)]
    now = 1
    for which, send, data, step, captured, extra in evs:
        now += step
        sock = sockets[which]
        feed = sock.send if send else sock.recv
        feed(data, now, size=len(data) + extra, captured=captured)
    if close:
        for sock in sockets:
            sock.close()
    else:
        for sock in sockets:
            sock.tick(now + 10**10)
    for sock in sockets:
        for span in sock.spans():
            assert span.name and span.end_ns >= span.start_ns
        parser.counters(sock.driver.state)
