"""Opens, configures, loads and attaches BPF objects; every failure says what to fix."""

from __future__ import annotations

import ctypes
import os
import subprocess
from collections.abc import Callable, Iterator
from pathlib import Path

from . import libbpf
from .libbpf import UprobeOpts, errno_text, lib

TRACEFS = Path("/sys/kernel/tracing")
BTF_PATH = Path("/sys/kernel/btf/vmlinux")
BPF_ANY = 0


class BPFError(RuntimeError):
    """Loading or attaching failed; the message names the cause and the fix."""


def bpf_dir() -> Path:
    """Where the compiled objects are: $OTEL_EBPF_BPF_DIR, else bpf/build in the source tree."""
    env = os.environ.get("OTEL_EBPF_BPF_DIR")
    if env:
        return Path(env)
    return Path(__file__).resolve().parents[2] / "bpf" / "build"


def object_path(name: str) -> Path:
    path = bpf_dir() / f"{name}.bpf.o"
    if not path.is_file():
        raise BPFError(
            f"BPF object {path} not found: build it with `make -C bpf` "
            "(needs clang, llvm, libbpf-dev and bpftool; `make run` installs them)"
        )
    return path


def ensure_tracefs() -> Path:
    """Tracepoint attachment reads event ids from tracefs; mount it when absent."""
    if (TRACEFS / "events").is_dir():
        return TRACEFS
    debugfs = Path("/sys/kernel/debug/tracing")
    if (debugfs / "events").is_dir():
        return debugfs
    proc = subprocess.run(
        ["mount", "-t", "tracefs", "nodev", str(TRACEFS)], capture_output=True, text=True
    )
    if proc.returncode != 0 or not (TRACEFS / "events").is_dir():
        raise BPFError(
            f"tracefs is not mounted at {TRACEFS} and mounting it failed "
            f"({proc.stderr.strip() or 'no events directory'}); run as root or mount it: "
            f"mount -t tracefs nodev {TRACEFS}"
        )
    return TRACEFS


def check_btf() -> None:
    if not BTF_PATH.is_file():
        raise BPFError(
            f"{BTF_PATH} is missing: the kernel was built without CONFIG_DEBUG_INFO_BTF, "
            "which CO-RE programs need (kernels 5.8+ from most distributions have it)"
        )


class Map:
    """A BPF map by file descriptor; keys and values are raw bytes of the right size."""

    def __init__(self, ptr: int) -> None:
        self.ptr = ptr
        self.name = lib.bpf_map__name(ptr).decode()

    @property
    def fd(self) -> int:
        return lib.bpf_map__fd(self.ptr)

    @property
    def key_size(self) -> int:
        return lib.bpf_map__key_size(self.ptr)

    @property
    def value_size(self) -> int:
        return lib.bpf_map__value_size(self.ptr)

    def update(self, key: bytes, value: bytes, flags: int = BPF_ANY) -> None:
        if lib.bpf_map_update_elem(self.fd, key, value, flags) != 0:
            raise BPFError(f"updating map {self.name} failed: {errno_text()}")

    def lookup(self, key: bytes, value_size: int | None = None) -> bytes | None:
        out = ctypes.create_string_buffer(value_size or self.value_size)
        if lib.bpf_map_lookup_elem(self.fd, key, out) != 0:
            return None
        return out.raw

    def delete(self, key: bytes) -> bool:
        return lib.bpf_map_delete_elem(self.fd, key) == 0

    def keys(self, limit: int | None = None) -> list[bytes]:
        """Every key of a hash map (at most `limit`), as the kernel iterates them. Keys
        added or removed meanwhile may be seen or missed, never repeated endlessly."""
        size = self.key_size
        out: list[bytes] = []
        prev = None
        nxt = ctypes.create_string_buffer(size)
        bound = limit if limit is not None else lib.bpf_map__max_entries(self.ptr)
        while len(out) < bound and lib.bpf_map_get_next_key(self.fd, prev, nxt) == 0:
            out.append(nxt.raw)
            prev = ctypes.create_string_buffer(nxt.raw, size)
        return out

    def lookup_percpu_u64(self, index: int) -> list[int]:
        """Per-CPU array of u64: one value per possible CPU."""
        ncpus = lib.libbpf_num_possible_cpus()
        raw = self.lookup(index.to_bytes(4, "little"), value_size=8 * ncpus)
        if raw is None:
            return [0] * ncpus
        return [int.from_bytes(raw[i * 8 : i * 8 + 8], "little") for i in range(ncpus)]


class BPFObject:
    """One .bpf.o: open -> configure (maps, .rodata) -> load -> attach -> close."""

    def __init__(self, name: str, log: libbpf.LibbpfLog, path: Path | None = None) -> None:
        """`name`'s object in bpf_dir(), or the object at `path` (a bench's own)."""
        self.name = name
        self.log = log
        self.path = path or object_path(name)
        self.links: list[int] = []
        self.ptr = lib.bpf_object__open_file(str(self.path).encode(), None)
        if not self.ptr:
            raise BPFError(f"opening {self.path} failed: {errno_text()}")

    def maps(self) -> Iterator[Map]:
        m = lib.bpf_object__next_map(self.ptr, None)
        while m:
            yield Map(m)
            m = lib.bpf_object__next_map(self.ptr, m)

    def map(self, name: str) -> Map:
        ptr = lib.bpf_object__find_map_by_name(self.ptr, name.encode())
        if not ptr:
            raise BPFError(f"{self.path} has no map {name!r} (stale build? run `make -C bpf`)")
        return Map(ptr)

    def programs(self) -> Iterator[tuple[int, str, str]]:
        p = lib.bpf_object__next_program(self.ptr, None)
        while p:
            yield p, lib.bpf_program__name(p).decode(), lib.bpf_program__section_name(p).decode()
            p = lib.bpf_object__next_program(self.ptr, p)

    def set_max_entries(self, map_name: str, n: int) -> None:
        if lib.bpf_map__set_max_entries(self.map(map_name).ptr, n) != 0:
            raise BPFError(f"setting {map_name} size to {n} failed: {errno_text()}")

    def set_rodata(self, data: bytes) -> None:
        """Write the `const volatile` settings (struct agent_config) before load."""
        for m in self.maps():
            if m.name.endswith(".rodata"):
                if m.value_size != len(data):
                    raise BPFError(
                        f"{self.path}: .rodata is {m.value_size} bytes but the agent's "
                        f"settings are {len(data)}: the object and the agent disagree "
                        "(rebuild with `make -C bpf`)"
                    )
                if lib.bpf_map__set_initial_value(m.ptr, data, len(data)) != 0:
                    raise BPFError(f"setting {m.name} failed: {errno_text()}")
                return
        raise BPFError(f"{self.path} has no .rodata settings section")

    def load(self) -> None:
        self.log.clear()
        if lib.bpf_object__load(self.ptr) != 0:
            err = ctypes.get_errno()
            raise BPFError(self._load_failure(err))

    def _load_failure(self, err: int) -> str:
        tail = "\n".join("    " + line for line in self.log.tail(20))
        cause = {
            1: "not permitted: run as root, or with CAP_BPF, CAP_PERFMON and CAP_SYS_RESOURCE",
            13: "permission denied by the verifier or a security module",
            7: "the verifier's log did not fit",
            22: "invalid: the kernel may be too old (5.8+ with BTF is needed)",
        }.get(err, errno_text(err))
        return f"loading {self.path.name} failed: {cause}\n  libbpf said (last lines):\n{tail}"

    def attach_all(self, skip: Callable[[str], bool] = lambda name: False) -> int:
        """Attach every program whose section names its target (tracepoints...). Bare
        `uprobe`/`uretprobe` sections name none: attach_uprobe() places them; a `sockops`
        program goes to the cgroup its user names (attach_cgroup()), never by default."""
        for prog, name, section in self.programs():
            if skip(name) or section in ("uprobe", "uretprobe", "sockops"):
                continue
            link = lib.bpf_program__attach(prog)
            if not link:
                err = ctypes.get_errno()
                raise BPFError(
                    f"attaching {name} ({section}) failed: {errno_text(err)}"
                    + ("; is tracefs mounted?" if section.startswith("tracepoint") else "")
                )
            self.links.append(link)
        return len(self.links)

    def _program(self, name: str) -> int:
        prog = lib.bpf_object__find_program_by_name(self.ptr, name.encode())
        if not prog:
            raise BPFError(f"{self.path} has no program {name!r} (stale build? `make -C bpf`)")
        return prog

    def _keep(self, link: int | None, what: str) -> int:
        if not link:
            raise BPFError(f"{what} failed: {errno_text()}")
        self.links.append(link)
        return link

    def attach_uprobe(
        self, program: str, binary: str, offset: int, retprobe: bool = False, pid: int = -1,
        cookie: int | None = None,
    ) -> int:
        """uprobe (or uretprobe) on binary+offset, for every process (pid -1) or one; a
        `cookie` is what bpf_get_attach_cookie() returns in the program."""
        if cookie is None:
            link = lib.bpf_program__attach_uprobe(self._program(program), retprobe, pid,
                                                  binary.encode(), offset)
        else:
            opts = UprobeOpts(sz=ctypes.sizeof(UprobeOpts), bpf_cookie=cookie,
                              retprobe=retprobe)
            link = lib.bpf_program__attach_uprobe_opts(self._program(program), pid,
                                                       binary.encode(), offset,
                                                       ctypes.byref(opts))
        return self._keep(link, f"uprobe {program} on {binary}+{offset:#x}")

    def detach(self, link: int) -> None:
        """Destroy one link made by this object: its probe is removed from the kernel (for a
        uprobe, the breakpoint leaves every process's copy of the file)."""
        self.links.remove(link)
        lib.bpf_link__destroy(link)

    def attach(self, program: str) -> int:
        """One program whose section names its target (raw_tp/..., tracepoint/...)."""
        return self._keep(lib.bpf_program__attach(self._program(program)), f"attaching {program}")

    def attach_cgroup(self, program: str, cgroup: str) -> int:
        """A cgroup program (sock_ops) on the cgroup v2 directory `cgroup`: it runs for the
        sockets of every process in it and in its descendants. The link holds it there (the
        directory's fd is not needed after)."""
        try:
            fd = os.open(cgroup, os.O_RDONLY | os.O_DIRECTORY)
        except OSError as exc:
            raise BPFError(f"opening cgroup {cgroup} failed: {exc.strerror} (a cgroup v2 "
                           "directory is needed: see the cgroup2 line of /proc/mounts)") from None
        try:
            link = lib.bpf_program__attach_cgroup(self._program(program), fd)
            return self._keep(link, f"attaching {program} to cgroup {cgroup}")
        finally:
            os.close(fd)

    def program_stats(self, program: str) -> tuple[int, int, int]:
        """(id, run count, run time in ns) of a loaded program; the two last grow only while
        the sysctl kernel.bpf_stats_enabled is 1."""
        info = libbpf.ProgInfo()
        size = ctypes.c_uint32(ctypes.sizeof(info))
        fd = lib.bpf_program__fd(self._program(program))
        if fd < 0 or lib.bpf_obj_get_info_by_fd(fd, ctypes.byref(info), ctypes.byref(size)):
            raise BPFError(f"reading {program}'s info failed: {errno_text()}")
        return info.id, info.run_cnt, info.run_time_ns

    def attach_perf_event(self, program: str, perf_fd: int) -> int:
        link = lib.bpf_program__attach_perf_event(self._program(program), perf_fd)
        return self._keep(link, f"attaching {program} to perf event {perf_fd}")

    def set_autoload(self, program: str, enabled: bool) -> None:
        """Before load: leave a program out (a probe whose target is absent, say)."""
        lib.bpf_program__set_autoload(self._program(program), enabled)

    def close(self) -> None:
        for link in self.links:
            lib.bpf_link__destroy(link)
        self.links.clear()
        if self.ptr:
            lib.bpf_object__close(self.ptr)
            self.ptr = None


SAMPLE_FN = ctypes.CFUNCTYPE(ctypes.c_int, ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t)


class RingBuffer:
    """Drains BPF ring buffers in batches: poll (sleep until a forced wake-up or the
    timeout), then consume everything; each record is copied out as bytes."""

    def __init__(self, maps: list[Map]) -> None:
        self.batch: list[bytes] = []
        string_at = ctypes.string_at
        append = self.batch.append

        def _sample(_ctx: int, data: int, size: int) -> int:
            append(string_at(data, size))
            return 0

        self._callback = SAMPLE_FN(_sample)
        self.ptr = lib.ring_buffer__new(maps[0].fd, self._callback, None, None)
        if not self.ptr:
            raise BPFError(f"creating the ring buffer reader failed: {errno_text()}")
        for m in maps[1:]:
            if lib.ring_buffer__add(self.ptr, m.fd, self._callback, None) != 0:
                raise BPFError(f"adding ring buffer {m.name} failed: {errno_text()}")

    def drain(self, timeout_ms: int) -> list[bytes]:
        """Wait up to timeout_ms, then return every record waiting (may be empty)."""
        self.batch.clear()
        rc = lib.ring_buffer__poll(self.ptr, timeout_ms)
        if rc < 0 and -rc != 4:  # EINTR is a signal arriving: not an error
            raise BPFError(f"ring buffer poll failed: {errno_text(-rc)}")
        lib.ring_buffer__consume(self.ptr)
        out = list(self.batch)
        self.batch.clear()
        return out

    def close(self) -> None:
        if self.ptr:
            lib.ring_buffer__free(self.ptr)
            self.ptr = None
