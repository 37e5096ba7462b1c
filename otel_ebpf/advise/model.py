"""What advise works on and what it produces: profiles, spans and metric points as read
from files (neutral of their format), and findings."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from otel_ebpf.profiling.frames import Frame

# a profile's kind, from its sample types (what the agent's profilers write)
CPU, GPU_MEMORY, LAUNCHES, COPIES, SYNC, OTHER = (
    "cpu", "gpu_memory", "launches", "copies", "sync", "other")
_KIND_BY_TYPE = {"cpu": CPU, "samples": CPU, "alloc_space": GPU_MEMORY,
                 "inuse_space": GPU_MEMORY, "kernel_launches": LAUNCHES, "copies": COPIES,
                 "copy_space": COPIES, "sync_wait": SYNC, "sync_calls": SYNC}
# the kind a folded file holds, from its name (folded lines carry one value, no types):
# `cpu-...`, `gpu-memory-...`, `gpu-launches-...`, `gpu-copies-...`, `gpu-sync-...`
FOLDED_KINDS = {"cpu": (CPU, ("samples", "count")),
                "gpu-memory": (GPU_MEMORY, ("alloc_objects", "count")),
                "gpu-launches": (LAUNCHES, ("kernel_launches", "count")),
                "gpu-copies": (COPIES, ("copies", "count")),
                "gpu-sync": (SYNC, ("sync_calls", "count"))}


def profile_kind(sample_types: tuple[tuple[str, str], ...]) -> str:
    for name, _unit in sample_types:
        if name in _KIND_BY_TYPE:
            return _KIND_BY_TYPE[name]
    return OTHER


@dataclass(frozen=True, slots=True)
class Sample:
    frames: tuple[Frame, ...]  # innermost first
    values: tuple[int, ...]  # one per sample type
    labels: Mapping[str, Any] = field(default_factory=dict)  # resource + sample attributes


@dataclass(slots=True)
class Profile:
    sample_types: tuple[tuple[str, str], ...]
    samples: list[Sample]
    start_ns: int  # wall clock; 0 when the file does not say
    duration_ns: int
    origin: str  # the file it came from
    kind: str = ""

    def __post_init__(self) -> None:
        self.kind = self.kind or profile_kind(self.sample_types)

    def index(self, *names: str) -> int | None:
        """The position of the first of `names` among the sample types."""
        types = [t for t, _ in self.sample_types]
        return next((types.index(n) for n in names if n in types), None)


@dataclass(frozen=True, slots=True)
class Span:
    trace_id: str
    span_id: str
    parent_span_id: str
    name: str
    kind: int  # OTLP SpanKind: 2 server, 3 client
    start_ns: int
    end_ns: int
    attributes: Mapping[str, Any]
    resource: Mapping[str, Any]
    status_code: int = 0  # OTLP StatusCode: 2 is an error

    @property
    def duration_s(self) -> float:
        return max(0, self.end_ns - self.start_ns) / 1e9


@dataclass(frozen=True, slots=True)
class Point:
    """One data point of a metric (sums and gauges: `value`; histograms: count and sum)."""

    name: str
    value: float
    attributes: Mapping[str, Any]
    resource: Mapping[str, Any]
    time_ns: int


@dataclass(slots=True)
class Evidence:
    """Everything read from the paths given."""

    profiles: list[Profile] = field(default_factory=list)
    spans: list[Span] = field(default_factory=list)
    points: list[Point] = field(default_factory=list)
    files: list[str] = field(default_factory=list)
    skipped: list[str] = field(default_factory=list)  # "path: why"


@dataclass(frozen=True, slots=True)
class Location:
    function: str
    file: str = ""
    line: int = 0

    def __str__(self) -> str:
        where = f"{self.file}:{self.line}" if self.file and self.line else self.file
        return f"{self.function} ({where})" if where else self.function


@dataclass(slots=True)
class Finding:
    """One piece of advice. `share` is the part of a whole the finding is about, 0..1: of
    the process's CPU samples, of its time waiting for the GPU, of its copy time, of its
    launches...; each analysis says which in `evidence`. Findings rank by `score`
    (share times how much the kind tends to be worth fixing, analyses.WEIGHTS)."""

    kind: str
    title: str
    share: float
    location: Location
    evidence: list[str]
    suggestion: str
    score: float = 0.0
    process: str = ""
    source: list[tuple[int, str]] = field(default_factory=list)  # (line number, text)
    advice: str = ""  # the model's proposed change, with --llm-endpoint

    def to_json(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "kind": self.kind, "title": self.title, "share": round(self.share, 4),
            "location": {"function": self.location.function, "file": self.location.file,
                         "line": self.location.line},
            "evidence": list(self.evidence), "suggestion": self.suggestion,
        }
        if self.process:
            out["process"] = self.process
        if self.source:
            out["source"] = [{"line": n, "text": t} for n, t in self.source]
        if self.advice:
            out["llm_suggestion"] = self.advice
        return out
