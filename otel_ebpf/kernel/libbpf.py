"""A small ctypes binding over libbpf 1.x: the only functions the agent calls, typed once."""

from __future__ import annotations

import ctypes
import ctypes.util
import os
import threading
from collections import deque

c_void_p = ctypes.c_void_p
c_char_p = ctypes.c_char_p
c_int = ctypes.c_int
c_size_t = ctypes.c_size_t


class LibbpfMissing(RuntimeError):
    pass


def _load() -> ctypes.CDLL:
    for name in ("libbpf.so.1", ctypes.util.find_library("bpf") or ""):
        if not name:
            continue
        try:
            return ctypes.CDLL(name, use_errno=True)
        except OSError:
            continue
    raise LibbpfMissing(
        "libbpf.so.1 not found: install it (Debian/Ubuntu: apt-get install libbpf1)"
    )


lib = _load()

# (restype, argtypes) per function. Pointers to libbpf objects stay opaque (c_void_p).
_SIGNATURES: dict[str, tuple[object, list[object]]] = {
    "libbpf_major_version": (ctypes.c_uint32, []),
    "libbpf_minor_version": (ctypes.c_uint32, []),
    "libbpf_num_possible_cpus": (c_int, []),
    "libbpf_set_print": (c_void_p, [c_void_p]),
    # (prog type, helper id, opts=NULL) -> 1 supported, 0 not, < 0 could not tell
    "libbpf_probe_bpf_helper": (c_int, [c_int, c_int, c_void_p]),
    "bpf_object__open_file": (c_void_p, [c_char_p, c_void_p]),
    "bpf_object__load": (c_int, [c_void_p]),
    "bpf_object__close": (None, [c_void_p]),
    "bpf_object__find_map_by_name": (c_void_p, [c_void_p, c_char_p]),
    "bpf_object__find_program_by_name": (c_void_p, [c_void_p, c_char_p]),
    "bpf_object__next_program": (c_void_p, [c_void_p, c_void_p]),
    "bpf_object__next_map": (c_void_p, [c_void_p, c_void_p]),
    "bpf_program__name": (c_char_p, [c_void_p]),
    "bpf_program__section_name": (c_char_p, [c_void_p]),
    "bpf_program__set_autoload": (c_int, [c_void_p, ctypes.c_bool]),
    "bpf_program__attach": (c_void_p, [c_void_p]),
    "bpf_program__attach_tracepoint": (c_void_p, [c_void_p, c_char_p, c_char_p]),
    "bpf_program__attach_uprobe": (
        c_void_p,
        [c_void_p, ctypes.c_bool, c_int, c_char_p, c_size_t],
    ),
    # (prog, pid, binary, offset, struct bpf_uprobe_opts *): a cookie the program reads
    "bpf_program__attach_uprobe_opts": (c_void_p, [c_void_p, c_int, c_char_p, c_size_t,
                                                   c_void_p]),
    "bpf_program__attach_perf_event": (c_void_p, [c_void_p, c_int]),
    # (prog, cgroup directory fd) -> link: a cgroup program (sock_ops) for every socket of
    # that cgroup and its descendants, alongside other programs there (BPF_LINK_CREATE)
    "bpf_program__attach_cgroup": (c_void_p, [c_void_p, c_int]),
    "bpf_program__fd": (c_int, [c_void_p]),
    # (fd, struct bpf_prog_info * or another object's info, u32 *len): a prefix of it
    "bpf_obj_get_info_by_fd": (c_int, [c_int, c_void_p, ctypes.POINTER(ctypes.c_uint32)]),
    "bpf_link__destroy": (c_int, [c_void_p]),
    "bpf_map__name": (c_char_p, [c_void_p]),
    "bpf_map__fd": (c_int, [c_void_p]),
    "bpf_map__set_max_entries": (c_int, [c_void_p, ctypes.c_uint32]),
    # before load: the object's map is this existing map (shared between objects)
    "bpf_map__reuse_fd": (c_int, [c_void_p, c_int]),
    # (type, name, key size, value size, max entries, struct bpf_map_create_opts *) -> fd
    "bpf_map_create": (c_int, [c_int, c_char_p, ctypes.c_uint32, ctypes.c_uint32,
                               ctypes.c_uint32, c_void_p]),
    "bpf_map__max_entries": (ctypes.c_uint32, [c_void_p]),
    "bpf_map__value_size": (ctypes.c_uint32, [c_void_p]),
    "bpf_map__key_size": (ctypes.c_uint32, [c_void_p]),
    "bpf_map__set_initial_value": (c_int, [c_void_p, c_void_p, c_size_t]),
    "bpf_map__initial_value": (c_void_p, [c_void_p, ctypes.POINTER(c_size_t)]),
    "bpf_map_update_elem": (c_int, [c_int, c_void_p, c_void_p, ctypes.c_uint64]),
    "bpf_map_lookup_elem": (c_int, [c_int, c_void_p, c_void_p]),
    "bpf_map_delete_elem": (c_int, [c_int, c_void_p]),
    "bpf_map_get_next_key": (c_int, [c_int, c_void_p, c_void_p]),
    "ring_buffer__new": (c_void_p, [c_int, c_void_p, c_void_p, c_void_p]),
    "ring_buffer__add": (c_int, [c_void_p, c_int, c_void_p, c_void_p]),
    "ring_buffer__poll": (c_int, [c_void_p, c_int]),
    "ring_buffer__consume": (c_int, [c_void_p]),
    "ring_buffer__free": (None, [c_void_p]),
}

for _name, (_res, _args) in _SIGNATURES.items():
    _fn = getattr(lib, _name)
    _fn.restype = _res
    _fn.argtypes = _args



class MapCreateOpts(ctypes.Structure):
    """struct bpf_map_create_opts up to map_ifindex (libbpf 1.0's fields; `sz` says so)."""

    _fields_ = [("sz", c_size_t), ("btf_fd", ctypes.c_uint32),
                ("btf_key_type_id", ctypes.c_uint32), ("btf_value_type_id", ctypes.c_uint32),
                ("btf_vmlinux_value_type_id", ctypes.c_uint32),
                ("inner_map_fd", ctypes.c_uint32), ("map_flags", ctypes.c_uint32),
                ("map_extra", ctypes.c_uint64), ("numa_node", ctypes.c_uint32),
                ("map_ifindex", ctypes.c_uint32)]


class UprobeOpts(ctypes.Structure):
    """struct bpf_uprobe_opts up to retprobe (libbpf 1.0's fields; `sz` says so)."""

    _fields_ = [("sz", c_size_t), ("ref_ctr_offset", c_size_t),
                ("bpf_cookie", ctypes.c_uint64), ("retprobe", ctypes.c_bool)]


class ProgInfo(ctypes.Structure):
    """struct bpf_prog_info up to run_cnt (linux/bpf.h; the kernel fills the prefix asked
    for). run_time_ns and run_cnt grow only while kernel.bpf_stats_enabled is 1."""

    _fields_ = [("type", ctypes.c_uint32), ("id", ctypes.c_uint32),
                ("_head", ctypes.c_uint8 * 56), ("name", ctypes.c_char * 16),
                ("_middle", ctypes.c_uint8 * 112), ("run_time_ns", ctypes.c_uint64),
                ("run_cnt", ctypes.c_uint64)]


# libbpf calls this for every message it prints; we keep the last ones so a load error
# can show the verifier's own words.
PRINT_FN = ctypes.CFUNCTYPE(c_int, c_int, c_char_p, c_void_p)
LIBBPF_WARN, LIBBPF_INFO, LIBBPF_DEBUG = 0, 1, 2

_vsnprintf = ctypes.CDLL(None).vsnprintf
_vsnprintf.restype = c_int
_vsnprintf.argtypes = [c_char_p, c_size_t, c_char_p, c_void_p]


class LibbpfLog:
    """Collects libbpf's messages (verifier logs included), the last `keep` lines."""

    def __init__(self, keep: int = 400) -> None:
        self.lines: deque[str] = deque(maxlen=keep)
        self._lock = threading.Lock()
        self._buf = ctypes.create_string_buffer(4 << 20)  # verifier logs come in one piece

        def _print(level: int, fmt: bytes, va_list: int) -> int:
            with self._lock:
                n = _vsnprintf(self._buf, len(self._buf), fmt, va_list)
                text = self._buf.value.decode(errors="replace")
                for line in text.splitlines():
                    if line.strip():
                        self.lines.append(line)
            return max(n, 0)

        self._callback = PRINT_FN(_print)  # kept alive as long as this object
        lib.libbpf_set_print(ctypes.cast(self._callback, c_void_p))

    def tail(self, n: int = 25) -> list[str]:
        with self._lock:
            return list(self.lines)[-n:]

    def clear(self) -> None:
        with self._lock:
            self.lines.clear()


def errno_text(err: int | None = None) -> str:
    err = ctypes.get_errno() if err is None else err
    return f"{os.strerror(err)} (errno {err})"


def version() -> tuple[int, int]:
    return lib.libbpf_major_version(), lib.libbpf_minor_version()
