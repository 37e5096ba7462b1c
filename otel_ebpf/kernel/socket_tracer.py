"""The capture programs (bpf/socket_trace.bpf.c, bpf/ssl_trace.bpf.c, linked into
build/capture.bpf.o): configure, load, attach, drain."""

from __future__ import annotations

import errno
import logging
import os
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

from otel_ebpf import _fast

from . import abi
from .asyncio_probes import AsyncioProbes
from .libbpf import LibbpfLog, lib
from .loader import BPFError, BPFObject, RingBuffer, check_btf, ensure_tracefs
from .propagation import PROGRAM as PROPAGATION_PROGRAM
from .propagation import Propagation, PropagationSettings
from .ssl_probes import SSLProbes

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class CaptureSettings:
    capture_max: int = 4096
    ring_buffer_bytes: int = 16 << 20
    wakeup_fill_percent: int = 50
    max_connections: int = 65536
    pids: tuple[int, ...] = ()
    process_names: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()
    ignored_ports: tuple[int, ...] = ()  # never selected (the agent's own export endpoints)
    # connections that send "POST <one of these path prefixes>" (LLM APIs) are captured
    # with wide_capture bytes per message, plus the last tail_capture bytes of longer ones
    wide_prefixes: tuple[str, ...] = ()
    wide_capture: int = 0
    tail_capture: int = 0
    # pipes (an MCP server's stdin and stdout) of these processes, of processes that exec
    # one of these names, and of their children; both empty: no pipe is captured
    pipe_pids: tuple[int, ...] = ()
    pipe_process_names: tuple[str, ...] = ()
    # trace context in a TCP option (bpf/propagation.bpf.c); None: its program is not even
    # loaded (it needs Linux 5.10's header-option helpers)
    propagation: PropagationSettings | None = None

    @property
    def pipes(self) -> bool:
        return bool(self.pipe_pids or self.pipe_process_names)


def wide_keys(prefixes: Iterable[str]) -> tuple[bytes, ...]:
    """The kernel matches a request path by its first 8 bytes: one key per distinct prefix
    head. Prefixes shorter than 8 bytes cannot be matched there and are left out."""
    keys: list[bytes] = []
    for prefix in prefixes:
        key = prefix.encode()[:8]
        if len(key) < 8:
            log.warning("wide capture: path prefix %r is shorter than 8 bytes; the kernel "
                        "cannot recognize it (its messages keep the normal capture size)",
                        prefix)
        elif key not in keys:
            keys.append(key)
    if len(keys) > abi.MAX_WIDE_KEYS:
        log.warning("wide capture: %d path keys, the kernel takes %d: %s are left out",
                    len(keys), abi.MAX_WIDE_KEYS, keys[abi.MAX_WIDE_KEYS:])
    return tuple(keys[: abi.MAX_WIDE_KEYS])


def wakeup_step(ring_bytes: int, wakeup_bytes: int, cpus: int) -> int:
    """Bytes of data records a CPU sends between two looks at the ring's fill: a quarter of
    the room above the wake-up threshold, shared by all CPUs, so the fill passes the
    threshold by at most that quarter (plus a record per CPU) before the reader is woken.
    0 (look at every record) when there is no room above it."""
    return max(0, ring_bytes - wakeup_bytes) // (4 * max(1, cpus))


def matching_pids(names: Iterable[str], proc_root: str = "/proc") -> set[int]:
    """Running processes whose argv[0] or argv[1] basename is one of `names` (so
    `uvicorn` matches `python /venv/bin/uvicorn app:app`, whose comm is `python`)."""
    wanted = set(names)
    return {int(entry.name) for entry in os.scandir(proc_root)
            if entry.name.isdigit() and argv_matches(int(entry.name), wanted, proc_root)}


def argv_matches(pid: int, names: set[str], proc_root: str = "/proc") -> bool:
    """Whether the process's argv[0] or argv[1] basename is one of `names` (False when it is
    gone)."""
    try:
        argv = Path(proc_root, str(pid), "cmdline").read_bytes().split(b"\0")[:2]
    except OSError:
        return False
    return any(os.path.basename(a.decode(errors="replace")) in names for a in argv if a)


def _stat(proc_root: str, pid: str) -> tuple[str, int] | None:
    """(comm, parent pid) of a process from /proc/<pid>/stat, or None when it is gone."""
    try:
        text = Path(proc_root, pid, "stat").read_text(errors="replace")
    except OSError:
        return None
    comm, _, rest = text.partition("(")[2].rpartition(")")
    fields = rest.split()
    return (comm, int(fields[1])) if len(fields) > 1 else None


def pipe_selection(pids: Iterable[int], names: Iterable[str],
                   proc_root: str = "/proc") -> set[int]:
    """Running processes whose pipes are captured: `pids`, those whose command name (as the
    kernel keeps it, 15 bytes) or argv[0]/argv[1] basename is one of `names`, and every
    descendant of those (an MCP client's server subprocesses)."""
    wanted = {n[: abi.COMM_LEN - 1] for n in names}
    parents: dict[int, int] = {}
    selected = set(pids) | (matching_pids(names, proc_root) if wanted else set())
    for entry in os.scandir(proc_root):
        if not entry.name.isdigit():
            continue
        stat = _stat(proc_root, entry.name)
        if stat is None:
            continue
        pid = int(entry.name)
        parents[pid] = stat[1]
        if stat[0] in wanted:
            selected.add(pid)
    out = set(selected)
    for pid in parents:  # descendants: walk up to a selected ancestor (bounded depth)
        up, seen = parents.get(pid, 0), 0
        while up > 1 and seen < 64:
            if up in selected:
                out.add(pid)
                break
            up, seen = parents.get(up, 0), seen + 1
    out.discard(os.getpid())
    return out


class SocketTracer:
    """Loaded and attached socket capture; `poll()` returns decoded events."""

    def __init__(self, settings: CaptureSettings, libbpf_log: LibbpfLog) -> None:
        check_btf()
        ensure_tracefs()
        self.obj = BPFObject("capture", libbpf_log)
        try:
            self._configure(settings)
            self.obj.load()
            self._select_targets(settings)
            # the pipe programs (bpf/include/pipes.bpf.h) only when pipes are selected
            self.programs = self.obj.attach_all(
                skip=lambda name: name.startswith("pipes_") and not settings.pipes)
            # the compiled reader when built (no Python callback per record), else ctypes
            self.ring = (RingBuffer([self.obj.map("events")]) if _fast.ring is None
                         else _fast.ring.Ring([self.obj.map("events").fd]))
            self.asyncio = AsyncioProbes(self.obj)
            self.ssl = SSLProbes(self.obj)
            self.propagation = (None if settings.propagation is None
                                else Propagation(self.obj, settings.propagation))
        except BaseException:
            self.obj.close()
            raise
        self.counters = self.obj.map("counters")
        self.bad_records = 0
        self._mute_epoch = 0

    def _configure(self, s: CaptureSettings) -> None:
        if not 1 <= s.capture_max <= abi.MAX_CAPTURE:
            raise BPFError(f"capture size {s.capture_max} is outside 1..{abi.MAX_CAPTURE}")
        keys = wide_keys(s.wide_prefixes) if s.wide_capture else ()
        wide = max(s.wide_capture, s.capture_max) if keys else 0
        if wide > abi.MAX_CAPTURE or not 0 <= s.tail_capture <= abi.MAX_CAPTURE:
            raise BPFError(f"wide capture {wide} / tail {s.tail_capture} outside "
                           f"0..{abi.MAX_CAPTURE}")
        self.obj.set_autoload(PROPAGATION_PROGRAM, s.propagation is not None)
        if s.propagation is None:  # an LRU hash is allocated whole: keep each to one entry
            for name in ("prop_out", "prop_in", "prop_traces"):
                self.obj.set_max_entries(name, 1)
        self.obj.set_max_entries("events", s.ring_buffer_bytes)
        self.obj.set_max_entries("conns", s.max_connections)
        cpus = lib.libbpf_num_possible_cpus()
        self.obj.set_max_entries("scratch_buf", cpus)
        wakeup = s.ring_buffer_bytes * s.wakeup_fill_percent // 100
        by_name = matching_pids(s.process_names) if s.process_names else set()
        self._pids = set(s.pids) | by_name
        self._targets_full_said = False
        self.obj.set_rodata(
            abi.pack_agent_config(
                agent_pid=os.getpid(),
                capture_max=s.capture_max,
                filter_pids=bool(self._pids) or bool(s.process_names),
                filter_comms=bool(s.process_names),
                filter_ports=bool(s.ports),
                wakeup_bytes=wakeup,
                wakeup_step=wakeup_step(s.ring_buffer_bytes, wakeup, cpus),
                ignore_ports=bool(s.ignored_ports),
                wide_capture=wide,
                tail_capture=s.tail_capture if keys else 0,
                wide_keys=keys,
                pipes=s.pipes,
                propagate=s.propagation is not None,
                exec_by_argv=bool(s.process_names),
            )
        )

    def add_pid(self, pid: int) -> bool:
        """One more process to trace (a process name matched on the argv of a later exec);
        False when the kernel's table of selected processes is full (said once)."""
        if pid in self._pids:
            return True
        if len(self._pids) >= abi.MAX_TARGETS:
            if not self._targets_full_said:
                self._targets_full_said = True
                log.warning("targets: %d processes selected, the kernel takes %d: pid %d "
                            "and later matches are not traced", len(self._pids),
                            abi.MAX_TARGETS, pid)
            return False
        self._pids.add(pid)
        self.obj.map("target_pids").update(pid.to_bytes(4, "little"), b"\x01")
        return True

    def forget_pid(self, pid: int) -> None:
        """A selected process exited: its pid may come back as another program's."""
        if pid in self._pids:
            self._pids.discard(pid)
            self.obj.map("target_pids").delete(pid.to_bytes(4, "little"))

    def _select_targets(self, s: CaptureSettings) -> None:
        one = b"\x01"
        for pid in list(self._pids)[: abi.MAX_TARGETS]:
            self.obj.map("target_pids").update(pid.to_bytes(4, "little"), one)
        for name in s.process_names[: abi.MAX_TARGETS]:
            key = name.encode()[: abi.COMM_LEN - 1].ljust(abi.COMM_LEN, b"\0")
            self.obj.map("target_comms").update(key, one)
        for port in s.ports[: abi.MAX_TARGETS]:
            self.obj.map("target_ports").update(port.to_bytes(2, "little"), one)
        for port in s.ignored_ports[: abi.MAX_TARGETS]:
            self.obj.map("ignored_ports").update(port.to_bytes(2, "little"), one)
        if s.pipes:
            self._select_pipes(s)
        if len(self._pids) > abi.MAX_TARGETS or len(s.ports) > abi.MAX_TARGETS:
            log.warning("more than %d pids or ports selected; the rest are ignored",
                        abi.MAX_TARGETS)

    def _select_pipes(self, s: CaptureSettings) -> None:
        """Processes whose pipes are captured: the configured pids, the running processes
        of the configured names, and their descendants; later ones the kernel adds (at
        exec of a name, at fork of a selected process)."""
        one = b"\x01"
        comms = self.obj.map("pipe_comms")
        for name in s.pipe_process_names[: abi.MAX_TARGETS]:
            comms.update(name.encode()[: abi.COMM_LEN - 1].ljust(abi.COMM_LEN, b"\0"), one)
        pids = self.pipe_pids = pipe_selection(s.pipe_pids, s.pipe_process_names)
        table = self.obj.map("pipe_pids")
        for pid in sorted(pids):
            table.update(pid.to_bytes(4, "little"), one)

    def poll(self, timeout_ms: int) -> list[abi.Event]:
        if isinstance(self.ring, RingBuffer):
            events, bad = abi.decode_each(self.ring.drain(timeout_ms))
        else:
            events, raw, rc = self.ring.poll(timeout_ms)
            if rc < 0 and -rc != errno.EINTR:  # a signal arriving is not an error
                raise BPFError(f"ring buffer poll failed: {os.strerror(-rc)} (errno {-rc})")
            events, bad = abi.finish_raw(events) if raw else (events, 0)
        if bad:
            self.bad_records += bad
            log.debug("%d bad ring-buffer records", bad)
        return events

    def mute(self, keys: list[tuple[int, int, int]]) -> None:
        """Stop tracing these connections (pid, fd, generation): no parser wants them."""
        if not keys:
            return
        table = self.obj.map("muted")
        for pid, fd, gen in keys:
            table.update(((pid << 32) | (fd & 0xFFFFFFFF)).to_bytes(8, "little"),
                         gen.to_bytes(8, "little"))
        # after the entries: a connection looks at `muted` once the epoch has moved
        self._mute_epoch += 1
        self.obj.map("mute_epoch").update(bytes(4), self._mute_epoch.to_bytes(8, "little"))

    def kernel_counters(self) -> dict[str, list[int]]:
        """The per-CPU counters of the BPF program, by name (one value per CPU)."""
        return {
            name: self.counters.lookup_percpu_u64(idx) for idx, name in abi.COUNTER_NAMES.items()
        }

    def close(self) -> None:
        self.ring.close()
        self.obj.close()
