"""/proc/PID/maps: which file backs an address of a process, and at what file offset."""

from __future__ import annotations

import bisect
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Mapping:
    start: int
    end: int
    offset: int
    path: str      # as the process sees it ('' for anonymous, '[vdso]', ...)
    executable: bool

    @property
    def is_file(self) -> bool:
        return self.path.startswith("/")


def parse_maps(text: str) -> list[Mapping]:
    out = []
    for line in text.splitlines():
        parts = line.split(None, 5)
        if len(parts) < 5:
            continue
        lo, _, hi = parts[0].partition("-")
        path = parts[5].strip() if len(parts) == 6 else ""
        if path.endswith(" (deleted)"):
            path = path[: -len(" (deleted)")]
        out.append(Mapping(int(lo, 16), int(hi, 16), int(parts[2], 16), path,
                           "x" in parts[1]))
    return out


class ProcessMaps:
    """The mappings of one process, sorted; re-read when an address falls outside them
    (a library loaded since)."""

    def __init__(self, pid: int, proc_root: str = "/proc") -> None:
        self.pid = pid
        self.proc_root = proc_root
        self.maps: list[Mapping] = []
        self._starts: list[int] = []
        self.refresh()

    def refresh(self) -> bool:
        try:
            with open(f"{self.proc_root}/{self.pid}/maps") as f:
                self.maps = parse_maps(f.read())
        except OSError:
            return False
        self._starts = [m.start for m in self.maps]
        return True

    def find(self, addr: int, retry: bool = True) -> Mapping | None:
        i = bisect.bisect_right(self._starts, addr) - 1
        if i >= 0 and addr < self.maps[i].end:
            return self.maps[i]
        if retry and self.refresh():
            return self.find(addr, retry=False)
        return None

    def host_path(self, m: Mapping) -> str:
        """The file as this agent can open it: through the process's root (containers)."""
        return f"{self.proc_root}/{self.pid}/root{m.path}"

    def base_of(self, path: str) -> int | None:
        """Load address of the file's first byte (its mapping at file offset 0)."""
        for m in self.maps:
            if m.path == path and m.offset == 0:
                return m.start
        return None
