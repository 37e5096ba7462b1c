"""RTPS records -> neutral spans: PRODUCER `publish {topic}` and CONSUMER `receive {topic}`
spans after the messaging semantic conventions, CLIENT and SERVER spans named by the ROS 2
service after the RPC ones; both ends of a sample or call share its message_id."""

from __future__ import annotations

from collections.abc import Mapping

from ..base import (
    AttributeValue,
    ConnInfo,
    Direction,
    Instrument,
    Measurement,
    NeutralSpan,
    Role,
    SpanKind,
    StatusCode,
    positional_maker,
)
from .names import Names
from .parse import VENDORS
from .stitch import CallRecord, MessageRecord, Sample

PROTOCOL = "rtps"
NS = 1e9

# span attributes of ours (no semantic convention covers them)
ROS_MESSAGE_TYPE = "ros.message.type"  # std_msgs/msg/String
ROS_SERVICE_TYPE = "ros.service.type"  # example_interfaces/srv/AddTwoInts
DDS_TOPIC = "otel_ebpf.dds.topic.name"  # the DDS topic: rt/chatter
DDS_TYPE = "otel_ebpf.dds.type.name"  # the DDS type: std_msgs::msg::dds_::String_
WRITER_GUID = "otel_ebpf.rtps.writer.guid"  # 32 hex digits
READER_GUID = "otel_ebpf.rtps.reader.guid"  # when the datagram named its reader
SEQUENCE = "otel_ebpf.rtps.sequence_number"
VENDOR = "otel_ebpf.rtps.vendor"  # cyclonedds, fastdds... (hex when not one we name)
FRAGMENTS = "otel_ebpf.rtps.fragments"  # DATA_FRAG fragments the sample came in
REPAIR = "otel_ebpf.rtps.repair"  # sent again (or asked for again) before this copy came
UNDISCOVERED = "otel_ebpf.rtps.writer.undiscovered"  # named by its writer's entity id
DELIVERY_LATENCY = "otel_ebpf.messaging.delivery.latency"  # s, receive - send on this host
PAIRING = "otel_ebpf.rtps.service.pairing"  # cyclone_header, related_sample_identity
REQUEST_SIZE = "otel_ebpf.rpc.request.body.size"
RESPONSE_SIZE = "otel_ebpf.rpc.response.body.size"
EVENT = "otel_ebpf.rtps.event"  # attribute of RELIABILITY_EVENTS: repair, nack, gap

# instruments
BODY_SIZE = "otel_ebpf.messaging.message.body.size"
LATENCY = "otel_ebpf.messaging.delivery.latency"
RELIABILITY_EVENTS = "otel_ebpf.rtps.reliability.events"
CLIENT_DURATION = "rpc.client.call.duration"
SERVER_DURATION = "rpc.server.call.duration"

# fmt: off
SIZE_BUCKETS = (64.0, 256.0, 1024.0, 4096.0, 16384.0, 65536.0, 262144.0, 1048576.0, 4194304.0,
                16777216.0)
LATENCY_BUCKETS = (0.00005, 0.0001, 0.00025, 0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05,
                   0.1, 0.25, 0.5, 1.0)
EVENT_BUCKETS = (1.0, 2.0, 5.0, 10.0, 20.0, 50.0, 100.0, 1000.0)
DURATION_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.075, 0.1, 0.25, 0.5, 0.75, 1.0, 2.5, 5.0, 7.5,
                    10.0)  # semconv rpc.*.call.duration
# fmt: on

INSTRUMENTS: Mapping[str, Instrument] = {
    BODY_SIZE: Instrument("By", "Serialized size of DDS samples published or received: the "
                          "count is the number of samples.", SIZE_BUCKETS),
    LATENCY: Instrument("s", "Time from a sample's send to its receipt, both on this host.",
                        LATENCY_BUCKETS),
    RELIABILITY_EVENTS: Instrument(
        "{event}", "RTPS retransmissions sent, samples a reader asked for again, and samples "
        "a writer declared gone, per writer since its previous sample: the sum is the count.",
        EVENT_BUCKETS),
    CLIENT_DURATION: Instrument("s", "Duration of ROS 2 service calls, client side.",
                                DURATION_BUCKETS),
    SERVER_DURATION: Instrument("s", "Duration of ROS 2 service calls, server side.",
                                DURATION_BUCKETS),
}

Attributes = dict[str, AttributeValue]
EGRESS, PRODUCER, CONSUMER = Direction.EGRESS, SpanKind.PRODUCER, SpanKind.CONSUMER  # bound once


def to_spans(record: MessageRecord | CallRecord, conn: ConnInfo) -> list[NeutralSpan]:
    if isinstance(record, CallRecord):
        return [_call(record)]
    return [_message(record)]


_new_span = positional_maker(NeutralSpan, (
    "name", "kind", "start_ns", "end_ns", "conn", "attributes", "protocol", "message_id",
    "measurements"))
_measurement = positional_maker(Measurement, ("instrument", "value", "attributes"))

# The measurements' attribute dicts, one per (system, topic, operation): a topic's samples
# share them instead of making two dicts per span (span metrics reads them, never writes).
# Bounded: undiscovered writers name their topic by entity id, so the keys are not.
MAX_METRIC_ATTRIBUTES = 1024
_metric_dicts: dict[tuple[str, str, str], tuple[Attributes, Attributes]] = {}


def _metric_attributes(system: str, destination: str, operation: str
                       ) -> tuple[Attributes, Attributes]:
    """(common, common + operation) for a sample's measurements."""
    key = (system, destination, operation)
    found = _metric_dicts.get(key)
    if found is None:
        common: Attributes = {"messaging.system": system,
                              "messaging.destination.name": destination}
        found = (common, {**common, "messaging.operation.name": operation})
        if len(_metric_dicts) >= MAX_METRIC_ATTRIBUTES:
            _metric_dicts.clear()
        _metric_dicts[key] = found
    return found


def _message(record: MessageRecord) -> NeutralSpan:
    sample, names = record.sample, record.names
    publish = sample.direction is EGRESS
    system = "ros2" if names is not None and names.kind is not None else "dds"
    destination = names.destination if names is not None else f"0x{sample.writer[12:].hex()}"
    operation = "publish" if publish else "receive"
    writer = sample.writer.hex()
    message_id = f"{writer}:{sample.seq}"  # Sample.message_id, its hex made once
    attrs: Attributes = {
        "messaging.system": system,
        "messaging.destination.name": destination,
        "messaging.operation.name": operation,
        "messaging.operation.type": "send" if publish else "receive",
        "messaging.message.id": message_id,
        "messaging.message.body.size": sample.size,
    }
    _names(names, attrs)
    _sample(sample, record.conn, attrs, writer)
    common, with_operation = _metric_attributes(system, destination, operation)
    measurements = [_measurement(BODY_SIZE, float(sample.size), with_operation)]
    latency_ns = record.latency_ns
    if latency_ns is not None:
        attrs[DELIVERY_LATENCY] = latency = latency_ns / NS
        measurements.append(_measurement(LATENCY, latency, common))
    loss = sample.loss
    for event, n in sorted(loss.items()) if loss else ():
        measurements.append(_measurement(RELIABILITY_EVENTS, float(n), {**common, EVENT: event}))
    return _new_span(f"{operation} {destination}", PRODUCER if publish else CONSUMER,
                     sample.start_ns, max(sample.end_ns, sample.start_ns), record.conn, attrs,
                     PROTOCOL, message_id, measurements)


def _names(names: Names | None, attrs: Attributes) -> None:
    if names is None:
        attrs[UNDISCOVERED] = True
        return
    attrs[DDS_TOPIC] = names.topic
    if names.type_name:
        attrs[DDS_TYPE] = names.type_name
    if names.kind is not None and names.message_type:
        attrs[ROS_MESSAGE_TYPE] = names.message_type


def _vendor(vendor: int) -> str:
    name = VENDORS.get(vendor)
    return name if name is not None else f"0x{vendor:04x}"


def _sample(sample: Sample, conn: ConnInfo, attrs: Attributes, writer: str) -> None:
    attrs[WRITER_GUID] = writer
    attrs[SEQUENCE] = sample.seq
    if sample.reader is not None:
        attrs[READER_GUID] = sample.reader.hex()
    attrs[VENDOR] = _vendor(sample.vendor)
    if sample.fragments:
        attrs[FRAGMENTS] = sample.fragments
    if sample.repair:
        attrs[REPAIR] = True
    _network(sample.peer, conn, attrs)


def _network(peer: tuple[str, int] | None, conn: ConnInfo, attrs: Attributes) -> None:
    attrs["network.transport"] = "udp"
    attrs["network.protocol.name"] = "rtps"
    if conn.family in ("ipv4", "ipv6"):
        attrs["network.type"] = conn.family
    address, port = peer if peer is not None else (conn.remote_addr, conn.remote_port)
    if address:
        attrs["network.peer.address"] = address
    if port:
        attrs["network.peer.port"] = port


def _call(record: CallRecord) -> NeutralSpan:
    request, reply, names = record.request, record.reply, record.names
    client = record.role is Role.CLIENT
    method = names.name or names.topic
    attrs: Attributes = {"rpc.system.name": "ros2", "rpc.method": method}
    if names.service_type:
        attrs[ROS_SERVICE_TYPE] = names.service_type
    # the other side: a client's server sent the reply; a server's client sent the request
    other = (reply.peer if reply is not None else request.peer) if client else request.peer
    _network(other, record.conn, attrs)
    if other is not None:
        prefix = "server" if client else "client"
        attrs[f"{prefix}.address"], attrs[f"{prefix}.port"] = other
    attrs[WRITER_GUID] = request.writer.hex()
    attrs[SEQUENCE] = request.seq
    attrs[VENDOR] = _vendor(request.vendor)
    attrs[REQUEST_SIZE] = request.size
    if reply is not None:
        attrs[RESPONSE_SIZE] = reply.size
        attrs[PAIRING] = record.pairing
    if request.repair or (reply is not None and reply.repair):
        attrs[REPAIR] = True
    if record.latency_ns is not None:
        attrs[DELIVERY_LATENCY] = record.latency_ns / NS
    status = StatusCode.UNSET
    if record.error:
        attrs["error.type"] = record.error
        status = StatusCode.ERROR
    start = request.start_ns if client else request.end_ns
    end = max(reply.end_ns if reply is not None else request.end_ns, start)
    common: Attributes = {"rpc.system.name": "ros2", "rpc.method": method}
    if record.error:
        common["error.type"] = record.error
    duration = Measurement(CLIENT_DURATION if client else SERVER_DURATION, (end - start) / NS,
                           common)
    return NeutralSpan(
        name=method,
        kind=SpanKind.CLIENT if client else SpanKind.SERVER,
        start_ns=start,
        end_ns=end,
        conn=record.conn,
        attributes=attrs,
        status=status,
        status_message=f"no reply ({record.error})" if record.error else "",
        protocol=PROTOCOL,
        message_id=request.message_id,
        measurements=[duration],
    )
