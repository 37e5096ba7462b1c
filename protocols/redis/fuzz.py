"""The redis fuzz target: pieces of RESP2/RESP3 commands and replies, so that random
sequences reach pipelining, pub/sub, transactions and the skipping of large values."""

from __future__ import annotations

from ..testing import FuzzTarget

COMMANDS = [
    b"*2\r\n$3\r\nGET\r\n$1\r\nk\r\n", b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$5\r\nvalue\r\n",
    b"*3\r\n$3\r\nSET\r\n$1\r\nk\r\n$100000\r\n", b"*2\r\n$6\r\nSELECT\r\n$1\r\n3\r\n",
    b"*1\r\n$5\r\nMULTI\r\n", b"*1\r\n$4\r\nEXEC\r\n", b"*1\r\n$7\r\nDISCARD\r\n",
    b"*3\r\n$9\r\nSUBSCRIBE\r\n$1\r\na\r\n$1\r\nb\r\n", b"*1\r\n$11\r\nUNSUBSCRIBE\r\n",
    b"*2\r\n$5\r\nHELLO\r\n$1\r\n3\r\n", b"*3\r\n$6\r\nCLIENT\r\n$7\r\nSETNAME\r\n$1\r\nn\r\n",
    b"PING\r\n", b"SET k v\r\n", b"\r\n", b"*1\r\n$5\r\nRESET\r\n", b"*-1\r\n", b"*0\r\n",
]
REPLIES = [
    b"+OK\r\n", b"+QUEUED\r\n", b"-WRONGTYPE Operation against a key\r\n", b"-ERR unknown\r\n",
    b":42\r\n", b"$5\r\nvalue\r\n", b"$-1\r\n", b"$100000\r\n", b"*2\r\n:1\r\n$1\r\nx\r\n",
    b"*-1\r\n", b"_\r\n", b",3.14\r\n", b"#t\r\n", b"(3492890328409238509324850943850943825024385\r\n",
    b"=15\r\ntxt:Some string\r\n", b"!21\r\nSYNTAX invalid syntax\r\n", b"%1\r\n+a\r\n:1\r\n",
    b"~2\r\n+a\r\n+b\r\n", b"|1\r\n+key-popularity\r\n:5\r\n", b">3\r\n$7\r\nmessage\r\n$1\r\na\r\n$2\r\nhi\r\n",
    b"*3\r\n$9\r\nsubscribe\r\n$1\r\na\r\n:1\r\n", b"*3\r\n$11\r\nunsubscribe\r\n$-1\r\n:0\r\n",
    b"*3\r\n$7\r\nmessage\r\n$1\r\na\r\n$2\r\nhi\r\n", b">3\r\n$9\r\nsubscribe\r\n$1\r\nb\r\n:2\r\n",
    b"+" + b"x" * 600 + b"\r\n", b"*3\r\n", b"$", b"\r\n", b"\x00\xff",
]


def _make():
    from . import RedisParser  # noqa: PLC0415 - imported under the fuzzer's instrumentation
    parser = RedisParser({"capture_keys": True})
    return lambda: (parser, ())


TARGET = FuzzTarget(make=_make(), pieces=lambda: COMMANDS + REPLIES)
