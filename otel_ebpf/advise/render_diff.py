"""`otel-ebpf diff`'s result as text (a terminal), Markdown (a pull request) or JSON (the
schema docs/advise.md gives); at most `top` rows per table, saying how many were cut."""

from __future__ import annotations

import orjson

from .diff import ALPHA, MIN_WINDOWS, Diff, FindingChange, Row, Table
from .model import Evidence

MiB = 1 << 20
TEXT_WIDTH = 60  # a function or site name longer than this is cut in text tables
COLUMNS = ("process", "what", "before", "after", "ratio", "windows", "p", "verdict")


def _value(v: float, measure: str) -> str:
    if measure == "share":
        return f"{v:.1%}"
    if measure == "seconds":
        return f"{v * 1e3:.1f} ms" if v < 1 else f"{v:.3f} s"
    if measure == "bytes":
        return f"{v / MiB:.1f} MiB"
    return f"{v:.3g}"


def _ratio(r: Row) -> str:
    if r.ratio is None:
        return "new" if r.after else "-"
    return "gone" if not r.after else f"{r.ratio:.2f}x"


def _cells(r: Row, measure: str) -> list[str]:
    return [r.process, r.what, _value(r.before, measure), _value(r.after, measure),
            _ratio(r), f"{len(r.before_windows)}/{len(r.after_windows)}",
            "" if r.p is None else f"{r.p:.2g}", r.verdict]


def _read(ev: Evidence) -> str:
    return (f"{len(ev.files)} files ({len(ev.profiles)} profiles, {len(ev.spans)} spans, "
            f"{len(ev.points)} metric points)")


def _per(d: Diff) -> str:
    if d.per == "request":
        return (f"per request (server spans: {d.requests[0]} before, {d.requests[1]} "
                "after)")
    if d.per == "second":
        return "per second of profile (no server spans in both runs' profile windows)"
    return "per profile file (the files carry no times)"


def _rule(d: Diff) -> str:
    return (f"a change is significant when a two-sided Mann-Whitney U test of the "
            f"per-window values, adjusted (Benjamini-Hochberg) over the {d.tested} rows "
            f"tested, gives p <= {ALPHA}; {MIN_WINDOWS} windows per run at least")


def _finding(c: FindingChange) -> str:
    where = f"[{c.kind}] {c.where} in {c.process}"
    if not c.before:
        return f"{where}: now #{c.after[0]}, share {c.after[1]:.0%}"
    if not c.after:
        return f"{where}: was #{c.before[0]}, share {c.before[1]:.0%}"
    return (f"{where}: #{c.before[0]} -> #{c.after[0]}, share {c.before[1]:.0%} -> "
            f"{c.after[1]:.0%}")


def _cut(n: int, top: int) -> str:
    cut = n - top
    return f"({cut} more {'row' if cut == 1 else 'rows'} cut: --top {n} shows them)"


def to_text(d: Diff, top: int = 20) -> str:
    out = [f"otel-ebpf diff: before {_read(d.before)}; after {_read(d.after)}",
           f"rates {_per(d)}", _rule(d)]
    empty = [t.title for t in d.tables if not t.rows]
    for t in d.tables:
        if not t.rows:
            continue
        rows = [[c if i != 1 or len(c) <= TEXT_WIDTH else c[:TEXT_WIDTH - 1] + "…"
                 for i, c in enumerate(_cells(r, t.measure))] for r in t.rows[:top]]
        widths = [max(len(c) for c in col) for col in zip(COLUMNS, *rows)]
        out += ["", f"{t.title} ({t.unit})"]
        for cells in [list(COLUMNS), *rows]:  # numbers (before .. p) right-aligned
            out.append("  " + "  ".join(
                c.rjust(w) if 2 <= i <= 6 else c.ljust(w)
                for i, (c, w) in enumerate(zip(cells, widths))).rstrip())
        if len(t.rows) > top:
            out.append("  " + _cut(len(t.rows), top))
    if empty:
        out += ["", "nothing to compare in: " + ", ".join(empty)]
    out += ["", "advise's findings:" if d.findings else "advise's findings: the same"]
    out += [f"  {c.change:<11}  {_finding(c)}" for c in d.findings[:top]]
    if len(d.findings) > top:
        out.append("  " + _cut(len(d.findings), top))
    skipped = d.before.skipped + d.after.skipped
    out += [f"skipped {s}" for s in skipped]
    return "\n".join(out) + "\n"


def to_markdown(d: Diff, top: int = 20) -> str:
    out = ["# otel-ebpf diff", "", f"Before: {_read(d.before)}. After: {_read(d.after)}.",
           f"Rates {_per(d)}; {_rule(d)}."]
    for t in d.tables:
        if not t.rows:
            continue
        out += ["", f"## {t.title}", "", f"{t.unit[0].upper()}{t.unit[1:]}.", "",
                "| " + " | ".join(COLUMNS) + " |",
                "|---|---|" + "---:|" * 5 + "---|"]
        for r in t.rows[:top]:
            cells = _cells(r, t.measure)
            cells[1] = f"`{cells[1]}`"
            if r.verdict == "significant":
                cells[7] = f"**{cells[7]}**"
            out.append("| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |")
        if len(t.rows) > top:
            out += ["", _cut(len(t.rows), top)]
    out += ["", "## advise's findings", ""]
    out += [f"- {c.change}: {_finding(c)}" for c in d.findings[:top]] or ["The same."]
    if len(d.findings) > top:
        out += ["", _cut(len(d.findings), top)]
    skipped = d.before.skipped + d.after.skipped
    if skipped:
        out += ["", "Skipped:"] + [f"- {s}" for s in skipped]
    return "\n".join(out) + "\n"


def _row_json(r: Row) -> dict:
    return {"process": r.process, "what": r.what, "before": r.before, "after": r.after,
            "ratio": r.ratio, "windows": {"before": len(r.before_windows),
                                          "after": len(r.after_windows)},
            "p": r.p, "verdict": r.verdict}


def _table_json(t: Table, top: int) -> dict:
    return {"title": t.title, "unit": t.unit, "rows": [_row_json(r) for r in t.rows[:top]],
            "cut": max(0, len(t.rows) - top)}


def _read_json(ev: Evidence) -> dict:
    return {"files": len(ev.files), "profiles": len(ev.profiles), "spans": len(ev.spans),
            "points": len(ev.points), "skipped": ev.skipped}


def to_json(d: Diff, top: int = 20) -> str:
    def rank(r: tuple[int, float] | None) -> dict | None:
        return {"rank": r[0], "share": round(r[1], 4)} if r else None

    return orjson.dumps({
        "read": {"before": _read_json(d.before), "after": _read_json(d.after)},
        "per": d.per, "requests": {"before": d.requests[0], "after": d.requests[1]},
        "rule": {"test": "mann-whitney-u", "adjust": "benjamini-hochberg", "alpha": ALPHA,
                 "min_windows": MIN_WINDOWS, "tested": d.tested},
        "tables": {t.name: _table_json(t, top) for t in d.tables},
        "findings": [{"change": c.change, "kind": c.kind, "where": c.where,
                      "process": c.process, "title": c.title, "before": rank(c.before),
                      "after": rank(c.after)} for c in d.findings[:top]],
        "findings_cut": max(0, len(d.findings) - top),
    }, option=orjson.OPT_INDENT_2).decode() + "\n"


RENDERERS = {"text": to_text, "markdown": to_markdown, "json": to_json}
