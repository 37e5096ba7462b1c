"""Redis record -> neutral span, after the semantic conventions for Redis: one span per
command, named by it; values never, keys only when asked for (in db.query.text)."""

from __future__ import annotations

import re

from ..base import (
    AttributeValue,
    ConnInfo,
    NeutralSpan,
    Role,
    SpanKind,
    StatusCode,
    positional_maker,
)
from ..common import network_attributes, server_attributes
from .pair import RedisRecord
from .resp import CONTAINERS

PROTOCOL = "redis"
MAX_PLACEHOLDERS = 16  # db.query.text shows at most this many `?`, then `...`
_ARRAY = 42
# a command's name as a span name: letters, digits and a module's dot (JSON.GET, FT.SEARCH)
_NAME = re.compile(r"[A-Za-z][A-Za-z0-9_.|:-]{0,31}")
_SUBCOMMAND = re.compile(r"[A-Za-z][A-Za-z0-9_-]{0,23}")
# commands whose first argument is no key: never shown, even with capture_keys (AUTH's
# and HELLO's carry credentials; the others a value, a count, a script, a channel)
NO_KEY = frozenset({
    "AUTH", "HELLO", "PING", "ECHO", "SELECT", "MULTI", "EXEC", "DISCARD", "QUIT", "RESET",
    "INFO", "DBSIZE", "FLUSHDB", "FLUSHALL", "SAVE", "BGSAVE", "BGREWRITEAOF", "TIME",
    "LASTSAVE", "SHUTDOWN", "SWAPDB", "WAIT", "WAITAOF", "SCAN", "KEYS", "RANDOMKEY", "EVAL",
    "EVALSHA", "EVAL_RO", "EVALSHA_RO", "FCALL", "FCALL_RO", "PUBLISH", "SPUBLISH",
    "SUBSCRIBE", "UNSUBSCRIBE", "PSUBSCRIBE", "PUNSUBSCRIBE", "SSUBSCRIBE", "SUNSUBSCRIBE",
    "MIGRATE", "REPLICAOF", "SLAVEOF", "FAILOVER", "MONITOR", "SYNC", "PSYNC", "REPLCONF",
    "READONLY", "READWRITE", "WATCH", "UNWATCH", "ROLE", "LOLWUT", "BITOP",
    "BLMPOP", "BZMPOP", "LMPOP", "ZMPOP", "ZUNION", "ZINTER", "ZDIFF", "SINTERCARD",
    "ZINTERCARD", "XREAD", "XREADGROUP"})

_SERVER_ROLE, _SERVER_KIND, _CLIENT_KIND = Role.SERVER, SpanKind.SERVER, SpanKind.CLIENT
_ERROR, _UNSET = StatusCode.ERROR, StatusCode.UNSET
_new_span = positional_maker(NeutralSpan, (
    "name", "kind", "start_ns", "end_ns", "conn", "attributes", "status", "protocol"))
_last_connection: tuple[ConnInfo | None, dict[str, AttributeValue]] = (None, {})


def operation(args: list[str] | None) -> str:
    """db.operation.name: the command in upper case (Redis reads it so; one name per
    command keeps span names few), with its subcommand (CLIENT SETNAME); "" when the
    bytes name none."""
    if not args or not _NAME.fullmatch(args[0]):
        return ""
    command = args[0].upper()
    if command in CONTAINERS and len(args) > 1 and _SUBCOMMAND.fullmatch(args[1]):
        return f"{command} {args[1].upper()}"
    return command


def query_text(op: str, args: list[str], argc: int, capture_keys: bool) -> str:
    """db.query.text sanitized: the command, then `?` for every argument, or with
    `capture_keys` its key as sent (a command whose first argument is a key)."""
    words = op.count(" ") + 1
    rest = argc - words
    text = op
    if capture_keys and rest > 0 and " " not in op and op not in NO_KEY \
            and len(args) > 1 and args[1]:
        text = f"{op} {args[1]}"
        rest -= 1
    if rest > 0:
        text += " ?" * min(rest, MAX_PLACEHOLDERS) + (" ..." if rest > MAX_PLACEHOLDERS else "")
    return text


def to_spans(record: RedisRecord, conn: ConnInfo, capture_keys: bool) -> list[NeutralSpan]:
    request, reply = record.request, record.response
    op = operation(request.args)
    attrs: dict[str, AttributeValue] = {"db.system.name": "redis"}
    if op:
        attrs["db.operation.name"] = op
        attrs["db.query.text"] = query_text(op, request.args, request.argc, capture_keys)
    if record.db is not None:
        attrs["db.namespace"] = record.db
    attrs.update(_connection_attributes(conn))
    status = _UNSET
    if reply is None:
        if record.error:
            attrs["error.type"] = record.error
            status = _ERROR
    elif reply.error is not None:
        attrs["db.response.status_code"] = attrs["error.type"] = reply.error
        status = _ERROR
    elif record.queued:
        attrs["otel_ebpf.redis.queued"] = True  # ours: its result comes with EXEC's
    elif op == "EXEC" and reply.kind == _ARRAY and reply.count != 1:
        # a transaction runs its commands as one batch (semconv: not for a single one)
        attrs["db.operation.batch.size"] = reply.count
    kind = _SERVER_KIND if conn.role == _SERVER_ROLE else _CLIENT_KIND
    return [_new_span(op or "redis", kind, request.start_ns, (reply or request).end_ns, conn,
                      attrs, status, PROTOCOL)]


def _connection_attributes(conn: ConnInfo) -> dict[str, AttributeValue]:
    """network.* and server.* (client.* on the server's side), kept for the last connection
    asked about: a connection's spans are made one after the other (copied, never changed)."""
    global _last_connection
    last = _last_connection
    if last[0] is conn:
        return last[1]
    attrs = network_attributes(conn, PROTOCOL)
    server_attributes(conn, attrs=attrs)
    if conn.role == _SERVER_ROLE:
        if conn.remote_addr:
            attrs["client.address"] = conn.remote_addr
        if conn.remote_port:
            attrs["client.port"] = conn.remote_port
    _last_connection = (conn, attrs)
    return attrs
