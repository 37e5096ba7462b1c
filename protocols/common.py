"""What every parser and layer would otherwise write again: one bounded table that counts
what it pushes out, the network/peer attributes of a connection, which header names carry
secrets."""

from __future__ import annotations

import functools
from collections.abc import Callable, Hashable
from typing import Any

from cachetools import LRUCache

from .base import AttributeValue, ConnInfo

Attributes = dict[str, AttributeValue]

# --- a bounded table -------------------------------------------------------------------


class BoundedTable(LRUCache):
    """A mapping of at most `limit` entries; past it the least recently used goes, and is
    counted in `evicted` (and handed to `on_evict`, when given: a request pushed out
    unanswered may still need its span). Reads and writes both count as use; `put` is
    `table[key] = value`, kept for the tables written that way.

    Per-connection parser state should keep its tables in one of these: a table that grows
    with what a peer sends must have a bound, and what the bound dropped must be said
    (the parser's `counters` report `evicted`)."""

    def __init__(self, limit: int, on_evict: Callable[[Hashable, Any], None] | None = None):
        if limit < 1:
            raise ValueError(f"a table of at most {limit} entries holds nothing")
        super().__init__(maxsize=limit)
        self.evicted = 0
        self._on_evict = on_evict

    @property
    def limit(self) -> int:
        return int(self.maxsize)

    def popitem(self):  # noqa: ANN201 - LRUCache calls it when full: that is an eviction
        key, value = super().popitem()
        self.evicted += 1
        if self._on_evict is not None:
            self._on_evict(key, value)
        return key, value

    def put(self, key: Hashable, value: Any) -> None:
        self[key] = value


# --- network and peer attributes -------------------------------------------------------


def network_attributes(conn: ConnInfo, protocol: str | None = None,
                       peer: tuple[str, int] | None = None, attrs: Attributes | None = None
                       ) -> Attributes:
    """network.protocol.name (when `protocol` is given), network.transport, network.type
    and network.peer.address/port of a connection, after the semantic conventions; `peer`
    overrides the connection's remote end (a datagram's sender). Written into `attrs` when
    given, in that order, and returned."""
    out: Attributes = {} if attrs is None else attrs
    if protocol is not None:
        out["network.protocol.name"] = protocol
    if conn.family == "unix":
        out["network.transport"] = "unix"
    else:
        out["network.transport"] = "udp" if conn.transport == "datagram" else "tcp"
    if conn.family in ("ipv4", "ipv6"):
        out["network.type"] = conn.family
    address, port = peer if peer is not None else (conn.remote_addr, conn.remote_port)
    if address:
        out["network.peer.address"] = address
    if port:
        out["network.peer.port"] = port
    if conn.nat is not None:
        nat_attributes(conn, out)
    return out


def nat_attributes(conn: ConnInfo, attrs: Attributes) -> None:
    """Where NAT took a client's connection (conn.nat): the server behind it (a Service's
    pod), and this end as the server saw it when it was rewritten too (SNAT). The semantic
    conventions have no attribute for a client's translated peer: network.peer.* stays the
    socket's peer (what an SDK reports: the Service), server.address the name asked for, and
    destination.* is for exchanges without a client and a server."""
    client_addr, client_port, server_addr, server_port = conn.nat  # type: ignore[misc]
    attrs["otel_ebpf.nat.peer.address"] = server_addr
    attrs["otel_ebpf.nat.peer.port"] = server_port
    if (client_addr, client_port) != (conn.local_addr, conn.local_port):
        attrs["otel_ebpf.nat.local.address"] = client_addr
        attrs["otel_ebpf.nat.local.port"] = client_port


def server_attributes(conn: ConnInfo, host: str = "", attrs: Attributes | None = None
                      ) -> Attributes:
    """server.address and server.port: the peer the traced client talks to (the name it
    asked for, `host`, when the protocol carries one), or the traced server's own end."""
    from .base import Role  # noqa: PLC0415 - base imports nothing of this module
    out: Attributes = {} if attrs is None else attrs
    if conn.role == Role.SERVER:
        address, port = conn.local_addr, conn.local_port
    else:
        address, port = conn.remote_addr, conn.remote_port
    if host or address:
        out["server.address"] = host or address
    if port:
        out["server.port"] = port
    return out


# --- secrets ---------------------------------------------------------------------------

SECRET_HEADERS = frozenset({"authorization", "proxy-authorization", "cookie", "set-cookie"})
SECRET_PARTS = ("api-key", "api_key", "apikey", "token", "secret")


@functools.lru_cache(maxsize=4096)  # header names repeat: decide each once
def is_secret(name: str) -> bool:
    """Whether a header, query parameter or field named `name` (lower case) may carry a
    secret: its value is never kept (not in carriers, not in captured headers)."""
    return name in SECRET_HEADERS or any(part in name for part in SECRET_PARTS)
