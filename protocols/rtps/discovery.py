"""DDS discovery as seen on the wire: SPDP announces participants, SEDP announces each writer
and reader with its topic and type. One table per parser, shared by every connection (a
process's discovery traffic and its data use different sockets), bounded LRU with evictions
counted."""

from __future__ import annotations

from dataclasses import dataclass

from . import payload as pl
from .names import Names, names
from .table import LruTable

# builtin writers (DDSI-RTPS 9.3.1.3), with the secure variants (DDS-Security 7.4.5)
SPDP_WRITERS = frozenset({0x000100C2, 0xFF0101C2})
SEDP_PUBLICATIONS = frozenset({0x000003C2, 0xFF0003C2})
SEDP_SUBSCRIPTIONS = frozenset({0x000004C2, 0xFF0004C2})
DISCOVERY_WRITERS = SPDP_WRITERS | SEDP_PUBLICATIONS | SEDP_SUBSCRIPTIONS


@dataclass(frozen=True, slots=True)
class Endpoint:
    """A writer or reader SEDP announced."""

    guid: bytes
    writer: bool
    names: Names


@dataclass(frozen=True, slots=True)
class Participant:
    """A participant SPDP announced (one per DDS domain participant: per ROS 2 context)."""

    prefix: bytes
    vendor: int
    name: str


class Discovery:
    """GUID -> endpoint and GUID prefix -> participant, each at most `max_entries` long."""

    __slots__ = ("endpoints", "max_entries", "participants")

    def __init__(self, max_entries: int) -> None:
        self.max_entries = max_entries
        self.endpoints = LruTable(max_entries)  # GUID -> Endpoint
        self.participants = LruTable(max_entries)  # prefix -> Participant

    @property
    def evicted(self) -> int:
        return self.endpoints.evicted + self.participants.evicted

    def endpoint(self, guid: bytes) -> Endpoint | None:
        return self.endpoints.get(guid)  # a read is a use: it keeps the entry

    def learn(self, writer_id: int, data: bytes, inline_qos: dict[int, bytes], qos_little: bool,
              key_only: bool, vendor: int) -> str | None:
        """Take one discovery sample (the builtin writer `writer_id` sent it); returns what it
        was ("participant", "endpoint", "disposed") or None when it could not be read."""
        status = pl.status_info(inline_qos.get(pl.PID_STATUS_INFO, b""))
        gone = key_only or bool(status & (pl.STATUS_DISPOSED | pl.STATUS_UNREGISTERED))
        params = _parameter_list(data)
        if writer_id in SPDP_WRITERS:
            return self._participant(params, inline_qos, gone, vendor)
        return self._endpoint(writer_id in SEDP_PUBLICATIONS, params, inline_qos, gone, data)

    def _participant(self, params: tuple[dict[int, bytes], bool] | None,
                     inline_qos: dict[int, bytes], gone: bool, vendor: int) -> str | None:
        values, little = params or ({}, True)
        guid = pl.guid(values.get(pl.PID_PARTICIPANT_GUID) or inline_qos.get(pl.PID_KEY_HASH, b""))
        if guid is None:
            return None
        prefix = guid[:12]
        if gone:
            return "disposed"  # kept: its last datagrams may still be in flight
        if pl.PID_VENDORID in values and len(values[pl.PID_VENDORID]) >= 2:
            vendor = int.from_bytes(values[pl.PID_VENDORID][:2], "big")
        name = pl.string(values.get(pl.PID_ENTITY_NAME, b""), little) or ""
        self._put(self.participants, prefix, Participant(prefix, vendor, name))
        return "participant"

    def _endpoint(self, writer: bool, params: tuple[dict[int, bytes], bool] | None,
                  inline_qos: dict[int, bytes], gone: bool, data: bytes) -> str | None:
        values, little = params or ({}, True)
        # the endpoint's GUID: its own parameter, else the key hash (which is the GUID for
        # builtin topics), in the data or in the inline QoS; a key-only sample in plain CDR
        # is the GUID itself
        guid = pl.guid(values.get(pl.PID_ENDPOINT_GUID)
                       or values.get(pl.PID_KEY_HASH)
                       or inline_qos.get(pl.PID_KEY_HASH)
                       or (data[4:20] if params is None and gone else b""))
        if guid is None:
            return None
        if gone:
            # kept until evicted: its last samples may still wait for their names, or come
            # late (repairs) after the process that wrote them exited
            return "disposed"
        topic = pl.string(values.get(pl.PID_TOPIC_NAME, b""), little)
        type_name = pl.string(values.get(pl.PID_TYPE_NAME, b""), little)
        if not topic:
            return None  # cut by the capture before its name: nothing worth keeping
        self._put(self.endpoints, guid, Endpoint(guid, writer, names(topic, type_name or "")))
        return "endpoint"

    def _put(self, table: LruTable, key: bytes, value: object) -> None:
        table.put(key, value)


def _parameter_list(data: bytes) -> tuple[dict[int, bytes], bool] | None:
    """The discovery data's parameters and their byte order, when it is a parameter list."""
    enc = pl.encapsulation(data)
    if enc is None or not enc.parameter_list:
        return None
    values, _ = pl.parameters(data, 4, len(data), enc.little)
    return values, enc.little
