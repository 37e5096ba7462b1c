"""Profile exporters from Collector-style config: `otlp` (gRPC ProfilesService), `pprof`
and `folded` (files in a directory). An `otlp` with an empty endpoint is left out."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from .factory import exporter_type
from .pprof import ProfileFileExporter
from .profiles import OtlpProfileExporter


def build_profile_exporters(exporters_config: Mapping[str, Mapping[str, Any] | None],
                            prefix: str = "cpu") -> tuple[dict[str, Any], list[str]]:
    """({instance name: exporter}, [info lines about exporters left off])."""
    out: dict[str, Any] = {}
    off: list[str] = []
    for name, cfg in exporters_config.items():
        cfg = cfg or {}
        kind = exporter_type(name)
        if kind == "otlp":
            endpoint = cfg.get("endpoint")
            if isinstance(endpoint, str) and not endpoint.strip():
                off.append(f"profile exporter {name} is off: its endpoint is empty")
                continue
            out[name] = OtlpProfileExporter(cfg)
        elif kind in ("pprof", "folded"):
            out[name] = ProfileFileExporter(str(cfg["path"]), kind, prefix)
        else:
            raise ValueError(f"exporters.{name}: type {kind} cannot export profiles")
    return out, off
