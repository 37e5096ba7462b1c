"""The unwind tables' two kernel maps (bpf/include/unwind.bpf.h), made by the agent once
and shared by every BPF object that walks user stacks with them: the CPU sampler
(profile.bpf.c) and the CUDA probes (cuda.bpf.c). Each object, before it is loaded,
takes these maps in place of its own (`reuse_in`, libbpf's bpf_map__reuse_fd), so one
set of rows in kernel memory serves both, and a process's mappings told once reach both
(docs/decisions.md, "GPU allocation stacks with the unwind tables")."""

from __future__ import annotations

import ctypes
import mmap
import os

from .libbpf import MapCreateOpts, errno_text, lib
from .loader import BPF_ANY, BPFError, BPFObject

BPF_MAP_TYPE_HASH = 1
BPF_MAP_TYPE_ARRAY = 2
BPF_F_MMAPABLE = 1 << 10

UNWIND_ROW_SIZE = 8       # struct unwind_row
UNWIND_MAX_MAPS = 256     # UNWIND_MAX_MAPS
UNWIND_MAP_SIZE = 32      # struct unwind_map
UNWIND_PROC_SIZE = 8 + UNWIND_MAX_MAPS * UNWIND_MAP_SIZE  # struct unwind_proc
MAX_PROCS = 1024          # PROF_MAX_TARGETS: processes with tables at once


def _create(kind: int, name: str, key: int, value: int, entries: int, flags: int = 0) -> int:
    opts = MapCreateOpts(sz=ctypes.sizeof(MapCreateOpts), map_flags=flags)
    fd = lib.bpf_map_create(kind, name.encode(), key, value, entries, ctypes.byref(opts))
    if fd < 0:
        raise BPFError(f"creating map {name} ({entries} entries) failed: {errno_text(-fd)}; "
                       "needs CAP_BPF (or root) and enough locked memory")
    return fd


class UnwindMaps:
    """`unwind_rows` (an mmapable array of `rows` rows, written through the mapping) and
    `unwind_procs` (pid -> struct unwind_proc)."""

    def __init__(self, rows: int, procs: int = MAX_PROCS) -> None:
        if rows < 1:
            raise BPFError("unwind tables need at least one row")
        self.rows = rows
        self.rows_fd = _create(BPF_MAP_TYPE_ARRAY, "unwind_rows", 4, UNWIND_ROW_SIZE, rows,
                               BPF_F_MMAPABLE)
        try:
            self.procs_fd = _create(BPF_MAP_TYPE_HASH, "unwind_procs", 4, UNWIND_PROC_SIZE,
                                    procs)
        except BaseException:
            os.close(self.rows_fd)
            raise
        size = -(-rows * UNWIND_ROW_SIZE // mmap.PAGESIZE) * mmap.PAGESIZE
        # tables of millions of rows are copied in, not updated one syscall per row
        self.mem: mmap.mmap | None = mmap.mmap(self.rows_fd, size, mmap.MAP_SHARED,
                                               mmap.PROT_READ | mmap.PROT_WRITE)

    def reuse_in(self, obj: BPFObject) -> None:
        """Before `obj` is loaded: its unwind maps are these."""
        for name, fd in (("unwind_rows", self.rows_fd), ("unwind_procs", self.procs_fd)):
            err = lib.bpf_map__reuse_fd(obj.map(name).ptr, fd)
            if err:
                raise BPFError(f"{obj.path.name}: sharing map {name} failed: "
                               f"{errno_text(-err)} (the object and the agent disagree on "
                               "its layout: rebuild with `make -C bpf`)")

    def write_rows(self, start: int, rows: bytes) -> None:
        """Rows (struct unwind_row each) into the array from index `start`."""
        if self.mem is None or start + len(rows) // UNWIND_ROW_SIZE > self.rows:
            raise BPFError("unwind rows beyond the table's size")
        at = start * UNWIND_ROW_SIZE
        self.mem[at:at + len(rows)] = rows

    def set_maps(self, pid: int, packed: bytes) -> None:
        """`pid`'s mappings with rows (a packed struct unwind_proc)."""
        key = pid.to_bytes(4, "little")
        if lib.bpf_map_update_elem(self.procs_fd, key, packed, BPF_ANY) != 0:
            raise BPFError(f"updating map unwind_procs failed: {errno_text()}")

    def forget(self, pid: int) -> None:
        lib.bpf_map_delete_elem(self.procs_fd, pid.to_bytes(4, "little"))

    def close(self) -> None:
        """The maps live on while a loaded program still uses them."""
        if self.mem is not None:
            self.mem.close()
            self.mem = None
            os.close(self.rows_fd)
            os.close(self.procs_fd)
