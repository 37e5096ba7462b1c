"""The documentation speaks to a user of the repository: it points at nothing outside it
(no design file next to the checkout, no issue tracker numbers, no work periods), and
every file it names is there."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
DOCS = [REPO / "README.md", *sorted((REPO / "docs").glob("*.md")),
        *sorted((REPO / "bench").rglob("*.md"))]
# where comments and docstrings live too: they must not point outside either
SOURCES = [p for top in ("config", "bench", "otel_ebpf", "protocols", "bpf")
           for p in sorted((REPO / top).rglob("*"))
           if p.suffix in (".py", ".yaml", ".c", ".h", ".md") and "build" not in p.parts]

OUTSIDE = re.compile(r"\.\./shared|DESIGN\.md|DESIGN \u00a7")  # \u00a7: the section sign
ISSUE = re.compile(r"\b[Ii]ssues? ?#?\d+")
WORK_PERIOD = re.compile(r"\b[Ss]essions? \d+\b|\bhelper-\w+")
MD_LINK = re.compile(r"\[[^\]]*\]\(([^)\s]+)\)")
# `path` in backticks naming a file of the repository (not build outputs or venvs)
CODE_PATH = re.compile(r"`((?:docs|bench|config|tests|otel_ebpf|protocols|bpf)/[\w./-]+)`")
BUILT = ("bpf/build", "bench/fuzz/crashes")  # made by `make` and by a fuzzing run


def _rel(path: Path) -> str:
    return str(path.relative_to(REPO))


@pytest.mark.parametrize("path", DOCS + SOURCES, ids=_rel)
def test_nothing_outside_the_repository(path):
    text = path.read_text(errors="replace")
    for pattern in (OUTSIDE, ISSUE, WORK_PERIOD):
        found = [(n, line.strip()) for n, line in enumerate(text.splitlines(), 1)
                 if pattern.search(line)]
        assert not found, f"{_rel(path)}: {found}"


@pytest.mark.parametrize("path", DOCS, ids=_rel)
def test_relative_links_resolve(path):
    text = path.read_text()
    broken = []
    for target in MD_LINK.findall(text):
        if re.match(r"[a-z]+:", target) or target.startswith("#"):
            continue  # a URL, or an anchor in the same page
        file = target.split("#", 1)[0]
        if not (path.parent / file).exists():
            broken.append(target)
    for named in CODE_PATH.findall(text):
        named = named.rstrip(".")
        if named.startswith(BUILT):
            continue
        if not (REPO / named).exists():
            broken.append(named)
    assert not broken, f"{_rel(path)} names what the repository does not have: {broken}"


HEADING = re.compile(r"^#{1,6}\s+(.+?)\s*#*\s*$")
FENCE = re.compile(r"^\s*(```|~~~)")


def _anchors(path: Path) -> set[str]:
    """The anchors a Markdown file's headings get, as GitHub makes them: the heading's text
    in lower case, without what is neither a letter, a digit, a space, `-` nor `_`, spaces
    made hyphens; a repeated one gets -1, -2..."""
    seen: dict[str, int] = {}
    inside_code = False
    for line in path.read_text().splitlines():
        if FENCE.match(line):
            inside_code = not inside_code
            continue
        heading = None if inside_code else HEADING.match(line)
        if heading:
            text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading.group(1))
            slug = re.sub(r"[^\w\- ]", "", text.strip().lower()).replace(" ", "-")
            seen[slug] = seen.get(slug, -1) + 1
            if seen[slug]:
                seen[f"{slug}-{seen[slug]}"] = 0
    return set(seen)


@pytest.mark.parametrize("path", DOCS, ids=_rel)
def test_anchors_resolve(path):
    """A link to a section (`file.md#anchor`, or `#anchor` in the same page) names a
    heading the file has: sections are renamed, and links must follow."""
    broken = []
    for target in MD_LINK.findall(path.read_text()):
        if re.match(r"[a-z]+:", target) or "#" not in target:
            continue
        file, anchor = target.split("#", 1)
        doc = (path.parent / file) if file else path
        if doc.suffix == ".md" and doc.exists() and anchor not in _anchors(doc):
            broken.append(target)
    assert not broken, f"{_rel(path)} links to sections that are not there: {broken}"


DECISIONS = REPO / "docs/decisions.md"
# `docs/decisions.md, "Title"` or `decisions: "Title"`, a comment's line breaks taken out
CITED_TITLE = re.compile(r'decisions(?:\.md)?[,:]?\s*"([^"]+)"')
CITED_NUMBER = re.compile(r"decisions(?:\.md)?,?\s*(?:\u00a7|#|entry |section )\s*\d")


def test_decisions_are_cited_by_their_titles():
    """Entries of docs/decisions.md have no numbers: code and docs cite them by title, and
    the title must be one the file has."""
    titles = {line[3:].strip() for line in DECISIONS.read_text().splitlines()
              if line.startswith("## ")}
    wrong = []
    for path in DOCS + SOURCES:
        text = re.sub(r"\n\s*(?:#|\*|//)?\s*", " ", path.read_text(errors="replace"))
        wrong += [(_rel(path), m.group(0)) for m in CITED_NUMBER.finditer(text)]
        wrong += [(_rel(path), m.group(1)) for m in CITED_TITLE.finditer(text)
                  if m.group(1).strip() not in titles]
    assert not wrong, wrong


def test_the_checks_look_at_something():
    assert REPO / "README.md" in DOCS and REPO / "docs/architecture.md" in DOCS
    assert len(SOURCES) > 100
    assert MD_LINK.findall((REPO / "README.md").read_text())
