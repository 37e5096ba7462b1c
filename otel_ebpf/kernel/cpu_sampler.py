"""The CPU sampler (bpf/profile.bpf.c): perf cpu-clock events on every CPU, the program
attached to each, target and Python-interpreter maps, and decoding of its sample records.
Mirrors bpf/include/profile_abi.h; tests/unit/test_profile_abi.py checks the layouts."""

from __future__ import annotations

import ctypes
import logging
import os
import platform
import struct
from collections.abc import Iterable
from dataclasses import dataclass

from .libbpf import LibbpfLog, errno_text
from .loader import BPFError, BPFObject, RingBuffer, check_btf
from .unwind_maps import (  # noqa: F401 (the layout's sizes, for its users)
    UNWIND_MAP_SIZE,
    UNWIND_MAX_MAPS,
    UNWIND_PROC_SIZE,
    UNWIND_ROW_SIZE,
    UnwindMaps,
)

log = logging.getLogger(__name__)

COMM_LEN = 16
MAX_KSTACK = 64
MAX_USTACK = 127
MAX_PY_FRAMES = 96
MAX_TARGETS = 1024
NO_FIELD = 0xFFFFFFFF
PY_F_ENTRY = 1
PY_NONE, PY_OK, PY_NO_THREAD, PY_READ_ERROR, PY_TRUNCATED, PY_NO_DISPATCHER = range(6)
MAX_WAKER_HOPS = 4
COUNTER_NAMES = {0: "samples", 1: "drops", 2: "python_errors", 3: "unwind_samples",
                 4: "unwind_table_frames", 5: "unwind_fp_frames", 6: "unwind_stopped",
                 7: "unwind_scanned", 8: "wakers", 9: "worker_samples"}
# programs that remember which thread of a Python process woke (or created) which: a
# worker's dispatcher (docs/decisions.md, "Worker threads' samples under their
# dispatcher's Python stack")
WAKER_PROGRAMS = ("profile_waking", "profile_wakeup_new")

# struct profile_sample: header, then three u64 arrays
_HEADER = struct.Struct("<QIIIiiHH16sIB3x")
SAMPLE_SIZE = _HEADER.size + 8 * (MAX_KSTACK + MAX_USTACK + MAX_PY_FRAMES)
_K_AT = _HEADER.size
_U_AT = _K_AT + 8 * MAX_KSTACK
_P_AT = _U_AT + 8 * MAX_USTACK
# struct py_proc: u64 runtime + struct py_offsets (10 x u32), padded to 8
PY_OFFSET_FIELDS = ("interp_head", "threads_head", "tstate_next", "tstate_native_tid",
                    "tstate_frame", "cframe_current", "frame_previous", "frame_code",
                    "frame_owner", "frame_is_entry")
_PY_PROC = struct.Struct("<Q10I")
PY_PROC_SIZE = 48
CONFIG = struct.Struct("<IBBBx")  # struct profile_config
# unwind tables: struct unwind_map, in struct unwind_proc (unwind_maps.py has the sizes)
_UNWIND_MAP = struct.Struct("<QQQII")
assert _UNWIND_MAP.size == UNWIND_MAP_SIZE


def pack_unwind_proc(maps: list[tuple[int, int, int, int, int]]) -> bytes:
    """struct unwind_proc from (start, end, bias, row_start, row_count), sorted by start."""
    maps = sorted(maps)[:UNWIND_MAX_MAPS]
    body = b"".join(_UNWIND_MAP.pack(*m) for m in maps)
    return struct.pack("<II", len(maps), 0) + body.ljust(UNWIND_MAX_MAPS * _UNWIND_MAP.size,
                                                         b"\0")

MAX_FREQUENCY = 999


@dataclass(frozen=True, slots=True)
class RawSample:
    """One sample as the kernel took it: addresses, not names yet. `py` holds code object
    addresses, innermost first, with PY_F_ENTRY on the last frame of each evaluator call."""

    ts_ns: int
    pid: int
    tid: int
    cpu: int
    comm: str
    kstack: tuple[int, ...]
    ustack: tuple[int, ...]
    py: tuple[int, ...]
    py_status: int
    # whose Python frames `py` holds: `tid`, or (a thread without a Python thread state,
    # a worker) the dispatcher's found `py_hops` wakers away
    py_tid: int = 0
    py_hops: int = 0

    @property
    def dispatched(self) -> bool:
        """A worker's sample carrying the Python frames of the thread that handed it work."""
        return self.py_hops > 0 and self.py_tid != self.tid


class BadSample(ValueError):
    pass


def _u64s(record: bytes, at: int, nbytes: int, cap: int) -> tuple[int, ...]:
    n = max(0, min(nbytes, 8 * cap)) // 8
    return struct.unpack_from(f"<{n}Q", record, at) if n else ()


def decode(record: bytes) -> RawSample:
    if len(record) != SAMPLE_SIZE:
        raise BadSample(f"sample of {len(record)} bytes, expected {SAMPLE_SIZE}")
    ts, pid, tid, cpu, kbytes, ubytes, npy, status, comm, py_tid, hops = \
        _HEADER.unpack_from(record)
    return RawSample(
        ts_ns=ts, pid=pid, tid=tid, cpu=cpu,
        comm=comm.split(b"\0", 1)[0].decode(errors="replace"),
        kstack=_u64s(record, _K_AT, kbytes, MAX_KSTACK),
        ustack=_u64s(record, _U_AT, ubytes, MAX_USTACK),
        py=_u64s(record, _P_AT, 8 * npy, MAX_PY_FRAMES),
        py_status=status, py_tid=py_tid, py_hops=hops,
    )


def pack_py_proc(runtime: int, offsets: dict[str, int]) -> bytes:
    return _PY_PROC.pack(runtime, *(offsets.get(f, NO_FIELD) for f in PY_OFFSET_FIELDS)).ljust(
        PY_PROC_SIZE, b"\0")


# --------------------------------------------------------------------------- perf events

PERF_TYPE_SOFTWARE = 1
PERF_COUNT_SW_CPU_CLOCK = 0
_ATTR_FREQ = 1 << 10  # perf_event_attr.freq: sample_freq is a frequency, not a period
_NR_PERF_EVENT_OPEN = {"x86_64": 298, "aarch64": 241}


class _PerfEventAttr(ctypes.Structure):
    # the fields up to the flags word; the kernel takes the rest as zero (size says how many)
    _fields_ = [("type", ctypes.c_uint32), ("size", ctypes.c_uint32),
                ("config", ctypes.c_uint64), ("sample_freq", ctypes.c_uint64),
                ("sample_type", ctypes.c_uint64), ("read_format", ctypes.c_uint64),
                ("flags", ctypes.c_uint64), ("rest", ctypes.c_uint8 * 80)]


_libc = ctypes.CDLL(None, use_errno=True)


def open_cpu_clock(cpu: int, frequency: int) -> int:
    """A cpu-clock sampling event on one CPU, all processes (the program filters)."""
    attr = _PerfEventAttr(type=PERF_TYPE_SOFTWARE, size=ctypes.sizeof(_PerfEventAttr),
                          config=PERF_COUNT_SW_CPU_CLOCK, sample_freq=frequency,
                          flags=_ATTR_FREQ)
    nr = _NR_PERF_EVENT_OPEN.get(platform.machine(), 298)
    fd = _libc.syscall(nr, ctypes.byref(attr), -1, cpu, -1, 0)
    if fd < 0:
        raise BPFError(f"perf_event_open(cpu-clock, cpu {cpu}) failed: {errno_text()}; "
                       "needs CAP_PERFMON (or root) and kernel.perf_event_paranoid <= 2")
    return fd


def online_cpus(path: str = "/sys/devices/system/cpu/online") -> list[int]:
    """CPU numbers from a list like `0-3,6`."""
    cpus: list[int] = []
    with open(path) as f:
        for part in f.read().strip().split(","):
            lo, _, hi = part.partition("-")
            cpus.extend(range(int(lo), int(hi or lo) + 1))
    return cpus


class CpuSampler:
    """CPU sampling: loaded by the constructor, sampling from `start()`; `poll()` returns
    decoded samples."""

    def __init__(self, frequency: int, libbpf_log: LibbpfLog, *, pids: Iterable[int] = (),
                 process_names: Iterable[str] = (), ring_buffer_bytes: int = 4 << 20,
                 unwind_rows: int = 0, unwind: UnwindMaps | None = None) -> None:
        """User stacks are walked with unwind tables when `unwind` (the agent's maps,
        shared with other objects) is given, or `unwind_rows` > 0 (maps of its own, of up
        to that many rows in all: 8 bytes each, kernel memory); rows are written with
        write_rows()."""
        if not 1 <= frequency <= MAX_FREQUENCY:
            raise BPFError(f"sampling frequency {frequency} Hz is outside 1..{MAX_FREQUENCY}")
        check_btf()
        pids, names = list(pids), list(process_names)
        self.frequency = frequency
        self._own_unwind = unwind is None and unwind_rows > 0
        self.unwind: UnwindMaps | None = UnwindMaps(unwind_rows) if self._own_unwind \
            else unwind
        self.unwind_rows = self.unwind.rows if self.unwind is not None else 0
        self.obj = BPFObject("profile", libbpf_log)
        try:
            self.obj.set_max_entries("samples", ring_buffer_bytes)
            if self.unwind is not None:
                self.unwind.reuse_in(self.obj)
            else:  # the object's own maps, unused: as small as they can be
                self.obj.set_max_entries("unwind_rows", 1)
                self.obj.set_max_entries("unwind_procs", 1)
            self.obj.set_rodata(CONFIG.pack(os.getpid(), bool(pids) or bool(names), bool(names),
                                            self.unwind is not None))
            self.obj.load()
            self.add_pids(pids)
            for name in names[:MAX_TARGETS]:
                key = name.encode()[: COMM_LEN - 1].ljust(COMM_LEN, b"\0")
                self.obj.map("target_comms").update(key, b"\x01")
            self.ring = RingBuffer([self.obj.map("samples")])
        except BaseException:
            self.close()
            raise
        self.py_procs = self.obj.map("py_procs")
        self.counters = self.obj.map("prof_counters")
        self.bad_records = 0

    def start(self) -> None:
        """Start sampling: a cpu-clock event per online CPU, each running the program.
        Apart from __init__ so that Python processes can be registered first."""
        try:
            for cpu in online_cpus():
                fd = open_cpu_clock(cpu, self.frequency)
                try:
                    self.obj.attach_perf_event("profile_cpu", fd)
                except BPFError:
                    os.close(fd)
                    raise
                # libbpf's perf-event link owns the fd from here: destroying it closes it
            for program in WAKER_PROGRAMS:
                self.obj.attach(program)
        except BaseException:
            self.close()
            raise

    def add_pids(self, pids: Iterable[int]) -> None:
        table = self.obj.map("target_pids")
        for pid in list(pids)[:MAX_TARGETS]:
            table.update(pid.to_bytes(4, "little"), b"\x01")

    def set_python(self, pid: int, runtime: int, offsets: dict[str, int]) -> None:
        """Tell the program where `pid`'s interpreter keeps its thread states."""
        self.py_procs.update(pid.to_bytes(4, "little"), pack_py_proc(runtime, offsets))

    def forget_python(self, pid: int) -> None:
        self.py_procs.delete(pid.to_bytes(4, "little"))

    def write_rows(self, start: int, rows: bytes) -> None:
        """Unwind rows (struct unwind_row each) into the kernel's array from index `start`."""
        if self.unwind is None:
            raise BPFError("no unwind tables")
        self.unwind.write_rows(start, rows)

    def set_unwind_maps(self, pid: int, maps: list[tuple[int, int, int, int, int]]) -> None:
        """The mappings of `pid` that have rows: (start, end, bias, row_start, row_count)."""
        if self.unwind is None:
            raise BPFError("no unwind tables")
        self.unwind.set_maps(pid, pack_unwind_proc(maps))

    def forget_unwind(self, pid: int) -> None:
        if self.unwind is not None:
            self.unwind.forget(pid)

    def poll(self, timeout_ms: int) -> list[RawSample]:
        out: list[RawSample] = []
        for record in self.ring.drain(timeout_ms):
            try:
                out.append(decode(record))
            except BadSample as exc:
                self.bad_records += 1
                log.debug("bad profile record: %s", exc)
        return out

    def kernel_counters(self) -> dict[str, int]:
        return {name: sum(self.counters.lookup_percpu_u64(idx))
                for idx, name in COUNTER_NAMES.items()}

    def close(self) -> None:
        ring = getattr(self, "ring", None)
        if ring is not None:
            ring.close()
        self.obj.close()  # destroys the perf links, which close their events
        if self._own_unwind and self.unwind is not None:
            self.unwind.close()
            self.unwind = None
