"""Reading JSON fields out of a body we hold only parts of (a head and a tail, a gap between).

A key inside a JSON string is escaped (`\\"model\\"`), so a match whose opening quote
follows a backslash is prompt text, not a key. What remains can still be a nested key of
the same name; callers pick the end of the body they trust for each field.
"""

from __future__ import annotations

import re
from collections.abc import Callable

import orjson

_STR = rb'(?<!\\)"%s"\s*:\s*"((?:[^"\\]|\\.){0,512})"'
_NUM = rb'(?<!\\)"%s"\s*:\s*(-?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?)'
_BOOL = rb'(?<!\\)"%s"\s*:\s*(true|false)'

_cache: dict[tuple[bytes, bytes], re.Pattern[bytes]] = {}


def _pattern(shape: bytes, key: str) -> re.Pattern[bytes]:
    found = _cache.get((shape, key.encode()))
    if found is None:
        found = re.compile(shape % re.escape(key.encode()))
        _cache[(shape, key.encode())] = found
    return found


def _all(shape: bytes, key: str, data: bytes) -> list[bytes]:
    return _pattern(shape, key).findall(data)


def _unquote(raw: bytes) -> str | None:
    try:
        value = orjson.loads(b'"' + raw + b'"')
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, str) else None


def _number(raw: bytes) -> int | float | None:
    try:
        value = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return value if isinstance(value, int | float) and not isinstance(value, bool) else None


def _pick(
    shape: bytes,
    key: str,
    head: bytes,
    tail: bytes,
    convert: Callable[[bytes], object],
    last: bool,
) -> object | None:
    """The first match in head, else the last in tail (or the other way round with `last`):
    clients write small top-level fields either before the prompt or after it."""
    order = ((tail, -1), (head, -1)) if last else ((head, 0), (tail, -1))
    for data, index in order:
        found = _all(shape, key, data)
        if found:
            return convert(found[index])
    return None


def string(key: str, head: bytes, tail: bytes = b"", *, last: bool = False) -> str | None:
    value = _pick(_STR, key, head, tail, _unquote, last)
    return value if isinstance(value, str) else None


def number(key: str, head: bytes, tail: bytes = b"", *, last: bool = False) -> int | float | None:
    value = _pick(_NUM, key, head, tail, _number, last)
    return value if isinstance(value, int | float) else None


def boolean(key: str, head: bytes, tail: bytes = b"", *, last: bool = False) -> bool | None:
    value = _pick(_BOOL, key, head, tail, lambda raw: raw == b"true", last)
    return value if isinstance(value, bool) else None


def strings(key: str, *parts: bytes) -> list[str]:
    """Every string value of `key`, in order (finish reasons of several choices)."""
    out = []
    for data in parts:
        for raw in _all(_STR, key, data):
            value = _unquote(raw)
            if value is not None:
                out.append(value)
    return out
