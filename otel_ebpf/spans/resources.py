"""Resource attributes of a traced process (service.name, process.*, container.id,
k8s.pod.uid), from /proc; pod names and owners from the pod list when one is given.

Everything is read from the outside: the process's own environment (as it was at exec:
/proc/PID/environ never shows later setenv calls), command line, executable and cgroup.
The command line names the service; process.command_args itself is exported only when
asked for (it is where secrets are passed; the executable already names the process),
and then redacted.
"""

from __future__ import annotations

import os
import socket
import threading
from collections import OrderedDict
from collections.abc import Callable
from urllib.parse import unquote

from otel_ebpf import __version__
from otel_ebpf.protocols.base import AttributeValue
from otel_ebpf.spans.cgroups import cgroup_ids, container_id
from otel_ebpf.spans.cmdline import PY_OPTS_WITH_VALUE, PYTHON, redact_args

__all__ = ["ProcessResources", "container_id", "parse_resource_attributes",
           "python_service_name"]

Attributes = dict[str, AttributeValue]

def python_service_name(args: list[str]) -> str | None:
    """`-m module` or the script's basename (without .py) of a Python command line.

    None when there is neither (`python -c ...`, a script on stdin, a bare REPL).
    """
    rest = iter(args[1:])
    for arg in rest:
        if arg == "--":
            arg = next(rest, "")
        elif arg.startswith("--"):  # of the long options, only this one takes a value
            if arg == "--check-hash-based-pycs":
                next(rest, None)
            continue
        elif arg.startswith("-") and arg != "-":
            # a cluster of one-letter flags; the first that takes a value ends it (-uBm mod)
            for j, flag in enumerate(arg[1:], start=1):
                if flag in PY_OPTS_WITH_VALUE:
                    value = arg[j + 1 :] or next(rest, "")
                    if flag == "m":
                        return value or None
                    if flag == "c":
                        return None
                    break
            continue
        name = os.path.basename(arg) if arg != "-" else ""
        return name.removesuffix(".py") or None
    return None


def parse_resource_attributes(value: str) -> dict[str, str]:
    """OTEL_RESOURCE_ATTRIBUTES (`k=v,k=v`, values percent-encoded), as the SDK reads it."""
    out: dict[str, str] = {}
    for item in value.split(","):
        key, sep, val = item.partition("=")
        key = key.strip()
        if sep and key:
            out[key] = unquote(val.strip())
    return out


class ProcessResources:
    """Resource attributes per process, cached by (pid, start time) so pid reuse never mixes.

    Call prime(pid) as soon as a process is seen: a short-lived process may be gone by
    the time its spans are exported, and then only what was cached is known.
    """

    def __init__(self, proc_root: str = "/proc", max_entries: int = 4096,
                 command_args: bool = False,
                 enrich: Callable[[Attributes], Attributes] | None = None) -> None:
        self._root = proc_root
        # adds what the pod list knows (spans/pods.py) at every look-up, so a process seen
        # before its pod was listed gets its names once they are known
        self._enrich = enrich
        self._command_args = command_args
        self._max = max_entries
        self._lock = threading.Lock()
        self._cache: OrderedDict[tuple[int, int], Attributes] = OrderedDict()
        self._latest: dict[int, tuple[int, int]] = {}  # pid -> its newest cache key
        self._host = socket.gethostname()

    def prime(self, pid: int, comm: str = "") -> None:
        self.get(pid, comm)

    def get(self, pid: int, comm: str = "") -> Attributes:
        """The process's resource attributes. Never raises; a vanished process gets its
        cached attributes, or a minimal set (pid, comm as service.name, host.name)."""
        attrs = self._get(pid, comm)
        return attrs if self._enrich is None else self._enrich(attrs)

    def _get(self, pid: int, comm: str) -> Attributes:
        try:
            start = self._start_time(pid)
        except (OSError, ValueError, IndexError):
            start = None
        with self._lock:
            key = (pid, start) if start is not None else self._latest.get(pid)
            if key is not None and (cached := self._cache.get(key)) is not None:
                self._cache.move_to_end(key)
                return cached
        if start is None:
            return self._minimal(pid, comm)
        attrs, complete = self._read(pid, comm)
        if complete:  # a zombie or a process mid-exit reads empty: don't remember that
            with self._lock:
                self._remember((pid, start), attrs)
        return attrs

    # -- internals

    def _remember(self, key: tuple[int, int], attrs: Attributes) -> None:
        self._cache[key] = attrs
        self._cache.move_to_end(key)
        self._latest[key[0]] = key
        while len(self._cache) > self._max:
            old, _ = self._cache.popitem(last=False)
            if self._latest.get(old[0]) == old:
                del self._latest[old[0]]

    def _path(self, pid: int, name: str) -> str:
        return os.path.join(self._root, str(pid), name)

    def _start_time(self, pid: int) -> int:
        with open(self._path(pid, "stat"), "rb") as f:
            stat = f.read()
        # field 2 (comm) may hold spaces and parentheses: count fields after the last ')'
        return int(stat[stat.rindex(b")") + 2 :].split()[19])  # field 22, starttime

    def _read_bytes(self, pid: int, name: str) -> bytes:
        try:
            with open(self._path(pid, name), "rb") as f:
                return f.read()
        except OSError:
            return b""

    def _minimal(self, pid: int, comm: str) -> Attributes:
        return {
            "service.name": comm or "unknown_service",
            "process.pid": pid,
            "host.name": self._host,
            "telemetry.distro.name": "otel-ebpf",
            "telemetry.distro.version": __version__,
        }

    def _read(self, pid: int, comm: str) -> tuple[Attributes, bool]:
        args = [a.decode(errors="replace") for a in self._read_bytes(pid, "cmdline").split(b"\0")]
        while args and not args[-1]:
            args.pop()
        environ = {}
        for entry in self._read_bytes(pid, "environ").split(b"\0"):
            key, sep, value = entry.partition(b"=")
            if sep and key in (b"OTEL_SERVICE_NAME", b"OTEL_RESOURCE_ATTRIBUTES"):
                environ[key.decode(errors="replace")] = value.decode(errors="replace")
        try:
            exe = os.readlink(self._path(pid, "exe")).removesuffix(" (deleted)")
        except OSError:
            exe = ""
        if not comm:
            comm = self._read_bytes(pid, "comm").decode(errors="replace").strip()

        attrs = self._minimal(pid, comm)
        if exe:
            attrs["process.executable.path"] = exe
            attrs["process.executable.name"] = os.path.basename(exe)
        if args and self._command_args:
            attrs["process.command_args"] = redact_args(args)
        cid, pod_uid = cgroup_ids(self._read_bytes(pid, "cgroup").decode(errors="replace"))
        if cid:
            attrs["container.id"] = cid
        if pod_uid:
            attrs["k8s.pod.uid"] = pod_uid
        attrs["service.name"] = self._derived_service_name(args, exe) or attrs["service.name"]
        # the process's own OTel settings win over what we derive, as they would in its SDK
        attrs.update(parse_resource_attributes(environ.get("OTEL_RESOURCE_ATTRIBUTES", "")))
        if environ.get("OTEL_SERVICE_NAME"):
            attrs["service.name"] = environ["OTEL_SERVICE_NAME"]
        return attrs, bool(args)

    @staticmethod
    def _derived_service_name(args: list[str], exe: str) -> str | None:
        names = [os.path.basename(p) for p in (exe, args[0] if args else "") if p]
        if any(PYTHON.fullmatch(n) for n in names):
            return python_service_name(args)
        return names[0] if names else None
