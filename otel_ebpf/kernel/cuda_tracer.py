"""The CUDA driver uprobes (bpf/cuda.bpf.c): finds libcuda (the system's, and the ones
running processes map, rescanned so a library dlopen()ed later is found too), attaches the
probes once per file, drains allocation/free/name records and reads the launch, copy and
synchronization totals by site."""

from __future__ import annotations

import logging
import os
import re
import subprocess
import threading
from dataclasses import dataclass
from pathlib import Path

from . import cuda_abi
from .cpu_sampler import pack_py_proc
from .cuda_abi import Api
from .libbpf import LibbpfLog
from .loader import BPFError, BPFObject, RingBuffer, check_btf
from .unwind_maps import UnwindMaps
from .uprobes import LibraryProbes, file_offsets, mapped_files

log = logging.getLogger(__name__)

# the driver library, by soname or as found (libcuda.so, libcuda.so.1, libcuda.so.580.65.06)
LIBCUDA = re.compile(r"/libcuda\.so(?:\.[\d.]+)?$")
# where container runtimes (the NVIDIA container toolkit, GKE, ...) put the host's driver
KNOWN_DIRS = ("/usr/local/nvidia/lib64", "/usr/lib/x86_64-linux-gnu", "/usr/lib64",
              "/usr/lib/aarch64-linux-gnu", "/usr/lib/wsl/lib")

_RET = "cu_return"
# (program, symbol, has a return probe). The driver exports per-thread-default-stream forms
# (_ptds, _ptsz: what a program built with --default-stream per-thread calls) with the same
# arguments, so each takes the program of its plain form.
_CALLS: list[tuple[str, str, bool]] = [
    ("cu_mem_alloc", "cuMemAlloc_v2", True),
    ("cu_mem_alloc_async", "cuMemAllocAsync", True),
    ("cu_mem_alloc_async", "cuMemAllocAsync_ptsz", True),
    ("cu_mem_alloc_managed", "cuMemAllocManaged", True),
    ("cu_mem_alloc_pitch", "cuMemAllocPitch_v2", True),
    ("cu_mem_free", "cuMemFree_v2", True),
    ("cu_mem_free_async", "cuMemFreeAsync", True),
    ("cu_mem_free_async", "cuMemFreeAsync_ptsz", True),
    ("cu_memcpy_htod", "cuMemcpyHtoD_v2", True),
    ("cu_memcpy_htod", "cuMemcpyHtoD_v2_ptds", True),
    ("cu_memcpy_dtoh", "cuMemcpyDtoH_v2", True),
    ("cu_memcpy_dtoh", "cuMemcpyDtoH_v2_ptds", True),
    ("cu_memcpy_htod_async", "cuMemcpyHtoDAsync_v2", True),
    ("cu_memcpy_htod_async", "cuMemcpyHtoDAsync_v2_ptsz", True),
    ("cu_memcpy_dtoh_async", "cuMemcpyDtoHAsync_v2", True),
    ("cu_memcpy_dtoh_async", "cuMemcpyDtoHAsync_v2_ptsz", True),
    ("cu_memcpy", "cuMemcpy", True),
    ("cu_memcpy", "cuMemcpy_ptds", True),
    ("cu_memcpy_async", "cuMemcpyAsync", True),
    ("cu_memcpy_async", "cuMemcpyAsync_ptsz", True),
    ("cu_launch_kernel", "cuLaunchKernel", False),
    ("cu_launch_kernel", "cuLaunchKernel_ptsz", False),
    ("cu_launch_kernel_ex", "cuLaunchKernelEx", False),
    ("cu_launch_kernel_ex", "cuLaunchKernelEx_ptsz", False),
    # where the CPU waits for the GPU
    ("cu_stream_sync", "cuStreamSynchronize", True),
    ("cu_stream_sync", "cuStreamSynchronize_ptsz", True),
    ("cu_ctx_sync", "cuCtxSynchronize", True),
    ("cu_event_sync", "cuEventSynchronize", True),
    # kernels' names, from the lookups the runtime makes before a first launch
    ("cu_module_get_function", "cuModuleGetFunction", True),
    ("cu_library_get_kernel", "cuLibraryGetKernel", True),
    ("cu_kernel_get_function", "cuKernelGetFunction", True),
    # virtual memory management: PyTorch's expandable segments
    ("cu_mem_create", "cuMemCreate", True),
    ("cu_mem_release", "cuMemRelease", True),
    ("cu_mem_map", "cuMemMap", True),
    ("cu_mem_unmap", "cuMemUnmap", True),
    # a process starts using CUDA: look at it before its first allocation
    ("cu_init", "cuInit", False),
    # which device a thread allocates on: contexts made, retained and made current
    ("cu_ctx_retain", "cuDevicePrimaryCtxRetain", True),
    ("cu_ctx_create", "cuCtxCreate_v2", True),
    ("cu_ctx_create_v4", "cuCtxCreate_v4", True),
    ("cu_ctx_set_current", "cuCtxSetCurrent", False),
    ("cu_ctx_set_current", "cuCtxPushCurrent_v2", False),
    ("cu_ctx_pop", "cuCtxPopCurrent_v2", False),
]
SYMBOLS = tuple(dict.fromkeys(symbol for _, symbol, _ in _CALLS))
# the launch probes: the hottest call, attached in duty cycles when
# gpu.launches.duty_cycle < 1 (otel_ebpf/gpu/duty.py); every other probe stays attached
LAUNCH_PROGRAMS = frozenset({"cu_launch_kernel", "cu_launch_kernel_ex"})
# without these two there is no memory accounting to speak of
REQUIRED = ("cuMemAlloc_v2", "cuMemFree_v2")


def probes_for(offsets: dict[str, int]) -> list[tuple[str, int, bool]]:
    """(program, file offset, retprobe) for every probed symbol the library has."""
    # return probes first: a call already inside the driver when its entry probe lands
    # must not leave an entry behind that no return clears (it returns unseen, counted)
    returns = [(_RET, offsets[symbol], True) for _, symbol, has_return in _CALLS
               if has_return and symbol in offsets]
    entries = [(program, offsets[symbol], False) for program, symbol, _ in _CALLS
               if symbol in offsets]
    return returns + entries


def system_libcuda(extra: tuple[str, ...] = ()) -> set[str]:
    """libcuda files of this host: the dynamic linker's (`ldconfig -p`), the usual driver
    directories and `extra`; resolved, so one file is probed once whatever its name."""
    candidates = list(extra)
    try:
        out = subprocess.run(["ldconfig", "-p"], capture_output=True, text=True, timeout=10,
                             check=False).stdout
        candidates += [line.rpartition("=>")[2].strip() for line in out.splitlines()
                       if "=>" in line]
    except (OSError, subprocess.SubprocessError):
        pass
    candidates += [os.path.join(d, "libcuda.so.1") for d in KNOWN_DIRS]
    return {os.path.realpath(p) for p in candidates
            if (LIBCUDA.search(p) or p in extra) and os.path.isfile(p)}


def libcuda_of(pid: int | str, proc_root: str = "/proc") -> set[str]:
    """The libcuda files process `pid` maps, as paths this agent can open: through
    /proc/PID/root when the process sees another file system (a container)."""
    found: set[str] = set()
    for path in mapped_files(pid, proc_root):
        if not LIBCUDA.search(path.removesuffix(" (deleted)")):
            continue
        inside = os.path.join(proc_root, str(pid), "root", path.lstrip("/"))
        try:
            same = os.path.exists(path) and os.path.samefile(path, inside)
        except OSError:
            same = False
        found.add(os.path.realpath(path) if same else inside)
    return found


@dataclass(frozen=True, slots=True)
class SiteTotals:
    """A launch, copy or synchronization site's totals since the process's first call:
    its user stack (innermost first), its innermost Python frames (as GpuAlloc.py) and,
    for launches, the function launched."""

    pid: int
    api: Api
    device: int
    stack: tuple[int, ...]  # () when the kernel could not take it
    py: tuple[int, ...]
    func: int
    count: int
    bytes: int
    ns: int


@dataclass(frozen=True, slots=True)
class CopyTotals:
    pid: int
    api: Api
    device: int
    count: int
    bytes: int
    ns: int


@dataclass(frozen=True, slots=True)
class LaunchTotals:
    pid: int
    device: int
    stack: tuple[int, ...]  # () when the kernel could not take it
    count: int


def copy_totals(sites: list[SiteTotals]) -> list[CopyTotals]:
    """Copies per process, entry point and device (the metrics' view), summed over sites."""
    rows: dict[tuple[int, Api, int], list[int]] = {}
    for t in sites:
        if t.api in cuda_abi.COPY_APIS:
            row = rows.setdefault((t.pid, t.api, t.device), [0, 0, 0])
            row[0] += t.count
            row[1] += t.bytes
            row[2] += t.ns
    return [CopyTotals(pid, api, device, *row) for (pid, api, device), row in rows.items()]


def launch_totals(sites: list[SiteTotals]) -> list[LaunchTotals]:
    """Launches per process, device and native stack, summed over Python stacks and kernels."""
    rows: dict[tuple[int, int, tuple[int, ...]], int] = {}
    for t in sites:
        if t.api is Api.LAUNCH_KERNEL:
            key = (t.pid, t.device, t.stack)
            rows[key] = rows.get(key, 0) + t.count
    return [LaunchTotals(pid, device, stack, n) for (pid, device, stack), n in rows.items()]


class CudaProbes(LibraryProbes):
    """The driver probes on every libcuda file seen, once per file (by inode: a container's
    view of the host's library is the same file). The launch probes can be detached and
    attached again (`set_launches`), on every file at once; the others stay."""

    def __init__(self, obj: BPFObject) -> None:
        super().__init__(obj)
        self.attached: dict[tuple[int, int], str] = {}  # (st_dev, st_ino) -> path
        self._covered_pids: set[int] = set()
        # the scan (drain thread) attaches new files while the duty cycle's thread
        # attaches and detaches the launch probes of the files known
        self._lock = threading.RLock()
        self.launches_on = True
        self._launch_probes: dict[str, list[tuple[str, int, bool]]] = {}
        self._launch_links: dict[str, list[int]] = {}

    def set_launches(self, on: bool) -> None:
        """Attach (on) or detach the launch probes of every probed file. Detaching destroys
        the links, so the uprobe's breakpoint leaves the processes: a detached launch costs
        nothing (a map flag would still pay the trap)."""
        with self._lock:
            if on == self.launches_on:
                return
            self.launches_on = on
            for path in list(self._launch_probes):
                if on:
                    self._attach_launches(path)
                else:  # the last attached (cuLaunchKernel itself) goes first
                    for link in reversed(self._launch_links.pop(path, [])):
                        self.obj.detach(link)

    def _attach_launches(self, path: str) -> None:
        links = self._launch_links.setdefault(path, [])
        try:
            # cuLaunchKernel, the one a program calls most, attached last and detached
            # first: its window is then the attach call's end to the detach call's start
            for program, offset, retprobe in reversed(self._launch_probes[path]):
                links.append(self.obj.attach_uprobe(program, path, offset, retprobe=retprobe))
        except BPFError as exc:  # the file went away (a container ended): keep the rest
            log.debug("GPU launch probes on %s: %s", path, exc)

    @property
    def covered_pids(self) -> set[int]:
        """Processes seen mapping a probed libcuda."""
        return set(self._covered_pids)

    def attach(self, path: str) -> bool:
        """Probe one library file; False when it is no usable libcuda (logged once)."""
        try:
            st = os.stat(path)
        except OSError:
            return False
        ident = (st.st_dev, st.st_ino)
        if ident in self.attached or path in self.uncovered:
            return ident in self.attached
        try:
            offsets = file_offsets(path, SYMBOLS, (".dynsym", ".symtab"))
        except (OSError, ValueError) as exc:
            log.info("GPU memory in %s not covered (%s)", path, exc)
            self.uncovered.add(path)
            return False
        missing = [s for s in REQUIRED if s not in offsets]
        if missing:
            log.info("GPU memory in %s not covered (no symbol %s)", path, ", ".join(missing))
            self.uncovered.add(path)
            return False
        probes = probes_for(offsets)
        with self._lock:
            if not self.attach_at(path, "GPU (CUDA driver)",
                                  [p for p in probes if p[0] not in LAUNCH_PROGRAMS]):
                return False
            self.attached[ident] = path
            self._launch_probes[path] = [p for p in probes if p[0] in LAUNCH_PROGRAMS]
            if self.launches_on:
                self._attach_launches(path)
        return True

    def scan(self, pids: list[int | str], proc_root: str = "/proc") -> int:
        """Attach to the libcuda files these processes map; how many files were new. A
        process found mapping a probed file is not read again (a file covers it for good)."""
        new = 0
        for pid in pids:
            if int(pid) in self._covered_pids:
                continue
            before = len(self.attached)
            # attach() is also True for a file already probed
            if any(self.attach(p) for p in libcuda_of(pid, proc_root)):
                self._covered_pids.add(int(pid))
            new += len(self.attached) - before
        return new

    def scan_all(self, proc_root: str = "/proc") -> int:
        pids = [int(p.name) for p in Path(proc_root).iterdir() if p.name.isdigit()]
        # pids that ended free their slot (a new process may reuse the number)
        self._covered_pids &= set(pids)
        return self.scan(pids, proc_root)


class CudaTracer:
    """Loaded cuda.bpf.o: `poll()` returns allocation, free, mapping and kernel-name
    events; `sites()` the kernel's running totals of launches, copies and synchronizations. With `unwind` (the agent's unwind-table
    maps, shared with the CPU sampler) allocation stacks are walked with the tables of
    the processes the maps have; launch stacks stay frame-pointer walks (docs/gpu.md)."""

    def __init__(self, libbpf_log: LibbpfLog, ring_buffer_bytes: int = 4 << 20,
                 wakeup_fill_percent: int = 50, libraries: tuple[str, ...] = (),
                 unwind: UnwindMaps | None = None) -> None:
        check_btf()
        self.obj = BPFObject("cuda", libbpf_log)
        self.unwind = unwind
        try:
            self.obj.set_max_entries("gpu_events", ring_buffer_bytes)
            self.obj.set_max_entries("gpu_scratch", 1)
            if unwind is not None:
                unwind.reuse_in(self.obj)
            else:  # the object's own maps, unused: as small as they can be
                self.obj.set_max_entries("unwind_rows", 1)
                self.obj.set_max_entries("unwind_procs", 1)
            self.obj.set_rodata(cuda_abi.pack_config(
                os.getpid(), ring_buffer_bytes * wakeup_fill_percent // 100,
                unwind is not None))
            self.obj.load()
            self.ring = RingBuffer([self.obj.map("gpu_events")])
            self.probes = CudaProbes(self.obj)
        except BaseException:
            self.obj.close()
            raise
        self._sites = self.obj.map("gpu_sites")
        self._stacks = self.obj.map("gpu_stacks")
        self._counters = self.obj.map("gpu_counters")
        self._py_procs = self.obj.map("py_procs")
        self.bad_records = 0
        for path in sorted(system_libcuda(libraries)):
            self.probes.attach(path)

    def poll(self, timeout_ms: int) -> list[cuda_abi.GpuEvent]:
        events = []
        for record in self.ring.drain(timeout_ms):
            try:
                events.append(cuda_abi.decode(record))
            except cuda_abi.BadRecord as exc:
                self.bad_records += 1
                log.debug("bad GPU record: %s", exc)
        return events

    def sites(self) -> list[SiteTotals]:
        """The kernel's running totals of launches, copies and synchronizations by site."""
        out = []
        stacks: dict[int, tuple[int, ...]] = {}
        for key in self._sites.keys():
            raw = self._sites.lookup(key)
            if raw is None:
                continue
            pid, stack_id, caller, func, device, api, py_n, _status, *py = \
                cuda_abi.SITE_KEY.unpack(key)
            if stack_id >= 0 and stack_id not in stacks:
                value = self._stacks.lookup(stack_id.to_bytes(4, "little"))
                stacks[stack_id] = cuda_abi.stack_from_map(value) if value else ()
            stack = stacks.get(stack_id, ())
            # a launch's caller, which the walk from the function's entry skipped, goes
            # back under the launch function's frame
            stack = stack[:1] + (caller,) + stack[1:] if stack and caller else stack
            try:
                api = Api(api)
            except ValueError:
                self.bad_records += 1
                continue
            count, nbytes, ns = cuda_abi.SITE_TOTALS.unpack(raw)
            out.append(SiteTotals(pid, api, device, stack, tuple(py[:py_n]), func, count,
                                  nbytes, ns))
        return out

    def copies(self) -> list[CopyTotals]:
        return copy_totals(self.sites())

    def launches(self) -> list[LaunchTotals]:
        return launch_totals(self.sites())

    def forget(self, pids: set[int]) -> None:
        """Drop the kernel's totals of processes that ended."""
        for key in self._sites.keys():
            if cuda_abi.SITE_KEY.unpack_from(key)[0] in pids:
                self._sites.delete(key)

    def set_python(self, pid: int, runtime: int, offsets: dict[str, int]) -> None:
        """Walk this process's Python frames at each allocation (its interpreter's
        _PyRuntime address and offsets, as the CPU profiler's symbolizer found them)."""
        self._py_procs.update(pid.to_bytes(4, "little"), pack_py_proc(runtime, offsets))

    def forget_python(self, pid: int) -> None:
        self._py_procs.delete(pid.to_bytes(4, "little"))

    def kernel_counters(self) -> dict[str, int]:
        return {name: sum(self._counters.lookup_percpu_u64(idx))
                for idx, name in cuda_abi.COUNTER_NAMES.items()}

    def close(self) -> None:
        self.ring.close()
        self.obj.close()

