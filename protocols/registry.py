"""Finds protocol parsers by entry point and asks them, in order, who owns a connection."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from importlib.metadata import entry_points
from typing import Any

from .base import ConnInfo, Direction, ProtocolParser, Role

ENTRY_POINT_GROUP = "otel_ebpf.protocols"
log = logging.getLogger(__name__)


def available_parsers() -> dict[str, type[ProtocolParser]]:
    """Parser classes registered under the entry-point group, by name."""
    found: dict[str, type[ProtocolParser]] = {}
    for ep in entry_points(group=ENTRY_POINT_GROUP):
        try:
            cls = ep.load()
        except Exception as exc:  # a broken plugin must not take the agent down
            log.error("protocol plugin %s could not be loaded: %s", ep.name, exc)
            continue
        found[ep.name] = cls
    return found


class Registry:
    """The enabled parsers, in the order they are asked to infer a connection's protocol."""

    def __init__(self, parsers: Iterable[ProtocolParser]) -> None:
        self.parsers = list(parsers)

    @classmethod
    def from_config(
        cls, enabled: Iterable[str] | None, options: Mapping[str, Mapping[str, Any]]
    ) -> Registry:
        """Instantiate the named parsers (all registered ones when `enabled` is None)."""
        known = available_parsers()
        names = list(known) if enabled is None else list(enabled)
        missing = [n for n in names if n not in known]
        if missing:
            raise KeyError(
                f"unknown protocol(s) {missing}; installed: {sorted(known)}"
            )
        return cls(known[n](options.get(n)) for n in names)

    def infer(
        self, direction: Direction, head: bytes, conn: ConnInfo
    ) -> tuple[ProtocolParser, Role] | None:
        for parser in self.parsers:
            if conn.transport != parser.transport:
                continue
            role = parser.infer(direction, head, conn)
            if role is not None:
                return parser, role
        return None
