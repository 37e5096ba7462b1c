"""HTTP/2 bytes for tests, made by the real encoders (hyperframe frames, hpack blocks): one
`Peer` per side of a connection, so each direction has its own HPACK context, as on the wire."""

from __future__ import annotations

import hpack
from hyperframe.frame import (
    ContinuationFrame,
    DataFrame,
    GoAwayFrame,
    HeadersFrame,
    PingFrame,
    PriorityFrame,
    PushPromiseFrame,
    RstStreamFrame,
    SettingsFrame,
    WindowUpdateFrame,
)

PREFACE = b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n"
TRACEPARENT = "00-0af7651916cd43dd8448eb211c80319c-b7ad6b7169203331-01"
CANCEL, REFUSED_STREAM, INTERNAL_ERROR = 0x8, 0x7, 0x2


def grpc_message(payload: bytes, compressed: bool = False) -> bytes:
    """One gRPC length-prefixed message."""
    return bytes([int(compressed)]) + len(payload).to_bytes(4, "big") + payload


def grpc_request(path: str, authority: str = "svc:50051", extra=()) -> list[tuple[str, str]]:
    return [(":method", "POST"), (":scheme", "http"), (":path", path),
            (":authority", authority), ("content-type", "application/grpc"),
            ("te", "trailers"), ("user-agent", "grpc-python/1.0"), *extra]


def http_request(method: str, path: str, authority: str = "example.test", extra=()
                 ) -> list[tuple[str, str]]:
    return [(":method", method), (":scheme", "http"), (":path", path),
            (":authority", authority), ("user-agent", "test-client/1"), *extra]


class Peer:
    """One endpoint's frames, encoded with its own HPACK encoder."""

    def __init__(self) -> None:
        self.encoder = hpack.Encoder()

    def block(self, fields) -> bytes:
        return self.encoder.encode(fields)

    def headers(self, stream: int, fields, end_stream: bool = False, split: int = 0,
                padding: int = 0, priority: bool = False) -> bytes:
        """HEADERS, and CONTINUATION frames when `split` > 0 cuts the block in pieces."""
        block = self.block(fields)
        pieces = [block[i : i + split] for i in range(0, len(block), split)] if split else [block]
        first = HeadersFrame(stream, pieces[0])
        if end_stream:
            first.flags.add("END_STREAM")
        if padding:
            first.flags.add("PADDED")
            first.pad_length = padding
        if priority:
            first.flags.add("PRIORITY")
            first.depends_on, first.stream_weight = 0, 15
        frames = [first]
        for piece in pieces[1:]:
            frames.append(ContinuationFrame(stream, piece))
        frames[-1].flags.add("END_HEADERS")
        return b"".join(fr.serialize() for fr in frames)

    def push_promise(self, stream: int, promised: int, fields) -> bytes:
        frame = PushPromiseFrame(stream, promised_stream_id=promised, data=self.block(fields))
        frame.flags.add("END_HEADERS")
        return frame.serialize()


def data(stream: int, payload: bytes, end_stream: bool = False, padding: int = 0) -> bytes:
    frame = DataFrame(stream, payload)
    if end_stream:
        frame.flags.add("END_STREAM")
    if padding:
        frame.flags.add("PADDED")
        frame.pad_length = padding
    return frame.serialize()


def settings(ack: bool = False, **values: int) -> bytes:
    frame = SettingsFrame(0, settings=None if ack else {
        getattr(SettingsFrame, k.upper()): v for k, v in values.items()})
    if ack:
        frame.flags.add("ACK")
    return frame.serialize()


def window_update(stream: int = 0, increment: int = 65535) -> bytes:
    return WindowUpdateFrame(stream, window_increment=increment).serialize()


def ping(ack: bool = False) -> bytes:
    frame = PingFrame(0, opaque_data=b"12345678")
    if ack:
        frame.flags.add("ACK")
    return frame.serialize()


def priority(stream: int) -> bytes:
    return PriorityFrame(stream, depends_on=0, stream_weight=1).serialize()


def rst_stream(stream: int, code: int = CANCEL) -> bytes:
    return RstStreamFrame(stream, error_code=code).serialize()


def goaway(last_stream: int, code: int = 0) -> bytes:
    return GoAwayFrame(0, last_stream_id=last_stream, error_code=code).serialize()


def unknown_frame(length: int = 4) -> bytes:
    """A frame of a type no RFC defines (0xfa): receivers ignore it."""
    return length.to_bytes(3, "big") + b"\xfa\x00" + (0).to_bytes(4, "big") + b"x" * length


def split_frames(wire: bytes) -> list[bytes]:
    """Cut bytes into their wire frames (the client preface alone first)."""
    out, pos = [], 0
    if wire.startswith(PREFACE):
        out.append(PREFACE)
        pos = len(PREFACE)
    while pos < len(wire):
        length = int.from_bytes(wire[pos : pos + 3], "big")
        out.append(wire[pos : pos + 9 + length])
        pos += 9 + length
    return out
