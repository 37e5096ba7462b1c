"""Kernel symbols from /proc/kallsyms (as root: real addresses), looked up by bisection."""

from __future__ import annotations

import bisect


class KernelSymbols:
    def __init__(self, path: str = "/proc/kallsyms") -> None:
        entries: list[tuple[int, str]] = []
        try:
            with open(path) as f:
                for line in f:
                    parts = line.split()
                    if len(parts) >= 3 and parts[1] in "tTwW":
                        addr = int(parts[0], 16)
                        if addr:
                            name = parts[2] + (f" {parts[3]}" if len(parts) > 3 else "")
                            entries.append((addr, name))
        except OSError:
            pass
        entries.sort()
        self._addrs = [a for a, _ in entries]
        self._names = [n for _, n in entries]

    def lookup(self, addr: int) -> str | None:
        i = bisect.bisect_right(self._addrs, addr) - 1
        return self._names[i] if i >= 0 else None
