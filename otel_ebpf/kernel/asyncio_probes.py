"""Finds CPython interpreters in running processes and attaches the Context hand-off probes
(socket_trace.bpf.c): one uprobe pair on `PyContext_CopyCurrent`, an exported function,
so stripped builds have it too. Every socket event carries the contextvars.Context its
thread ran in (read from the thread state in the kernel); a copy says which Context a new
one came from: an asyncio task's, or the one a thread-pool call runs (to_thread, anyio,
Starlette). Each interpreter file gets a record (by the probe's cookie) that lets a process
register itself at its first copy: where `_PyRuntime` is from the probe's address, and the
thread state offsets of its CPython version."""

from __future__ import annotations

import logging
import os
import re
import struct
import time
from collections.abc import Container
from pathlib import Path

from otel_ebpf.profiling.elf import ElfInfo
from otel_ebpf.profiling.python_offsets import (
    DEBUG_OFFSETS_SIZE,
    UnsupportedPython,
    for_version,
)

from otel_ebpf.protocols.base import Role

from .abi import CONN_F_PIPE, CONN_F_TCP, ConnOpen
from .loader import BPFError, BPFObject
from .uprobes import LibraryProbes, file_offsets

log = logging.getLogger(__name__)

_LIBPYTHON = re.compile(r"/libpython3\.\d+[^/]*\.so[.\d]*$")
_UVLOOP = re.compile(r"/uvloop/loop\.cpython-[^/]*\.so$")
# uvloop's helpers that enter a transport's Context to run a protocol callback
# (data_received, connection_made, eof_received...), the Context their first argument:
# Cython functions of the module, named in its .symtab (its wheels keep it)
LOOP_ENTRIES = ("__pyx_f_6uvloop_4loop_run_in_context", "__pyx_f_6uvloop_4loop_run_in_context1")
# Seconds before a probed process without uvloop is looked at again (doubled each time, up
# to LOOP_LOOK_LAST): a server imports its event loop after its start, before it serves
LOOP_LOOK_FIRST, LOOP_LOOK_LAST = 0.5, 64.0
_EXECUTABLE = re.compile(r"/python3?(\.\d+)?[^/]*$")
CONTEXT_COPY = "PyContext_CopyCurrent"
# PyThreadState.context by CPython minor version: not among 3.13's _Py_DebugOffsets, so a
# table (tests/unit/test_asyncio_layout.py checks it against every live interpreter found)
TSTATE_CONTEXT = {(3, 11): 224, (3, 12): 208, (3, 13): 208}
MAX_FILES = 64  # PY_CTX_FILES in bpf/include/py_context.bpf.h
# Copies after which a process that never called out loses its probes: a few hundred
# requests of a service (3 copies per `async def` request under uvicorn, 7 per `def`)
LEAF_COPIES = 1000
# Processes of one interpreter file probed each for itself, at most: every probed process's
# probe is one more consumer that each trap walks (~45 ns each here), so past this many the
# file is probed for every process (one consumer; leaves then pay as well)
SHARED_AFTER = 16
# Seconds a probed process without a traced connection may go with no socket open before
# its probes come off (a short-lived tool, an idle interpreter), and between such looks;
# its first connection brings them back
QUIET_S = 10.0
# struct py_ctx_proc: runtime (here: _PyRuntime minus PyContext_CopyCurrent), offsets,
# copies (per process: counted by the entry probe), calls_out (per process: set by the
# kernel at a connection out), padding
PY_CTX_RECORD = struct.Struct("<qIIIIIIII")


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
            exe = str(Path(proc_root, str(pid), "exe").resolve(strict=True))
        except OSError:
            return set()
        if _EXECUTABLE.search(exe):
            found.add(exe)
    return found


# x86-64: `mov 0x18(%rax),%rdi` (the current Context's ctx_vars), an optional pop, then
# `jmp rel32`: PyContext_CopyCurrent tail-calling context_new_from_vars
_TAIL_CALL = re.compile(rb"\x48\x8b\x78\x18(?:[\x58-\x5f]|\x41[\x58-\x5f])?\xe9(.{4})", re.S)
_EM_X86_64 = 62


def copy_site(path: str, elf: ElfInfo, offset: int) -> int:
    """Where every copy of a Context passes: PyContext_CopyCurrent's file offset, or, where
    it tail-calls the static context_new_from_vars, that function's. A build that links the
    interpreter into its executable with link-time optimization (Debian's python3.11)
    inlines PyContext_CopyCurrent into `contextvars.copy_context()`, so thread-pool
    hand-offs (anyio, asyncio.to_thread) never call the exported function there; all of them
    reach context_new_from_vars."""
    with open(path, "rb") as f:
        head = f.read(20)
        if len(head) < 20 or struct.unpack_from("<H", head, 18)[0] != _EM_X86_64:
            return offset
        f.seek(offset)
        code = f.read(48)
    m = _TAIL_CALL.search(code)
    if m is None:
        return offset
    target = offset + m.end() + struct.unpack("<i", m.group(1))[0]
    # the target must lie in the same executable segment
    start, end = elf.vaddr_of_offset(offset), elf.vaddr_of_offset(target)
    if start is None or end is None or end - start != target - offset:
        return offset
    return target


def interpreter_record(path: str) -> tuple[int, bytes]:
    """(file offset of the copy site, the file's py_ctx_proc record); ValueError
    (UnsupportedPython) when `path` is no CPython 3.11-3.13 or lacks what is needed."""
    offset = file_offsets(path, (CONTEXT_COPY,), (".dynsym", ".symtab")).get(CONTEXT_COPY)
    if offset is None:
        raise UnsupportedPython(f"no {CONTEXT_COPY}")
    elf = ElfInfo(path)
    offset = copy_site(path, elf, offset)
    runtime = elf.objects.get("_PyRuntime")
    version_sym = elf.objects.get("Py_Version")
    raw = elf.read(version_sym[0], 4) if version_sym else None
    copy_vaddr = elf.vaddr_of_offset(offset)
    if runtime is None or raw is None or copy_vaddr is None:
        raise UnsupportedPython("no _PyRuntime or Py_Version")
    hexv = struct.unpack("<I", raw)[0]
    version = (hexv >> 24, hexv >> 16 & 0xFF)
    if version not in TSTATE_CONTEXT:
        raise UnsupportedPython(f"CPython {version[0]}.{version[1]} (3.11 to 3.13 are known)")
    o = for_version(version, elf.read(runtime[0], DEBUG_OFFSETS_SIZE))
    record = PY_CTX_RECORD.pack(runtime[0] - copy_vaddr, o.interp_head, o.threads_head,
                                o.tstate_next, o.tstate_native_tid, TSTATE_CONTEXT[version],
                                0, 0, 0)
    return offset, record


def loop_modules(pid: int | str, proc_root: str = "/proc") -> set[str]:
    """uvloop's compiled loop module for process `pid`: the one it maps, or, before it
    imports uvloop, the one in the virtualenv its command runs from (`venv/bin/uvicorn`,
    `venv/bin/python -m ...`), so that the probe is there for its first request."""
    proc = Path(proc_root, str(pid))
    try:
        maps = (proc / "maps").read_text()
    except OSError:
        return set()
    found = {line.split(maxsplit=5)[-1] for line in maps.splitlines()
             if line.count(" ") >= 5 and _UVLOOP.search(line)}
    if found:
        return found
    try:
        argv = (proc / "cmdline").read_bytes().split(b"\0")[:2]
        cwd = os.readlink(proc / "cwd")
    except OSError:
        return found
    for arg in argv:
        command = Path(cwd, os.fsdecode(arg)) if arg else None
        # a script or interpreter in venv/bin: the venv is two levels up, named by its
        # pyvenv.cfg
        venv = command.parent.parent if command is not None else None
        if venv is not None and (venv / "pyvenv.cfg").is_file():
            found.update(str(p) for p in
                         venv.glob("lib/python3*/site-packages/uvloop/loop.cpython-*.so"))
    return found


def has_socket(proc: Path) -> bool:
    """Whether the process at /proc/PID has a socket open."""
    try:
        return any(os.readlink(fd).startswith("socket:") for fd in (proc / "fd").iterdir())
    except OSError:
        return False


def calls_out(ev: ConnOpen) -> bool:
    """Whether a connection says its process calls out: one it connected, a pipe (MCP over
    stdio), or a TCP connection open before the agent started (which side it is is not
    known yet). A Unix socket of unknown side is a socketpair (asyncio's self-pipe, say)."""
    if ev.role is Role.CLIENT:
        return True
    return ev.role is Role.UNKNOWN and bool(ev.flags & (CONN_F_PIPE | CONN_F_TCP))


class AsyncioProbes(LibraryProbes):
    """Attaches the Context probes to each Python process of its own, from its start on (the
    agent's start-up scan, its exec, its fork by a probed process), and takes them off a
    process that shows it only serves: a leaf service needs no hand-off seen, and each copy
    there costs two traps (decisions: "Context probes per process"). A process's probes are
    one consumer more for every probed process's traps, so past `shared_after` processes
    of one interpreter file the probes go on the file, for every process, as before."""

    def __init__(self, obj: BPFObject, leaf_copies: int = LEAF_COPIES,
                 shared_after: int = SHARED_AFTER) -> None:
        super().__init__(obj)
        self.leaf_copies = leaf_copies  # 0: never taken off
        self.shared_after = shared_after
        self.interpreters: dict[str, int] = {}  # path -> its record's index (the cookie)
        self._sites: dict[str, int] = {}  # path -> the copy site's file offset
        # pid -> [file, its links, when to look again whether it is quiet]
        self.processes: dict[int, list] = {}
        self.shared: set[str] = set()  # files probed for every process
        self.calls_out: set[int] = set()  # pids seen calling out: their probes stay
        self.retired: set[int] = set()  # pids whose probes came off (only serving)
        self.attached = self.retired_count = 0  # totals, for the agent's own metrics
        self._own = os.getpid()  # the agent copies Contexts too, untraced
        self.proc_root = "/proc"
        self._procs = obj.map("py_ctx_procs")
        self._epoch_map = obj.map("py_ctx_epoch")
        self._epoch = 0
        self._probed = obj.map("py_ctx_probed")
        # uvloop: pid -> the links of its loop probes; offsets by file (None: not covered);
        # pid -> [when to look again for its uvloop, the gap after that]
        self.loops: dict[int, list[int]] = {}
        self._loop_sites: dict[str, tuple[int, ...] | None] = {}
        self._loop_looks: dict[int, list[float]] = {}

    def scan(self, pids: list[int | str]) -> int:
        """Attach to these processes' interpreters; returns how many processes were new."""
        new = 0
        for pid in pids:
            pid = int(pid)
            if pid in self.processes and pid not in self.loops:
                self._look_for_loop(pid)  # its first connection: its loop is there by now
            if pid in self.processes or pid == self._own or (
                    pid in self.retired and pid not in self.calls_out):
                continue
            for path in interpreters_of(pid):
                if path not in self.uncovered and self._file(path) is not None:
                    new += self._attach_process(pid, path)
                    if path in self.shared or pid in self.processes:
                        self._look_for_loop(pid)
        return new

    def scan_all(self, proc_root: str = "/proc") -> int:
        """At the agent's start: the processes with a socket open (the others are probed at
        their first connection, as a process started later is at its exec)."""
        return self.scan([p.name for p in Path(proc_root).iterdir()
                          if p.name.isdigit() and has_socket(p)])

    def execed(self, pid: int) -> None:
        """Process `pid` runs a new program: probes for the old one go, the new one's come."""
        self.exited(pid)
        self.scan([pid])

    def forked(self, pid: int) -> None:
        """A probed process forked `pid`: the child's copy of the code lost the probes."""
        self.scan([pid])

    def exited(self, pid: int) -> None:
        """Process `pid` is gone (or runs another program: execed): its probes and its
        record go. The record would otherwise stay until the LRU evicts it, and a process
        that later gets its pid (or the new program) would have its socket calls read a
        Context where the old interpreter kept its thread states. No epoch bump: the old
        threads' cached values went with them (sched_process_exit, sched_process_exec)."""
        self._detach_process(pid)
        self._detach_loop(pid)
        self._procs.delete(pid.to_bytes(4, "little"))
        self.calls_out.discard(pid)
        self.retired.discard(pid)

    def calling_out(self, pid: int) -> None:
        """`pid` opened a connection it did not accept (or a pipe): its outbound calls need
        their parents, so its probes stay, or come back if they were taken off."""
        if pid in self.calls_out:
            return
        self.calls_out.add(pid)
        if pid in self.retired:
            self.retired.discard(pid)
            self.scan([pid])

    def retire(self, connected: Container[int], now: float | None = None) -> int:
        """Take the probes off processes that need none; returns how many. A leaf: it
        copied `leaf_copies` Contexts and never called out (its probes come back only when
        it does). A quiet one: no socket open QUIET_S after its probes came, nor at any check
        every QUIET_S since (a tool, an idle interpreter; a server waiting for its first
        request has its listening socket): its probes come back at its first connection.
        Either stops reading Contexts at its socket calls too (unregistered)."""
        now = time.monotonic() if now is None else now
        gone = 0
        for pid, (_, _, check_at) in list(self.processes.items()):
            if pid in self.calls_out:
                continue
            key = pid.to_bytes(4, "little")
            if pid in connected:
                record = self._procs.lookup(key) if self.leaf_copies else None
                if record is None:
                    continue
                *_, copies, kernel_calls_out, _ = PY_CTX_RECORD.unpack(record)
                if kernel_calls_out:  # a connection out the agent has not read yet
                    self.calls_out.add(pid)
                    continue
                if copies < self.leaf_copies:
                    continue
                self.retired.add(pid)
                self.retired_count += 1
                log.debug("context probes off process %d: it only serves", pid)
            elif now < check_at:
                continue
            elif has_socket(Path(self.proc_root, str(pid))):
                self.processes[pid][2] = now + QUIET_S
                continue
            self._detach_process(pid)
            self._detach_loop(pid)
            self._procs.delete(key)
            self._bump_epoch()
            gone += 1
        if self._loop_looks:
            self._look_again(now)
        return gone

    def _look_for_loop(self, pid: int) -> None:
        """Attach the loop probe to the uvloop module process `pid` maps or will import;
        without one yet, look again later (LOOP_LOOK_FIRST, doubling)."""
        if pid in self.loops:
            return
        links: list[int] = []
        for path in loop_modules(pid, self.proc_root):
            links += self._attach_loop(path, pid)
        if links:
            self.loops[pid] = links
            self._loop_looks.pop(pid, None)
            log.debug("event loop probes attached to uvloop for process %d", pid)
        elif pid not in self._loop_looks:
            self._loop_looks[pid] = [time.monotonic() + LOOP_LOOK_FIRST, LOOP_LOOK_FIRST]

    def _look_again(self, now: float) -> None:
        for pid, look in list(self._loop_looks.items()):
            if now < look[0]:
                continue
            self._look_for_loop(pid)
            if pid in self._loop_looks:
                look[1] *= 2
                if look[1] > LOOP_LOOK_LAST:
                    del self._loop_looks[pid]  # a program that never runs uvloop
                else:
                    look[0] = now + look[1]

    def _attach_loop(self, path: str, pid: int) -> list[int]:
        """The loop probe on each of uvloop's entry helpers in `path`, for process `pid`."""
        if path not in self._loop_sites:
            try:
                offsets = file_offsets(path, LOOP_ENTRIES)
            except (OSError, ValueError) as exc:
                offsets = {}
                log.debug("uvloop module %s unreadable: %s", path, exc)
            if len(offsets) < len(LOOP_ENTRIES):  # a stripped build: no evidence there
                log.info("uvloop in %s not covered (no %s)", path,
                         ", ".join(sorted(set(LOOP_ENTRIES) - set(offsets))))
            self._loop_sites[path] = tuple(offsets.values()) or None
        links: list[int] = []
        for offset in self._loop_sites[path] or ():
            try:
                links.append(self.obj.attach_uprobe("loop_context_enter", path, offset,
                                                    pid=pid))
            except BPFError as exc:
                log.warning("uvloop probe on %s for process %d failed: %s", path, pid, exc)
        return links

    def _detach_loop(self, pid: int) -> None:
        self._loop_looks.pop(pid, None)
        for link in self.loops.pop(pid, ()):
            self.obj.detach(link)

    def _bump_epoch(self) -> None:
        """After a record left py_ctx_procs: threads that cached their thread state look at
        their process's record again at their next call (py_context.bpf.h)."""
        self._epoch = (self._epoch + 1) & 0xFFFFFFFF
        self._epoch_map.update(b"\0\0\0\0", self._epoch.to_bytes(4, "little"))

    def _file(self, path: str) -> int | None:
        """The interpreter file's record index (written to the kernel once), or None."""
        index = self.interpreters.get(path)
        if index is not None:
            return index
        index = len(self.interpreters)
        try:
            if index >= MAX_FILES:
                raise UnsupportedPython(f"more than {MAX_FILES} interpreter files")
            offset, record = interpreter_record(path)
        except (OSError, ValueError) as exc:
            log.info("contexts in %s not covered (%s)", path, exc)
            self.uncovered.add(path)
            return None
        self.obj.map("py_ctx_files").update(index.to_bytes(4, "little"), record)
        self.interpreters[path] = index
        self._sites[path] = offset
        return index

    def _attach(self, path: str, pid: int) -> list[int]:
        """The probe pair on `path` for process `pid` (-1: every process)."""
        index, offset = self.interpreters[path], self._sites[path]
        links = [self.obj.attach_uprobe("context_copy_enter", path, offset, pid=pid,
                                        cookie=index)]
        try:
            links.append(self.obj.attach_uprobe("context_copy_return", path, offset,
                                                retprobe=True, pid=pid, cookie=index))
        except BPFError:
            self.obj.detach(links[0])
            raise
        return links

    def _attach_process(self, pid: int, path: str) -> int:
        if path in self.shared:
            return 0
        if sum(1 for f, *_ in self.processes.values() if f == path) >= self.shared_after:
            return self._share(path)
        try:
            links = self._attach(path, pid)
        except BPFError as exc:
            if Path("/proc", str(pid)).exists():  # a process gone already needs none
                log.warning("context probes on %s for process %d failed: %s", path, pid, exc)
            return 0
        self.processes[pid] = [path, links, time.monotonic() + QUIET_S]
        self.attached += 1
        self._probed.update(pid.to_bytes(4, "little"), b"\x01")
        log.debug("context probes attached to %s for process %d", path, pid)
        return 1

    def _share(self, path: str) -> int:
        """Probe `path` for every process: first the file's pair, then each process's goes
        (no moment without probes)."""
        try:
            self._attach(path, -1)
        except BPFError as exc:
            log.warning("context probes on %s failed: %s", path, exc)
            self.uncovered.add(path)
            return 0
        self.shared.add(path)
        for pid in [p for p, (f, *_) in self.processes.items() if f == path]:
            self._detach_process(pid)
        log.info("context probes attached to %s for every process (more than %d need them)",
                 path, self.shared_after)
        return 1

    def _detach_process(self, pid: int) -> None:
        entry = self.processes.pop(pid, None)
        if entry is None:
            return
        for link in entry[1]:
            self.obj.detach(link)
        self._probed.delete(pid.to_bytes(4, "little"))
