"""RTPS 2.x wire format (OMG DDSI-RTPS 2.5, 8.3 and 9.4): one datagram's captured bytes into
its header and submessages, each with the source, destination and time the INFO_*
submessages before it set. Pure and total: bytes that are not RTPS give None, a submessage
cut by the capture ends the list, nothing raises."""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass, field, fields

from otel_ebpf import _fast

from ..base import Frame
from .payload import parameters, sequence_number

# this file's compiled implementation (_parse.c: `parse`), None on the pure Python path;
# `parse` below is bound to it once, at import
compiled = _fast.accelerator(__name__)

MAGIC = b"RTPS"
HEADER_SIZE = 20  # "RTPS", version (2), vendor id (2), GUID prefix (12)
UNKNOWN_PREFIX = bytes(12)
MAX_SUBMESSAGES = 512  # a 64 KiB datagram holds at most ~16k; real ones hold a few dozen
MAX_SET_BITS = 256  # numBits of a SequenceNumberSet / FragmentNumberSet (DDSI-RTPS 9.4.2.6)
MAX_SEQUENCE_NUMBER = 2**63 - 1  # a SequenceNumber_t is a signed 64-bit count

PAD, ACKNACK, HEARTBEAT, GAP, INFO_TS = 0x01, 0x06, 0x07, 0x08, 0x09
INFO_SRC, INFO_REPLY_IP4, INFO_DST, INFO_REPLY = 0x0C, 0x0D, 0x0E, 0x0F
NACK_FRAG, HEARTBEAT_FRAG, DATA, DATA_FRAG = 0x12, 0x13, 0x15, 0x16

FLAG_E = 0x01  # every submessage: its fields are little-endian
# DATA: Q inline QoS, D data, K key; DATA_FRAG: Q inline QoS, K key
DATA_Q, DATA_D, DATA_K = 0x02, 0x04, 0x08
FRAG_Q, FRAG_K = 0x02, 0x04
FINAL_F = 0x02  # HEARTBEAT and ACKNACK: no answer needed
HEARTBEAT_L = 0x04  # liveliness only
INFO_TS_I = 0x02  # invalidate: the following submessages carry no source time

# vendor ids (OMG's DDSI-RTPS vendor id list) of the implementations ROS 2 runs on; others are
# shown as hex
VENDORS: dict[int, str] = {
    0x0101: "rti_connext", 0x0102: "opensplice", 0x0103: "opendds", 0x010A: "rti_connext_micro",
    0x010F: "fastdds", 0x0110: "cyclonedds",
}
VENDOR_CYCLONE = 0x0110


@dataclass(frozen=True, slots=True)
class Submessage:
    """What every submessage has: its id and flags (E, the byte order, is bit 0)."""

    id: int
    flags: int

    @property
    def little(self) -> bool:
        return bool(self.flags & FLAG_E)


@dataclass(frozen=True, slots=True)
class Addressed(Submessage):
    """A submessage between a reader and a writer: their entity ids, and the GUID prefixes of
    the message's source and of its destination (UNKNOWN_PREFIX: every participant)."""

    reader_id: int
    writer_id: int
    src_prefix: bytes
    dst_prefix: bytes

    @property
    def writer_guid(self) -> bytes:
        """The writer's GUID: whoever sent a DATA or HEARTBEAT is the writer..."""
        return self.src_prefix + self.writer_id.to_bytes(4, "big")


@dataclass(frozen=True, slots=True)
class Data(Addressed):
    """DATA: one sample (or its key). `payload` holds the captured bytes of the serialized
    payload, from `payload_offset` in the datagram; it ends at `payload_end`, or at the
    datagram's end when None (the datagram's real size comes from the tracker)."""

    seq: int
    inline_qos: dict[int, bytes]
    payload: bytes
    payload_offset: int
    payload_end: int | None
    source_time: tuple[int, int] | None  # INFO_TS (seconds, fraction) before it, if any

    @property
    def has_data(self) -> bool:
        return bool(self.flags & DATA_D)

    @property
    def key_only(self) -> bool:
        return bool(self.flags & DATA_K) and not self.flags & DATA_D


@dataclass(frozen=True, slots=True)
class DataFrag(Addressed):
    """DATA_FRAG: fragments `start`..`start + count - 1` (numbered from 1) of a sample of
    `sample_size` bytes cut in `fragment_size` pieces; `payload` their captured bytes."""

    seq: int
    start: int
    count: int
    fragment_size: int
    sample_size: int
    inline_qos: dict[int, bytes]
    payload: bytes
    source_time: tuple[int, int] | None

    @property
    def key_only(self) -> bool:
        return bool(self.flags & FRAG_K)


@dataclass(frozen=True, slots=True)
class Heartbeat(Addressed):
    """HEARTBEAT: the writer has samples first..last (available for repair)."""

    first: int
    last: int
    count: int

    @property
    def final(self) -> bool:
        return bool(self.flags & FINAL_F)

    @property
    def liveliness(self) -> bool:
        return bool(self.flags & HEARTBEAT_L)


@dataclass(frozen=True, slots=True)
class AckNack(Addressed):
    """ACKNACK: the reader has everything before `base`; `missing` are the sequence numbers
    it asks the writer to send again."""

    base: int
    missing: tuple[int, ...]
    count: int

    @property
    def writer_guid(self) -> bytes:  # the reader sent it: the writer is its destination
        return self.dst_prefix + self.writer_id.to_bytes(4, "big")


@dataclass(frozen=True, slots=True)
class NackFrag(Addressed):
    """NACK_FRAG: the reader asks again for these fragments of sample `seq`."""

    seq: int
    missing: tuple[int, ...]
    count: int

    @property
    def writer_guid(self) -> bytes:
        return self.dst_prefix + self.writer_id.to_bytes(4, "big")


@dataclass(frozen=True, slots=True)
class HeartbeatFrag(Addressed):
    """HEARTBEAT_FRAG: the writer has fragments up to `last_fragment` of sample `seq`."""

    seq: int
    last_fragment: int
    count: int


@dataclass(frozen=True, slots=True)
class Gap(Addressed):
    """GAP: sequence numbers the writer will never send to this reader (irrelevant or gone)."""

    start: int
    base: int
    listed: tuple[int, ...]

    @property
    def gapped(self) -> int:
        """How many sequence numbers it declares: [start, base) and the ones listed."""
        return max(0, min(self.base - self.start, 1 << 20)) + len(self.listed)


@dataclass(frozen=True, slots=True)
class InfoTs(Submessage):
    seconds: int = 0
    fraction: int = 0

    @property
    def invalidate(self) -> bool:
        return bool(self.flags & INFO_TS_I)


@dataclass(frozen=True, slots=True)
class InfoDst(Submessage):
    prefix: bytes = UNKNOWN_PREFIX


@dataclass(frozen=True, slots=True)
class InfoSrc(Submessage):
    prefix: bytes = UNKNOWN_PREFIX
    version: tuple[int, int] = (0, 0)
    vendor: int = 0


@dataclass(frozen=True, slots=True)
class Other(Submessage):
    """PAD, INFO_REPLY and ids we do not read (skipped by their length)."""

    length: int = 0


@dataclass(slots=True, kw_only=True)
class RTPSMessage(Frame):
    """One datagram: the RTPS header and its submessages in order."""

    version: tuple[int, int] = (0, 0)
    vendor: int = 0
    prefix: bytes = UNKNOWN_PREFIX  # the sending participant's GUID prefix
    submessages: list[Submessage] = field(default_factory=list)
    truncated: bool = False  # a submessage went past the captured bytes (the capture size)
    captured: int = 0  # bytes parsed (the tracker sets `size`: the datagram's real length)
    malformed: int = 0  # submessages too short for their fixed fields, or with bad sets
    unknown: int = 0  # submessages of ids we do not know


def is_rtps(head: bytes | memoryview) -> bool:
    """An RTPS header of protocol version 2.x."""
    return len(head) >= HEADER_SIZE and bytes(head[:4]) == MAGIC and head[4] == 2 and head[5] < 10


_HEADER = struct.Struct(">4sBBH12s")
_SUB_HEADER = {True: struct.Struct("<BBH"), False: struct.Struct(">BBH")}
_ADDRESSED = struct.Struct(">II")  # reader and writer entity ids: octets, big-endian as ints
_DATA = {True: struct.Struct("<HH"), False: struct.Struct(">HH")}  # extraFlags, to inline QoS
_FRAG = {True: struct.Struct("<IHHI"), False: struct.Struct(">IHHI")}
_U32 = {True: struct.Struct("<I"), False: struct.Struct(">I")}
_HEARTBEAT = {True: struct.Struct("<iIiII"), False: struct.Struct(">iIiII")}  # first, last, count
_HEARTBEAT_FRAG = {True: struct.Struct("<iIII"), False: struct.Struct(">iIII")}  # seq, last, count
_TS = {True: struct.Struct("<iI"), False: struct.Struct(">iI")}


class _Context:
    """What the INFO_* submessages set for the submessages after them (DDSI-RTPS 8.3.4)."""

    __slots__ = ("src", "dst", "time", "version", "vendor")

    def __init__(self, prefix: bytes, version: tuple[int, int], vendor: int) -> None:
        self.src, self.dst, self.time = prefix, UNKNOWN_PREFIX, None
        self.version, self.vendor = version, vendor


def parse_python(buf: bytes | memoryview) -> RTPSMessage | None:
    """The datagram's RTPS message, or None when it is not RTPS 2.x. The reference:
    `parse` is _parse.c's where it is built (the same objects, equal)."""
    if not is_rtps(buf):
        return None
    _, major, minor, vendor, prefix = _HEADER.unpack_from(buf, 0)
    message = RTPSMessage(version=(major, minor), vendor=vendor, prefix=prefix,
                          captured=len(buf))
    ctx = _Context(prefix, (major, minor), vendor)
    offset, size = HEADER_SIZE, len(buf)
    for _ in range(MAX_SUBMESSAGES):
        if offset + 4 > size:
            message.truncated = offset < size
            break
        sub_id, flags, length = _SUB_HEADER[bool(buf[offset + 1] & FLAG_E)].unpack_from(buf, offset)
        body = offset + 4
        # octetsToNextHeader 0: the last submessage, up to the datagram's end; except for PAD
        # and INFO_TS, whose 0 means an empty body (DDSI-RTPS 9.4.5.1.3)
        to_end = length == 0 and sub_id not in (PAD, INFO_TS)
        end = None if to_end else body + length
        cut = end is not None and end > size
        decoder = _DECODERS.get(sub_id)
        if decoder is None:
            message.unknown += 1
            message.submessages.append(Other(sub_id, flags, length))
        else:
            sub = decoder(buf, body, size if end is None else min(end, size), end, flags, ctx)
            if sub is None:
                message.malformed += 0 if cut else 1
            else:
                message.submessages.append(sub)
        if cut:
            message.truncated = True
            break
        if end is None:
            break
        offset = end
    return message


# --- submessage decoders: (buf, body, captured end, declared end or None, flags, context) --


def _ids(buf, body: int, end: int) -> tuple[int, int] | None:
    if body + 8 > end:
        return None
    return _ADDRESSED.unpack_from(buf, body)


def _data(buf, body: int, end: int, declared: int | None, flags: int, ctx: _Context
          ) -> Data | None:
    little = bool(flags & FLAG_E)
    if body + 20 > end:
        return None
    _, to_qos = _DATA[little].unpack_from(buf, body)
    reader_id, writer_id = _ADDRESSED.unpack_from(buf, body + 4)
    seq = sequence_number(buf, body + 12, little)
    qos, start = _inline_qos(buf, body + 4 + to_qos, end, little, flags & DATA_Q)
    if seq is None or start is None:
        return None
    has_payload = flags & (DATA_D | DATA_K)
    payload = bytes(buf[start:end]) if has_payload else b""
    return Data(DATA, flags, reader_id, writer_id, ctx.src, ctx.dst, seq, qos, payload, start,
                declared if has_payload else start, ctx.time)


def _data_frag(buf, body: int, end: int, declared: int | None, flags: int, ctx: _Context
               ) -> DataFrag | None:
    little = bool(flags & FLAG_E)
    if body + 32 > end:
        return None
    _, to_qos = _DATA[little].unpack_from(buf, body)
    reader_id, writer_id = _ADDRESSED.unpack_from(buf, body + 4)
    seq = sequence_number(buf, body + 12, little)
    start, count, fragment_size, sample_size = _FRAG[little].unpack_from(buf, body + 20)
    qos, data = _inline_qos(buf, body + 4 + to_qos, end, little, flags & FRAG_Q)
    if seq is None or data is None or start < 1 or fragment_size == 0:
        return None
    return DataFrag(DATA_FRAG, flags, reader_id, writer_id, ctx.src, ctx.dst, seq, start, count,
                    fragment_size, sample_size, qos, bytes(buf[data:end]), ctx.time)


def _inline_qos(buf, offset: int, end: int, little: bool, present: int
                ) -> tuple[dict[int, bytes], int | None]:
    if offset > end:
        return {}, None
    if not present:
        return {}, offset
    return parameters(buf, offset, end, little)


def _heartbeat(buf, body: int, end: int, declared: int | None, flags: int, ctx: _Context
               ) -> Heartbeat | None:
    little = bool(flags & FLAG_E)
    ids = _ids(buf, body, end)
    if ids is None or body + 28 > end:
        return None
    high1, low1, high2, low2, count = _HEARTBEAT[little].unpack_from(buf, body + 8)
    return Heartbeat(HEARTBEAT, flags, *ids, ctx.src, ctx.dst, (high1 << 32) | low1,
                     (high2 << 32) | low2, count)


def _number_set(buf, offset: int, end: int, little: bool, wide: bool
                ) -> tuple[int, tuple[int, ...], int] | None:
    """A SequenceNumberSet (wide: 64-bit base) or FragmentNumberSet: (base, members, the
    offset after it)."""
    base_size = 8 if wide else 4
    if offset + base_size + 4 > end:
        return None
    if wide:
        base = sequence_number(buf, offset, little)
    else:
        (base,) = _U32[little].unpack_from(buf, offset)
    (bits,) = _U32[little].unpack_from(buf, offset + base_size)
    words = (bits + 31) // 32
    offset += base_size + 4
    if bits > MAX_SET_BITS or offset + 4 * words > end or base is None:
        return None
    if wide and bits and base + bits - 1 > MAX_SEQUENCE_NUMBER:
        return None  # members past the largest sequence number: malformed
    members: list[int] = []
    u32 = _U32[little]
    for w in range(words):
        (word,) = u32.unpack_from(buf, offset + 4 * w)
        for bit in range(32):
            i = w * 32 + bit
            if i < bits and word & (0x80000000 >> bit):
                members.append(base + i)
    return base, tuple(members), offset + 4 * words


def _acknack(buf, body: int, end: int, declared: int | None, flags: int, ctx: _Context
             ) -> AckNack | None:
    little = bool(flags & FLAG_E)
    ids = _ids(buf, body, end)
    found = _number_set(buf, body + 8, end, little, wide=True)
    if ids is None or found is None or found[2] + 4 > end:
        return None
    base, missing, after = found
    (count,) = _U32[little].unpack_from(buf, after)
    return AckNack(ACKNACK, flags, *ids, ctx.src, ctx.dst, base, missing, count)


def _nack_frag(buf, body: int, end: int, declared: int | None, flags: int, ctx: _Context
               ) -> NackFrag | None:
    little = bool(flags & FLAG_E)
    ids = _ids(buf, body, end)
    seq = sequence_number(buf, body + 8, little) if body + 16 <= end else None
    found = _number_set(buf, body + 16, end, little, wide=False)
    if ids is None or seq is None or found is None or found[2] + 4 > end:
        return None
    _, missing, after = found
    (count,) = _U32[little].unpack_from(buf, after)
    return NackFrag(NACK_FRAG, flags, *ids, ctx.src, ctx.dst, seq, missing, count)


def _heartbeat_frag(buf, body: int, end: int, declared: int | None, flags: int, ctx: _Context
                    ) -> HeartbeatFrag | None:
    little = bool(flags & FLAG_E)
    ids = _ids(buf, body, end)
    if ids is None or body + 24 > end:
        return None
    high, low, last, count = _HEARTBEAT_FRAG[little].unpack_from(buf, body + 8)
    return HeartbeatFrag(HEARTBEAT_FRAG, flags, *ids, ctx.src, ctx.dst, (high << 32) | low, last,
                         count)


def _gap(buf, body: int, end: int, declared: int | None, flags: int, ctx: _Context
         ) -> Gap | None:
    little = bool(flags & FLAG_E)
    ids = _ids(buf, body, end)
    start = sequence_number(buf, body + 8, little) if body + 16 <= end else None
    found = _number_set(buf, body + 16, end, little, wide=True)
    if ids is None or start is None or found is None:
        return None
    base, listed, _ = found
    return Gap(GAP, flags, *ids, ctx.src, ctx.dst, start, base, listed)


def _info_ts(buf, body: int, end: int, declared: int | None, flags: int, ctx: _Context
             ) -> InfoTs | None:
    if flags & INFO_TS_I:
        ctx.time = None
        return InfoTs(INFO_TS, flags)
    if body + 8 > end:
        return None
    seconds, fraction = _TS[bool(flags & FLAG_E)].unpack_from(buf, body)
    ctx.time = (seconds, fraction)
    return InfoTs(INFO_TS, flags, seconds, fraction)


def _info_dst(buf, body: int, end: int, declared: int | None, flags: int, ctx: _Context
              ) -> InfoDst | None:
    if body + 12 > end:
        return None
    ctx.dst = bytes(buf[body : body + 12])
    return InfoDst(INFO_DST, flags, ctx.dst)


def _info_src(buf, body: int, end: int, declared: int | None, flags: int, ctx: _Context
              ) -> InfoSrc | None:
    if body + 20 > end:
        return None
    major, minor = buf[body + 4], buf[body + 5]
    vendor = int.from_bytes(buf[body + 6 : body + 8], "big")
    ctx.src, ctx.version, ctx.vendor = bytes(buf[body + 8 : body + 20]), (major, minor), vendor
    ctx.time = None  # a new source: the time the previous one gave is not its time
    return InfoSrc(INFO_SRC, flags, ctx.src, (major, minor), vendor)


def _other(buf, body: int, end: int, declared: int | None, flags: int, ctx: _Context
           ) -> Other:
    return Other(buf[body - 4], flags, (declared or end) - body)


Decoder = Callable[..., Submessage | None]
_DECODERS: dict[int, Decoder] = {
    DATA: _data,
    DATA_FRAG: _data_frag,
    HEARTBEAT: _heartbeat,
    HEARTBEAT_FRAG: _heartbeat_frag,
    ACKNACK: _acknack,
    NACK_FRAG: _nack_frag,
    GAP: _gap,
    INFO_TS: _info_ts,
    INFO_DST: _info_dst,
    INFO_SRC: _info_src,
    PAD: _other,
    INFO_REPLY: _other,
    INFO_REPLY_IP4: _other,
}


def _compiled() -> Callable[[bytes | memoryview], RTPSMessage | None] | None:
    """_parse.c's parse, given these classes (it writes their slots by offset;
    RTPSMessage's Frame fields start as a default instance has them), or None."""
    fast = compiled
    if fast is None:
        return None
    own = {"version", "vendor", "prefix", "submessages", "truncated", "captured", "malformed",
           "unknown"}
    fast.setup((Data, DataFrag, Heartbeat, AckNack, NackFrag, HeartbeatFrag, Gap, InfoTs,
                InfoDst, InfoSrc, Other, RTPSMessage),
               tuple(f.name for f in fields(RTPSMessage) if f.name not in own), RTPSMessage(),
               UNKNOWN_PREFIX)
    return fast.parse


parse: Callable[[bytes | memoryview], RTPSMessage | None] = _compiled() or parse_python
