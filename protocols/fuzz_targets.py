"""Finds every installed protocol's fuzz target by name, without importing any parser (a
fuzzer must import them under its coverage instrumentation, after this).

A parser or layer registered as `<name> = "pkg.proto:Class"` has its target, when it has
one, as `TARGET` in `pkg.proto.fuzz` (an otel_ebpf.protocols.testing.FuzzTarget): no line
more to write. Targets elsewhere, or more than one per protocol, are entry points of the
group `otel_ebpf.fuzz_targets` (`<target name> = "module:ATTRIBUTE"`)."""

from __future__ import annotations

import importlib
import importlib.util
import os
from importlib.metadata import entry_points
from typing import Any

PLUGIN_GROUPS = ("otel_ebpf.protocols", "otel_ebpf.layers")
FUZZ_ENTRY_POINT_GROUP = "otel_ebpf.fuzz_targets"


def _has_fuzz_module(module: str) -> bool:
    """Whether `module` (a package) holds a fuzz.py, importing only its parents."""
    parent, _, leaf = module.rpartition(".")
    try:
        spec = importlib.util.find_spec(parent) if parent else None
    except (ImportError, ValueError):
        return False
    locations = spec.submodule_search_locations if spec is not None else None
    return any(os.path.isfile(os.path.join(loc, leaf, "fuzz.py")) for loc in locations or ())


def fuzz_target_refs() -> dict[str, str]:
    """Target name -> "module:ATTRIBUTE", by name (the explicit group wins)."""
    refs: dict[str, str] = {}
    for group in PLUGIN_GROUPS:
        for ep in entry_points(group=group):
            if _has_fuzz_module(ep.module):
                refs[ep.name] = f"{ep.module}.fuzz:TARGET"
    for ep in entry_points(group=FUZZ_ENTRY_POINT_GROUP):
        refs[ep.name] = ep.value
    return refs


def load_fuzz_target(ref: str) -> Any:
    """The FuzzTarget a "module:ATTRIBUTE" reference names."""
    module, _, attribute = ref.partition(":")
    return getattr(importlib.import_module(module), attribute)
