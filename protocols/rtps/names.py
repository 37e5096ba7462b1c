"""ROS 2 names from DDS names: the rmw prefixes of topics (rt/, rq/, rr/) and the `dds_`
modules of type names, so spans show what a ROS user wrote (`/chatter`, `std_msgs/msg/String`)."""

from __future__ import annotations

import enum
from dataclasses import dataclass


class RosKind(enum.Enum):
    TOPIC = "topic"
    REQUEST = "request"  # a service's request topic
    REPLY = "reply"  # a service's reply topic


# rmw topic prefixes (ROS 2 design, "Topic and Service name mapping to DDS"): what follows the
# prefix is the ROS name without its leading slash; service topics carry a suffix
_PREFIXES: dict[str, tuple[RosKind, str]] = {
    "rt/": (RosKind.TOPIC, ""),
    "rq/": (RosKind.REQUEST, "Request"),
    "rr/": (RosKind.REPLY, "Reply"),
}
# the suffixes rmw type support gives a service's request and response message types
_SERVICE_TYPE_SUFFIXES = ("_Request", "_Response")


@dataclass(frozen=True, slots=True)
class Names:
    """What a DDS topic and type mean to ROS 2 (`kind` None: a plain DDS topic)."""

    topic: str  # the DDS topic name, as discovery announced it
    type_name: str  # the DDS type name
    kind: RosKind | None = None
    name: str = ""  # ROS name: the topic's, or the service's for requests and replies
    message_type: str = ""  # ROS message type: std_msgs/msg/String, pkg/srv/Name_Request
    service_type: str = ""  # ROS service type for requests and replies: pkg/srv/Name

    @property
    def destination(self) -> str:
        """The name spans show: the ROS name when there is one, else the DDS topic."""
        return self.name or self.topic


def names(topic: str, type_name: str) -> Names:
    kind, name = ros_name(topic)
    message_type = ros_type(type_name) if kind is not None else ""
    service_type = ""
    if kind in (RosKind.REQUEST, RosKind.REPLY) and message_type:
        service_type = _strip_service_suffix(message_type)
    return Names(topic, type_name, kind, name, message_type, service_type)


def ros_name(topic: str) -> tuple[RosKind | None, str]:
    """("rt/chatter") -> (TOPIC, "/chatter"); ("rq/add_two_intsRequest") -> (REQUEST,
    "/add_two_ints"); a topic without a ROS prefix -> (None, "")."""
    found = _PREFIXES.get(topic[:3])
    if found is None or len(topic) <= 3:
        return None, ""
    kind, suffix = found
    rest = topic[3:]
    if suffix and rest.endswith(suffix) and len(rest) > len(suffix):
        rest = rest[: -len(suffix)]
    return kind, "/" + rest.lstrip("/")


def ros_type(type_name: str) -> str:
    """"std_msgs::msg::dds_::String_" -> "std_msgs/msg/String"; a type that is not in rmw's
    form comes back unchanged."""
    parts = type_name.split("::")
    if len(parts) < 3 or "dds_" not in parts:
        return type_name
    parts = [p for p in parts if p != "dds_"]
    last = parts[-1]
    if last.endswith("_"):  # rmw appends "_" to the IDL struct name
        parts[-1] = last[:-1]
    return "/".join(parts)


def _strip_service_suffix(message_type: str) -> str:
    for suffix in _SERVICE_TYPE_SUFFIXES:
        if message_type.endswith(suffix):
            return message_type[: -len(suffix)]
    return message_type
