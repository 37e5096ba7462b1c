"""`otel-ebpf top`: a live table per service and side (server, client) from the spans the
agent's file exporter writes (OTLP/JSON lines), followed as the file grows: request rate,
errors, p50/p99 duration and, for GenAI spans, time to first token and time per output
token, over a sliding window."""

from __future__ import annotations

import time
from collections import deque
from collections.abc import Iterable
from dataclasses import dataclass, field
from pathlib import Path

import orjson
from rich.table import Table

from otel_ebpf.advise.model import Span
from otel_ebpf.advise.readers import spans_of
from otel_ebpf.advise.serving import TPOT, TTFT

SIDES = {2: "server", 3: "client", 4: "producer", 5: "consumer"}
ERROR = 2  # OTLP StatusCode


@dataclass(slots=True)
class _Row:
    spans: deque = field(default_factory=deque)  # (end_ns, seconds, error, ttft, tpot)


def _pct(values: list[float], q: float) -> float | None:
    if not values:
        return None
    v = sorted(values)
    return v[min(len(v) - 1, int(q * (len(v) - 1) + 0.5))]


def _ms(s: float | None) -> str:
    return "-" if s is None else f"{s * 1e3:.1f}"


class Follower:
    """Reads the complete lines a file has gained since the last call (a line being
    written is left for the next), from its start or its end."""

    def __init__(self, path: str, from_start: bool = True) -> None:
        self.path = Path(path)
        self.offset = 0 if from_start or not self.path.exists() else self.path.stat().st_size
        self.bad_lines = 0

    def spans(self) -> list[Span]:
        try:
            size = self.path.stat().st_size
        except FileNotFoundError:
            return []
        if size < self.offset:  # truncated or replaced: start again
            self.offset = 0
        out: list[Span] = []
        with self.path.open("rb") as f:
            f.seek(self.offset)
            data = f.read(size - self.offset)
        end = data.rfind(b"\n") + 1
        self.offset += end
        for line in data[:end].splitlines():
            if not line.strip():
                continue
            try:
                tree = orjson.loads(line)
            except orjson.JSONDecodeError:
                self.bad_lines += 1
                continue
            if isinstance(tree, dict) and "resourceSpans" in tree:
                out.extend(spans_of(tree))
        return out


class Top:
    """Spans by (service, side), kept for `window_s` seconds of span end times."""

    def __init__(self, window_s: float = 60.0) -> None:
        self.window_ns = int(window_s * 1e9)
        self.rows: dict[tuple[str, str], _Row] = {}
        self.latest_ns = 0

    def add(self, spans: Iterable[Span]) -> None:
        for s in spans:
            side = SIDES.get(s.kind)
            if side is None:
                continue
            service = str(s.resource.get("service.name") or s.resource.get("process.pid")
                          or "?")
            row = self.rows.setdefault((service, side), _Row())
            ttft, tpot = s.attributes.get(TTFT), s.attributes.get(TPOT)
            row.spans.append((s.end_ns, s.duration_s, s.status_code == ERROR,
                              float(ttft) if ttft is not None else None,
                              float(tpot) if tpot is not None else None))
            self.latest_ns = max(self.latest_ns, s.end_ns)
        cutoff = self.latest_ns - self.window_ns
        for row in self.rows.values():
            while row.spans and row.spans[0][0] < cutoff:
                row.spans.popleft()

    def table(self) -> Table:
        t = Table(title=f"otel-ebpf top: the last {self.window_ns / 1e9:g} s of spans")
        for col in ("service", "side", "req/s", "errors", "p50 ms", "p99 ms", "TTFT p50 ms",
                    "TPOT p50 ms"):
            t.add_column(col, justify="left" if col in ("service", "side") else "right")
        rows = sorted(self.rows.items(), key=lambda kv: (-len(kv[1].spans), kv[0]))
        for (service, side), row in rows:
            if not row.spans:
                continue
            durations = [d for _, d, _, _, _ in row.spans]
            errors = sum(1 for _, _, e, _, _ in row.spans if e)
            t.add_row(service, side, f"{len(row.spans) / (self.window_ns / 1e9):.2f}",
                      f"{errors} ({errors / len(row.spans):.0%})",
                      _ms(_pct(durations, 0.5)), _ms(_pct(durations, 0.99)),
                      _ms(_pct([x for *_, x, _ in row.spans if x is not None], 0.5)),
                      _ms(_pct([x for *_, x in row.spans if x is not None], 0.5)))
        return t


def run(path: str, window_s: float, interval_s: float, once: bool, console) -> None:
    follower, top = Follower(path), Top(window_s)
    top.add(follower.spans())
    if once:
        console.print(top.table())
        return
    from rich.live import Live

    with Live(top.table(), console=console, refresh_per_second=4) as live:
        while True:
            time.sleep(interval_s)
            top.add(follower.spans())
            live.update(top.table())
