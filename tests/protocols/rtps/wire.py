"""RTPS datagrams for tests, built field by field with struct (DDSI-RTPS 2.5, sections 8.3 and 9.4),
in either byte order, and a `Socket` that feeds them through the real connection tracker
as one process's UDP socket does."""

from __future__ import annotations

import struct

from otel_ebpf.protocols.base import Direction, Role
from otel_ebpf.protocols.testing import ConnectionDriver, conn_info

CYCLONE, FASTDDS = 0x0110, 0x010F
SPDP_WRITER, SEDP_PUB_WRITER, SEDP_SUB_WRITER = 0x000100C2, 0x000003C2, 0x000004C2
PID_TOPIC_NAME, PID_TYPE_NAME, PID_ENDPOINT_GUID = 0x0005, 0x0007, 0x005A
PID_PARTICIPANT_GUID, PID_ENTITY_NAME, PID_KEY_HASH = 0x0050, 0x0062, 0x0070
PID_STATUS_INFO, PID_RELATED_SAMPLE_IDENTITY, PID_FAST_RELATED = 0x0071, 0x0083, 0x800F
MULTICAST = ("239.255.0.1", 7401)


def _o(little: bool) -> str:
    return "<" if little else ">"


def header(prefix: bytes, vendor: int = CYCLONE, version: tuple[int, int] = (2, 3)) -> bytes:
    return b"RTPS" + bytes(version) + vendor.to_bytes(2, "big") + prefix


def submessage(sub_id: int, flags: int, body: bytes, little: bool = True, last: bool = False
               ) -> bytes:
    """A submessage: E set for little-endian; `last` writes octetsToNextHeader 0."""
    flags = flags | 0x01 if little else flags & ~0x01
    return struct.pack(_o(little) + "BBH", sub_id, flags, 0 if last else len(body)) + body


def seq(n: int, little: bool = True) -> bytes:
    return struct.pack(_o(little) + "iI", n >> 32, n & 0xFFFFFFFF)


def entity(entity_id: int) -> bytes:
    return entity_id.to_bytes(4, "big")


def params(items: list[tuple[int, bytes]], little: bool = True) -> bytes:
    """A parameter list: each value padded to 4 octets, then PID_SENTINEL."""
    out = b""
    for pid, value in items:
        value += bytes(-len(value) % 4)
        out += struct.pack(_o(little) + "HH", pid, len(value)) + value
    return out + struct.pack(_o(little) + "HH", 0x0001, 0)


def cdr_string(text: str, little: bool = True) -> bytes:
    raw = text.encode() + b"\x00"
    return struct.pack(_o(little) + "I", len(raw)) + raw


def identity(writer: bytes, number: int, little: bool = True) -> bytes:
    """A SampleIdentity: writer GUID (16 octets) and sequence number."""
    return writer + seq(number, little)


def data(writer_id: int, number: int, payload: bytes = b"", *, reader_id: int = 0,
         qos: list[tuple[int, bytes]] | None = None, little: bool = True, key: bool = False,
         last: bool = False) -> bytes:
    """DATA: Q when `qos` is given, D when a payload is (K with `key`)."""
    flags = (0x02 if qos is not None else 0) | ((0x08 if key else 0x04) if payload else 0)
    body = struct.pack(_o(little) + "HH", 0, 16) + entity(reader_id) + entity(writer_id)
    body += seq(number, little)
    if qos is not None:
        body += params(qos, little)
    return submessage(0x15, flags, body + payload, little, last)


def data_frag(writer_id: int, number: int, start: int, fragments: bytes, *, count: int = 1,
              fragment_size: int, sample_size: int, reader_id: int = 0,
              qos: list[tuple[int, bytes]] | None = None, little: bool = True) -> bytes:
    flags = 0x02 if qos is not None else 0
    body = struct.pack(_o(little) + "HH", 0, 28) + entity(reader_id) + entity(writer_id)
    body += seq(number, little) + struct.pack(_o(little) + "IHHI", start, count, fragment_size,
                                               sample_size)
    if qos is not None:
        body += params(qos, little)
    return submessage(0x16, flags, body + fragments, little)


def heartbeat(writer_id: int, first: int, last: int, count: int = 1, *, reader_id: int = 0,
              little: bool = True, final: bool = False) -> bytes:
    body = entity(reader_id) + entity(writer_id) + seq(first, little) + seq(last, little)
    return submessage(0x07, 0x02 if final else 0, body + struct.pack(_o(little) + "I", count),
                      little)


def number_set(base: bytes, bits: int, members: list[int], little: bool = True) -> bytes:
    words = [0] * ((bits + 31) // 32)
    for i in members:
        words[i // 32] |= 0x80000000 >> (i % 32)
    return base + struct.pack(_o(little) + "I" + "I" * len(words), bits, *words)


def acknack(writer_id: int, base: int, missing: list[int] = (), count: int = 1, *,
            reader_id: int = 0x00000504, little: bool = True) -> bytes:
    """ACKNACK: everything before `base` received; `missing` (absolute numbers) asked for."""
    bits = max([m - base + 1 for m in missing], default=0)
    body = entity(reader_id) + entity(writer_id)
    body += number_set(seq(base, little), bits, [m - base for m in missing], little)
    return submessage(0x06, 0, body + struct.pack(_o(little) + "I", count), little)


def nack_frag(writer_id: int, number: int, missing: list[int], *, reader_id: int = 0x504,
              little: bool = True) -> bytes:
    base = min(missing)
    body = entity(reader_id) + entity(writer_id) + seq(number, little)
    body += number_set(struct.pack(_o(little) + "I", base), max(missing) - base + 1,
                       [m - base for m in missing], little)
    return submessage(0x12, 0, body + struct.pack(_o(little) + "I", 1), little)


def heartbeat_frag(writer_id: int, number: int, last_fragment: int, *, little: bool = True
                   ) -> bytes:
    body = entity(0) + entity(writer_id) + seq(number, little)
    return submessage(0x13, 0, body + struct.pack(_o(little) + "II", last_fragment, 1), little)


def gap(writer_id: int, start: int, base: int, listed: list[int] = (), *, reader_id: int = 0,
        little: bool = True) -> bytes:
    bits = max([m - base + 1 for m in listed], default=0)
    body = entity(reader_id) + entity(writer_id) + seq(start, little)
    return submessage(0x08, 0, body + number_set(seq(base, little), bits,
                                                  [m - base for m in listed], little), little)


def info_ts(seconds: int | None = 1_700_000_000, fraction: int = 0, little: bool = True
            ) -> bytes:
    """INFO_TS; None: the invalidate flag, no body (octetsToNextHeader 0, not the last)."""
    if seconds is None:
        return submessage(0x09, 0x02, b"", little)
    return submessage(0x09, 0, struct.pack(_o(little) + "iI", seconds, fraction), little)


def info_dst(prefix: bytes, little: bool = True) -> bytes:
    return submessage(0x0E, 0, prefix, little)


def info_src(prefix: bytes, vendor: int = CYCLONE, little: bool = True) -> bytes:
    return submessage(0x0C, 0, bytes(4) + bytes((2, 3)) + vendor.to_bytes(2, "big") + prefix,
                      little)


def pad(size: int = 4, little: bool = True) -> bytes:
    return submessage(0x01, 0, bytes(size), little)


def unknown(sub_id: int = 0x7F, size: int = 8, little: bool = True) -> bytes:
    return submessage(sub_id, 0, b"\xab" * size, little)


# --- serialized payloads -----------------------------------------------------------------


def encapsulated(body: bytes, kind: int) -> bytes:
    return kind.to_bytes(2, "big") + b"\x00\x00" + body


def string_sample(text: str, little: bool = True) -> bytes:
    """A std_msgs/msg/String in CDR: encapsulation, then the string."""
    return encapsulated(cdr_string(text, little), 0x0001 if little else 0x0000)


def sedp(endpoint: bytes, topic: str, type_name: str, little: bool = True,
         with_guid: bool = True) -> bytes:
    """SEDP publication or subscription data (PL_CDR): topic, type and endpoint GUID."""
    items = [(PID_TOPIC_NAME, cdr_string(topic, little)),
             (PID_TYPE_NAME, cdr_string(type_name, little))]
    items.append((PID_ENDPOINT_GUID, endpoint) if with_guid else (PID_KEY_HASH, endpoint))
    return encapsulated(params(items, little), 0x0003 if little else 0x0002)


def spdp(prefix: bytes, name: str = "", little: bool = True) -> bytes:
    items = [(PID_PARTICIPANT_GUID, prefix + entity(0x000001C1))]
    if name:
        items.append((PID_ENTITY_NAME, cdr_string(name, little)))
    return encapsulated(params(items, little), 0x0003 if little else 0x0002)


def cyclone_request(client: int, number: int, body: bytes = b"", little: bool = True) -> bytes:
    """rmw_cyclonedds' request/reply payload: its header (u64 client, i64 seq), the fields."""
    return encapsulated(struct.pack(_o(little) + "Qq", client, number) + body,
                        0x0001 if little else 0x0000)


def add_two_ints(a: int, b: int, little: bool = True) -> bytes:
    return struct.pack(_o(little) + "qq", a, b)


# --- participants and sockets ------------------------------------------------------------


class Participant:
    """One DDS participant: its GUID prefix, vendor and byte order."""

    def __init__(self, key: int, vendor: int = CYCLONE, little: bool = True) -> None:
        self.prefix = vendor.to_bytes(2, "big") + key.to_bytes(10, "big")
        self.vendor, self.little = vendor, little

    def guid(self, entity_id: int) -> bytes:
        return self.prefix + entity(entity_id)

    def message(self, *subs: bytes) -> bytes:
        return header(self.prefix, self.vendor) + b"".join(subs)

    def announce(self, entity_id: int, topic: str, type_name: str, writer: bool = True,
                 number: int = 1) -> bytes:
        """The SEDP datagram that names one of its writers (or readers)."""
        payload = sedp(self.guid(entity_id), topic, type_name, self.little)
        sedp_writer = SEDP_PUB_WRITER if writer else SEDP_SUB_WRITER
        return self.message(info_ts(little=self.little),
                            data(sedp_writer, number, payload, little=self.little))

    def sample(self, writer_id: int, number: int, payload: bytes, *,
               qos: list[tuple[int, bytes]] | None = None, dst: bytes | None = None,
               reader_id: int = 0) -> bytes:
        subs = [info_dst(dst, self.little)] if dst is not None else []
        subs += [info_ts(little=self.little),
                 data(writer_id, number, payload, qos=qos, little=self.little,
                      reader_id=reader_id)]
        return self.message(*subs)


class Socket:
    """One process's UDP socket, through the real tracker: send() and recv() datagrams."""

    def __init__(self, parser, pid: int, fd: int = 5) -> None:
        self.driver = ConnectionDriver(parser, conn_info(
            role=Role.UNKNOWN, pid=pid, fd=fd, transport="datagram", local_addr="127.0.0.1",
            local_port=0, remote_addr="", remote_port=0))
        self.pos = {d: 0 for d in Direction}

    def _feed(self, direction: Direction, datagram: bytes, at: int, peer, size: int | None,
              captured: int | None) -> None:
        size = len(datagram) if size is None else size
        payload = datagram if captured is None else datagram[:captured]
        driver = self.driver
        driver.connection.on_data(direction, self.pos[direction], size, payload, at, at, 0,
                                  driver.registry, driver.stats, peer=peer)
        self.pos[direction] += size
        driver.stitch(at)

    def send(self, datagram: bytes, at: int, peer=MULTICAST, size: int | None = None,
             captured: int | None = None) -> None:
        self._feed(Direction.EGRESS, datagram, at, peer, size, captured)

    def recv(self, datagram: bytes, at: int, peer=("127.0.0.1", 7410), size: int | None = None,
             captured: int | None = None) -> None:
        self._feed(Direction.INGRESS, datagram, at, peer, size, captured)

    def tick(self, at: int) -> None:
        self.driver.tick(at)

    def close(self) -> None:
        self.driver.close()

    @property
    def records(self):
        return self.driver.records

    def spans(self):
        return self.driver.spans()

    @property
    def counters(self) -> dict[str, int]:
        return dict(self.driver.state.counts)

    @property
    def parse_errors(self) -> int:
        return self.driver.invalid
