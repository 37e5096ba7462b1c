"""Findings as text (a terminal), Markdown (an issue, a pull request) or JSON
(`{"findings": [...]}`, best first: the schema docs/advise.md gives)."""

from __future__ import annotations

import orjson

from .model import Evidence, Finding

SOURCE_LINES = 12  # lines of source shown per finding in text and Markdown


def _summary(ev: Evidence) -> str:
    return (f"{len(ev.files)} files: {len(ev.profiles)} profiles, {len(ev.spans)} spans, "
            f"{len(ev.points)} metric points")


def to_json(findings: list[Finding], ev: Evidence) -> str:
    return orjson.dumps({"findings": [f.to_json() for f in findings],
                         "read": {"files": len(ev.files), "profiles": len(ev.profiles),
                                  "spans": len(ev.spans), "points": len(ev.points),
                                  "skipped": ev.skipped}},
                        option=orjson.OPT_INDENT_2).decode() + "\n"


def to_text(findings: list[Finding], ev: Evidence) -> str:
    out = [f"otel-ebpf advise: {_summary(ev)}"]
    if not findings:
        out.append("no findings: nothing in these files stands out")
    for i, f in enumerate(findings, 1):
        out.append("")
        out.append(f"{i}. [{f.kind}] {f.title}  (share {f.share:.0%})")
        out.append(f"   at {f.location}")
        out.extend(f"   - {e}" for e in f.evidence)
        for n, text in f.source[:SOURCE_LINES]:
            out.append(f"   {n:5d} | {text}")
        out.append(f"   suggestion: {f.suggestion}")
        if f.advice:
            out.append("   model's proposed change:")
            out.extend(f"     {line}" for line in f.advice.splitlines())
    for s in ev.skipped:
        out.append(f"skipped {s}")
    return "\n".join(out) + "\n"


def to_markdown(findings: list[Finding], ev: Evidence) -> str:
    out = ["# otel-ebpf advise", "", f"Read {_summary(ev)}."]
    if not findings:
        out += ["", "No findings: nothing in these files stands out."]
    for i, f in enumerate(findings, 1):
        out += ["", f"## {i}. {f.title}", "",
                f"`{f.kind}`, share {f.share:.0%}, at `{f.location}`", ""]
        out += [f"- {e}" for e in f.evidence]
        if f.source:
            out += ["", "```python"] + [f"{n:5d}  {t}" for n, t in f.source[:SOURCE_LINES]]
            out += ["```"]
        out += ["", f"**Suggestion:** {f.suggestion}"]
        if f.advice:
            out += ["", "**The model's proposed change:**", "", f.advice]
    if ev.skipped:
        out += ["", "Skipped:"] + [f"- {s}" for s in ev.skipped]
    return "\n".join(out) + "\n"


RENDERERS = {"text": to_text, "markdown": to_markdown, "json": to_json}
