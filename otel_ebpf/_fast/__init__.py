"""Compiled implementations of the agent's per-event path, behind the Python contract.

Each module here is an implementation of something Python keeps as the reference:
`ring` drains the BPF ring buffer and decodes its records (otel_ebpf/kernel/abi.py),
`conn` takes a connection's usual data event (otel_ebpf/conntrack/connection.py),
`otlp` writes OTLP Span messages (otel_ebpf/export/otlp_proto.py), `maker` builds slots
dataclasses from positional fields (protocols/base.py positional_maker), `correlate` takes
the correlator's usual frames and spans (otel_ebpf/correlate/joiner.py), `table` the
connection table's loop over the usual data events (otel_ebpf/conntrack/table.py).
slots.h, the shared header, reads and writes the agent's slots classes by offset.

A protocol's accelerators live in its own folder, beside the Python module they speed up,
as CPython pairs `_pickle` with `pickle`: protocols/<name>/_X.c is module
otel_ebpf.protocols.<name>._X, the compiled implementation of X.py, which keeps the
reference and holds the loaded module as its `compiled` attribute
(`compiled = _fast.accelerator(__name__)`); its callers look that attribute up, so setting
it to None turns that protocol's compiled path off. setup.py finds them by that name.

All are built by `pip install -e .` (setup.py); when they are missing (no compiler) or
OTEL_EBPF_PURE_PYTHON=1 is set, every caller takes the Python path, which produces the
same events, frames and spans (the differential tests check it on the same input).
"""

from __future__ import annotations

import importlib
import importlib.machinery
import os
from pathlib import Path
from types import ModuleType

PURE_PYTHON = os.environ.get("OTEL_EBPF_PURE_PYTHON", "").strip().lower() in ("1", "true", "yes")


def _load(name: str) -> ModuleType | None:
    if PURE_PYTHON:
        return None
    try:
        return importlib.import_module(name)
    except ImportError:
        return None


ring = _load("otel_ebpf._fast.ring")
otlp = _load("otel_ebpf._fast.otlp")
conn = _load("otel_ebpf._fast.conn")
maker = _load("otel_ebpf._fast.maker")
correlate = _load("otel_ebpf._fast.correlate")
table = _load("otel_ebpf._fast.table")

MODULES = ("ring", "otlp", "conn", "maker", "correlate", "table")


def accelerator(module_name: str) -> ModuleType | None:
    """The compiled sibling of a Python module: "a.b.X" -> module "a.b._X", or None when it
    is not built or OTEL_EBPF_PURE_PYTHON=1 is set (the module's own Python is the path)."""
    package, _, stem = module_name.rpartition(".")
    return _load(f"{package}._{stem}" if package else f"_{stem}")


def accelerators() -> list[tuple[str, bool]]:
    """(dotted name, built) of every protocol accelerator: a `_X.c` source or a built `_X`
    extension in a folder of the otel_ebpf.protocols package."""
    try:
        import otel_ebpf.protocols as protocols
    except ImportError:
        return []
    suffixes = importlib.machinery.EXTENSION_SUFFIXES
    found: dict[str, bool] = {}
    for root in map(Path, protocols.__path__):
        for folder in sorted(p for p in root.iterdir() if p.is_dir()):
            for path in folder.glob("_*"):
                stem = next((path.name[:-len(s)] for s in suffixes if path.name.endswith(s)),
                            None)
                if stem is not None and "." not in stem:  # not another Python's build
                    found[f"{protocols.__name__}.{folder.name}.{stem}"] = True
                elif path.suffix == ".c":
                    found.setdefault(f"{protocols.__name__}.{folder.name}.{path.stem}", False)
    return sorted(found.items())


def status() -> tuple[bool, str]:
    """Whether the compiled path is on, and what to say about it (`otel-ebpf check`)."""
    if PURE_PYTHON:
        return False, "off: OTEL_EBPF_PURE_PYTHON=1 (the Python reference: the same spans)"
    names = [(name, globals()[name] is not None) for name in MODULES]
    names += [(name, built and _load(name) is not None) for name, built in accelerators()]
    loaded = [name for name, ok in names if ok]
    missing = [name for name, ok in names if not ok]
    if not loaded:
        return False, "off: not built (pip install builds it with a C compiler); the Python " \
            "reference gives the same spans"
    return True, "on" + (f" (not built: {', '.join(missing)})" if missing else "")
