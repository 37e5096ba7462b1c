"""What RTPS submessages carry: parameter lists (inline QoS, discovery data), the serialized
payload's encapsulation header, and the few CDR values we read from them (strings, GUIDs,
sequence numbers). Every reader returns None rather than raise on short or odd bytes."""

from __future__ import annotations

import struct
from dataclasses import dataclass

PID_PAD = 0x0000
PID_SENTINEL = 0x0001
PID_TOPIC_NAME = 0x0005
PID_TYPE_NAME = 0x0007
PID_VENDORID = 0x0016
PID_PARTICIPANT_GUID = 0x0050
PID_ENDPOINT_GUID = 0x005A
PID_ENTITY_NAME = 0x0062
PID_KEY_HASH = 0x0070
PID_STATUS_INFO = 0x0071
PID_RELATED_SAMPLE_IDENTITY = 0x0083
PID_FASTDDS_RELATED_SAMPLE_IDENTITY = 0x800F  # Fast DDS before it used the standard id
MAX_PARAMS = 128  # a parameter list longer than this is not one we need to read further
MAX_STRING = 1024  # topic and type names longer than this are cut

# PID_STATUS_INFO flags (DDSI-RTPS 9.6.3.9): the sample ends the instance, it is no data
STATUS_DISPOSED = 0x01
STATUS_UNREGISTERED = 0x02

_U16 = {True: struct.Struct("<H"), False: struct.Struct(">H")}
_U32 = {True: struct.Struct("<I"), False: struct.Struct(">I")}
_SEQ = {True: struct.Struct("<iI"), False: struct.Struct(">iI")}
_PARAM = {True: struct.Struct("<HH"), False: struct.Struct(">HH")}
_HEADER_U64 = {True: struct.Struct("<Qq"), False: struct.Struct(">Qq")}


@dataclass(frozen=True, slots=True)
class Encapsulation:
    """The 4-byte header of a serialized payload (DDSI-RTPS 10.2, DDS-XTypes 7.6.3.1.2)."""

    name: str
    little: bool  # byte order of what follows
    parameter_list: bool  # a parameter list (discovery data), not a plain CDR struct


# representation identifier -> (name, little-endian, parameter list)
_ENCAPSULATIONS: dict[int, tuple[str, bool, bool]] = {
    0x0000: ("CDR_BE", False, False),
    0x0001: ("CDR_LE", True, False),
    0x0002: ("PL_CDR_BE", False, True),
    0x0003: ("PL_CDR_LE", True, True),
    0x0010: ("CDR2_BE", False, False),
    0x0011: ("CDR2_LE", True, False),
    0x0012: ("PL_CDR2_BE", False, True),
    0x0013: ("PL_CDR2_LE", True, True),
    0x0014: ("D_CDR2_BE", False, False),
    0x0015: ("D_CDR2_LE", True, False),
}


def encapsulation(payload: bytes) -> Encapsulation | None:
    """The payload's encapsulation, or None when its first two bytes name none we know.
    The identifier is big-endian whatever the byte order of the data."""
    if len(payload) < 4:
        return None
    found = _ENCAPSULATIONS.get(int.from_bytes(payload[:2], "big"))
    return Encapsulation(*found) if found is not None else None


def parameters(buf: bytes | memoryview, offset: int, end: int, little: bool
               ) -> tuple[dict[int, bytes], int | None]:
    """A parameter list from `offset`: ({pid: value} keeping each pid's first value, the offset
    after its sentinel), the offset None when the list did not end before `end` (cut short
    by the capture, or not a list)."""
    found: dict[int, bytes] = {}
    head = _PARAM[little]
    end = min(end, len(buf))
    for _ in range(MAX_PARAMS):
        if offset + 4 > end:
            return found, None
        pid, length = head.unpack_from(buf, offset)
        offset += 4
        if pid == PID_SENTINEL:
            return found, offset
        if offset + length > end:
            return found, None
        if pid != PID_PAD and pid not in found:
            found[pid] = bytes(buf[offset : offset + length])
        offset += length
    return found, None


def string(value: bytes, little: bool) -> str | None:
    """A CDR string: a 4-byte length counting the NUL, then the characters."""
    if len(value) < 4:
        return None
    (length,) = _U32[little].unpack_from(value, 0)
    text = value[4 : 4 + min(length, MAX_STRING)]
    return text.split(b"\x00", 1)[0].decode("utf-8", "replace")


def guid(value: bytes) -> bytes | None:
    """A GUID (prefix and entity id, 16 octets: no byte order)."""
    return value[:16] if len(value) >= 16 else None


def sequence_number(value: bytes, offset: int, little: bool) -> int | None:
    """An RTPS SequenceNumber_t (high: signed 32, low: unsigned 32)."""
    if len(value) < offset + 8:
        return None
    high, low = _SEQ[little].unpack_from(value, offset)
    return (high << 32) | low


def sample_identity(value: bytes, little: bool) -> tuple[bytes, int] | None:
    """A SampleIdentity: the writer GUID and sequence number of another sample."""
    writer = guid(value)
    seq = sequence_number(value, 16, little)
    if writer is None or seq is None:
        return None
    return writer, seq


def status_info(value: bytes) -> int:
    """PID_STATUS_INFO: its flags are in the last of its four octets."""
    return value[3] if len(value) >= 4 else 0


def request_header(payload: bytes) -> tuple[int, int] | None:
    """rmw_cyclonedds' service call header (`cdds_request_header_t {uint64_t guid; int64_t
    seq;}`) at the start of the CDR data of both a request and its reply: (guid, seq)."""
    enc = encapsulation(payload)
    if enc is None or enc.parameter_list or len(payload) < 20:
        return None
    return _HEADER_U64[enc.little].unpack_from(payload, 4)


def u16(buf: bytes | memoryview, offset: int, little: bool) -> int:
    return _U16[little].unpack_from(buf, offset)[0]


def u32(buf: bytes | memoryview, offset: int, little: bool) -> int:
    return _U32[little].unpack_from(buf, offset)[0]
