"""Finds protocol parsers and layers by entry point and asks the parsers, in order, who owns
a connection; layers (APIs over HTTP) are handed to the parsers that carry them."""

from __future__ import annotations

import logging
from collections.abc import Iterable, Mapping
from importlib.metadata import entry_points
from typing import Any

from .base import ConnInfo, Direction, ProtocolParser, Role
from .layers import LAYER_ENTRY_POINT_GROUP, HTTPLayer
from .options import OptionError

ENTRY_POINT_GROUP = "otel_ebpf.protocols"
log = logging.getLogger(__name__)


def _load(group: str) -> dict[str, Any]:
    found: dict[str, Any] = {}
    for ep in entry_points(group=group):
        try:
            cls = ep.load()
        except Exception as exc:  # a broken plugin must not take the agent down
            log.error("protocol plugin %s could not be loaded: %s", ep.name, exc)
            continue
        found[ep.name] = cls
    return found


def available_parsers() -> dict[str, type[ProtocolParser]]:
    """Parser classes registered under the entry-point group, by name."""
    return _load(ENTRY_POINT_GROUP)


def available_layers() -> dict[str, type[HTTPLayer]]:
    """Layer classes (APIs over HTTP) registered under their entry-point group, by name."""
    return _load(LAYER_ENTRY_POINT_GROUP)


def default_protocols() -> tuple[str, ...]:
    """The parsers, then the layers, that declare themselves on by default
    (`default_enabled`), each kind by `default_rank` (the order parsers are asked to infer
    a connection and layers whether they want a request), then name: `protocols.enabled` when the config does not
    say. The core names none of them."""
    out: list[str] = []
    for group in (available_parsers(), available_layers()):
        on = [(getattr(cls, "default_rank", 100), name) for name, cls in group.items()
              if getattr(cls, "default_enabled", False)]
        out += [name for _, name in sorted(on)]
    return tuple(out)


class PluginOptionsError(ValueError):
    """A parser or layer refused its options (`receivers.ebpf.protocols.<name>`); `reason`
    is its own words (`llm.provider: expected a non-empty string, got 7`). `option` is
    the OptionError of a v2 plugin's schema (key, expected, got), else None."""

    def __init__(self, name: str, reason: str, option: OptionError | None = None) -> None:
        self.name, self.reason, self.option = name, reason, option
        super().__init__(f"receivers.ebpf.protocols.{name}: {reason}")


def build(name: str, cls: type, options: Mapping[str, Any] | None):
    """One parser or layer with its options; PluginOptionsError when it refuses them (the
    config loader calls this too, so that bad options stop `run` before it needs root)."""
    try:
        return cls(options)
    except OptionError as exc:
        raise PluginOptionsError(name, str(exc), exc) from exc
    except (ValueError, TypeError) as exc:
        raise PluginOptionsError(name, str(exc)) from exc



class Registry:
    """The enabled parsers, in the order they are asked to infer a connection's protocol,
    and the enabled layers, in the order they are asked whether they want a request."""

    def __init__(self, parsers: Iterable[ProtocolParser],
                 layers: Iterable[HTTPLayer] = ()) -> None:
        self.parsers = list(parsers)
        self.layers = tuple(layers)
        for parser in self.parsers:
            parser.use_layers(self.layers)

    @classmethod
    def from_config(
        cls, enabled: Iterable[str] | None, options: Mapping[str, Mapping[str, Any]]
    ) -> Registry:
        """Instantiate the named parsers and layers (those on by default when `enabled` is
        None)."""
        parsers, layers = available_parsers(), available_layers()
        names = list(default_protocols()) if enabled is None else list(enabled)
        missing = [n for n in names if n not in parsers and n not in layers]
        if missing:
            raise KeyError(
                f"unknown protocol(s) {missing}; installed: {sorted([*parsers, *layers])}"
            )
        return cls([build(n, parsers[n], options.get(n)) for n in names if n in parsers],
                   [build(n, layers[n], options.get(n)) for n in names if n in layers])

    @property
    def instruments(self) -> dict:
        """Every histogram the enabled parsers and layers declare, by name."""
        out: dict = {}
        for plugin in (*self.parsers, *self.layers):
            out.update(type(plugin).instruments)
        return out

    def wide_prefixes(self) -> tuple[str, ...]:
        """Request-path prefixes whose connections the kernel should capture more of."""
        return tuple(p for layer in self.layers for p in layer.capture_prefixes())

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
