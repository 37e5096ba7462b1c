"""Loads bpf/rdma.bpf.c and attaches its uprobes to every libibverbs and libnccl found
(the dynamic linker's cache, and the files running processes map, such as the libnccl
inside PyTorch's nvidia-nccl wheel), once per file; drains the verbs call events and
reads the kernel's NCCL totals."""

from __future__ import annotations

import logging
import os
import re
import time
from pathlib import Path

from . import rdma_abi as abi
from .libbpf import LibbpfLog
from .loader import BPFError, BPFObject, RingBuffer, check_btf
from .uprobes import LibraryProbes, file_offsets, linker_libraries, mapped_files

log = logging.getLogger(__name__)

_LIBIBVERBS = re.compile(r"/libibverbs\.so(?:\.[\d.]+)?$")
_LIBNCCL = re.compile(r"/libnccl\.so(?:\.[\d.]+)?$")

# (program, symbol, retprobe). The verbs a program calls are the exported, versioned
# functions (verbs.h's inline wrappers end in them).
VERBS = [
    ("ibv_create_qp_enter", "ibv_create_qp", False), ("ibv_create_qp_exit", "ibv_create_qp", True),
    ("ibv_modify_qp_enter", "ibv_modify_qp", False), ("ibv_int_exit", "ibv_modify_qp", True),
    ("ibv_destroy_qp_enter", "ibv_destroy_qp", False), ("ibv_int_exit", "ibv_destroy_qp", True),
    ("ibv_dereg_mr_enter", "ibv_dereg_mr", False), ("ibv_int_exit", "ibv_dereg_mr", True),
]
# ibv_reg_mr (and ibv_reg_mr_iova) tail-call ibv_reg_mr_iova2 where it exists (rdma-core
# 30+): probing both would count each registration twice
REG_MR = ("ibv_reg_mr_iova2", "ibv_reg_mr")
REG_DMABUF = "ibv_reg_dmabuf_mr"  # GPU memory (NCCL's GPUDirect RDMA on recent drivers)
NCCL = [
    ("nccl_all_reduce", "ncclAllReduce"), ("nccl_all_gather", "ncclAllGather"),
    ("nccl_reduce_scatter", "ncclReduceScatter"), ("nccl_broadcast", "ncclBroadcast"),
    ("nccl_reduce", "ncclReduce"), ("nccl_send", "ncclSend"), ("nccl_recv", "ncclRecv"),
]
TABLES = (".dynsym", ".symtab")


def system_libraries() -> set[str]:
    """libibverbs and libnccl files the dynamic linker knows (`ldconfig -p`)."""
    return linker_libraries(_LIBIBVERBS, _LIBNCCL)


class RdmaProbes:
    """The loaded rdma object: attach() files, poll() verbs events, collectives()."""

    def __init__(self, libbpf_log: LibbpfLog) -> None:
        check_btf()
        self.obj = BPFObject("rdma", libbpf_log)
        try:
            self.obj.load()
            self.ring = RingBuffer([self.obj.map("rdma_events")])
        except BaseException:
            self.obj.close()
            raise
        self.files = LibraryProbes(self.obj)
        self.verbs: set[str] = set()
        self.nccl: set[str] = set()
        self.attached_ns: int | None = None  # wall time the first probes were attached
        self.bad_records = 0

    # -- finding and attaching

    def attach(self, path: str) -> int:
        """Probe a libibverbs or libnccl file (by its name); 1 when newly covered."""
        path = os.path.realpath(path)
        if path in self.verbs or path in self.nccl or path in self.files.uncovered:
            return 0
        if _LIBNCCL.search(path):
            probes = [(prog, sym, False) for prog, sym in NCCL]
            if self.files.probe(path, "NCCL", probes, TABLES, required=1) is None:
                return 0
            self.nccl.add(path)
        elif _LIBIBVERBS.search(path):
            if not self._attach_verbs(path):
                return 0
            self.verbs.add(path)
        else:
            return 0
        if self.attached_ns is None:
            self.attached_ns = time.time_ns()
        return 1

    def _attach_verbs(self, path: str) -> bool:
        try:
            offsets = file_offsets(path, (*REG_MR, REG_DMABUF), TABLES)
        except (OSError, ValueError) as exc:
            log.info("RDMA verbs in %s not covered (%s)", path, exc)
            self.files.uncovered.add(path)
            return False
        reg = next((sym for sym in REG_MR if sym in offsets), None)
        probes = list(VERBS)
        for sym in (reg, REG_DMABUF if REG_DMABUF in offsets else None):
            if sym:
                probes += [("ibv_reg_mr_enter", sym, False), ("ibv_reg_mr_exit", sym, True)]
        return self.files.probe(path, "RDMA verbs", probes, TABLES) is not None

    def scan_system(self) -> int:
        return sum(self.attach(path) for path in sorted(system_libraries()))

    def scan(self, pids: list[int | str], proc_root: str = "/proc") -> int:
        """Attach to the libibverbs/libnccl files these processes map; how many were new."""
        new = 0
        for pid in pids:
            for path in mapped_files(pid, proc_root):
                if _LIBIBVERBS.search(path) or _LIBNCCL.search(path):
                    new += self.attach(path)
        return new

    def scan_all(self, proc_root: str = "/proc") -> int:
        return self.scan([p.name for p in Path(proc_root).iterdir() if p.name.isdigit()],
                         proc_root)

    # -- reading

    def poll(self, timeout_ms: int) -> list[abi.VerbsCall]:
        events = []
        for record in self.ring.drain(timeout_ms):
            try:
                events.append(abi.decode_event(record))
            except abi.BadRecord as exc:
                self.bad_records += 1
                log.debug("bad rdma record: %s", exc)
        return events

    def collectives(self) -> list[abi.CollectiveTotals]:
        table = self.obj.map("nccl_calls")
        out = []
        for key in table.keys():
            value = table.lookup(key)
            if value is not None:
                out.append(abi.decode_collective(key, value))
        return out

    def forget(self, pids: set[int]) -> None:
        """Drop the NCCL totals of processes that ended (their last values were exported)."""
        table = self.obj.map("nccl_calls")
        for key in table.keys():
            if abi.NCCL_KEY.unpack(key)[0] in pids:
                table.delete(key)

    def counters(self) -> dict[str, int]:
        table = self.obj.map("rdma_counters")
        return {name: sum(table.lookup_percpu_u64(idx))
                for idx, name in abi.COUNTER_NAMES.items()}

    def close(self) -> None:
        self.ring.close()
        self.obj.close()


__all__ = ["BPFError", "RdmaProbes", "system_libraries"]
