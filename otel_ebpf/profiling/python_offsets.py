"""Where CPython 3.11, 3.12 and 3.13 keep thread states, frames and code objects (x86-64
and aarch64 LP64 layouts; field names as in CPython's headers).

3.13+ describes itself: `_PyRuntime` starts with `_Py_DebugOffsets` (cookie "xdebugpy"),
read here from the interpreter's ELF file. 3.11 and 3.12 do not, so their offsets are
tables taken from the interpreters' DWARF (`ptype/o` of PyThreadState, _PyInterpreterFrame,
PyCodeObject...) and checked by tests/unit/test_python_offsets.py against the DWARF of
every interpreter at hand and by walking a live interpreter's frames.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

NO_FIELD = 0xFFFFFFFF


@dataclass(frozen=True, slots=True)
class PyOffsets:
    """What the kernel walk needs (bpf/include/profile_abi.h struct py_offsets) and what
    user space needs to name a code object."""

    version: tuple[int, int]
    # kernel walk
    interp_head: int
    threads_head: int
    tstate_next: int
    tstate_native_tid: int
    tstate_frame: int       # tstate->cframe (3.11/3.12) or tstate->current_frame (3.13)
    cframe_current: int     # _PyCFrame.current_frame, NO_FIELD from 3.13
    frame_previous: int
    frame_code: int
    frame_owner: int
    frame_is_entry: int     # 3.11 only
    # user space: code objects and their strings
    code_filename: int
    code_name: int
    code_qualname: int
    code_firstlineno: int
    unicode_state: int      # PyASCIIObject.state (a bit field)
    unicode_length: int
    ascii_size: int         # sizeof(PyASCIIObject): where compact ASCII data starts
    compact_size: int       # sizeof(PyCompactUnicodeObject): compact non-ASCII data

    def kernel_fields(self) -> dict[str, int]:
        return {k: getattr(self, k) for k in (
            "interp_head", "threads_head", "tstate_next", "tstate_native_tid",
            "tstate_frame", "cframe_current", "frame_previous", "frame_code",
            "frame_owner", "frame_is_entry")}


# From the DWARF of CPython 3.11.7 and 3.12.1 (pyenv builds); the layouts of these structs
# do not change within a minor version (CPython keeps internal ABI per minor release).
TABLES: dict[tuple[int, int], PyOffsets] = {
    (3, 11): PyOffsets(
        version=(3, 11), interp_head=0x28, threads_head=0x10, tstate_next=8,
        tstate_native_tid=160, tstate_frame=56, cframe_current=8, frame_previous=48,
        frame_code=32, frame_owner=69, frame_is_entry=68,
        code_filename=112, code_name=120, code_qualname=128, code_firstlineno=72,
        unicode_state=32, unicode_length=16, ascii_size=48, compact_size=72,
    ),
    (3, 12): PyOffsets(
        version=(3, 12), interp_head=0x28, threads_head=0x48, tstate_next=8,
        tstate_native_tid=144, tstate_frame=56, cframe_current=0, frame_previous=8,
        frame_code=0, frame_owner=70, frame_is_entry=NO_FIELD,
        code_filename=112, code_name=120, code_qualname=128, code_firstlineno=68,
        unicode_state=32, unicode_length=16, ascii_size=40, compact_size=56,
    ),
}

DEBUG_COOKIE = b"xdebugpy"
# _Py_DebugOffsets (Include/internal/pycore_runtime.h, 3.13): u64 fields after the 8-byte
# cookie, in this order; only the first sections matter here.
_DEBUG_FIELDS = (
    "version", "free_threaded",
    "rt_size", "rt_finalizing", "rt_interpreters_head",
    "is_size", "is_id", "is_next", "is_threads_head", "is_gc", "is_imports_modules",
    "is_sysdict", "is_builtins", "is_ceval_gil", "is_gil_runtime_state",
    "is_gil_runtime_state_enabled", "is_gil_runtime_state_locked",
    "is_gil_runtime_state_holder",
    "ts_size", "ts_prev", "ts_next", "ts_interp", "ts_current_frame", "ts_thread_id",
    "ts_native_thread_id", "ts_datastack_chunk", "ts_status",
    "fr_size", "fr_previous", "fr_executable", "fr_instr_ptr", "fr_localsplus", "fr_owner",
    "co_size", "co_filename", "co_name", "co_qualname", "co_linetable", "co_firstlineno",
    "co_argcount", "co_localsplusnames", "co_localspluskinds", "co_code_adaptive",
    "po_size", "po_ob_type",
    "ty_size", "ty_tp_name", "ty_tp_repr", "ty_tp_flags",
    "tu_size", "tu_ob_item", "tu_ob_size",
    "li_size", "li_ob_item", "li_ob_size",
    "di_size", "di_ma_keys", "di_ma_values",
    "fl_size", "fl_ob_fval",
    "lo_size", "lo_lv_tag", "lo_ob_digit",
    "by_size", "by_ob_size", "by_ob_sval",
    "un_size", "un_state", "un_length", "un_asciiobject_size",
)
DEBUG_OFFSETS_SIZE = 8 + 8 * len(_DEBUG_FIELDS)


class UnsupportedPython(ValueError):
    pass


def from_debug_offsets(raw: bytes) -> PyOffsets:
    """PyOffsets from the bytes of `_Py_DebugOffsets` (the start of `_PyRuntime`), 3.13."""
    if len(raw) < DEBUG_OFFSETS_SIZE or raw[:8] != DEBUG_COOKIE:
        raise UnsupportedPython("no _Py_DebugOffsets (cookie 'xdebugpy') at _PyRuntime")
    values = struct.unpack_from(f"<{len(_DEBUG_FIELDS)}Q", raw, 8)
    d = dict(zip(_DEBUG_FIELDS, values, strict=True))
    version = (d["version"] >> 24 & 0xFF, d["version"] >> 16 & 0xFF)
    if version != (3, 13):
        # 3.14 reorders and extends the struct; its layout must be read by its own table
        raise UnsupportedPython(f"_Py_DebugOffsets of Python {version[0]}.{version[1]}: "
                                "only 3.13's layout is known")
    if d["free_threaded"]:
        raise UnsupportedPython("free-threaded CPython (3.13t) is not supported")
    # compact non-ASCII strings start after PyCompactUnicodeObject: utf8_length and utf8
    # follow the PyASCIIObject header (two 8-byte fields)
    return PyOffsets(
        version=version, interp_head=d["rt_interpreters_head"],
        threads_head=d["is_threads_head"], tstate_next=d["ts_next"],
        tstate_native_tid=d["ts_native_thread_id"], tstate_frame=d["ts_current_frame"],
        cframe_current=NO_FIELD, frame_previous=d["fr_previous"],
        frame_code=d["fr_executable"], frame_owner=d["fr_owner"], frame_is_entry=NO_FIELD,
        code_filename=d["co_filename"], code_name=d["co_name"],
        code_qualname=d["co_qualname"], code_firstlineno=d["co_firstlineno"],
        unicode_state=d["un_state"], unicode_length=d["un_length"],
        ascii_size=d["un_asciiobject_size"], compact_size=d["un_asciiobject_size"] + 16,
    )


def for_version(version: tuple[int, int], runtime_head: bytes | None) -> PyOffsets:
    """The offsets for an interpreter of `version`; `runtime_head` is the first bytes of its
    `_PyRuntime` (needed from 3.13 on)."""
    if version in TABLES:
        return TABLES[version]
    if version >= (3, 13):
        if runtime_head is None:
            raise UnsupportedPython(f"Python {version[0]}.{version[1]}: _PyRuntime unreadable")
        return from_debug_offsets(runtime_head)
    raise UnsupportedPython(f"Python {version[0]}.{version[1]}: frames are read for 3.11+")
