"""What the overhead benchmarks share: every mode once per round (a fresh process each), a
medians table with the ratio to the untraced run, printed and appended to a Markdown file."""

from __future__ import annotations

import statistics
import sys
from collections.abc import Callable, Sequence
from pathlib import Path


def rounds(modes: Sequence[str], count: int, measure: Callable[[str], float],
           unit: str) -> dict[str, list[float]]:
    """measure(mode) for every mode, `count` rounds, progress on stderr."""
    results: dict[str, list[float]] = {m: [] for m in modes}
    for r in range(count):
        for mode in modes:
            results[mode].append(measure(mode))
            print(f"round {r + 1}/{count} {mode:9s} {results[mode][-1]:8.0f} {unit}",
                  file=sys.stderr)
    return results


def spread(values: Sequence[float]) -> str:
    """A table cell: "median [min–max]", one decimal."""
    return f"{statistics.median(values):.1f} [{min(values):.1f}–{max(values):.1f}]"


def rotated(items: Sequence, i: int) -> Sequence:
    """Round i's order: the items rotated by i, so no item always runs first (warm caches,
    a busy neighbour) across interleaved rounds."""
    k = i % len(items)
    return items[k:] + items[:k]


def cost_table(title: str, what: str, per: str, results: dict[str, list[float]],
               calls: int = 2, base: str = "off") -> list[str]:
    """Median ns per `what`, ns added per `per` (`calls` of them in each), ratio to base."""
    reference = statistics.median(results[base])
    lines = [title, "", f"| mode | ns per {what} | added per {per} (ns) | ratio to {base} |",
             "|---|---:|---:|---:|"]
    for mode, values in results.items():
        med = statistics.median(values)
        lines.append(f"| {mode} | {med:.0f} | {(med - reference) / calls:.0f} | "
                     f"{med / reference:.2f} |")
    return lines


def publish(lines: list[str], out: Path | None) -> None:
    table = "\n".join(lines)
    print(table)
    if out:
        with out.open("a") as f:
            f.write("\n" + table + "\n")
