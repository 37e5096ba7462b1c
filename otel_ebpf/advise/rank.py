"""Ordering findings: by score (share times the kind's weight: how directly the kind
turns into time saved), then a fixed order for ties, so a report is deterministic."""

from __future__ import annotations

from .model import Finding

# time the program loses outright weighs 1; memory and latency distributions, which
# need reading before they turn into a change, less
WEIGHTS = {
    "cpu_hotspot": 1.0, "sync_per_step": 1.0, "copy_in_loop": 1.0, "launch_storm": 0.9,
    "unpinned_copy": 0.8, "slow_db_call": 0.7, "gateway_hop": 0.6, "copy_time": 0.5,
    "gpu_memory_churn": 0.5, "serving_latency": 0.5, "gpu_memory_peak": 0.3,
    "gpu_memory_holder": 0.1,
}


def rank(findings: list[Finding], top: int | None = None) -> list[Finding]:
    for f in findings:
        f.score = round(f.share * WEIGHTS.get(f.kind, 0.5), 6)
    out = sorted(findings, key=lambda f: (-f.score, f.kind, f.process, f.location.file,
                                          f.location.line, f.location.function, f.title))
    return out[:top] if top else out
