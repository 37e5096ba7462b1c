"""Compiled implementations of the agent's per-event path, behind the Python contract.

Each module here is an implementation of something Python keeps as the reference:
`ring` drains the BPF ring buffer and decodes its records (otel_ebpf/kernel/abi.py),
`http1` frames plain HTTP/1 heads and whole plain messages (protocols/http1/parse.py,
llhttp), `conn` takes a connection's usual data event (otel_ebpf/conntrack/connection.py),
`otlp` writes OTLP Span messages (otel_ebpf/export/otlp_proto.py), `rtps` reads RTPS
datagrams into submessages (protocols/rtps/parse.py), `sse` splits SSE bodies into
events (protocols/llm/stream.py) and reads OpenAI chat chunks into the response's fields
(protocols/llm/events.py read_events), `maker` builds slots dataclasses from positional fields
(protocols/base.py positional_maker), `h2` splits HTTP/2 bytes into frames
(protocols/http2/parse.py), `correlate` takes the correlator's usual frames and spans
(otel_ebpf/correlate/joiner.py), `table` the connection table's loop over the usual data
events (otel_ebpf/conntrack/table.py), `h2span` pairs HTTP/2 streams and writes a gRPC
call's span (protocols/http2/stitch.py pair, spans.py to_spans). All are built by
`pip install -e .` (setup.py); when they are missing (no compiler) or
OTEL_EBPF_PURE_PYTHON=1 is set, every caller takes the Python path, which produces the
same events, frames and spans (the differential tests check it on the same input).
"""

from __future__ import annotations

import os
from types import ModuleType

PURE_PYTHON = os.environ.get("OTEL_EBPF_PURE_PYTHON", "").strip().lower() in ("1", "true", "yes")


def _load(name: str) -> ModuleType | None:
    if PURE_PYTHON:
        return None
    try:
        return __import__(f"otel_ebpf._fast.{name}", fromlist=[name])
    except ImportError:
        return None


ring = _load("ring")
http1 = _load("http1")
otlp = _load("otlp")
conn = _load("conn")
rtps = _load("rtps")
sse = _load("sse")
maker = _load("maker")
h2 = _load("h2")
correlate = _load("correlate")
table = _load("table")
h2span = _load("h2span")

MODULES = ("ring", "http1", "otlp", "conn", "rtps", "sse", "maker", "h2", "correlate", "table",
           "h2span")


def status() -> tuple[bool, str]:
    """Whether the compiled path is on, and what to say about it (`otel-ebpf check`)."""
    if PURE_PYTHON:
        return False, "off: OTEL_EBPF_PURE_PYTHON=1 (the Python reference: the same spans)"
    loaded = [name for name in MODULES if globals()[name] is not None]
    missing = [name for name in MODULES if name not in loaded]
    if not loaded:
        return False, "off: not built (pip install builds it with a C compiler); the Python " \
            "reference gives the same spans"
    return True, "on" + (f" (not built: {', '.join(missing)})" if missing else "")
