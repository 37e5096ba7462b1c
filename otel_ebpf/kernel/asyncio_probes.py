"""Finds CPython in traced processes and attaches the task uprobes (socket_trace.bpf.c) to
each such process alone: from the `_asyncio` extension, the asyncio task each thread steps
and each task's creation; from the interpreter (libpython or the executable), the
contextvars.Context each thread enters, which follows a task's work onto thread pool
workers. Together they tie an asyncio service's outbound calls to the request they serve:
a process that serves and makes no calls loses them all, one whose calls all come from
its event loop loses the Context probes (docs/decisions.md)."""

from __future__ import annotations

import logging
import re
from dataclasses import dataclass, field
from pathlib import Path

from otel_ebpf.protocols.base import Direction, Role

from .abi import TaskNew
from .loader import BPFError, BPFObject
from .uprobes import file_offsets

log = logging.getLogger(__name__)

_ASYNCIO_SO = re.compile(r"/_asyncio\.cpython-3(\d+)[^/]*\.so$")
_LIBPYTHON = re.compile(r"/libpython3\.\d+[^/]*\.so[.\d]*$")
TASK_STEP = "task_step_impl"
TASK_INIT = "_asyncio_Task___init__"
CONTEXT_RUN = "context_run"
CONTEXT_DEALLOC = "context_tp_dealloc"
# A process that has served this many requests without a traced outbound connection is a
# leaf: its calls need no parent, and its probes (a trap per task step, per Context.run,
# per Context freed) cost it CPU for nothing. They come back at its first outbound one.
LEAF_AFTER_REQUESTS = 100
# A process whose outbound requests were all written by the threads that read its server
# requests (its event loop) needs no Context evidence after this many: the Context probes
# (a trap per Context.run and per Context freed) come off, and back at a call from another
# thread (a thread pool's).
LOOP_ONLY_AFTER_CALLS = 100
# The task step program for each CPython minor version: where the task argument is, and
# TaskObj.task_context (the macros in socket_trace.bpf.c; tests check them against live
# interpreters).
TASK_STEP_PROGRAMS = {11: "task_step_enter_311", 12: "task_step_enter_312",
                      13: "task_step_enter_313"}
TASK_CONTEXT_OFFSETS = {11: 152, 12: 152, 13: 136}


def asyncio_libraries_of(pid: int | str, proc_root: str = "/proc") -> set[tuple[str, int]]:
    """(path, CPython minor version) of each _asyncio extension process `pid` maps."""
    found: set[tuple[str, int]] = set()
    try:
        maps = Path(proc_root, str(pid), "maps").read_text()
    except OSError:
        return found
    for line in maps.splitlines():
        path = line.split(maxsplit=5)[-1] if line.count(" ") >= 5 else ""
        m = _ASYNCIO_SO.search(path)
        if m:
            found.add((path, int(m.group(1))))
    return found


def interpreters_of(pid: int | str, proc_root: str = "/proc") -> set[str]:
    """Files that may hold the interpreter's own functions: a mapped libpython, else the
    executable (static builds: python-build-standalone, many distributions' python3)."""
    try:
        maps = Path(proc_root, str(pid), "maps").read_text()
    except OSError:
        return set()
    found = {line.split(maxsplit=5)[-1] for line in maps.splitlines()
             if line.count(" ") >= 5 and _LIBPYTHON.search(line)}
    if not found:
        try:
            found.add(str(Path(proc_root, str(pid), "exe").resolve(strict=True)))
        except OSError:
            pass
    return found


@dataclass
class _Process:
    links: list[int] = field(default_factory=list)       # task probes
    ctx_links: list[int] = field(default_factory=list)   # Context probes
    calls_out: bool = False   # a traced connection it did not accept
    served: int = 0           # requests read on connections it accepted, while probed
    leaf: bool = False        # probes taken off: it served LEAF_AFTER_REQUESTS, no calls
    loop_tids: set[int] = field(default_factory=set)  # threads that read server requests
    loop_calls: int = 0       # outbound requests written by those threads
    thread_calls: int = 0     # ... and by any other thread (a pool's)
    loop_only: bool = False   # Context probes taken off: all calls from the loop


class AsyncioProbes:
    """Entry-only task and Context uprobes, attached per process (a pid filter: no other
    process that maps the same library gets a breakpoint), taken off a leaf service."""

    def __init__(self, obj: BPFObject, leaf_after: int = LEAF_AFTER_REQUESTS,
                 loop_only_after: int = LOOP_ONLY_AFTER_CALLS) -> None:
        self.obj = obj
        self.leaf_after = leaf_after
        self.loop_only_after = loop_only_after
        self.uncovered: set[str] = set()        # files without the symbols (logged once)
        self._offsets: dict[str, dict[str, int]] = {}
        self.procs: dict[int, _Process] = {}

    @property
    def probed(self) -> set[int]:
        return {pid for pid, p in self.procs.items() if p.links}

    def on_connection(self, pid: int, role: Role) -> None:
        """A traced connection of `pid` opened (connect, accept, or first seen on data)."""
        proc = self.procs.get(pid)
        if proc is None:
            proc = self.procs[pid] = _Process()
            proc.calls_out = role != Role.SERVER
            self._attach(pid, proc)
        elif role != Role.SERVER and not proc.calls_out:
            proc.calls_out = True
            if proc.leaf:
                log.info("pid %d calls out: asyncio task probes attached again", pid)
                proc.leaf = False
                self._attach(pid, proc)

    def observe(self, observed: list) -> None:
        """Completed frames (the tracker's `observed`): takes a leaf's probes off (served
        requests, no calls), and the Context probes of a process whose calls all come
        from its event loop; puts them back at a call from another thread."""
        procs = self.procs
        for conn, frame in observed:
            if type(conn) is TaskNew:
                continue
            proc = procs.get(conn.pid)
            if proc is None or not proc.links:
                continue
            if conn.role == Role.SERVER:
                if frame.direction == Direction.INGRESS:
                    proc.loop_tids.add(frame.tid)
                    if not proc.calls_out:
                        proc.served += 1
                        if proc.served >= self.leaf_after:
                            log.info("pid %d served %d requests without calling out: "
                                     "asyncio task probes taken off", conn.pid, proc.served)
                            self._detach(proc)
                            proc.leaf = True
            elif conn.role == Role.CLIENT and frame.direction == Direction.EGRESS:
                self._call(conn.pid, proc, frame.tid)

    def _call(self, pid: int, proc: _Process, tid: int) -> None:
        if tid in proc.loop_tids:
            proc.loop_calls += 1
            if (proc.ctx_links and not proc.thread_calls
                    and proc.loop_calls >= self.loop_only_after):
                log.info("pid %d made %d calls, all from its event loop: Context probes "
                         "taken off", pid, proc.loop_calls)
                self._detach_links(proc.ctx_links)
                proc.loop_only = True
            return
        proc.thread_calls += 1
        if proc.loop_only:
            log.info("pid %d calls out from another thread: Context probes attached again",
                     pid)
            proc.loop_only = False
            self._attach(pid, proc, tasks=False)

    def forget(self, pid: int) -> None:
        """The process is gone."""
        proc = self.procs.pop(pid, None)
        if proc is not None:
            self._detach(proc)

    def close(self) -> None:
        for proc in self.procs.values():
            self._detach(proc)
        self.procs.clear()

    # ---- attaching ------------------------------------------------------------------

    def _attach(self, pid: int, proc: _Process, tasks: bool = True) -> None:
        """The task probes (unless `tasks` is False: they are on) and, unless the process
        calls out from its loop only, the Context probes."""
        libraries = asyncio_libraries_of(pid)
        if not libraries:
            return  # no asyncio here (yet): its contexts do not matter
        placed: list[tuple[str, str, int]] = []
        for path, minor in libraries:
            placed += self._task_probes(path, minor)
        if not placed:
            return
        contexts = [] if proc.loop_only else [
            probe for path in interpreters_of(pid) for probe in self._context_probes(path)]
        try:
            for into, probes in ((proc.links, placed if tasks else []), (proc.ctx_links, contexts)):
                for program, path, offset in probes:
                    into.append(self.obj.attach_uprobe(program, path, offset, pid=pid))
        except BPFError as exc:
            log.warning("asyncio task probes on pid %d failed: %s", pid, exc)
            self._detach(proc)
            return
        log.info("asyncio task probes attached to pid %d (%d task, %d Context)", pid,
                 len(proc.links), len(proc.ctx_links))

    def _detach(self, proc: _Process) -> None:
        self._detach_links(proc.links)
        self._detach_links(proc.ctx_links)

    def _detach_links(self, links: list[int]) -> None:
        for link in links:
            self.obj.detach(link)
        links.clear()

    def _symbols(self, path: str, what: str, names: tuple[str, ...]) -> dict[str, int] | None:
        if path in self.uncovered:
            return None
        offsets = self._offsets.get(path)
        if offsets is None:
            try:
                offsets = file_offsets(path, names)
            except (OSError, ValueError) as exc:
                offsets, why = {}, str(exc)
            else:
                why = "no symbol " + ", ".join(s for s in names if s not in offsets)
            if len(offsets) < len(names):
                log.info("%s in %s not covered (%s)", what, path, why)
                self.uncovered.add(path)
                return None
            self._offsets[path] = offsets
        return offsets

    def _task_probes(self, path: str, minor: int) -> list[tuple[str, str, int]]:
        """The task probes of an _asyncio library (3.11 passes the task first, 3.12+ after
        the module state; the task's Context sits where the version puts it)."""
        step = TASK_STEP_PROGRAMS.get(minor)
        if step is None:
            if path not in self.uncovered:
                log.info("asyncio tasks in %s not covered: CPython 3.%d (3.11 to 3.13 are)",
                         path, minor)
                self.uncovered.add(path)
            return []
        offsets = self._symbols(path, "asyncio tasks", (TASK_STEP, TASK_INIT))
        if offsets is None:
            return []
        return [(step, path, offsets[TASK_STEP]), ("task_init", path, offsets[TASK_INIT])]

    def _context_probes(self, path: str) -> list[tuple[str, str, int]]:
        offsets = self._symbols(path, "contexts", (CONTEXT_RUN, CONTEXT_DEALLOC))
        if offsets is None:
            return []
        return [("context_run_enter", path, offsets[CONTEXT_RUN]),
                ("context_dealloc", path, offsets[CONTEXT_DEALLOC])]
