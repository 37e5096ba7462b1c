"""ROS 2 names from DDS names, and the discovery table: SPDP participants, SEDP endpoints
(GUID from PID_ENDPOINT_GUID or the key hash), disposals, bounded LRU with evictions."""

from __future__ import annotations

import pytest
from otel_ebpf.protocols.rtps import RosKind, names
from otel_ebpf.protocols.rtps.discovery import (
    SEDP_PUBLICATIONS,
    SEDP_SUBSCRIPTIONS,
    SPDP_WRITERS,
    Discovery,
)
from otel_ebpf.protocols.rtps.names import ros_name, ros_type

from . import wire as w

SEDP_PUB, SEDP_SUB, SPDP = (min(SEDP_PUBLICATIONS), min(SEDP_SUBSCRIPTIONS), min(SPDP_WRITERS))


@pytest.mark.parametrize("topic, kind, name", [
    ("rt/chatter", RosKind.TOPIC, "/chatter"),
    ("rt/robot1/cmd_vel", RosKind.TOPIC, "/robot1/cmd_vel"),
    ("rq/add_two_intsRequest", RosKind.REQUEST, "/add_two_ints"),
    ("rr/add_two_intsReply", RosKind.REPLY, "/add_two_ints"),
    ("rq/ns/fib/_action/send_goalRequest", RosKind.REQUEST, "/ns/fib/_action/send_goal"),
    ("ros_discovery_info", None, ""),
    ("Square", None, ""),
    ("rt/", None, ""),
])
def test_ros_names(topic, kind, name) -> None:
    assert ros_name(topic) == (kind, name)


@pytest.mark.parametrize("dds, ros", [
    ("std_msgs::msg::dds_::String_", "std_msgs/msg/String"),
    ("sensor_msgs::msg::dds_::PointCloud2_", "sensor_msgs/msg/PointCloud2"),
    ("example_interfaces::srv::dds_::AddTwoInts_Request_",
     "example_interfaces/srv/AddTwoInts_Request"),
    ("ShapeType", "ShapeType"),
    ("a::b", "a::b"),
])
def test_ros_types(dds, ros) -> None:
    assert ros_type(dds) == ros


def test_service_names() -> None:
    n = names("rq/add_two_intsRequest", "example_interfaces::srv::dds_::AddTwoInts_Request_")
    assert (n.kind, n.destination, n.service_type) == (
        RosKind.REQUEST, "/add_two_ints", "example_interfaces/srv/AddTwoInts")
    reply = names("rr/add_two_intsReply", "example_interfaces::srv::dds_::AddTwoInts_Response_")
    assert reply.service_type == "example_interfaces/srv/AddTwoInts"
    plain = names("Square", "ShapeType")
    assert (plain.kind, plain.destination, plain.message_type) == (None, "Square", "")


@pytest.mark.parametrize("little", [True, False])
def test_sedp_publication_and_subscription(little: bool) -> None:
    table, p = Discovery(16), w.Participant(1, little=little)
    string = "std_msgs::msg::dds_::String_"
    for sedp_writer, entity in ((SEDP_PUB, 0x1103), (SEDP_SUB, 0x1204)):
        data = w.sedp(p.guid(entity), "rt/chatter", string, little)
        assert table.learn(sedp_writer, data, {}, little, False, w.CYCLONE) == "endpoint"
    writer, reader = table.endpoint(p.guid(0x1103)), table.endpoint(p.guid(0x1204))
    assert writer.writer and not reader.writer
    assert writer.names.destination == "/chatter"
    assert writer.names.message_type == "std_msgs/msg/String"


def test_key_hash_names_the_endpoint_without_its_guid_parameter() -> None:
    table, p = Discovery(16), w.Participant(1)
    data = w.sedp(p.guid(0x1103), "Square", "ShapeType", with_guid=False)
    assert table.learn(SEDP_PUB, data, {}, True, False, w.FASTDDS) == "endpoint"
    assert table.endpoint(p.guid(0x1103)).names.topic == "Square"
    # and from the inline QoS, when the data has neither
    data = w.encapsulated(w.params([(w.PID_TOPIC_NAME, w.cdr_string("T")),
                                    (w.PID_TYPE_NAME, w.cdr_string("X"))]), 3)
    qos = {w.PID_KEY_HASH: p.guid(0x2203)}
    assert table.learn(SEDP_PUB, data, qos, True, False, w.FASTDDS) == "endpoint"
    assert table.endpoint(p.guid(0x2203)).names.topic == "T"


def test_spdp_participant() -> None:
    table, p = Discovery(16), w.Participant(1)
    assert table.learn(SPDP, w.spdp(p.prefix, "/talker"), {}, True, False, w.CYCLONE) \
        == "participant"
    assert table.participants[p.prefix].name == "/talker"
    assert table.participants[p.prefix].vendor == w.CYCLONE


def test_disposed_endpoints_stay_named() -> None:
    table, p = Discovery(16), w.Participant(1)
    table.learn(SEDP_PUB, w.sedp(p.guid(0x1103), "rt/chatter", "T"), {}, True, False, 0)
    qos = {w.PID_STATUS_INFO: b"\x00\x00\x00\x03", w.PID_KEY_HASH: p.guid(0x1103)}
    assert table.learn(SEDP_PUB, b"", qos, True, True, 0) == "disposed"
    assert table.endpoint(p.guid(0x1103)) is not None


def test_unreadable_discovery_data() -> None:
    table = Discovery(16)
    assert table.learn(SEDP_PUB, b"\x00\x01\x00\x00junk", {}, True, False, 0) is None
    assert table.learn(SEDP_PUB, w.encapsulated(w.params([]), 3), {}, True, False, 0) is None
    assert table.learn(SPDP, b"", {}, True, False, 0) is None


def test_bounded_lru_counts_evictions() -> None:
    table, p = Discovery(3), w.Participant(1)
    for i in range(5):
        table.learn(SEDP_PUB, w.sedp(p.guid(0x1003 + (i << 8)), f"rt/t{i}", "T"), {}, True,
                    False, 0)
        if i == 2:
            assert table.endpoint(p.guid(0x1003)) is not None  # used: the LRU keeps it
    assert len(table.endpoints) == 3 and table.evicted == 2
    assert table.endpoint(p.guid(0x1003)) is not None
    assert table.endpoint(p.guid(0x1103)) is None
