"""Topics through the real tracker, one parser shared by a publisher's and two subscribers'
sockets (as the agent shares it): span names and attributes, one message_id on both ends,
delivery latency, waits for discovery and for the send time, repairs, duplicates, counts."""

from __future__ import annotations

from otel_ebpf.protocols.base import SpanKind
from otel_ebpf.protocols.rtps import RTPSParser

from . import wire as w

MS = 1_000_000
PUB, SUB1, SUB2 = w.Participant(1), w.Participant(2), w.Participant(3)
WRITER = 0x00001103  # a user writer without key
TOPIC, TYPE = "rt/chatter", "std_msgs::msg::dds_::String_"
HERE = ("127.0.0.1", 7411)
RELIABILITY = "otel_ebpf.rtps.reliability.events"


def world(**options):
    parser = RTPSParser(options)
    return parser, w.Socket(parser, 100), w.Socket(parser, 200), w.Socket(parser, 300)


def announce(sock: w.Socket, at: int = 1 * MS, who: w.Participant = PUB, writer: int = WRITER,
             topic: str = TOPIC, type_name: str = TYPE) -> None:
    sock.send(who.announce(writer, topic, type_name), at)


def chatter(n: int, who: w.Participant = PUB, text: str = "hello", **kw) -> bytes:
    return who.sample(WRITER, n, w.string_sample(f"{text} {n}", who.little), **kw)


def only(spans, kind=None):
    spans = [s for s in spans if kind is None or s.kind == kind]
    assert len(spans) == 1, spans
    return spans[0]


def test_publish_and_two_receives_share_the_message_id() -> None:
    _, pub, sub1, sub2 = world()
    announce(pub)
    datagram = chatter(1)
    pub.send(datagram, 10 * MS)
    sub1.recv(datagram, 10 * MS + 100_000, HERE)
    sub2.recv(datagram, 10 * MS + 300_000, HERE)
    producer = only(pub.spans())
    c1, c2 = only(sub1.spans()), only(sub2.spans())
    assert producer.kind == SpanKind.PRODUCER and producer.name == "publish /chatter"
    assert c1.kind == c2.kind == SpanKind.CONSUMER and c1.name == "receive /chatter"
    message_id = f"{PUB.guid(WRITER).hex()}:1"
    assert producer.message_id == c1.message_id == c2.message_id == message_id
    assert producer.request_pos is None and c1.request_pos is None
    a = producer.attributes
    assert a["messaging.system"] == "ros2"
    assert a["messaging.destination.name"] == "/chatter"
    assert a["messaging.operation.name"] == "publish"
    assert a["messaging.operation.type"] == "send"
    assert a["messaging.message.id"] == message_id
    assert a["messaging.message.body.size"] == len(w.string_sample("hello 1"))
    assert a["ros.message.type"] == "std_msgs/msg/String"
    assert a["otel_ebpf.dds.topic.name"] == TOPIC and a["otel_ebpf.dds.type.name"] == TYPE
    assert a["otel_ebpf.rtps.writer.guid"] == PUB.guid(WRITER).hex()
    assert a["otel_ebpf.rtps.sequence_number"] == 1
    assert a["otel_ebpf.rtps.vendor"] == "cyclonedds"
    assert (a["network.peer.address"], a["network.peer.port"]) == w.MULTICAST
    assert a["network.transport"] == "udp"
    assert "otel_ebpf.messaging.delivery.latency" not in a
    b = c1.attributes
    assert b["messaging.operation.name"] == "receive" and b["messaging.operation.type"] == "receive"
    assert (b["network.peer.address"], b["network.peer.port"]) == HERE
    assert b["otel_ebpf.messaging.delivery.latency"] == 0.0001
    assert c2.attributes["otel_ebpf.messaging.delivery.latency"] == 0.0003
    assert "otel_ebpf.rtps.repair" not in b and "otel_ebpf.rtps.fragments" not in b


def test_measurements() -> None:
    parser, pub, sub1, _ = world()
    announce(pub)
    pub.send(chatter(1), 10 * MS)
    sub1.recv(chatter(1), 11 * MS)
    size = float(len(w.string_sample("hello 1")))
    produced = {m.instrument: m for m in only(pub.spans()).measurements}
    received = {m.instrument: m for m in only(sub1.spans()).measurements}
    assert set(produced) == {"otel_ebpf.messaging.message.body.size"}
    assert produced["otel_ebpf.messaging.message.body.size"].value == size
    assert dict(produced["otel_ebpf.messaging.message.body.size"].attributes) == {
        "messaging.system": "ros2", "messaging.destination.name": "/chatter",
        "messaging.operation.name": "publish"}
    assert received["otel_ebpf.messaging.delivery.latency"].value == 0.001
    assert set(parser.instruments) >= set(produced) | set(received)


def test_a_receive_processed_before_its_send_waits_for_the_send_time() -> None:
    _, pub, sub1, _ = world()
    announce(pub)
    sub1.recv(chatter(1), 10 * MS)  # the subscriber's event came first in the batch
    assert sub1.records == []
    pub.send(chatter(1), 9 * MS)
    sub1.tick(10 * MS + 1)
    assert only(sub1.spans()).attributes["otel_ebpf.messaging.delivery.latency"] == 0.001


def test_a_receive_whose_send_was_not_seen_goes_without_latency() -> None:
    _, pub, sub1, _ = world(latency_wait_s=0.2)
    announce(pub)
    sub1.recv(chatter(1), 10 * MS)
    sub1.tick(200 * MS)
    assert sub1.records == []
    sub1.tick(211 * MS)
    span = only(sub1.spans())
    assert span.name == "receive /chatter"
    assert "otel_ebpf.messaging.delivery.latency" not in span.attributes


def test_stitch_without_a_clock_uses_the_latest_frame_time() -> None:
    parser, pub, sub1, sub2 = world()
    announce(pub)
    sub1.recv(chatter(1), 10 * MS)
    sub1.driver.stitch(0)  # what the agent passes between sweeps
    assert sub1.records == []
    sub2.recv(chatter(9, text="later"), 300 * MS)  # any connection's frames move the clock
    sub1.driver.stitch(0)
    assert len(sub1.records) == 1


def test_an_unknown_writer_waits_for_discovery() -> None:
    _, pub, sub1, _ = world()
    discovery_socket = w.Socket(pub.driver.parser, 100, fd=6)
    pub.send(chatter(1), 10 * MS)
    sub1.recv(chatter(1), 10 * MS + 50_000)
    assert pub.records == [] and sub1.records == []
    announce(discovery_socket, 20 * MS)
    pub.tick(21 * MS)
    sub1.tick(21 * MS)
    assert only(pub.spans()).name == "publish /chatter"
    consumer = only(sub1.spans())
    assert consumer.name == "receive /chatter"
    assert consumer.attributes["otel_ebpf.messaging.delivery.latency"] == 0.00005


def test_an_undiscovered_writer_is_named_by_its_entity_id() -> None:
    _, pub, sub1, _ = world(discovery_wait_s=0.5)
    pub.send(chatter(3), 10 * MS)
    sub1.recv(chatter(3), 11 * MS)
    pub.tick(500 * MS)
    assert pub.records == []
    pub.tick(511 * MS)
    sub1.tick(511 * MS)
    producer, consumer = only(pub.spans()), only(sub1.spans())
    assert producer.name == "publish 0x00001103" and consumer.name == "receive 0x00001103"
    assert producer.attributes["messaging.system"] == "dds"
    assert producer.attributes["otel_ebpf.rtps.writer.undiscovered"] is True
    assert producer.message_id == consumer.message_id
    assert pub.counters["unknown_writers"] == 1


def test_samples_of_a_closed_socket_wait_on_and_the_last_close_ends_the_waits() -> None:
    _, pub, sub1, sub2 = world()
    announce(pub)
    sub1.recv(chatter(1), 10 * MS)
    sub1.close()  # the process exited right after its receive...
    assert sub1.records == []
    pub.send(chatter(1), 9 * MS)  # ...and the send, in the same batch, is stitched after
    (record,) = pub.records[1:]  # the closed socket's sample went out with another's
    (consumer,) = pub.driver.parser.to_spans(record, pub.driver.conn)
    assert consumer.conn.pid == 200 and consumer.kind.name == "CONSUMER"
    assert consumer.attributes["otel_ebpf.messaging.delivery.latency"] == 0.001
    sub2.recv(chatter(2), 20 * MS)
    sub2.close()
    pub.close()  # the last connection: nothing is left to wait for
    (late,) = pub.records[2:]
    assert late.conn.pid == 300 and late.latency_ns is None


def test_plain_dds_topic() -> None:
    _, pub, sub1, _ = world()
    announce(pub, topic="Square", type_name="ShapeType")
    pub.send(chatter(1), 10 * MS)
    span = only(pub.spans())
    assert span.name == "publish Square"
    assert span.attributes["messaging.system"] == "dds"
    assert span.attributes["otel_ebpf.dds.type.name"] == "ShapeType"
    assert "ros.message.type" not in span.attributes


def test_big_endian_participants() -> None:
    pub_p = w.Participant(11, little=False)
    _, pub, sub1, _ = world()
    announce(pub, who=pub_p)
    datagram = pub_p.sample(WRITER, 2**33 + 1, w.string_sample("be", little=False))
    pub.send(datagram, 10 * MS)
    sub1.recv(datagram, 11 * MS)
    producer, consumer = only(pub.spans()), only(sub1.spans())
    assert producer.name == "publish /chatter"
    assert producer.message_id == consumer.message_id == f"{pub_p.guid(WRITER).hex()}:{2**33 + 1}"
    assert consumer.attributes["otel_ebpf.messaging.delivery.latency"] == 0.001


def test_several_samples_in_one_datagram() -> None:
    _, pub, _, _ = world()
    announce(pub)
    datagram = PUB.message(w.info_ts(), w.data(WRITER, 1, w.string_sample("a")),
                           w.data(WRITER, 2, w.string_sample("bb")), w.heartbeat(WRITER, 1, 2))
    pub.send(datagram, 10 * MS)
    spans = pub.spans()
    assert [s.attributes["otel_ebpf.rtps.sequence_number"] for s in spans] == [1, 2]
    assert pub.counters["heartbeats"] == 1


def test_body_size_from_the_declared_length_when_the_capture_is_cut() -> None:
    _, pub, sub1, _ = world()
    announce(pub)
    payload = w.string_sample("z" * 5000)
    datagram = PUB.sample(WRITER, 1, payload)
    pub.send(datagram, 10 * MS, captured=200)
    last = PUB.message(w.info_ts(), w.data(WRITER, 2, payload, last=True))
    pub.send(last, 11 * MS, captured=200)  # size from the datagram's length (the tracker's)
    sizes = [s.attributes["messaging.message.body.size"] for s in pub.spans()]
    assert sizes == [len(payload), len(payload)]
    assert pub.counters["truncated_datagrams"] == 2
    sub1.recv(datagram, 12 * MS, captured=64)
    assert only(sub1.spans()).attributes["messaging.message.body.size"] == len(payload)


def test_fan_out_is_one_sample_and_a_resend_is_a_repair() -> None:
    _, pub, sub1, _ = world()
    announce(pub)
    a, b = ("127.0.0.1", 7411), ("127.0.0.1", 7413)
    pub.send(chatter(1, dst=SUB1.prefix), 10 * MS, peer=a)
    pub.send(chatter(1, dst=SUB2.prefix), 10 * MS + 10_000, peer=b)  # the other reader's copy
    assert len(pub.spans()) == 1
    assert "repair_samples" not in pub.counters
    pub.send(chatter(1, dst=SUB1.prefix), 30 * MS, peer=a)  # again to the same reader
    assert len(pub.spans()) == 1
    assert pub.counters["repair_samples"] == 1
    sub1.recv(chatter(1, dst=SUB1.prefix), 31 * MS)  # the first copy was lost: this is it
    consumer = only(sub1.spans())
    assert consumer.attributes["otel_ebpf.rtps.repair"] is True
    assert consumer.attributes["otel_ebpf.messaging.delivery.latency"] == 0.021
    pub.send(chatter(2), 40 * MS)
    second = pub.spans()[-1]
    events = [m for m in second.measurements if m.instrument == RELIABILITY]
    assert [(m.value, m.attributes["otel_ebpf.rtps.event"]) for m in events] == [(1.0, "repair")]


def test_duplicates_and_own_multicast_make_no_spans() -> None:
    _, pub, sub1, _ = world()
    announce(pub)
    pub.send(chatter(1), 10 * MS)
    pub.recv(chatter(1), 10 * MS + 5)  # the multicast looped back to its sender
    sub1.recv(chatter(1), 11 * MS)
    sub1.recv(chatter(1), 12 * MS)
    assert len(pub.spans()) == 1 and len(sub1.spans()) == 1
    assert pub.counters["own_samples"] == 1
    assert sub1.counters["duplicate_samples"] == 1


def test_a_sample_asked_for_again_is_a_repair_and_the_nack_is_measured() -> None:
    _, pub, sub1, _ = world()
    announce(pub)
    sub1.recv(chatter(1), 10 * MS)
    sub1.send(SUB1.message(w.info_dst(PUB.prefix), w.acknack(WRITER, 2, [2, 3])), 15 * MS,
              peer=HERE)
    sub1.recv(chatter(2), 20 * MS)
    sub1.tick(1000 * MS)
    first, second = sub1.spans()
    assert "otel_ebpf.rtps.repair" not in first.attributes
    assert second.attributes["otel_ebpf.rtps.repair"] is True
    (nack,) = [m for m in second.measurements if m.instrument == RELIABILITY]
    assert (nack.value, nack.attributes["otel_ebpf.rtps.event"]) == (2.0, "nack")
    assert nack.attributes["messaging.destination.name"] == "/chatter"
    assert sub1.counters["acknacks"] == 1 and sub1.counters["nacked_samples"] == 2


def test_gaps_heartbeats_and_acknacks_are_counted() -> None:
    parser, pub, sub1, _ = world()
    announce(pub)
    sub1.recv(PUB.message(w.heartbeat(WRITER, 1, 5), w.gap(WRITER, 1, 4)), 10 * MS)
    sub1.recv(PUB.message(w.heartbeat_frag(WRITER, 9, 3), w.heartbeat(WRITER, 1, 5)), 11 * MS)
    sub1.send(SUB1.message(w.info_dst(PUB.prefix), w.acknack(WRITER, 6),
                           w.nack_frag(WRITER, 9, [2])), 12 * MS)
    sub1.recv(chatter(6), 13 * MS)
    sub1.tick(500 * MS)
    sub1.close()
    (gap,) = [m for m in only(sub1.spans()).measurements if m.instrument == RELIABILITY]
    assert (gap.value, gap.attributes["otel_ebpf.rtps.event"]) == (3.0, "gap")
    counters = parser.counters(sub1.driver.state)
    assert counters["heartbeats"] == 2 and counters["gaps"] == 1
    assert counters["heartbeat_frags"] == 1 and counters["nack_frags"] == 1
    assert counters["acknacks"] == 1 and "nacked_samples" not in counters


def test_counters_report_the_shared_tables_once() -> None:
    parser, pub, sub1, _ = world(discovery_max_entries=1)
    announce(pub)
    announce(pub, at=2 * MS, writer=0x1203, topic="rt/other")
    pub.close()
    first = parser.counters(pub.driver.state)
    assert first["discovery_samples"] == 2 and first["discovery_evicted"] == 1
    sub1.close()
    second = parser.counters(sub1.driver.state)
    assert "discovery_samples" not in second and "discovery_evicted" not in second


def test_key_only_and_builtin_samples_make_no_spans() -> None:
    _, pub, _, _ = world()
    announce(pub)
    pub.send(PUB.message(w.data(WRITER, 4, w.encapsulated(bytes(16), 1), key=True)), 10 * MS)
    pub.send(PUB.message(w.data(0x000200C2, 1, w.encapsulated(bytes(16), 1))), 11 * MS)
    pub.close()
    assert pub.spans() == []
    assert pub.counters["key_only_samples"] == 1


def test_garbage_datagrams_are_parse_errors() -> None:
    _, pub, _, _ = world()
    pub.send(PUB.message(w.info_ts()), 1 * MS)  # RTPS first: the socket is claimed
    pub.send(b"not rtps at all, not at all", 2 * MS)
    pub.send(b"", 3 * MS)
    assert pub.parse_errors == 2
