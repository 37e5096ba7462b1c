"""Raw samples -> merged stacks of named frames: kernel addresses by /proc/kallsyms, user
addresses by /proc/PID/maps and ELF symbols (unknown ones as module+offset), Python code
objects by reading the interpreter's objects; each process's state is kept until it exits.
One bad sample, address or file costs only its own frames: each step is guarded, and what
failed is counted by (stage, reason) through `on_failure`."""

from __future__ import annotations

import logging
import os
import platform
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass

from otel_ebpf.kernel.cpu_sampler import PY_F_ENTRY, RawSample

from .demangle import demangle
from .elf import ElfCache, follows_call, read_file
from .frames import KERNEL, NATIVE, PYTHON, Frame, merge, merge_dispatched, python_groups
from .kallsyms import KernelSymbols
from .procmaps import ProcessMaps
from .python_procs import CodeNames, Interpreter, find_interpreter

log = logging.getLogger(__name__)

MAX_FRAME_CACHE = 200_000


@dataclass(frozen=True, slots=True)
class Stack:
    pid: int
    tid: int
    ts_ns: int
    comm: str
    frames: tuple[Frame, ...]   # innermost first
    # a worker thread's sample with the Python frames of this thread, which handed it the
    # work (0: the thread's own frames, or none)
    dispatcher: int = 0


# (stage, reason): stage is where it failed (kernel, native, python, process_setup), the
# reason an exception's type or a named condition (python_procs' reasons)
OnFailure = Callable[[str, str], None]


class _Process:
    def __init__(self, pid: int, elfs: ElfCache, fail: OnFailure) -> None:
        self.pid = pid
        self.maps = ProcessMaps(pid)
        self.frames: dict[int, Frame] = {}
        self.python: CodeNames | None = None
        try:
            interp = find_interpreter(pid, self.maps, elfs)
            if interp is not None:
                self.python = CodeNames(interp, on_failure=lambda r: fail("python", r))
        except OSError as exc:  # the process exited, or its files are not ours to read
            log.debug("pid %d: interpreter not readable: %s", pid, exc)
        except Exception as exc:  # a malformed ELF file, an unexpected layout
            fail("process_setup", type(exc).__name__)
            log.debug("pid %d: interpreter not recognised: %r", pid, exc)

    def close(self) -> None:
        if self.python is not None:
            self.python.close()


class Symbolizer:
    """`on_python(interpreter)` is called once per Python process found (the sampler then
    walks its frames in the kernel)."""

    def __init__(self, on_python: Callable[[Interpreter], None] | None = None,
                 kallsyms: str = "/proc/kallsyms", on_failure: OnFailure | None = None) -> None:
        self.elfs = ElfCache()
        self.kernel = KernelSymbols(kallsyms)
        self._kcache: dict[int, Frame] = {}
        self._procs: dict[int, _Process] = {}
        self.on_python = on_python
        self.on_failure = on_failure
        self.failures: Counter[tuple[str, str]] = Counter()
        self.machine = platform.machine()

    def fail(self, stage: str, reason: str) -> None:
        """Count a failed step; the first of each kind is logged."""
        key = (stage, reason)
        if key not in self.failures:
            log.warning("profiler: a %s step failed (%s); it is skipped and counted as "
                        "otel_ebpf.profiles.errors", stage, reason)
        self.failures[key] += 1
        if self.on_failure is not None:
            self.on_failure(stage, reason)

    def process(self, pid: int) -> _Process:
        proc = self._procs.get(pid)
        if proc is None:
            proc = self._procs[pid] = _Process(pid, self.elfs, self.fail)
            if proc.python is not None and self.on_python is not None:
                try:
                    self.on_python(proc.python.interp)
                except Exception as exc:  # the kernel map full, say: no Python frames
                    self.fail("process_setup", type(exc).__name__)
        return proc

    def stack(self, s: RawSample) -> Stack:
        """The sample's frames; a part that cannot be read (kernel, native or Python) is
        left out and counted, the others are kept."""
        kernel = self._guarded("kernel", lambda: [self._kernel_frame(a) for a in s.kstack])
        native = self._guarded("native", lambda: self.native(s.pid, s.ustack))
        groups = self._guarded("python", lambda: self.python(s.pid, s.py) or []) if s.py else []
        if s.dispatched and groups:
            return Stack(s.pid, s.tid, s.ts_ns, s.comm,
                         tuple(merge_dispatched(kernel, native, groups)), s.py_tid)
        return Stack(s.pid, s.tid, s.ts_ns, s.comm, tuple(merge(kernel, native, groups)))

    def _guarded(self, stage: str, step: Callable[[], list]) -> list:
        try:
            return step()
        except Exception as exc:
            self.fail(stage, type(exc).__name__)
            return []

    def native(self, pid: int, ips: tuple[int, ...]) -> list[Frame]:
        """User frames of return addresses `ips` (innermost first) of process `pid`."""
        return self._native(self.process(pid), ips)

    def python(self, pid: int, py: tuple[int, ...]) -> list[list[Frame]] | None:
        """Python frames as the kernel walked them (code object addresses, PY_F_ENTRY on
        each evaluator call's last frame), named and split by python_groups; None when
        `pid` runs no known interpreter."""
        names = self.process(pid).python
        if names is None:
            return None
        return python_groups([self._python_frame(names, a & ~PY_F_ENTRY) for a in py],
                             [bool(a & PY_F_ENTRY) for a in py])

    def _python_frame(self, names: CodeNames, code: int) -> Frame:
        try:
            return names.frame(code)
        except Exception as exc:  # this frame unnamed, the others of the sample kept
            self.fail("python", type(exc).__name__)
            return Frame(f"<python code {code:#x}>", "<unknown>", PYTHON)

    def _kernel_frame(self, addr: int) -> Frame:
        f = self._kcache.get(addr)
        if f is None:
            name = self.kernel.lookup(addr)
            f = Frame(name or f"[kernel]+{addr:#x}", "[kernel]", KERNEL, addr)
            if len(self._kcache) >= MAX_FRAME_CACHE:
                self._kcache.clear()
            self._kcache[addr] = f
        return f

    def _native(self, proc: _Process, ips: tuple[int, ...]) -> list[Frame]:
        """User frames; the unwind is cut at the first return address that does not
        follow a call (the frame-pointer walk went astray in code without them)."""
        out = []
        for i, addr in enumerate(ips):
            try:
                f = self._user_frame(proc, addr, return_address=i > 0)
            except Exception as exc:  # one file that cannot be read: this frame only
                self.fail("native", type(exc).__name__)
                f = Frame(f"[unknown]+{addr:#x}", "[unknown]", NATIVE, addr)
            if f is None:
                break
            out.append(f)
        return out

    def _user_frame(self, proc: _Process, addr: int, return_address: bool) -> Frame | None:
        key = addr if not return_address else -addr  # a leaf address needs no call check
        if key in proc.frames:
            return proc.frames[key]
        f = self._resolve(proc, addr, return_address)
        if len(proc.frames) >= MAX_FRAME_CACHE:
            proc.frames.clear()
        proc.frames[key] = f
        return f

    def _resolve(self, proc: _Process, addr: int, return_address: bool) -> Frame | None:
        m = proc.maps.find(addr)
        if m is None:
            return None if return_address else Frame(f"[unknown]+{addr:#x}", "[unknown]",
                                                     NATIVE, addr)
        if return_address and not m.executable:
            return None
        file_off = addr - m.start + m.offset
        if return_address and m.is_file and not follows_call(
                read_file(proc.maps.host_path(m), file_off - 7, 7), self.machine):
            return None
        if not m.is_file:
            # [vdso], [anon] (JIT code)...: named by the mapping
            module = m.path or "[anon]"
            return Frame(f"{module}+{addr - m.start:#x}", module, NATIVE, addr - m.start)
        elf = self.elfs.get(proc.maps.host_path(m))
        vaddr = elf.vaddr_of_offset(file_off) if elf else None
        sym = elf.symbol(vaddr) if elf and vaddr is not None else None
        base = os.path.basename(m.path)
        if sym is None:
            return Frame(f"{base}+{file_off:#x}", m.path, NATIVE, file_off)
        return Frame(demangle(sym[0]), m.path, NATIVE, vaddr if vaddr is not None else file_off)

    def forget(self, pid: int) -> None:
        proc = self._procs.pop(pid, None)
        if proc is not None:
            proc.close()

    def sweep(self) -> list[int]:
        """Forget processes that exited; returns their pids."""
        gone = [pid for pid in self._procs if not os.path.exists(f"/proc/{pid}")]
        for pid in gone:
            try:
                self.forget(pid)
            except OSError as exc:
                self.fail("process_exit", type(exc).__name__)
        return gone

    def close(self) -> None:
        for pid in list(self._procs):
            self.forget(pid)
