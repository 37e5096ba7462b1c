"""Source lines of a finding's location, read from disk when the file is there: the
function from its first line (what the profiles give) to the end of its body."""

from __future__ import annotations

from pathlib import Path

from .model import Finding

MAX_LINES = 40


def function_lines(path: str, first: int, limit: int = MAX_LINES) -> list[tuple[int, str]]:
    """(number, text) from line `first` to the end of the block it opens (by indentation);
    [] when the file cannot be read or the line is not in it."""
    if not path or first <= 0:
        return []
    try:
        lines = Path(path).read_text(errors="replace").splitlines()
    except OSError:
        return []
    if first > len(lines):
        return []
    head = lines[first - 1]
    indent = len(head) - len(head.lstrip())
    out = [(first, head.rstrip())]
    for n in range(first, min(len(lines), first - 1 + limit)):
        text = lines[n]
        if text.strip() and len(text) - len(text.lstrip()) <= indent and \
                not text.lstrip().startswith(("#", ")", "]", "}")):
            break  # the next statement at the def's level: the body ended
        out.append((n + 1, text.rstrip()))
    while out and not out[-1][1].strip():
        out.pop()
    return out


def attach(findings: list[Finding]) -> None:
    for f in findings:
        if not f.source:
            f.source = function_lines(f.location.file, f.location.line)
