"""Unwind tables at run time: which files of each process need one, building them in a
background thread (once per build id: libtorch_cpu takes seconds), placing their rows in
the kernel's array and telling the BPF walker each process's mappings that have rows.
Samples never wait: until a file's table is in, its frames are walked by frame pointer.

One Unwinder serves the CPU profiler and the GPU probes (`UnwindTables`: the kernel maps,
which both BPF objects reuse, and the Unwinder that fills them): processes are added from
either thread, so the per-process state is under a lock."""

from __future__ import annotations

import logging
import os
import queue
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass

from elftools.elf.elffile import ELFFile

from otel_ebpf.kernel.cpu_sampler import pack_unwind_proc
from otel_ebpf.kernel.unwind_maps import UnwindMaps

from .elf import _build_id
from .procmaps import ProcessMaps
from .unwind_tables import ROW_SIZE, UnsupportedFile, build_table

log = logging.getLogger(__name__)

RESCAN_S = 2.0  # how often a process's mappings are looked at again (dlopen: torch)
SLOW_BUILD_S = 1.0  # builds that take longer are logged at info (libtorch: tens of seconds)


@dataclass(frozen=True, slots=True)
class Placed:
    row_start: int
    row_count: int


@dataclass
class BuildStats:
    """What building tables cost, per file (bench and docs read this)."""

    path: str
    rows: int
    fdes: int
    seconds: float          # thread CPU time of the build
    source: str


class Unwinder:
    """`write_rows(start, rows)` and `set_maps(pid, maps)` / `forget(pid)` reach the kernel
    (CpuSampler); `fail(stage, reason)` counts what went wrong."""

    def __init__(self, capacity_rows: int, write_rows: Callable[[int, bytes], None],
                 set_maps: Callable[[int, list], None], forget: Callable[[int], None],
                 fail: Callable[[str, str], None]) -> None:
        self.capacity = capacity_rows
        self._write_rows, self._set_maps, self._forget = write_rows, set_maps, forget
        self.fail = fail
        self.used = 0
        self.placed: dict[str, Placed | None] = {}   # build id (or path) -> rows, None: none
        self.builds: list[BuildStats] = []
        self._ids: dict[tuple[int, int, int], str] = {}  # (dev, ino, mtime) -> build id
        self._procs: dict[int, tuple[ProcessMaps, float, frozenset]] = {}
        self._waiting: dict[str, set[int]] = {}  # table being built -> pids that need it
        self._lock = threading.Lock()
        self._queue: queue.Queue[tuple[str, str] | None] = queue.Queue()
        self._ready: queue.Queue[set[int]] = queue.Queue()  # pids whose tables came in
        self._segments: dict[str, list[tuple[int, int, int]]] = {}  # file -> PT_LOADs
        # processes whose readiness is logged at info (the GPU monitor's: few, and what a
        # user waits for), and what was last said of each
        self._announce: set[int] = set()
        self._announced: dict[int, tuple | str] = {}
        self._plock = threading.RLock()  # _procs and what hangs on it: two callers' threads
        self._thread = threading.Thread(target=self._build_loop, name="otel-ebpf-unwind",
                                        daemon=True)
        self._thread.start()

    # -- processes (the profiler's thread)

    def add(self, pid: int, announce: bool = False) -> None:
        """Build and hand over the tables of `pid`'s files; `announce`: say at info when
        they are all in (each time its files change)."""
        with self._plock:
            first = announce and pid not in self._announce
            if announce:
                self._announce.add(pid)
            if pid not in self._procs:
                self._procs[pid] = (ProcessMaps(pid), 0.0, frozenset())
                self._scan(pid)
            elif first:  # added by another user before: say its state now
                self._push(pid)

    def tick(self) -> None:
        """Look again at the processes whose mappings may have changed (bounded rate)."""
        with self._plock:
            now = time.monotonic()
            for pid, (_, at, _) in list(self._procs.items()):
                if now - at >= RESCAN_S:
                    self._scan(pid)

    def remove(self, pid: int) -> None:
        with self._plock:
            self._announce.discard(pid)
            self._announced.pop(pid, None)
            self._procs.pop(pid, None)  # maybe dropped already, when its maps went
            try:
                self._forget(pid)  # the kernel's entry either way
            except Exception as exc:
                self.fail("unwind", type(exc).__name__)

    def has(self, pid: int) -> bool:
        with self._plock:
            return pid in self._procs

    def ready(self, pid: int) -> bool:
        """Every file of `pid` seen so far has its table in the kernel (or has none)."""
        with self._plock, self._lock:
            return pid in self._procs and not any(pid in w for w in self._waiting.values())\
                and self._ready.empty()

    def _scan(self, pid: int) -> None:
        maps, _, known = self._procs[pid]
        files = frozenset((m.start, m.end, m.offset, m.path) for m in maps.maps
                          if m.executable and m.is_file) if maps.refresh() else frozenset()
        if not files:  # gone (an exiting process's maps read empty)
            self._procs.pop(pid, None)
            self._announce.discard(pid)
            self._announced.pop(pid, None)
            return
        self._procs[pid] = (maps, time.monotonic(), files)
        if files != known:
            self._push(pid)

    def _file_key(self, path: str) -> str | None:
        try:
            st = os.stat(path)
        except OSError:
            return None
        key = (st.st_dev, st.st_ino, st.st_mtime_ns)
        bid = self._ids.get(key)
        if bid is None:
            try:
                with open(path, "rb") as f:
                    bid = _build_id(ELFFile(f)) or f"{path}:{key}"
            except Exception:
                bid = f"unreadable:{path}"
            self._ids[key] = bid
        return bid

    def _push(self, pid: int) -> None:
        """Tell the kernel the mappings of `pid` whose tables are in; queue the others."""
        entry = self._procs.get(pid)
        if entry is None:
            return
        maps, _, files = entry
        out = []
        waiting = 0
        for start, end, offset, path in sorted(files):
            host = f"{maps.proc_root}/{pid}/root{path}"
            key = self._file_key(host)
            if key is None or key.startswith("unreadable:"):
                continue
            with self._lock:
                placed = self.placed.get(key, False)
                if placed is False:
                    if key not in self._waiting:
                        self._waiting[key] = set()
                        self._queue.put((key, host))
                    self._waiting[key].add(pid)
                    waiting += 1
                    continue
            if placed is None:
                continue
            bias = self._bias(host, start, offset)
            if bias is not None:
                out.append((start, end, bias, placed.row_start, placed.row_count, end - start))
        # the largest mappings first when there are more than the kernel keeps
        out.sort(key=lambda m: -m[5])
        try:
            self._set_maps(pid, [m[:5] for m in out])
        except Exception as exc:  # the process map full: frame pointers for it
            self.fail("unwind", type(exc).__name__)
            return
        if pid in self._announce:
            self._say(pid, out, waiting)

    def _say(self, pid: int, out: list, waiting: int) -> None:
        """At most two lines per change of a process's files: tables being built for it,
        then all of them in. The last line said of a process is its state."""
        said = self._announced.get(pid)
        if waiting:
            if said is None or said != "waiting":
                self._announced[pid] = "waiting"
                log.info("unwind tables for pid %d: %d files waiting for their tables", pid,
                         waiting)
            return
        now = tuple(m[:2] for m in out)
        if said != now:
            self._announced[pid] = now
            log.info("unwind tables in for pid %d: %d mappings, %d rows", pid, len(out),
                     sum(m[4] for m in out))

    def _bias(self, host: str, start: int, offset: int) -> int | None:
        segs = self._segments.get(host)
        if segs is None:
            try:
                with open(host, "rb") as f:
                    segs = [(s["p_offset"], s["p_filesz"], s["p_vaddr"])
                            for s in ELFFile(f).iter_segments() if s["p_type"] == "PT_LOAD"]
            except Exception:
                segs = []
            self._segments[host] = segs
        for off, size, vaddr in segs:
            if off <= offset < off + max(size, 1):
                return start - (vaddr + offset - off)
        return None

    # -- the builder thread

    def _build_loop(self) -> None:
        while True:
            item = self._queue.get()
            if item is None:
                return
            key, host = item
            placed = None
            try:
                t0 = time.thread_time()
                table = build_table(host)
                spent = time.thread_time() - t0
                n = len(table)
                with self._lock:
                    fits = self.used + n <= self.capacity
                    start = self.used
                    if fits:
                        self.used += n
                if fits:
                    self._write_rows(start, table.rows)
                    placed = Placed(start, n)
                else:
                    self.fail("unwind", "table_full")
                self.builds.append(BuildStats(host, n, table.fdes, spent, table.source))
                log.log(logging.INFO if spent >= SLOW_BUILD_S else logging.DEBUG,
                        "unwind table of %s: %d rows from %d FDEs in %.1fs of CPU", host, n,
                        table.fdes, spent)
            except UnsupportedFile:
                pass  # no call frame information: frame pointers there
            except Exception as exc:
                self.fail("unwind", type(exc).__name__)
            with self._lock:
                self.placed[key] = placed
                pids = self._waiting.pop(key, set())
            self._ready.put(pids)

    def apply_ready(self) -> None:
        """On a caller's thread: processes whose tables came in are pushed again."""
        with self._plock:
            pids: set[int] = set()
            while True:
                try:
                    pids |= self._ready.get_nowait()
                except queue.Empty:
                    break
            for pid in pids:
                self._push(pid)

    def idle(self) -> bool:
        """No table being built or waiting to be given to its processes."""
        with self._lock:
            return not self._waiting and self._ready.empty()

    def close(self) -> None:
        self._queue.put(None)
        self._thread.join(timeout=5)


class UnwindTables:
    """The agent's unwind tables: the kernel maps (reused by every BPF object that walks
    user stacks: CPU samples, GPU allocations) and the Unwinder that fills them."""

    def __init__(self, capacity_rows: int, fail: Callable[[str, str], None]) -> None:
        self.maps = UnwindMaps(capacity_rows)
        try:
            self.unwinder = Unwinder(
                capacity_rows, self.maps.write_rows,
                lambda pid, maps: self.maps.set_maps(pid, pack_unwind_proc(maps)),
                self.maps.forget, fail)
        except BaseException:
            self.maps.close()
            raise

    def close(self) -> None:
        self.unwinder.close()
        self.maps.close()


__all__ = ["Unwinder", "UnwindTables", "BuildStats", "ROW_SIZE"]
