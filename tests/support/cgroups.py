"""Real cgroups shaped like a Kubernetes pod's container, for the kernel tests: created
under a mounted hierarchy (the v2 tree or a v1 controller's), removed when emptied."""

from __future__ import annotations

import os
import time
from pathlib import Path

# where this machine mounts each: cgroup v2 alone at /sys/fs/cgroup, or beside the v1
# controllers at /sys/fs/cgroup/unified (the hybrid layout)
V2_ROOTS = ("/sys/fs/cgroup/unified", "/sys/fs/cgroup")
V1_ROOT = "/sys/fs/cgroup/pids"


def v2_root() -> str:
    for root in V2_ROOTS:
        if os.path.exists(os.path.join(root, "cgroup.procs")) and \
                os.path.exists(os.path.join(root, "cgroup.controllers")):
            return root
    raise RuntimeError(f"no cgroup v2 hierarchy mounted at any of {V2_ROOTS}")


def v1_root() -> str:
    if not os.path.exists(os.path.join(V1_ROOT, "tasks")):
        raise RuntimeError(f"no cgroup v1 pids hierarchy mounted at {V1_ROOT}")
    return V1_ROOT


class PodCgroup:
    """`<root>/<relative path>`, made with its parents; `wrap(argv)` runs a command inside
    it from its first instruction (so its first connection is already the pod's)."""

    def __init__(self, root: str, relative: str) -> None:
        self.path = Path(root) / relative.strip("/")
        self._made: list[Path] = []
        for parent in reversed([self.path, *self.path.parents]):
            if not parent.exists():
                parent.mkdir()
                self._made.append(parent)

    def wrap(self, argv: list[str]) -> list[str]:
        return ["sh", "-c", f'echo $$ > "{self.path}/cgroup.procs" && exec "$@"', "sh", *argv]

    def remove(self, timeout_s: float = 10.0) -> None:
        """Remove what was made, innermost first, once its processes have gone."""
        deadline = time.monotonic() + timeout_s
        for made in reversed(self._made):
            while True:
                try:
                    made.rmdir()
                    break
                except OSError:
                    if time.monotonic() > deadline:
                        raise
                    time.sleep(0.1)
