"""From paths to ranked findings: read, run every analysis, rank, attach source lines."""

from __future__ import annotations

import time
from collections.abc import Iterable

from . import cpu, gpu, serving
from .model import Evidence, Finding
from .rank import rank
from .readers import read
from .source import attach


def advise(paths: Iterable[str], since_s: float | None = None, top: int | None = 10,
           now_ns: int | None = None) -> tuple[list[Finding], Evidence]:
    """The findings (best first, at most `top`) of everything under `paths` newer than
    `since_s` seconds ago."""
    since_ns = 0
    if since_s:
        since_ns = (now_ns or time.time_ns()) - int(since_s * 1e9)
    ev = read(paths, since_ns)
    findings = cpu.analyze(ev.profiles) + gpu.analyze(ev.profiles, ev.points) + \
        serving.analyze(ev.spans)
    ranked = rank(findings, top)
    attach(ranked)
    return ranked, ev
