"""The RTPS wire parser: header, every submessage kind in both byte orders, the INFO_*
context, lengths (0 = to the end; PAD and INFO_TS excepted), truncation, and inference."""

from __future__ import annotations

import pytest
from otel_ebpf.protocols.base import Direction, ParseResult, Role
from otel_ebpf.protocols.rtps import RTPSParser
from otel_ebpf.protocols.rtps import parse as P
from otel_ebpf.protocols.rtps import payload as pl
from otel_ebpf.protocols.testing import conn_info

from . import wire as w

PUB = w.Participant(1)
BOTH = pytest.mark.parametrize("little", [True, False], ids=["le", "be"])


def parse(datagram: bytes) -> P.RTPSMessage:
    message = P.parse(datagram)
    assert message is not None
    return message


def test_header() -> None:
    m = parse(w.header(PUB.prefix, w.FASTDDS, (2, 4)))
    assert (m.version, m.vendor, m.prefix, m.submessages) == ((2, 4), w.FASTDDS, PUB.prefix, [])
    assert not m.truncated


@pytest.mark.parametrize("head", [
    b"", b"RTPS", b"RTPX" + bytes(16), b"RTPS\x01\x00" + bytes(14), b"RTPS\x02\x0a" + bytes(14),
    b"GET / HTTP/1.1\r\n\r\n" + bytes(8),
])
def test_not_rtps(head: bytes) -> None:
    parser = RTPSParser()
    conn = conn_info(transport="datagram", role=Role.UNKNOWN)
    assert P.parse(head) is None
    assert parser.infer(Direction.EGRESS, head, conn) is None
    assert parser.parse(Direction.EGRESS, memoryview(head), parser.new_state(conn))[0] \
        is ParseResult.INVALID


def test_infer_claims_rtps_2x_without_a_role() -> None:
    parser = RTPSParser()
    conn = conn_info(transport="datagram", role=Role.UNKNOWN)
    for minor in (1, 2, 3, 4, 5):
        role = parser.infer(Direction.INGRESS, w.header(PUB.prefix, version=(2, minor)), conn)
        assert role is Role.UNKNOWN  # not None: the registry takes it as a match


@BOTH
def test_data(little: bool) -> None:
    payload = w.string_sample("hello", little)
    qos = [(w.PID_KEY_HASH, bytes(range(16)))]
    m = parse(PUB.message(w.info_dst(bytes(12), little), w.info_ts(5, 7, little),
                          w.data(0x1103, 42, payload, reader_id=0x1204, qos=qos, little=little)))
    dst, ts, d = m.submessages
    assert isinstance(dst, P.InfoDst) and isinstance(ts, P.InfoTs)
    assert isinstance(d, P.Data)
    assert (d.reader_id, d.writer_id, d.seq, d.little) == (0x1204, 0x1103, 42, little)
    assert d.writer_guid == PUB.guid(0x1103)
    assert d.payload == payload and d.has_data and not d.key_only
    assert d.inline_qos == {w.PID_KEY_HASH: bytes(range(16))}
    assert d.source_time == (5, 7)
    assert d.payload_end - d.payload_offset == len(payload)
    assert pl.encapsulation(d.payload).name == ("CDR_LE" if little else "CDR_BE")


def test_data_last_submessage_runs_to_the_end() -> None:
    payload = w.string_sample("x" * 100)
    m = parse(PUB.message(w.info_ts(), w.data(0x1103, 1, payload, last=True)))
    d = m.submessages[-1]
    assert d.payload == payload and d.payload_end is None


def test_zero_length_pad_and_info_ts_are_empty_not_last() -> None:
    m = parse(PUB.message(w.submessage(0x01, 0, b""), w.info_ts(None),
                          w.data(0x1103, 3, w.string_sample("a"))))
    kinds = [type(s) for s in m.submessages]
    assert kinds == [P.Other, P.InfoTs, P.Data]
    assert m.submessages[1].invalidate and m.submessages[2].source_time is None


def test_info_ts_invalidate_clears_the_time() -> None:
    m = parse(PUB.message(w.info_ts(9), w.data(0x1103, 1, w.string_sample("a")), w.info_ts(None),
                          w.data(0x1103, 2, w.string_sample("b"))))
    first, second = (s for s in m.submessages if isinstance(s, P.Data))
    assert first.source_time == (9, 0) and second.source_time is None


def test_info_src_and_info_dst_set_the_context() -> None:
    other, reader = w.Participant(7, w.FASTDDS), w.Participant(8)
    m = parse(PUB.message(w.info_src(other.prefix, w.FASTDDS), w.info_dst(reader.prefix),
                          w.data(0x1103, 1, w.string_sample("a"), reader_id=0x1204)))
    d = m.submessages[-1]
    assert d.src_prefix == other.prefix and d.dst_prefix == reader.prefix
    assert d.writer_guid == other.guid(0x1103)


@BOTH
def test_data_frag(little: bool) -> None:
    m = parse(PUB.message(w.data_frag(0x1103, 9, 3, b"\x01" * 20, count=2, fragment_size=10,
                                      sample_size=95, little=little)))
    (f,) = m.submessages
    assert isinstance(f, P.DataFrag)
    assert (f.seq, f.start, f.count, f.fragment_size, f.sample_size) == (9, 3, 2, 10, 95)
    assert f.payload == b"\x01" * 20 and not f.key_only


@BOTH
def test_heartbeat_acknack_gap(little: bool) -> None:
    m = parse(PUB.message(
        w.heartbeat(0x1103, 3, 12, 5, little=little, final=True),
        w.acknack(0x1103, 4, [4, 6, 40], 2, little=little),
        w.gap(0x1103, 2, 5, [6, 8], little=little),
    ))
    hb, an, gp = m.submessages
    assert (hb.first, hb.last, hb.count, hb.final, hb.liveliness) == (3, 12, 5, True, False)
    assert (an.base, an.missing, an.count) == (4, (4, 6, 40), 2)
    assert (gp.start, gp.base, gp.listed, gp.gapped) == (2, 5, (6, 8), 5)


@BOTH
def test_fragment_submessages(little: bool) -> None:
    m = parse(PUB.message(w.nack_frag(0x1103, 7, [2, 5], little=little),
                          w.heartbeat_frag(0x1103, 7, 30, little=little)))
    nf, hf = m.submessages
    assert (nf.seq, nf.missing) == (7, (2, 5))
    assert (hf.seq, hf.last_fragment) == (7, 30)


def test_acknack_names_its_writer_by_the_destination() -> None:
    writer = w.Participant(3)
    m = parse(PUB.message(w.info_dst(writer.prefix), w.acknack(0x1103, 1, [1])))
    assert m.submessages[-1].writer_guid == writer.guid(0x1103)


def test_unknown_submessages_are_skipped_by_length() -> None:
    m = parse(PUB.message(w.unknown(0x7F, 12), w.unknown(0x33, 0 + 4), w.pad(8),
                          w.data(0x1103, 1, w.string_sample("a"))))
    assert m.unknown == 2 and isinstance(m.submessages[-1], P.Data)


def test_a_set_with_too_many_bits_is_malformed() -> None:
    body = w.entity(0) + w.entity(0x1103) + w.seq(1) + (300).to_bytes(4, "little") + bytes(40)
    m = parse(PUB.message(w.submessage(0x06, 0, body), w.heartbeat(0x1103, 1, 1)))
    assert m.malformed == 1 and isinstance(m.submessages[0], P.Heartbeat)


def test_short_submessages_are_malformed() -> None:
    m = parse(PUB.message(w.submessage(0x07, 0, bytes(8)), w.submessage(0x15, 0, bytes(10)),
                          w.submessage(0x0E, 0, bytes(4)), w.heartbeat(0x1103, 1, 2)))
    assert m.malformed == 3 and len(m.submessages) == 1


def test_truncated_capture_keeps_what_it_can() -> None:
    payload = w.string_sample("y" * 500)
    datagram = PUB.message(w.info_ts(), w.data(0x1103, 5, payload), w.heartbeat(0x1103, 1, 5))
    m = parse(datagram[:100])
    assert m.truncated and m.malformed == 0
    d = m.submessages[-1]
    assert isinstance(d, P.Data) and d.seq == 5
    assert d.payload == payload[: 100 - d.payload_offset]
    assert d.payload_end - d.payload_offset == len(payload)  # its declared size stays known


def test_header_cut_inside_a_submessage_header() -> None:
    m = parse(PUB.message(w.info_ts())[:22])
    assert m.truncated and m.submessages == []


def test_encapsulations() -> None:
    names = {k: pl.encapsulation(k.to_bytes(2, "big") + b"\0\0").name
             for k in (0, 1, 2, 3, 0x10, 0x11, 0x12, 0x13, 0x14, 0x15)}
    assert names[0x0003] == "PL_CDR_LE" and names[0x0011] == "CDR2_LE"
    assert pl.encapsulation(b"\x00\x07\x00\x00") is None and pl.encapsulation(b"\x00") is None


def test_parameter_list_stops_at_the_sentinel_and_keeps_first_values() -> None:
    raw = w.params([(0x0005, b"abcd"), (0x0005, b"zzzz"), (0x0000, b"")]) + b"trailing"
    values, end = pl.parameters(raw, 0, len(raw), True)
    assert values == {0x0005: b"abcd"} and raw[end:] == b"trailing"
    assert pl.parameters(raw[:10], 0, 10, True) == ({0x0005: b"abcd"}, None)


def test_request_header() -> None:
    for little in (True, False):
        assert pl.request_header(w.cyclone_request(2**63 + 5, 9, little=little)) == (2**63 + 5, 9)
    assert pl.request_header(b"\x00\x03\x00\x00" + bytes(20)) is None  # a parameter list
    assert pl.request_header(w.encapsulated(bytes(8), 1)) is None
