"""PostgreSQL protocol 3.0 messages as clients and servers write them, for the tests."""

from __future__ import annotations

import struct


def msg(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


def cstr(text: str | bytes) -> bytes:
    return (text.encode() if isinstance(text, str) else text) + b"\0"


def startup(user: str = "app", database: str = "shop") -> bytes:
    body = struct.pack("!i", 196608) + cstr("user") + cstr(user) + cstr("database") \
        + cstr(database) + b"\0"
    return struct.pack("!i", len(body) + 4) + body


SSL_REQUEST = struct.pack("!ii", 8, 80877103)
GSSENC_REQUEST = struct.pack("!ii", 8, 80877104)


def cancel(pid: int = 77, key: int = 1234) -> bytes:
    return struct.pack("!iiii", 16, 80877102, pid, key)


def query(text: str) -> bytes:
    return msg(b"Q", cstr(text))


def parse(text: str, name: str = "", types: tuple[int, ...] = ()) -> bytes:
    return msg(b"P", cstr(name) + cstr(text) + struct.pack("!h", len(types))
               + b"".join(struct.pack("!i", t) for t in types))


def bind(params: tuple[bytes | None, ...] = (), statement: str = "", portal: str = "",
         formats: tuple[int, ...] = ()) -> bytes:
    body = cstr(portal) + cstr(statement) + struct.pack("!h", len(formats))
    body += b"".join(struct.pack("!h", f) for f in formats)
    body += struct.pack("!h", len(params))
    for p in params:
        body += struct.pack("!i", -1) if p is None else struct.pack("!i", len(p)) + p
    return msg(b"B", body + struct.pack("!h", 0))


def describe(kind: bytes = b"P", name: str = "") -> bytes:
    return msg(b"D", kind + cstr(name))


def execute(portal: str = "", max_rows: int = 0) -> bytes:
    return msg(b"E", cstr(portal) + struct.pack("!i", max_rows))


def close(kind: bytes, name: str) -> bytes:
    return msg(b"C", kind + cstr(name))


SYNC = msg(b"S")
FLUSH = msg(b"H")
TERMINATE = msg(b"X")


def password(secret: str) -> bytes:
    return msg(b"p", cstr(secret))


def copy_data(data: bytes) -> bytes:
    return msg(b"d", data)


COPY_DONE = msg(b"c")

# --- backend ---------------------------------------------------------------------

AUTH_OK = msg(b"R", struct.pack("!i", 0))
AUTH_MD5 = msg(b"R", struct.pack("!i", 5) + b"salt")


def parameter_status(name: str, value: str) -> bytes:
    return msg(b"S", cstr(name) + cstr(value))


BACKEND_KEY = msg(b"K", struct.pack("!ii", 77, 1234))


def ready(status: bytes = b"I") -> bytes:
    return msg(b"Z", status)


def row_description(*names: str) -> bytes:
    body = struct.pack("!h", len(names))
    for n in names:
        body += cstr(n) + struct.pack("!ihihih", 0, 0, 25, -1, -1, 0)
    return msg(b"T", body)


def data_row(*values: bytes | None) -> bytes:
    body = struct.pack("!h", len(values))
    for v in values:
        body += struct.pack("!i", -1) if v is None else struct.pack("!i", len(v)) + v
    return msg(b"D", body)


def complete(tag: str) -> bytes:
    return msg(b"C", cstr(tag))


def error(code: str, message: str = "boom", severity: str = "ERROR") -> bytes:
    return msg(b"E", b"S" + cstr(severity) + b"V" + cstr(severity) + b"C" + cstr(code)
               + b"M" + cstr(message) + b"\0")


def notice(message: str = "note") -> bytes:
    return msg(b"N", b"S" + cstr("NOTICE") + b"C" + cstr("00000") + b"M" + cstr(message) + b"\0")


PARSE_COMPLETE = msg(b"1")
BIND_COMPLETE = msg(b"2")
CLOSE_COMPLETE = msg(b"3")
NO_DATA = msg(b"n")
EMPTY_QUERY = msg(b"I")
PORTAL_SUSPENDED = msg(b"s")


def parameter_description(*oids: int) -> bytes:
    return msg(b"t", struct.pack("!h", len(oids)) + b"".join(struct.pack("!i", o) for o in oids))


def copy_in_response(columns: int = 1) -> bytes:
    return msg(b"G", b"\0" + struct.pack("!h", columns) + b"\0\0" * columns)


def copy_out_response(columns: int = 1) -> bytes:
    return msg(b"H", b"\0" + struct.pack("!h", columns) + b"\0\0" * columns)


def server_hello() -> bytes:
    """What a server writes between the startup packet and its first ReadyForQuery."""
    return AUTH_OK + parameter_status("server_version", "15.8") + BACKEND_KEY + ready()
