"""Per-process GPU memory accounting: live allocations by device pointer (a free pairs with
the allocation that returned its pointer), bytes in use and peak per device and memory
type, and interval profiles as neutral samples (stack + values)."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from otel_ebpf.kernel.cuda_abi import COPY_APIS, SYNC_APIS, Api, GpuAlloc, GpuFree, GpuMap

# pprof's heap sample types, in this order in every GPU memory sample's values
SAMPLE_TYPES: tuple[tuple[str, str], ...] = (
    ("alloc_objects", "count"),
    ("alloc_space", "bytes"),
    ("inuse_objects", "count"),
    ("inuse_space", "bytes"),
)
# the attribute of launch counts scaled from the probes' duty cycle (estimates, not counts)
ESTIMATED = "gpu.launch.count.estimated"
LAUNCH_SAMPLE_TYPES: tuple[tuple[str, str], ...] = (("kernel_launches", "count"),)
COPY_SAMPLE_TYPES: tuple[tuple[str, str], ...] = (
    ("copies", "count"), ("copy_space", "bytes"), ("copy_time", "nanoseconds"))
SYNC_SAMPLE_TYPES: tuple[tuple[str, str], ...] = (
    ("sync_calls", "count"), ("sync_wait", "nanoseconds"))
# cuMemCreate handles live beside device pointers in one table: apart, so a handle equal
# to some pointer never pairs with it
_HANDLE = 1 << 64

DEVICE, MANAGED = "device", "managed"


def memory_type(api: Api) -> str:
    """Managed memory migrates between host and device: counted apart from device memory."""
    return MANAGED if api is Api.MEM_ALLOC_MANAGED else DEVICE


@dataclass(frozen=True, slots=True)
class Site:
    """Where allocations come from: native user stack (innermost first) and, for CPython,
    the code objects of the thread's Python frames (innermost first), as the kernel saw
    them; the profile exporter symbolizes both."""

    stack: tuple[int, ...]
    py: tuple[int, ...] = ()


@dataclass(frozen=True, slots=True)
class Sample:
    """One line of a profile: a site and its values (in the profile's sample types)."""

    site: Site
    values: tuple[int, ...]
    attributes: tuple[tuple[str, str | int], ...] = ()


@dataclass(frozen=True, slots=True)
class ProcessProfile:
    """A process's samples over [start_ns, end_ns] (CLOCK_MONOTONIC)."""

    pid: int
    start_ns: int
    end_ns: int
    sample_types: tuple[tuple[str, str], ...]
    samples: tuple[Sample, ...]


@dataclass(frozen=True, slots=True)
class Usage:
    """Memory held by a process on one device, of one type, at the snapshot."""

    pid: int
    device: int  # -1: unknown
    type: str  # device | managed
    in_use: int
    peak: int
    live: int  # allocations held
    allocated: int  # bytes allocated since the process was first seen (monotonic)
    allocations: int  # allocations since then (monotonic)


@dataclass(slots=True)
class _Allocation:
    size: int
    device: int
    type: str
    site: Site


@dataclass(slots=True)
class _Pool:
    in_use: int = 0
    peak: int = 0
    live: int = 0
    allocated: int = 0
    allocations: int = 0


@dataclass(slots=True)
class _Process:
    start_ns: int
    live: dict[int, _Allocation] = field(default_factory=dict)
    pools: dict[tuple[int, str], _Pool] = field(default_factory=dict)
    # this interval's allocations by (site, device, type): [count, bytes]
    interval: dict[tuple[Site, int, str], list[int]] = field(default_factory=dict)
    mappings: dict[int, int] = field(default_factory=dict)  # cuMemMap: address -> bytes


class MemoryLedger:
    """Fed GpuAlloc/GpuFree events in order; read by snapshot() and usage()."""

    def __init__(self, max_live_per_process: int = 1 << 20) -> None:
        self._procs: dict[int, _Process] = {}
        self._max_live = max_live_per_process
        # what did not pair: frees of pointers allocated before we looked (or missed),
        # allocations of a pointer still live (its free was missed), allocations refused
        # because the table was full
        self.unmatched_frees = 0
        self.replaced = 0
        self.overflow = 0

    def apply(self, events: Iterable, now_ns: int = 0) -> None:
        """Allocations, frees and mappings, in order; other events are not the ledger's."""
        for ev in events:
            if type(ev) not in (GpuAlloc, GpuFree, GpuMap):
                continue
            proc = self._procs.get(ev.pid)
            if proc is None:
                proc = self._procs[ev.pid] = _Process(now_ns or ev.ts_ns)
            if type(ev) is GpuAlloc:
                self._alloc(proc, ev)
            elif type(ev) is GpuFree:
                self._free(proc, ev)
            elif ev.mapped:
                proc.mappings[ev.dptr] = ev.size
            else:
                proc.mappings.pop(ev.dptr, None)

    def _alloc(self, proc: _Process, ev: GpuAlloc) -> None:
        key = ev.dptr | _HANDLE if ev.api is Api.MEM_CREATE else ev.dptr
        old = proc.live.pop(key, None)
        if old is not None:  # the pointer came back without our seeing its free
            self.replaced += 1
            self._release(proc, old)
        kind = memory_type(ev.api)
        site = Site(ev.stack, ev.py)
        pool = proc.pools.setdefault((ev.device, kind), _Pool())
        pool.allocated += ev.size
        pool.allocations += 1
        counts = proc.interval.setdefault((site, ev.device, kind), [0, 0])
        counts[0] += 1
        counts[1] += ev.size
        if len(proc.live) >= self._max_live:
            self.overflow += 1
            return
        proc.live[key] = _Allocation(ev.size, ev.device, kind, site)
        pool.in_use += ev.size
        pool.live += 1
        if pool.in_use > pool.peak:
            pool.peak = pool.in_use

    def _free(self, proc: _Process, ev: GpuFree) -> None:
        alloc = proc.live.pop(ev.dptr | _HANDLE if ev.api is Api.MEM_RELEASE else ev.dptr, None)
        if alloc is None:
            self.unmatched_frees += 1
            return
        self._release(proc, alloc)

    @staticmethod
    def _release(proc: _Process, alloc: _Allocation) -> None:
        pool = proc.pools[(alloc.device, alloc.type)]
        pool.in_use -= alloc.size
        pool.live -= 1

    @property
    def pids(self) -> set[int]:
        return set(self._procs)

    def usage(self) -> list[Usage]:
        return [Usage(pid, device, kind, p.in_use, p.peak, p.live, p.allocated, p.allocations)
                for pid, proc in self._procs.items()
                for (device, kind), p in proc.pools.items()]

    def live_allocations(self, pid: int) -> dict[int, int]:
        """{device pointer: size} of what the process holds (cuMemCreate's handles with
        bit 64 set)."""
        proc = self._procs.get(pid)
        return {dptr: a.size for dptr, a in proc.live.items()} if proc else {}

    def mapped(self) -> dict[int, int]:
        """{pid: bytes mapped by cuMemMap and not unmapped}, for processes that map."""
        return {pid: sum(p.mappings.values()) for pid, p in self._procs.items() if p.mappings}

    def snapshot(self, now_ns: int) -> list[ProcessProfile]:
        """Each process's profile since the last snapshot: alloc_* from the interval's
        allocations, inuse_* from what is held now, by site; then a new interval starts."""
        out: list[ProcessProfile] = []
        for pid, proc in self._procs.items():
            rows: dict[tuple[Site, int, str], list[int]] = {}
            for key, (n, nbytes) in proc.interval.items():
                rows[key] = [n, nbytes, 0, 0]
            for a in proc.live.values():
                row = rows.setdefault((a.site, a.device, a.type), [0, 0, 0, 0])
                row[2] += 1
                row[3] += a.size
            samples = tuple(
                Sample(site, tuple(values), _attributes(device, kind))
                for (site, device, kind), values in rows.items())
            if samples:
                out.append(ProcessProfile(pid, proc.start_ns, now_ns, SAMPLE_TYPES, samples))
            proc.interval = {}
            proc.start_ns = now_ns
        return out

    def exited(self, pid: int) -> None:
        """The process exited: the driver released what it held (no frees are seen for
        that), so its pools read 0 in use for a last report before end()."""
        proc = self._procs.get(pid)
        if proc is not None:
            proc.live.clear()
            proc.mappings.clear()
            for pool in proc.pools.values():
                pool.in_use = pool.live = 0

    def end(self, pid: int) -> None:
        """The process exited: the driver released everything it held."""
        self._procs.pop(pid, None)


def _attributes(device: int, kind: str) -> tuple[tuple[str, str | int], ...]:
    attrs: tuple[tuple[str, str | int], ...] = (("gpu.memory.type", kind),)
    return ((("gpu.device.index", device),) + attrs) if device >= 0 else attrs


def site_profiles(totals: Iterable, previous: dict, start_ns: int, now_ns: int,
                  names: dict[tuple[int, int], str] | None = None,
                  launch_scale: float | None = None) -> dict[str, list[ProcessProfile]]:
    """Launches, copies and synchronizations since the last call, by site, from the
    kernel's running totals (SiteTotals): {"launches"|"copies"|"sync": profiles}.
    `previous` (updated here) holds the totals last seen; `names` ({(pid, function
    handle): kernel name}) names the kernel of each launch (`gpu.kernel.name`).
    `launch_scale` (the launch probes' duty cycle, otel_ebpf/gpu/duty.py): None, launches
    counted exactly; a factor, each launch count is multiplied by it, rounded, and marked
    `gpu.launch.count.estimated`; 0.0, launches are left for the next call (the probes were
    not attached in this interval)."""
    names = names or {}
    rows: dict[str, dict[int, list[Sample]]] = {"launches": {}, "copies": {}, "sync": {}}
    for t in totals:
        if launch_scale == 0.0 and t.api is Api.LAUNCH_KERNEL:
            continue  # `previous` keeps the count: the next interval estimates from it
        key = (t.pid, t.api, t.device, t.stack, t.py, t.func)
        last = previous.get(key, (0, 0, 0))
        previous[key] = (t.count, t.bytes, t.ns)
        delta = (t.count - last[0], t.bytes - last[1], t.ns - last[2])
        if delta[0] <= 0:
            continue
        attrs: tuple[tuple[str, str | int], ...] = (
            (("gpu.device.index", t.device),) if t.device >= 0 else ())
        if t.api is Api.LAUNCH_KERNEL:
            kind, values = "launches", delta[:1]
            name = names.get((t.pid, t.func))
            if name:
                attrs += (("gpu.kernel.name", name),)
            if launch_scale is not None:
                values = (round(delta[0] * launch_scale),)
                attrs += ((ESTIMATED, True),)
        elif t.api in COPY_APIS:
            kind, values = "copies", delta
            attrs += (("gpu.copy.api", t.api.name.lower()),)
        elif t.api in SYNC_APIS:
            kind, values = "sync", (delta[0], delta[2])
            attrs += (("gpu.sync.api", t.api.name.lower()),)
        else:
            continue
        rows[kind].setdefault(t.pid, []).append(Sample(Site(t.stack, t.py), values, attrs))
    types = {"launches": LAUNCH_SAMPLE_TYPES, "copies": COPY_SAMPLE_TYPES,
             "sync": SYNC_SAMPLE_TYPES}
    return {kind: [ProcessProfile(pid, start_ns, now_ns, types[kind], tuple(samples))
                   for pid, samples in by_pid.items()]
            for kind, by_pid in rows.items()}
