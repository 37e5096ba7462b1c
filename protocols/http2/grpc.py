"""gRPC over HTTP/2 (grpc/doc/PROTOCOL-HTTP2.md): what marks a call as gRPC, its status
codes, and its length-prefixed messages counted as DATA frames carry them."""

from __future__ import annotations

from urllib.parse import unquote

CODES = (
    "OK", "CANCELLED", "UNKNOWN", "INVALID_ARGUMENT", "DEADLINE_EXCEEDED", "NOT_FOUND",
    "ALREADY_EXISTS", "PERMISSION_DENIED", "RESOURCE_EXHAUSTED", "FAILED_PRECONDITION",
    "ABORTED", "OUT_OF_RANGE", "UNIMPLEMENTED", "INTERNAL", "UNAVAILABLE", "DATA_LOSS",
    "UNAUTHENTICATED",
)
OK, CANCELLED, UNKNOWN, INTERNAL, UNAVAILABLE = 0, 1, 2, 13, 14
# semconv (rpc/grpc.md): on a server only these are errors; on a client all but OK
SERVER_ERRORS = frozenset({"UNKNOWN", "DEADLINE_EXCEEDED", "UNIMPLEMENTED", "INTERNAL",
                           "UNAVAILABLE", "DATA_LOSS"})
# grpc/doc/http-grpc-status-mapping.md: a response without grpc-status
_FROM_HTTP = {400: INTERNAL, 401: 16, 403: 7, 404: 12, 429: UNAVAILABLE, 502: UNAVAILABLE,
              503: UNAVAILABLE, 504: UNAVAILABLE}
# PROTOCOL-HTTP2.md "Errors": RST_STREAM codes as the client library reports them
_FROM_RST = {0x7: UNAVAILABLE, 0x8: CANCELLED, 0xB: 8, 0xC: 7}
PREFIX_LEN = 5  # compressed flag (1) + message length (4, big-endian)


def is_grpc(content_type: str | None) -> bool:
    """application/grpc, application/grpc+proto, ...; not grpc-web, which frames differently."""
    if not content_type:
        return False
    kind = content_type.split(";", 1)[0].strip().lower()
    return kind == "application/grpc" or kind.startswith("application/grpc+")


def code_name(code: int) -> str:
    return CODES[code] if 0 <= code < len(CODES) else str(code)


def parse_status(value: str | None) -> int | None:
    if value is None or not value.isascii() or not value.strip().isdigit():
        return None
    return int(value)


def from_http(status: int) -> int:
    return OK if status == 200 else _FROM_HTTP.get(status, UNKNOWN)


def from_rst(error_code: int) -> int:
    return _FROM_RST.get(error_code, INTERNAL)


def decode_message(value: str | None) -> str | None:
    """grpc-message is percent-encoded UTF-8."""
    if value is None:
        return None
    return unquote(value, errors="replace")


class Messages:
    """Length-prefixed messages of one side of a call, counted from the prefixes we see.
    Bodies are skipped by length, so bytes we never captured cost nothing; a prefix that
    falls in such bytes makes the count inexact, and it is then not reported."""

    __slots__ = ("count", "size", "body_left", "prefix", "exact")

    def __init__(self) -> None:
        self.count = 0
        self.size = 0  # message bytes as sent (compressed when the flag says so)
        self.body_left = 0
        self.prefix = bytearray()
        self.exact = True

    def feed(self, data, total: int) -> None:
        """`total` payload bytes went by, of which `data` (a prefix of them) was seen."""
        if not self.exact:
            return
        n = len(data)
        if n == total >= PREFIX_LEN and not self.body_left and not self.prefix:
            # the usual DATA frame: whole, beginning with a prefix and holding one message
            flag = data[0]
            size = int.from_bytes(data[1:PREFIX_LEN], "big")
            if flag <= 1 and size == n - PREFIX_LEN:
                self.size += size
                self.count += 1
                return
        i = 0
        while i < n:
            if self.body_left:
                take = min(self.body_left, n - i)
                self.body_left -= take
                i += take
                continue
            need = PREFIX_LEN - len(self.prefix)
            self.prefix += data[i : i + need]
            i += min(need, n - i)
            if len(self.prefix) == PREFIX_LEN:
                if self.prefix[0] > 1:  # the flag is 0 or 1: this is not gRPC framing
                    self.exact = False
                    return
                self.body_left = int.from_bytes(self.prefix[1:], "big")
                self.size += self.body_left
                self.count += 1
                self.prefix.clear()
        unseen = total - n
        if unseen > self.body_left or (unseen and self.prefix):
            self.exact = False  # a prefix lay in bytes we did not see
        else:
            self.body_left -= unseen

    def at_message(self) -> bool:
        """Counting exactly, and the next byte begins a message's prefix."""
        return self.exact and not self.body_left and not self.prefix

    def lose(self) -> None:
        self.exact = False

    @property
    def complete(self) -> bool:
        """Every byte went into whole messages whose prefixes we saw."""
        return self.exact and not self.body_left and not self.prefix
