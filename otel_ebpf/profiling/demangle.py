"""C++ symbol names as people read them (`at::native::matmul(...)` for
`_ZN2at6native6matmulE...`), by the C++ runtime's own demangler (libstdc++'s
__cxa_demangle, through ctypes); names it cannot read, or no C++ runtime, stay as they are."""

from __future__ import annotations

import ctypes
import ctypes.util
import functools

MAX_NAME = 1024  # longer demangled names (deep templates) are cut with "..."


def _runtime():
    for name in ("libstdc++.so.6", ctypes.util.find_library("stdc++"), "libc++abi.so.1"):
        if not name:
            continue
        try:
            lib = ctypes.CDLL(name)
            fn = lib.__cxa_demangle
        except (OSError, AttributeError):
            continue
        fn.restype = ctypes.c_void_p
        fn.argtypes = [ctypes.c_char_p, ctypes.c_void_p, ctypes.c_void_p,
                       ctypes.POINTER(ctypes.c_int)]
        return fn
    return None


_demangle = _runtime()
_free = ctypes.CDLL(None).free
_free.argtypes = [ctypes.c_void_p]


@functools.lru_cache(maxsize=65536)
def demangle(name: str) -> str:
    if _demangle is None or not name.startswith("_Z"):
        return name
    status = ctypes.c_int(0)
    out = _demangle(name.encode(), None, None, ctypes.byref(status))
    if not out or status.value != 0:
        return name
    try:
        text = ctypes.string_at(out).decode(errors="replace")
    finally:
        _free(out)
    return text if len(text) <= MAX_NAME else text[:MAX_NAME - 3] + "..."
