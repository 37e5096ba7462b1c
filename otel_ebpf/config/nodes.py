"""The schema's node types: each checks one kind of value and knows its default."""

from __future__ import annotations

import copy
import difflib
import re
from collections.abc import Callable
from typing import Any

import yaml

from .values import _Ctx, _env_str, _EnvStr, _show, parse_duration

_REQUIRED = object()  # a leaf that must be set
_ABSENT = object()  # a leaf that may be left out, and then stays out of the result


class _Node:
    expected: str = ""
    default: Any = _REQUIRED
    takes_empty = False  # is an empty string from the environment a value, or "unset"?

    def check(self, value: Any, path: tuple, ctx: _Ctx) -> Any:
        raise NotImplementedError

    def missing(self, path: tuple, ctx: _Ctx, value: Any = None) -> Any:
        """The result for a key that is absent or null."""
        if self.default is _REQUIRED:
            ctx.fail(path, self.expected, None if value is None else _show(value))
        return self.default if self.default is _ABSENT else copy.deepcopy(self.default)


class _Int(_Node):
    def __init__(self, lo: int, hi: int, default: Any = _REQUIRED, *, power_of_two=False):
        self.lo, self.hi, self.default, self.power_of_two = lo, hi, default, power_of_two
        kind = "a power of two" if power_of_two else "an integer"
        self.expected = f"{kind} from {lo} to {hi}"

    def check(self, value, path, ctx):
        if isinstance(value, _EnvStr) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
            value = int(value)
        if (
            isinstance(value, bool)
            or not isinstance(value, int)
            or not self.lo <= value <= self.hi
            or (self.power_of_two and value & (value - 1))
        ):
            ctx.fail(path, self.expected, _show(value))
        return value


class _Duration(_Node):
    def __init__(self, lo: str, hi: str, default: Any):
        self.lo, self.hi = parse_duration(lo), parse_duration(hi)
        self.default = parse_duration(default) if isinstance(default, str) else default
        self.expected = f"a duration from {lo} to {hi} (like 100ms, 10s, 5m, 1h, or seconds)"

    def check(self, value, path, ctx):
        try:
            seconds = parse_duration(value)
        except ValueError:
            ctx.fail(path, self.expected, _show(value))
        if not self.lo <= seconds <= self.hi:
            ctx.fail(path, self.expected, _show(value))
        return seconds


class _Ratio(_Node):
    expected = "a number from 0 to 1"

    def __init__(self, default: Any = _REQUIRED):
        self.default = default

    def check(self, value, path, ctx):
        if isinstance(value, _EnvStr):
            try:
                value = float(value)
            except ValueError:
                ctx.fail(path, self.expected, _show(value))
        if isinstance(value, bool) or not isinstance(value, (int, float)) \
                or not 0.0 <= value <= 1.0:  # NaN fails both
            ctx.fail(path, self.expected, _show(value))
        return float(value)


_TRUE = {"true", "yes", "on", "1"}
_FALSE = {"false", "no", "off", "0"}


class _Bool(_Node):
    expected = "true or false"

    def __init__(self, default: Any = _REQUIRED):
        self.default = default

    def check(self, value, path, ctx):
        if isinstance(value, _EnvStr):
            word = value.strip().lower()
            value = True if word in _TRUE else False if word in _FALSE else value
        if not isinstance(value, bool):
            ctx.fail(path, self.expected, _show(value))
        return value


class _Choice(_Node):
    def __init__(self, options: tuple[str, ...], default: Any, aliases: dict | None = None):
        self.options, self.default, self.aliases = options, default, aliases or {}
        self.expected = "one of " + ", ".join(options)

    def check(self, value, path, ctx):
        word = value.strip().lower() if isinstance(value, str) else None
        word = self.aliases.get(word, word)
        if word not in self.options:
            ctx.fail(path, self.expected, _show(value))
        return word


class _Str(_Node):
    def __init__(
        self,
        default: Any = _REQUIRED,
        *,
        expected: str = "a non-empty string",
        valid: Callable[[str], bool] | None = None,
        takes_empty: bool = False,
    ):
        self.default, self.expected, self.valid = default, expected, valid
        self.takes_empty = takes_empty

    def check(self, value, path, ctx):
        if (
            not isinstance(value, str)
            or (value == "" and not self.takes_empty)
            or (self.valid is not None and not self.valid(value))
        ):
            ctx.fail(path, self.expected, _show(value))
        return str(value)


class _List(_Node):
    """A YAML list; from the environment, `a,b` or the flow form `[a, b]`."""

    takes_empty = True  # OTEL_EBPF_..._PORTS= clears the list

    def __init__(self, item: _Node, expected: str, default: Any = (), max_items: int | None = None):
        self.item, self.expected, self.max_items = item, expected, max_items
        self.default = list(default) if isinstance(default, tuple) else default
        if max_items is not None:
            self.expected += f", at most {max_items}"

    def check(self, value, path, ctx):
        if isinstance(value, _EnvStr):
            value = _env_list(value)
        if not isinstance(value, list):
            ctx.fail(path, self.expected, _show(value))
        if self.max_items is not None and len(value) > self.max_items:
            ctx.fail(path, self.expected, f"{len(value)} items")
        return [self.item.check(v, path + (i,), ctx) for i, v in enumerate(value)]


def _env_list(text: str) -> Any:
    text = text.strip()
    if text.startswith("["):
        try:
            parsed = yaml.safe_load(text)
        except yaml.YAMLError:
            return text
        if not isinstance(parsed, list):
            return text
        return [_env_str(v) if isinstance(v, str) else v for v in parsed]
    return [_env_str(part.strip()) for part in text.split(",") if part.strip()]


class _StrMap(_Node):
    """Strings by string (headers); from the environment, `k=v,k2=v2` or `{k: v}`."""

    expected = "a mapping of strings to strings"
    takes_empty = True

    def __init__(self, default: Any = _REQUIRED):
        self.default = default

    def check(self, value, path, ctx):
        if isinstance(value, _EnvStr):
            value = _env_map(value)
        if not isinstance(value, dict):
            ctx.fail(path, self.expected, _show(value))
        out = {}
        for k, v in value.items():
            if not isinstance(k, str) or not k:
                ctx.fail(path, "non-empty string keys", _show(k))
            if isinstance(v, bool) or not isinstance(v, (str, int, float)):
                ctx.fail(path + (k,), "a string", _show(v))
            out[k] = str(v)
        return out


def _env_map(text: str) -> Any:
    text = text.strip()
    if text.startswith("{"):
        try:
            return yaml.safe_load(text)
        except yaml.YAMLError:
            return text
    out = {}
    for part in filter(None, (p.strip() for p in text.split(","))):
        key, eq, val = part.partition("=")
        if not eq:
            return text
        out[key.strip()] = val.strip()
    return out


class _Any(_Node):
    """Any value, handed on as plain YAML data (for parsers that validate their own)."""

    default = _ABSENT

    def check(self, value, path, ctx):
        return _plain(value)


class _AnyMap(_Any):
    expected = "a mapping of options"
    default = {}

    def check(self, value, path, ctx):
        if value is None:
            return {}
        if not isinstance(value, dict) or not all(isinstance(k, str) for k in value):
            ctx.fail(path, self.expected, _show(value))
        return _plain(value)


def _plain(value: Any) -> Any:
    if isinstance(value, _EnvStr):
        if value.whole:  # like the Collector: `${env:N}` alone takes the YAML type of N
            try:
                typed = yaml.safe_load(value)
            except yaml.YAMLError:
                typed = None
            if isinstance(typed, (bool, int, float)):
                return typed
            # a flow list or mapping (`[/gw, /x]`, `{prefix: /gw, api: openai}`) is one
            if isinstance(typed, (list, dict)) and value.lstrip()[:1] in ("[", "{"):
                return typed
        return str(value)
    if isinstance(value, dict):
        return {k: _plain(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_plain(v) for v in value]
    return value


class _Map(_Node):
    """A mapping with known keys; `extra` validates any other key (None: unknown = error);
    `after` checks what involves several keys, once they are valid."""

    def __init__(
        self,
        fields: dict[str, _Node],
        *,
        extra: _Node | None = None,
        after: Callable[[dict, tuple, _Ctx], None] | None = None,
        optional: bool = False,
    ):
        self.fields, self.extra, self.after, self.optional = fields, extra, after, optional
        self.expected = "a mapping with the keys " + ", ".join(fields)

    def missing(self, path, ctx, value=None):
        """Absent: the mapping of defaults, or nothing at all for an optional mapping."""
        return _ABSENT if self.optional else self.check({}, path, ctx)

    def check(self, value, path, ctx):
        if value is None:
            value = {}
        if not isinstance(value, dict):
            ctx.fail(path, self.expected, _show(value))
        out: dict[str, Any] = {}
        for key in value:
            if not isinstance(key, str):
                ctx.fail(path, "string keys", _show(key))
            if key not in self.fields and self.extra is None:
                hint = difflib.get_close_matches(key, self.fields, n=1)
                got = f"unknown key {key!r}" + (f" (did you mean {hint[0]}?)" if hint else "")
                ctx.fail(path + (key,), "one of the keys " + ", ".join(self.fields), got)
        for key, node in self.fields.items():
            raw = value.get(key)
            if raw is None or (isinstance(raw, _EnvStr) and raw == "" and not node.takes_empty):
                result = node.missing(path + (key,), ctx, raw)
            else:
                result = node.check(raw, path + (key,), ctx)
            if result is not _ABSENT:
                out[key] = result
        for key, raw in value.items():
            if key not in self.fields:
                out[key] = self.extra.check(raw, path + (key,), ctx)  # type: ignore[union-attr]
        if self.after is not None:
            self.after(out, path, ctx)
        return out


class _Named(_Node):
    """A mapping whose keys the user names (exporter instances, pipelines): `pick` gives the
    schema for a name, or None when the name is not allowed. When the section is absent
    (or null) in the file it is `default_raw`, validated like a user's."""

    def __init__(self, pick: Callable[[str], _Node | None], expected_key: str, default_raw):
        self.pick, self.expected_key, self.default_raw = pick, expected_key, default_raw
        self.expected = "a mapping of " + expected_key.removeprefix("a ").removeprefix("an ")

    def missing(self, path, ctx, value=None):
        return self.check({}, path, ctx)

    def check(self, value, path, ctx):
        if value is None:
            value = {}
        if not isinstance(value, dict):
            ctx.fail(path, self.expected, _show(value))
        out = {}
        for key, raw in value.items():
            node = self.pick(key) if isinstance(key, str) else None
            if node is None:
                ctx.fail(path + (str(key),), self.expected_key, _show(key))
            out[key] = node.check(raw, path + (key,), ctx)
        return out


# The schema. Ranges are what the kernel side and memory budgets can take.
