"""CPU hot spots by Python function: each function's self share (samples whose innermost
Python frame is it, the native code it called included) and total share (samples with it
anywhere on the stack) of its process's samples, and the native code under it."""

from __future__ import annotations

from collections import Counter, defaultdict
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field

from otel_ebpf.profiling.frames import NATIVE, PYTHON, Frame

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


def _function(frame: Frame) -> tuple:
    return (frame.name, frame.module, frame.line)


@dataclass
class Tally:
    """CPU samples by process: all of them (`samples`), by Python function as the
    innermost Python frame (`self_n`, the native code it called included) and anywhere on
    the stack (`total_n`), self samples in native code (`in_native`), and which native
    functions those were (`children`)."""

    samples: Counter = field(default_factory=Counter)
    self_n: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    total_n: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    in_native: dict[str, Counter] = field(default_factory=lambda: defaultdict(Counter))
    children: dict[tuple[str, tuple], Counter] = field(
        default_factory=lambda: defaultdict(Counter))


def tally(profiles: Iterable[Profile], process: Callable[[Mapping], str] = process_of,
          function: Callable[[Frame], tuple] = _function) -> Tally:
    """The CPU profiles' samples counted by `process` (of a sample's labels) and
    `function` (of a frame: by default its name, file and line)."""
    t = Tally()
    for prof in profiles:
        if prof.kind != CPU:
            continue
        i_val = prof.index("samples") or 0
        for s in prof.samples:
            n = s.values[i_val]
            proc = process(s.labels)
            t.samples[proc] += n
            i = python_index(s.frames)
            if i is None:
                continue
            key = function(s.frames[i])
            t.self_n[proc][key] += n
            if i > 0 and s.frames[i - 1].kind == NATIVE:
                t.in_native[proc][key] += n
                # the native function the Python code called, and the leaf it was in
                leaf = s.frames[0].name
                called = s.frames[i - 1].name
                t.children[(proc, key)][called if leaf == called else f"{called} … {leaf}"] += n
            # a set: a recursive function counts once per sample
            for f in {function(f) for f in s.frames if f.kind == PYTHON}:
                t.total_n[proc][f] += n
    return t


def analyze(profiles: list[Profile]) -> list[Finding]:
    t = tally(profiles)
    findings = []
    for proc, counts in t.self_n.items():
        total = t.samples[proc]
        for key, n in counts.most_common(PER_PROCESS):
            share = n / total
            if share < MIN_SHARE:
                break
            name, module, line = key
            loc = Location(name, module, line)
            source = function_lines(module, line)
            native_share = t.in_native[proc][key] / n
            suggestion, loop_line = _loop_suggestion(source, native_share)
            evidence = [
                f"self {share:.0%} of {proc}'s CPU samples ({n} of {total}); total "
                f"{t.total_n[proc][key] / total:.0%} (with the functions it calls)",
                f"{native_share:.0%} of its self samples are in native code it called",
            ]
            kids = t.children.get((proc, key))
            if kids:
                evidence.append("native children: " + ", ".join(
                    f"{c} {k / n:.0%}" for c, k in kids.most_common(3)))
            if loop_line:
                evidence.append(f"per-character loop at {short(module)}:{loop_line}")
            findings.append(Finding(
                "cpu_hotspot", f"{name}() takes {share:.0%} of {proc}'s CPU", share, loc,
                evidence, suggestion, process=proc, source=source))
    return findings
