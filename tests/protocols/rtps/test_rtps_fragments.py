"""DATA_FRAG reassembly through the real tracker: a sample split over several datagrams is
ONE sample on each end, in or out of order, several fragments per submessage, captures cut
short; a lost fragment expires (counted) unless a repair fills it; tables are bounded."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st
from otel_ebpf.protocols.rtps import RTPSParser
from otel_ebpf.protocols.rtps.stitch import Coverage

from . import wire as w

MS = 1_000_000
PUB = w.Participant(1)
WRITER = 0x00001103
FRAG = 1000


def world(**options):
    parser = RTPSParser(options)
    pub, sub = w.Socket(parser, 100), w.Socket(parser, 200)
    pub.send(PUB.announce(WRITER, "rt/image", "sensor_msgs::msg::dds_::Image_"), 1 * MS)
    return parser, pub, sub


def sample_bytes(size: int) -> bytes:
    return w.encapsulated(bytes(i % 251 for i in range(size - 4)), 1)


def fragments(number: int, payload: bytes, per_submessage: int = 1, little: bool = True,
              writer: int = WRITER, who: w.Participant = PUB) -> list[bytes]:
    """One datagram per `per_submessage` fragments (numbered from 1)."""
    out = []
    total = -(-len(payload) // FRAG)
    for start in range(1, total + 1, per_submessage):
        count = min(per_submessage, total - start + 1)
        piece = payload[(start - 1) * FRAG : (start - 1 + count) * FRAG]
        out.append(who.message(w.info_ts(little=little), w.data_frag(
            writer, number, start, piece, count=count, fragment_size=FRAG,
            sample_size=len(payload), little=little)))
    return out


def test_a_sample_in_several_datagrams_is_one_sample_on_both_ends() -> None:
    _, pub, sub = world()
    payload = sample_bytes(4500)
    pieces = fragments(7, payload)
    assert len(pieces) == 5
    for i, piece in enumerate(pieces):
        pub.send(piece, 10 * MS + i * 1000)
    for i, piece in enumerate(pieces):
        assert sub.records == []
        sub.recv(piece, 11 * MS + i * 1000)
    (producer,), (consumer,) = pub.spans(), sub.spans()
    assert producer.name == "publish /image" and consumer.name == "receive /image"
    assert producer.message_id == consumer.message_id == f"{PUB.guid(WRITER).hex()}:7"
    for span in (producer, consumer):
        assert span.attributes["otel_ebpf.rtps.fragments"] == 5
        assert span.attributes["messaging.message.body.size"] == 4500
    assert (producer.start_ns, producer.end_ns) == (10 * MS, 10 * MS + 4000)
    assert (consumer.start_ns, consumer.end_ns) == (11 * MS, 11 * MS + 4000)
    # from the first fragment's send to the last fragment's receipt
    assert consumer.attributes["otel_ebpf.messaging.delivery.latency"] == 0.001004
    assert pub.counters["reassembled_samples"] == 1 == sub.counters["reassembled_samples"]


def test_out_of_order_several_per_submessage_big_endian() -> None:
    _, pub, sub = world()
    payload = sample_bytes(7000)
    pieces = fragments(2, payload, per_submessage=3, little=False)
    assert len(pieces) == 3
    for i, piece in enumerate(reversed(pieces)):
        sub.recv(piece, 11 * MS + i)
    sub.tick(2000 * MS)
    (consumer,) = sub.spans()
    assert consumer.attributes["otel_ebpf.rtps.fragments"] == 7
    assert consumer.attributes["messaging.message.body.size"] == 7000


def test_fragments_cut_by_the_capture_still_count() -> None:
    _, pub, sub = world()
    payload = sample_bytes(3000)
    for i, piece in enumerate(fragments(1, payload)):
        pub.send(piece, 10 * MS + i, captured=90)
    (producer,) = pub.spans()
    assert producer.attributes["messaging.message.body.size"] == 3000
    assert pub.counters["truncated_datagrams"] == 3


def test_a_lost_fragment_expires_and_is_counted() -> None:
    _, _, sub = world(reassembly_timeout_s=0.5)
    pieces = fragments(3, sample_bytes(3500))
    for i in (0, 1, 3):
        sub.recv(pieces[i], 10 * MS + i)
    sub.tick(400 * MS)
    assert sub.records == [] and len(sub.driver.state.reassembly) == 1
    sub.tick(600 * MS)
    assert sub.records == [] and not sub.driver.state.reassembly
    assert sub.counters["incomplete_samples"] == 1


def test_a_repaired_fragment_completes_the_sample() -> None:
    _, pub, sub = world()
    pieces = fragments(3, sample_bytes(3500))
    for i, piece in enumerate(pieces):
        pub.send(piece, 10 * MS + i)
    for i in (0, 1, 3):
        sub.recv(pieces[i], 11 * MS + i)
    sub.send(w.Participant(2).message(w.info_dst(PUB.prefix), w.nack_frag(WRITER, 3, [3])),
             12 * MS)
    pub.send(pieces[2], 13 * MS)  # the repair, to the same destination
    sub.recv(pieces[2], 13 * MS + 500)
    (consumer,) = sub.spans()
    assert consumer.attributes["otel_ebpf.rtps.fragments"] == 4
    assert len(pub.spans()) == 1
    assert pub.counters["repair_fragments"] == 1 and sub.counters["nack_frags"] == 1
    sub.recv(pieces[0], 14 * MS)  # a straggler copy
    assert sub.counters["duplicate_fragments"] == 1 and len(sub.spans()) == 1


def test_fragments_for_two_readers_are_one_sample() -> None:
    _, pub, _ = world()
    pieces = fragments(4, sample_bytes(2500))
    for peer in (("127.0.0.1", 7411), ("127.0.0.1", 7413)):
        for piece in pieces:
            pub.send(piece, 10 * MS, peer=peer)
    assert len(pub.spans()) == 1 and "repair_fragments" not in pub.counters


def test_reassembly_table_is_bounded() -> None:
    _, _, sub = world(max_reassemblies=2)
    for number in (1, 2, 3):
        sub.recv(fragments(number, sample_bytes(2500))[0], 10 * MS + number)
    assert list(k[1] for k in sub.driver.state.reassembly) == [2, 3]
    assert sub.counters["reassembly_evicted"] == 1


def test_inconsistent_fragments_are_malformed() -> None:
    _, _, sub = world()
    sub.recv(PUB.message(w.data_frag(WRITER, 1, 1, bytes(10), fragment_size=10,
                                     sample_size=30)), 10 * MS)
    sub.recv(PUB.message(w.data_frag(WRITER, 1, 2, bytes(10), fragment_size=10,
                                     sample_size=99)), 11 * MS)
    sub.recv(PUB.message(w.data_frag(WRITER, 2, 9, bytes(10), fragment_size=10,
                                     sample_size=30)), 12 * MS)  # fragment 9 of 3
    sub.recv(PUB.message(w.data_frag(WRITER, 3, 1, b"", fragment_size=10, sample_size=0)),
             13 * MS)
    assert sub.counters["malformed_submessages"] == 3


def test_fragmented_discovery_is_learned() -> None:
    parser = RTPSParser()
    sub = w.Socket(parser, 200)
    other = w.Participant(5)
    announcement = w.sedp(other.guid(0x1203), "rt/" + "long/" * 190 + "scan",
                          "sensor_msgs::msg::dds_::LaserScan_")
    pieces = fragments(1, announcement, writer=w.SEDP_PUB_WRITER, who=other)
    assert len(pieces) == 2
    for i, piece in enumerate(pieces):
        sub.recv(piece, 10 * MS + i)
    sub.recv(other.sample(0x1203, 1, w.string_sample("x")), 11 * MS)
    sub.tick(300 * MS)
    (consumer,) = sub.spans()
    assert consumer.name.endswith("/long/scan")
    assert consumer.attributes["ros.message.type"] == "sensor_msgs/msg/LaserScan"



@settings(max_examples=200, deadline=None)
@given(st.lists(st.tuples(st.integers(1, 60), st.integers(0, 5)), max_size=40))
def test_coverage_counts_distinct_fragments(pieces) -> None:
    coverage, seen = Coverage(), set()
    for lo, n in pieces:
        assert coverage.add(lo, lo + n)
        seen.update(range(lo, lo + n + 1))
        assert coverage.covered == len(seen)
        assert all(e + 1 < s for e, s in zip(coverage.ends, coverage.starts[1:], strict=False))


def test_fragments_reordered_past_the_bound_are_dropped() -> None:
    _, _, sub = world()
    every_other = range(1, 2 * Coverage.MAX_RANGES + 3, 2)
    for start in every_other:
        sub.recv(PUB.message(w.data_frag(WRITER, 1, start, bytes(10), fragment_size=10,
                                         sample_size=10 * 10**6)), 10 * MS)
    assert not sub.driver.state.reassembly and sub.counters["reassembly_evicted"] == 1
