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
    ev = read(paths, cutoff(since_s, now_ns))
    ranked = findings_of(ev, top)
    attach(ranked)
    return ranked, ev


def cutoff(since_s: float | None, now_ns: int | None = None) -> int:
    """The wall-clock time `since_s` seconds ago (0: everything)."""
    return (now_ns or time.time_ns()) - int(since_s * 1e9) if since_s else 0


def findings_of(ev: Evidence, top: int | None = None) -> list[Finding]:
    """Every analysis's findings on `ev`, ranked (at most `top`), without their source."""
    return rank(cpu.analyze(ev.profiles) + gpu.analyze(ev.profiles, ev.points) +
                serving.analyze(ev.spans), top)
