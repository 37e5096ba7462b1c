"""The postgres fuzz target: startup, simple and extended query messages and their
answers as pieces, so that random sequences reach pairing and spans."""

from __future__ import annotations

import struct

from ..testing import FuzzTarget


def _msg(kind: bytes, body: bytes = b"") -> bytes:
    return kind + struct.pack("!i", len(body) + 4) + body


_STARTUP = struct.pack("!i", 196608) + b"user\0app\0database\0shop\0\0"
PIECES = [
    struct.pack("!i", len(_STARTUP) + 4) + _STARTUP,
    struct.pack("!ii", 8, 80877103), struct.pack("!ii", 8, 80877104),
    struct.pack("!iiii", 16, 80877102, 1, 2), b"N", b"S", b"G", b"\x16\x03\x01",
    _msg(b"Q", b"SELECT a FROM t WHERE b = 'x' LIMIT 3\0"),
    _msg(b"Q", b"SELECT id FROM items ORDER BY e <-> '[1,2]' LIMIT 5; DELETE FROM t\0"),
    _msg(b"Q", b"COPY t FROM STDIN\0"),
    _msg(b"P", b"s1\0SELECT id FROM items ORDER BY e <=> $1 LIMIT $2\0\0\0"),
    _msg(b"P", b"\0UPDATE t SET a = $1\0\0\x01\0\0\0\x17"),
    _msg(b"B", b"\0s1\0\0\x01\0\x01\0\x02\0\0\0\x03abc\0\0\0\x08" + bytes(7) + b"\x05\0\0"),
    _msg(b"B", b"p1\0\0\0\0\0\x01\0\0\0\x011\0\0"),
    _msg(b"D", b"P\0"), _msg(b"E", b"\0\0\0\0\0"), _msg(b"E", b"p1\0\0\0\0\x02"),
    _msg(b"C", b"Ss1\0"), _msg(b"S"), _msg(b"H"), _msg(b"X"), _msg(b"p", b"secret\0"),
    _msg(b"d", b"1\tx\n"), _msg(b"c"), _msg(b"F", b"\0\0\0\x01\0\0\0\0\0\0"),
    _msg(b"R", b"\0\0\0\0"), _msg(b"S", b"a\0b\0"), _msg(b"K", bytes(8)),
    _msg(b"Z", b"I"), _msg(b"Z", b"E"), _msg(b"T", b"\0\x01a\0" + bytes(18)),
    _msg(b"D", b"\0\x01\0\0\0\x011"), _msg(b"D", b"\0\x01\0\x01\0\0" + b"v" * 40),
    _msg(b"C", b"SELECT 1\0"), _msg(b"C", b"INSERT 0 3\0"), _msg(b"C", b"COPY 2\0"),
    _msg(b"E", b"SERROR\0C42P01\0Mno\0\0"), _msg(b"N", b"SNOTICE\0Mhi\0\0"),
    _msg(b"1"), _msg(b"2"), _msg(b"3"), _msg(b"n"), _msg(b"I"), _msg(b"s"),
    _msg(b"t", b"\0\0"), _msg(b"G", b"\0\0\x01\0\0"), _msg(b"H", b"\0\0\x01\0\0"),
    _msg(b"V", b"\0\0\0\x01x"), b"\0\0\0", b"Q", b"\xff\xff\xff\xff",
    # whole answers, so that one piece completes an exchange
    _msg(b"C", b"SELECT 1\0") + _msg(b"Z", b"I"), _msg(b"2") + _msg(b"C", b"UPDATE 2\0"),
]


def _make():
    from . import PostgresParser  # noqa: PLC0415 - imported under the fuzzer's instrumentation
    parser = PostgresParser({"max_statements": 4})
    return lambda: (parser, ())


# a request and its answer must come in the right directions for a record: 4000 inputs
# rarely get there
TARGET = FuzzTarget(make=_make(), pieces=lambda: PIECES, ci_runs=20000)
