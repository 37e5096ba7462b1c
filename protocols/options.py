"""Plugin options: a parser or layer declares each of its keys once (type, bounds, unit,
default) in `option_schema`; the config loader and the plugin check values against it.

A value comes as YAML types it (a variable `OTEL_EBPF_RECEIVERS_EBPF_PROTOCOLS_<NAME>_<KEY>`
is typed the same way), and leaves typed: a duration as float seconds, a size as int bytes.
A bad value is an `OptionError` naming `<name>.<key>`; the config loader turns it into
`config error at receivers.ebpf.protocols.<name>.<key>: expected ..., got ...`.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from decimal import Decimal
from typing import Any

# keys the agent hands every parser and layer, whatever its schema says
AGENT_OPTIONS = frozenset({"correlation_headers"})


class OptionError(ValueError):
    """A value a plugin's schema refuses: `key` is `<name>.<key>`; `expected` and `got` are
    worded as the config loader's own errors are (`got` is None for a missing part)."""

    def __init__(self, key: str, expected: str, got: str | None = None) -> None:
        self.key, self.expected, self.got = key, expected, got
        super().__init__(f"{key}: expected {expected}" + (f", got {got}" if got is not None else ""))


def show(value: Any) -> str:
    """A value as config errors print it: 7, 'soon', true, null."""
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        return repr(value if len(value) <= 60 else value[:57] + "...")
    if isinstance(value, dict):
        return "a mapping"
    return repr(value)


_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_DURATION_UNITS = {"ns": Decimal("1e-9"), "us": Decimal("1e-6"), "µs": Decimal("1e-6"),
                   "ms": Decimal("1e-3"), "s": Decimal(1), "m": Decimal(60), "h": Decimal(3600)}
_DURATION_PART = re.compile(rf"({_NUMBER})(ns|us|µs|ms|s|m|h)")
_DURATION = re.compile(rf"(?:{_NUMBER}(?:ns|us|µs|ms|s|m|h))+")
_SIZE_UNITS = {"": 1, "b": 1, "kb": 1000, "mb": 1000**2, "gb": 1000**3,
               "kib": 1 << 10, "mib": 1 << 20, "gib": 1 << 30}
_SIZE = re.compile(rf"\s*({_NUMBER})\s*([kKmMgG]i?[bB]|[bB])?\s*")
_TRUE = frozenset({"true", "yes", "on", "1"})
_FALSE = frozenset({"false", "no", "off", "0"})


def parse_duration(value: Any) -> float:
    """`100ms`, `10s`, `5m`, `1h`, `1m30s` or a number of seconds -> float seconds;
    ValueError for anything else, negative values included."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, int | float):
        if not value >= 0 or value == float("inf"):  # also refuses NaN
            raise ValueError(f"not a duration: {value!r}")
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(_NUMBER, text):
            return float(Decimal(text))
        if _DURATION.fullmatch(text):
            return float(sum(Decimal(n) * _DURATION_UNITS[u]
                             for n, u in _DURATION_PART.findall(text)))
    raise ValueError(f"not a duration: {value!r}")


def parse_size(value: Any) -> int:
    """`4096`, `64KiB`, `1MiB`, `2MB` -> int bytes; ValueError for anything else."""
    if isinstance(value, bool):
        raise ValueError(f"not a size: {value!r}")
    if isinstance(value, int):
        if value < 0:
            raise ValueError(f"not a size: {value!r}")
        return value
    if isinstance(value, str):
        m = _SIZE.fullmatch(value)
        if m:
            number = Decimal(m.group(1)) * _SIZE_UNITS[(m.group(2) or "").lower()]
            if number == number.to_integral_value():
                return int(number)
    raise ValueError(f"not a size: {value!r}")


@dataclass(frozen=True, slots=True)
class Option:
    """One key of a plugin's options. Subclasses say what a value is (`check`)."""

    default: Any
    doc: str = ""

    @property
    def expected(self) -> str:
        raise NotImplementedError

    def check(self, value: Any, key: str) -> Any:
        """The value typed; OptionError(key, ...) when it is not one."""
        raise NotImplementedError

    def fail(self, key: str, value: Any, expected: str | None = None):
        raise OptionError(key, expected or self.expected, show(value))


@dataclass(frozen=True, slots=True)
class Duration(Option):
    """A duration (`500ms`, `30s`, `5m`, or a number of seconds) -> float seconds."""

    least: str = "1ms"
    most: str = "1h"

    @property
    def expected(self) -> str:
        return f"a duration from {self.least} to {self.most} (like 100ms, 10s, 5m, 1h, or seconds)"

    def check(self, value: Any, key: str) -> float:
        try:
            seconds = parse_duration(value)
        except ValueError:
            self.fail(key, value)
        if not parse_duration(self.least) <= seconds <= parse_duration(self.most):
            self.fail(key, value)
        return seconds


@dataclass(frozen=True, slots=True)
class Size(Option):
    """A number of bytes (`4096`, `64KiB`, `1MiB`) -> int bytes."""

    least: int = 0
    most: int = 1 << 30

    @property
    def expected(self) -> str:
        return f"a size from {self.least} to {self.most} bytes (like 4096, 64KiB, 1MiB)"

    def check(self, value: Any, key: str) -> int:
        try:
            size = parse_size(value)
        except ValueError:
            self.fail(key, value)
        if not self.least <= size <= self.most:
            self.fail(key, value)
        return size


@dataclass(frozen=True, slots=True)
class Integer(Option):
    """A count. `most` None: no upper bound."""

    least: int = 0
    most: int | None = None

    @property
    def expected(self) -> str:
        if self.most is None:
            return "an integer"
        return f"an integer from {self.least} to {self.most}"

    def check(self, value: Any, key: str) -> int:
        if isinstance(value, str) and re.fullmatch(r"\s*[+-]?\d+\s*", value):
            value = int(value)
        if isinstance(value, bool) or not isinstance(value, int):
            self.fail(key, value)
        if value < self.least or (self.most is not None and value > self.most):
            self.fail(key, value, None if self.most is not None else f"at least {self.least}")
        return value


@dataclass(frozen=True, slots=True)
class Flag(Option):
    """true or false (`on`/`off`, `yes`/`no` as text)."""

    @property
    def expected(self) -> str:
        return "true or false"

    def check(self, value: Any, key: str) -> bool:
        if isinstance(value, str):
            word = value.strip().lower()
            value = True if word in _TRUE else False if word in _FALSE else value
        if not isinstance(value, bool):
            self.fail(key, value)
        return value


@dataclass(frozen=True, slots=True)
class Text(Option):
    """A non-empty string; `choices`: one of them. A None default: optional."""

    choices: tuple[str, ...] = ()

    @property
    def expected(self) -> str:
        return f"one of {list(self.choices)}" if self.choices else "a non-empty string"

    def check(self, value: Any, key: str) -> str | None:
        if value is None and self.default is None:
            return None
        if not isinstance(value, str) or not value or (self.choices and value not in self.choices):
            self.fail(key, value)
        return value


@dataclass(frozen=True, slots=True)
class Paths(Option):
    """A list of request paths, each starting with '/' (a trailing '/' is dropped)."""

    @property
    def expected(self) -> str:
        return "a list of paths starting with '/'"

    def check(self, value: Any, key: str) -> tuple[str, ...]:
        if isinstance(value, str) or not isinstance(value, list | tuple) or not all(
                isinstance(p, str) and p.startswith("/") for p in value):
            self.fail(key, value)
        return tuple(p.rstrip("/") or "/" for p in value)


_MUST_BE = re.compile(r"(?:[A-Za-z0-9_]+ )?must be (.*?)(?:, got (.*))?", re.S)


@dataclass(frozen=True, slots=True)
class Custom(Option):
    """A value of a shape the plugin reads itself (a list of routes): `parse(value)` checks
    it, raising ValueError worded `expected X, got Y` or `<part> must be X, got Y`; the value
    is kept as given (plain YAML data), and the plugin builds from it."""

    parse: Callable[[Any], Any] = lambda value: value
    what: str = "a value"

    @property
    def expected(self) -> str:
        return self.what

    def check(self, value: Any, key: str) -> Any:
        try:
            self.parse(value)
        except OptionError:
            raise
        except (TypeError, ValueError) as exc:
            reason = str(exc)
            if reason.startswith(key + ": "):
                reason = reason[len(key) + 2:]
            if reason.startswith("expected "):
                expected, sep, got = reason[len("expected "):].rpartition(", got ")
                raise OptionError(key, expected if sep else reason[9:], got if sep else None) \
                    from None
            m = _MUST_BE.fullmatch(reason)
            if m:
                raise OptionError(key, m.group(1), m.group(2)) from None
            raise OptionError(key, self.what, reason) from None
        return value


Schema = Mapping[str, Option]


def resolve(name: str, schema: Schema, options: Mapping[str, Any] | None) -> dict[str, Any]:
    """`options` checked against `schema`, every key filled: what the plugin reads. The keys
    every plugin is handed (AGENT_OPTIONS) pass as they are; any other unknown key is an
    error (a typo would otherwise leave a default in force silently)."""
    given = dict(options or {})
    out: dict[str, Any] = {}
    for key, value in given.items():
        option = schema.get(key)
        if value is None and option is not None:  # `key:` left empty: the default, as YAML
            continue
        if option is None:
            if key in AGENT_OPTIONS:
                out[key] = value
                continue
            known = ", ".join(schema) or "none"
            raise OptionError(f"{name}.{key}", f"an option {name} takes ({known})",
                              f"unknown key {key!r}")
        out[key] = option.check(value, f"{name}.{key}")
    for key, option in schema.items():
        if key not in out:
            out[key] = option.default
    return out


def defaults(schema: Schema) -> dict[str, Any]:
    """Every key at its default (what `resolve` gives for no options)."""
    return {key: option.default for key, option in schema.items()}

