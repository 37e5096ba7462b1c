"""Scores the agent's span parents against the topology's ground truth: `evaluate(spans,
truth) -> Report`, with precision and recall per edge shape, and the Markdown table.

A span is mapped to its request by the `rid` query parameter (`url.query` on SERVER spans,
`url.full` on CLIENT spans). True edges, one per request rid R of the ground truth:
  cross-process  the SERVER span of R has the CLIENT span of R as parent (the load
                 generator's requests to the gateway included: it is a traced process too)
  in-process     the CLIENT span of R has as parent the SERVER span of parent_rid(R), in the
                 caller; its shape (asyncio, threadpool, thread) is the caller's
  root           the load generator's CLIENT spans have no true parent: any parent set on
                 them is wrong (they count in precision, never in recall)
Precision = spans whose parent is right / spans with a parent set; recall = true edges
found / true edges. Spans without a rid are counted and left out of both.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

from tests.integration.conftest import read_spans as read_test_spans

SERVER, CLIENT = 2, 3  # OTLP SpanKind enum values
SHAPES = ("asyncio", "threadpool", "thread")
ROWS = ("cross-process", *SHAPES, "root")
CORRELATION_ATTRIBUTE = "otel_ebpf.correlation"


@dataclass(frozen=True)
class Span:
    """What the evaluation needs of an exported span."""

    span_id: str
    parent_id: str
    trace_id: str
    kind: int
    service: str
    attrs: dict

    @property
    def rid(self) -> str | None:
        query = self.attrs.get("url.query")
        if query is None and (full := self.attrs.get("url.full")):
            query = urlsplit(str(full)).query
        values = parse_qs(str(query or "")).get("rid")
        return values[0] if values else None


def read_spans(path: Path) -> list[Span]:
    """Spans of an OTLP/JSON lines file (the agent's `file` exporter), as the tests read them."""
    return [
        Span(span_id=s.span_id, parent_id=s.parent_span_id, trace_id=s.trace_id, kind=s.kind,
             service=str(s.resource.get("service.name", "")), attrs=s.attrs)
        for s in read_test_spans(Path(path))
    ]


@dataclass
class Row:
    edges: int = 0  # true edges in the ground truth
    seen: int = 0  # of those, both spans exported
    found: int = 0  # of those, the child has the right parent
    set: int = 0  # child spans with a parent set by the agent
    right: int = 0  # of those, the right parent
    dangling: int = 0  # parent set to a span id that is not in the output at all
    ambiguous: int = 0  # spans marked otel_ebpf.correlation=ambiguous
    evidence: Counter = field(default_factory=Counter)  # otel_ebpf.correlation values

    @property
    def precision(self) -> float | None:
        return self.right / self.set if self.set else None

    @property
    def recall(self) -> float | None:
        return self.found / self.edges if self.edges else None

    def add(self, other: Row) -> None:
        for name in ("edges", "seen", "found", "set", "right", "dangling", "ambiguous"):
            setattr(self, name, getattr(self, name) + getattr(other, name))
        self.evidence.update(other.evidence)


@dataclass
class Report:
    rows: dict[str, Row]
    spans: int = 0
    without_rid: int = 0  # spans that carry no rid (not judged)
    unknown_rid: int = 0  # spans whose rid no ground-truth line names
    duplicates: int = 0  # extra spans for one (rid, kind)
    missing_server: int = 0  # ground-truth requests without a SERVER span
    missing_client: int = 0  # ground-truth requests without a CLIENT span
    traces: int = 0  # root requests
    traces_right: int = 0  # every edge of the tree right, every span in one trace

    @property
    def total(self) -> Row:
        row = Row()
        for r in self.rows.values():
            row.add(r)
        return row


def evaluate(spans: list[Span], truth: list[dict]) -> Report:
    by_rid = {t["rid"]: t for t in truth}
    report = Report(rows={name: Row() for name in ROWS}, spans=len(spans))
    servers: defaultdict[str, list[Span]] = defaultdict(list)
    clients: defaultdict[str, list[Span]] = defaultdict(list)
    for s in spans:
        rid = s.rid
        if rid is None or s.kind not in (SERVER, CLIENT):
            report.without_rid += 1
        elif rid not in by_rid:
            report.unknown_rid += 1
        else:
            (servers if s.kind == SERVER else clients)[rid].append(s)
    report.duplicates = sum(len(v) - 1 for d in (servers, clients) for v in d.values() if v)
    all_ids = {s.span_id for s in spans}

    def ids(group: list[Span]) -> set[str]:
        return {s.span_id for s in group}

    def judge(row: Row, children: list[Span], parents: list[Span]) -> bool:
        """Score the child spans of one edge (parents: its true parent spans)."""
        want = ids(parents)
        for c in children:
            mark = c.attrs.get(CORRELATION_ATTRIBUTE)
            if mark:
                row.evidence[str(mark)] += 1
            row.ambiguous += mark == "ambiguous"
            if c.parent_id:
                row.set += 1
                row.right += c.parent_id in want
                row.dangling += c.parent_id not in all_ids
        return any(c.parent_id and c.parent_id in want for c in children)

    right_edges: set[tuple[str, str]] = set()  # (rid, "cross" | "in")
    for rid, t in by_rid.items():
        report.missing_server += not servers[rid]
        report.missing_client += not clients[rid]
        row = report.rows["cross-process"]
        row.edges += 1
        row.seen += bool(servers[rid] and clients[rid])
        if judge(row, servers[rid], clients[rid]):
            row.found += 1
            right_edges.add((rid, "cross"))
        parent = t.get("parent_rid")
        if parent is None:
            judge(report.rows["root"], clients[rid], [])
            continue
        row = report.rows[t["shape"] if t["shape"] in SHAPES else "root"]
        row.edges += 1
        row.seen += bool(clients[rid] and servers.get(parent))
        if judge(row, clients[rid], servers.get(parent, [])):
            row.found += 1
            right_edges.add((rid, "in"))

    # whole traces: every edge under a root right and all its spans in one trace
    children: defaultdict[str, list[str]] = defaultdict(list)
    for rid, t in by_rid.items():
        if t.get("parent_rid") is not None:
            children[t["parent_rid"]].append(rid)
    for root, t in by_rid.items():
        if t.get("parent_rid") is not None:
            continue
        report.traces += 1
        tree, todo = [], [root]
        while todo and len(tree) < 10_000:
            rid = todo.pop()
            tree.append(rid)
            todo.extend(children.get(rid, ()))
        edges_ok = all((r, "cross") in right_edges for r in tree) and all(
            (r, "in") in right_edges for r in tree if r != root)
        root_ok = not any(c.parent_id for c in clients[root])
        traces = {s.trace_id for r in tree for s in (*servers[r], *clients[r])}
        report.traces_right += edges_ok and root_ok and len(traces) == 1
    return report


# ---- presentation ---------------------------------------------------------------------------

def _pct(x: float | None) -> str:
    return "—" if x is None else f"{100 * x:.1f}%"


def _evidence(c: Counter) -> str:
    return ", ".join(f"{k} {v}" for k, v in c.most_common()) or "—"


HEADER = ("| edge | true edges | both spans seen | parents set | right | precision | recall "
          "| ambiguous | dangling | evidence (otel_ebpf.correlation) |\n"
          "|---|---:|---:|---:|---:|---:|---:|---:|---:|---|")


def markdown_table(report: Report) -> str:
    lines = [HEADER]
    for name, row in [*report.rows.items(), ("all", report.total)]:
        edges = "—" if name == "root" else str(row.edges)
        seen = "—" if name == "root" else str(row.seen)
        label = f"**{name}**" if name == "all" else name
        lines.append(f"| {label} | {edges} | {seen} | {row.set} | {row.right} | "
                     f"{_pct(row.precision)} | {_pct(row.recall)} | {row.ambiguous} | "
                     f"{row.dangling} | {_evidence(row.evidence)} |")
    return "\n".join(lines)


def summary_line(report: Report) -> str:
    return (f"Spans exported: {report.spans} ({report.without_rid} without a rid, "
            f"{report.unknown_rid} with an unknown rid, {report.duplicates} duplicates); "
            f"requests without a SERVER span: {report.missing_server}, without a CLIENT span: "
            f"{report.missing_client}; whole traces right: {report.traces_right} of "
            f"{report.traces}.")
