"""The statistics `otel-ebpf diff` decides with: the two-sided Mann-Whitney U test (exact
for small samples without ties, the normal approximation with its tie correction
otherwise) and the Benjamini-Hochberg adjustment for many rows tested at once."""

from __future__ import annotations

import math
from collections.abc import Sequence
from functools import cache

EXACT_MAX = 400  # n1 * n2 up to which the exact distribution of U is counted


def _ranks(values: Sequence[float]) -> tuple[list[float], list[int]]:
    """Each value's rank (1-based; tied values share their mean rank), and the tie sizes."""
    order = sorted(range(len(values)), key=values.__getitem__)
    ranks, ties = [0.0] * len(values), []
    i = 0
    while i < len(order):
        j = i
        while j + 1 < len(order) and values[order[j + 1]] == values[order[i]]:
            j += 1
        for k in range(i, j + 1):
            ranks[order[k]] = (i + j) / 2 + 1
        ties.append(j - i + 1)
        i = j + 1
    return ranks, ties


@cache
def _u_counts(n1: int, n2: int) -> tuple[int, ...]:
    """How many orderings of n1 + n2 distinct values give each U from 0 to n1 * n2 (U: the
    pairs in which the first sample's value is the larger)."""
    if n1 == 0 or n2 == 0:
        return (1,)
    out = [0] * (n1 * n2 + 1)
    # the largest value is the first sample's (larger than all n2 of the second) or not
    for u, c in enumerate(_u_counts(n1 - 1, n2)):
        out[u + n2] += c
    for u, c in enumerate(_u_counts(n1, n2 - 1)):
        out[u] += c
    return tuple(out)


def mann_whitney(x: Sequence[float], y: Sequence[float]) -> float:
    """The two-sided p-value of the hypothesis that `x` and `y` come from one distribution."""
    n1, n2 = len(x), len(y)
    if not n1 or not n2:
        return 1.0
    ranks, ties = _ranks([*x, *y])
    u = sum(ranks[:n1]) - n1 * (n1 + 1) / 2
    if max(ties) == 1 and n1 * n2 <= EXACT_MAX:
        counts = _u_counts(n1, n2)
        k = int(u)
        tail = min(sum(counts[:k + 1]), sum(counts[k:])) / sum(counts)
        return min(1.0, 2 * tail)
    n = n1 + n2
    variance = n1 * n2 / 12 * (n + 1 - sum(t ** 3 - t for t in ties) / (n * (n - 1)))
    if variance <= 0:
        return 1.0  # every value the same
    z = max(0.0, abs(u - n1 * n2 / 2) - 0.5) / math.sqrt(variance)  # continuity corrected
    return math.erfc(z / math.sqrt(2))


def benjamini_hochberg(pvalues: Sequence[float]) -> list[float]:
    """The adjusted p-values: the rows whose adjusted value is at most q are the
    discoveries at a false discovery rate of q (over all the rows, however many)."""
    m = len(pvalues)
    out = [1.0] * m
    running = 1.0
    order = sorted(range(m), key=pvalues.__getitem__, reverse=True)
    for i, index in enumerate(order):
        running = min(running, pvalues[index] * m / (m - i))  # m - i: its rank, ascending
        out[index] = running
    return out
