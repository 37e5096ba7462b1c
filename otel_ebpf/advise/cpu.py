"""CPU hot spots by Python function: each function's self share (samples whose innermost
Python frame is it, the native code it called included) and total share (samples with it
anywhere on the stack) of its process's samples, and the native code under it."""

from __future__ import annotations

from collections import Counter, defaultdict

from otel_ebpf.profiling.frames import NATIVE, PYTHON

from .loops import char_loop_line
from .model import CPU, Finding, Location, Profile
from .sites import process_of, python_index, short
from .source import function_lines

MIN_SHARE = 0.05  # a function with less self time is not a finding
PER_PROCESS = 5  # hot spots reported per process


def _loop_suggestion(source: list[tuple[int, str]], native_share: float) -> tuple[str, int]:
    """What to try, from the function's source when it is there; the loop's line (0)."""
    line = char_loop_line(source)
    if line:
        return ("a Python loop over each character runs the interpreter per byte: use "
                "str/bytes methods (count, translate, encode, join), a regex, or "
                "hashlib/zlib for checksums, which do the loop in C", line)
    if native_share >= 0.5:
        return ("most of this function's time is in native code it calls (below): call it "
                "less often (cache, batch) or with larger inputs", 0)
    return ("the interpreter itself runs this code: vectorize it (NumPy, torch), use "
            "builtins that loop in C, cache repeated work, or move it off the request path",
            0)


def analyze(profiles: list[Profile]) -> list[Finding]:
    # process -> function -> [self, total]; function -> native children
    self_n: dict[str, Counter] = defaultdict(Counter)
    total_n: dict[str, Counter] = defaultdict(Counter)
    in_native: dict[str, Counter] = defaultdict(Counter)
    children: dict[tuple[str, tuple], Counter] = defaultdict(Counter)
    totals: Counter = Counter()
    for prof in profiles:
        if prof.kind != CPU:
            continue
        i_val = prof.index("samples") or 0
        for s in prof.samples:
            n = s.values[i_val]
            proc = process_of(s.labels)
            totals[proc] += n
            i = python_index(s.frames)
            if i is None:
                continue
            top = s.frames[i]
            key = (top.name, top.module, top.line)
            self_n[proc][key] += n
            if i > 0 and s.frames[i - 1].kind == NATIVE:
                in_native[proc][key] += n
                # the native function the Python code called, and the leaf it was in
                leaf = s.frames[0].name
                called = s.frames[i - 1].name
                children[(proc, key)][called if leaf == called else f"{called} … {leaf}"] += n
            for f in {(f.name, f.module, f.line) for f in s.frames if f.kind == PYTHON}:
                total_n[proc][f] += n
    findings = []
    for proc, counts in self_n.items():
        total = totals[proc]
        for key, n in counts.most_common(PER_PROCESS):
            share = n / total
            if share < MIN_SHARE:
                break
            name, module, line = key
            loc = Location(name, module, line)
            source = function_lines(module, line)
            native_share = in_native[proc][key] / n
            suggestion, loop_line = _loop_suggestion(source, native_share)
            evidence = [
                f"self {share:.0%} of {proc}'s CPU samples ({n} of {total}); total "
                f"{total_n[proc][key] / total:.0%} (with the functions it calls)",
                f"{native_share:.0%} of its self samples are in native code it called",
            ]
            kids = children.get((proc, key))
            if kids:
                evidence.append("native children: " + ", ".join(
                    f"{c} {k / n:.0%}" for c, k in kids.most_common(3)))
            if loop_line:
                evidence.append(f"per-character loop at {short(module)}:{loop_line}")
            findings.append(Finding(
                "cpu_hotspot", f"{name}() takes {share:.0%} of {proc}'s CPU", share, loc,
                evidence, suggestion, process=proc, source=source))
    return findings
