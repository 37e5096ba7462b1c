"""ROS 2 services through the real tracker: a client's request out and reply in make one
CLIENT span, a server's request in and reply out one SERVER span, both with the request's
message_id; paired by rmw_cyclonedds' request header or by Fast DDS' related sample identity
(standard and legacy parameter ids), in any processing order; unanswered calls end with an
error, stray replies are counted."""

from __future__ import annotations

import pytest
from otel_ebpf.protocols.base import SpanKind, StatusCode
from otel_ebpf.protocols.rtps import RTPSParser

from . import wire as w

MS = 1_000_000
REQ_WRITER, REQ_READER = 0x00001303, 0x00001304
REP_WRITER, REP_READER = 0x00001403, 0x00001404
REQ_TOPIC, REQ_TYPE = "rq/add_two_intsRequest", "example_interfaces::srv::dds_::AddTwoInts_Request_"
REP_TOPIC, REP_TYPE = "rr/add_two_intsReply", "example_interfaces::srv::dds_::AddTwoInts_Response_"
CLIENT_ADDR, SERVER_ADDR = ("127.0.0.1", 40001), ("127.0.0.1", 40002)


def world(vendor: int = w.CYCLONE, **options):
    parser = RTPSParser(options)
    client_p, server_p = w.Participant(1, vendor), w.Participant(2, vendor)
    client, server = w.Socket(parser, 500), w.Socket(parser, 600)
    client.send(client_p.announce(REQ_WRITER, REQ_TOPIC, REQ_TYPE), 1 * MS)
    server.send(server_p.announce(REP_WRITER, REP_TOPIC, REP_TYPE), 1 * MS)
    return parser, client_p, server_p, client, server


def cyclone_call(client_p, server_p, number: int = 1, handle: int = 0x7398_0000_0000_00B9):
    request = client_p.sample(REQ_WRITER, number, w.cyclone_request(
        handle, number, w.add_two_ints(number, 100)), dst=server_p.prefix)
    reply = server_p.sample(REP_WRITER, number, w.cyclone_request(
        handle, number, (101).to_bytes(8, "little")), dst=client_p.prefix)
    return request, reply


def call(client, server, request: bytes, reply: bytes, t0: int = 10 * MS) -> None:
    client.send(request, t0, peer=SERVER_ADDR)
    server.recv(request, t0 + 100_000, peer=CLIENT_ADDR)
    server.send(reply, t0 + 500_000, peer=CLIENT_ADDR)
    client.recv(reply, t0 + 600_000, peer=SERVER_ADDR)


def test_cyclone_header_pairs_client_and_server() -> None:
    _, client_p, server_p, client, server = world()
    call(client, server, *cyclone_call(client_p, server_p))
    (c,), (s,) = client.spans(), server.spans()
    assert (c.kind, s.kind) == (SpanKind.CLIENT, SpanKind.SERVER)
    assert c.name == s.name == "/add_two_ints"
    assert c.message_id == s.message_id == f"{client_p.guid(REQ_WRITER).hex()}:1"
    assert (c.start_ns, c.end_ns) == (10 * MS, 10 * MS + 600_000)
    assert (s.start_ns, s.end_ns) == (10 * MS + 100_000, 10 * MS + 500_000)
    for span in (c, s):
        a = span.attributes
        assert a["rpc.system.name"] == "ros2" and a["rpc.method"] == "/add_two_ints"
        assert a["ros.service.type"] == "example_interfaces/srv/AddTwoInts"
        assert a["otel_ebpf.rtps.service.pairing"] == "cyclone_header"
        assert a["otel_ebpf.rpc.request.body.size"] == 4 + 16 + 16
        assert span.status == StatusCode.UNSET and "error.type" not in a
    assert (c.attributes["server.address"], c.attributes["server.port"]) == SERVER_ADDR
    assert (s.attributes["client.address"], s.attributes["client.port"]) == CLIENT_ADDR
    assert s.attributes["otel_ebpf.messaging.delivery.latency"] == 0.0001
    (cm,), (sm,) = c.measurements, s.measurements
    assert (cm.instrument, cm.value) == ("rpc.client.call.duration", 0.0006)
    assert (sm.instrument, sm.value) == ("rpc.server.call.duration", 0.0004)
    assert dict(cm.attributes) == {"rpc.system.name": "ros2", "rpc.method": "/add_two_ints"}


@pytest.mark.parametrize("pid", [w.PID_RELATED_SAMPLE_IDENTITY, w.PID_FAST_RELATED])
def test_related_sample_identity_pairs_fastdds_calls(pid: int) -> None:
    _, client_p, server_p, client, server = world(w.FASTDDS)
    request = client_p.sample(REQ_WRITER, 5, w.encapsulated(w.add_two_ints(2, 3), 1),
                              qos=[(pid, w.identity(client_p.guid(REP_READER), -1))])
    reply = server_p.sample(REP_WRITER, 9, w.encapsulated((5).to_bytes(8, "little"), 1),
                            qos=[(pid, w.identity(client_p.guid(REQ_WRITER), 5))])
    call(client, server, request, reply)
    (c,), (s,) = client.spans(), server.spans()
    assert c.message_id == s.message_id == f"{client_p.guid(REQ_WRITER).hex()}:5"
    assert c.attributes["otel_ebpf.rtps.service.pairing"] == "related_sample_identity"
    assert c.attributes["otel_ebpf.rtps.vendor"] == "fastdds"


def test_a_reply_processed_before_its_request_still_pairs() -> None:
    parser, client_p, server_p, client, _ = world()
    replies = w.Socket(parser, 500, fd=9)  # the client process reads replies on another socket
    request, reply = cyclone_call(client_p, server_p, 3)
    replies.recv(reply, 10 * MS + 600_000)  # its stitch ran first
    client.send(request, 10 * MS)
    assert replies.records == []
    (c,) = client.spans()
    assert (c.start_ns, c.end_ns) == (10 * MS, 10 * MS + 600_000)


def test_calls_from_one_client_pair_by_sequence() -> None:
    _, client_p, server_p, client, server = world()
    calls = [cyclone_call(client_p, server_p, n) for n in (1, 2, 3)]
    for n, (request, _) in enumerate(calls):
        client.send(request, 10 * MS + n)
    for n, (_, reply) in reversed(list(enumerate(calls))):
        client.recv(reply, 20 * MS + n)
    assert [s.attributes["otel_ebpf.rtps.sequence_number"] for s in client.spans()] == [3, 2, 1]
    assert all(s.end_ns == 20 * MS + s.attributes["otel_ebpf.rtps.sequence_number"] - 1
               for s in client.spans())


def test_an_unanswered_request_times_out() -> None:
    parser, client_p, server_p, client, _ = world(pairing_timeout_s=1.0)
    request, _ = cyclone_call(client_p, server_p)
    client.send(request, 10 * MS)
    client.tick(1000 * MS)
    assert client.records == []
    client.tick(1011 * MS)
    (c,) = client.spans()
    assert c.kind == SpanKind.CLIENT and c.status == StatusCode.ERROR
    assert c.attributes["error.type"] == "timeout"
    assert c.end_ns == c.start_ns == 10 * MS
    (m,) = c.measurements
    assert m.attributes["error.type"] == "timeout"
    client.close()
    assert parser.counters(client.driver.state)["unanswered_requests"] == 1


def test_a_process_that_closes_ends_its_calls() -> None:
    parser, client_p, server_p, client, server = world()
    other = w.Socket(parser, 500, fd=6)
    request, _ = cyclone_call(client_p, server_p)
    client.send(request, 10 * MS)
    client.close()  # the process still has a socket open: its call may still be answered
    assert client.records == []
    other.close()
    (c,) = other.spans()
    assert c.attributes["error.type"] == "closed"
    assert c.conn.fd == 5  # the request's socket


def test_replies_to_other_clients_are_counted_not_spans() -> None:
    parser, client_p, server_p, client, server = world(pairing_timeout_s=1.0)
    bystander = w.Socket(parser, 700)
    request, reply = cyclone_call(client_p, server_p)
    call(client, server, request, reply)
    bystander.recv(reply, 10 * MS + 700_000)  # every client of the service gets every reply
    bystander.tick(2000 * MS)
    assert bystander.records == [] and len(client.spans()) == 1
    bystander.close()
    assert parser.counters(bystander.driver.state)["orphan_replies"] == 1


def test_a_reply_without_identity_is_counted() -> None:
    parser, client_p, server_p, client, _ = world(w.FASTDDS)
    client.recv(server_p.sample(REP_WRITER, 1, w.encapsulated(b"", 1)), 10 * MS)
    client.close()
    assert parser.counters(client.driver.state)["replies_without_identity"] == 1


def test_a_fragmented_request_keeps_its_header() -> None:
    _, client_p, server_p, client, server = world()
    request, reply = cyclone_call(client_p, server_p)
    payload = w.cyclone_request(0x7398_0000_0000_00B9, 1, bytes(2500))
    pieces = [client_p.message(w.data_frag(REQ_WRITER, 1, n, payload[(n - 1) * 1000 : n * 1000],
                                           fragment_size=1000, sample_size=len(payload)))
              for n in (1, 2, 3)]
    for i, piece in enumerate(pieces):
        server.recv(piece, 10 * MS + i)
    server.send(reply, 11 * MS)
    (s,) = server.spans()
    assert s.attributes["otel_ebpf.rtps.service.pairing"] == "cyclone_header"
    assert s.attributes["otel_ebpf.rpc.request.body.size"] == len(payload)
