"""Config values: the error every check raises, strings from the environment, how values
print in errors, durations."""

from __future__ import annotations

import re
from decimal import Decimal
from typing import Any, NoReturn

ENV_PREFIX = "OTEL_EBPF_"
ENV_CONFIG = "OTEL_EBPF_CONFIG"  # default config file for `run` when -c is not given
ENV_REQUIRE_BPF = "OTEL_EBPF_REQUIRE_BPF"  # tests: fail instead of skip without BPF
ENV_BPF_DIR = "OTEL_EBPF_BPF_DIR"  # where the compiled .bpf.o files are
RESERVED_ENV = frozenset({ENV_CONFIG, ENV_REQUIRE_BPF, ENV_BPF_DIR})

SIGNALS = ("traces", "metrics", "profiles")


class ConfigError(Exception):
    """An invalid config. `path` is the YAML path (`receivers.ebpf.capture.max_bytes`), the
    environment variable that set the bad value, or the file (then with `line`/`column`)."""

    def __init__(
        self,
        path: str,
        expected: str,
        got: str | None = None,
        *,
        line: int | None = None,
        column: int | None = None,
    ) -> None:
        self.path = path
        self.expected = expected
        self.got = got
        self.line = line
        self.column = column
        where = path if line is None else f"{path}:{line}:{column}"
        message = f"config error at {where}: expected {expected}"
        if got is not None:
            message += f", got {got}"
        super().__init__(message)


# --------------------------------------------------------------------------- values


class _EnvStr(str):
    """A string that came from the environment (an override or a `${...}` expansion).

    Such strings carry no YAML type, so validators parse them (`"8192"` is a fine integer);
    a string written in the file is taken as the string it is. `whole` marks a value that
    was one reference and nothing else, which the Collector types like a YAML scalar."""

    whole: bool


def _env_str(text: str, whole: bool = True) -> _EnvStr:
    s = _EnvStr(text)
    s.whole = whole
    return s


def _dotted(path: tuple[str | int, ...]) -> str:
    out = ""
    for part in path:
        out += f"[{part}]" if isinstance(part, int) else (f".{part}" if out else part)
    return out or "(top level)"


def _show(value: Any) -> str:
    if value is None:
        return "null"
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, str):
        text = str(value)
        return repr(text if len(text) <= 60 else text[:57] + "...")
    if isinstance(value, dict):
        return "a mapping"
    if isinstance(value, list):
        text = "[" + ", ".join(str(v) for v in value) + "]"
        return text if len(text) <= 60 else "a list"
    return repr(value)


class _Ctx:
    """Carries which paths environment variables set, so errors name the variable."""

    def __init__(self) -> None:
        self.overrides: dict[tuple[str, ...], str] = {}
        self.defaulted: set[tuple[str, ...]] = set()  # sections the file left to the defaults

    def fail(self, path: tuple[str | int, ...], expected: str, got: str | None) -> NoReturn:
        for n in range(len(path), 0, -1):
            var = self.overrides.get(path[:n])  # type: ignore[arg-type]
            if var is not None:
                raise ConfigError(var, expected, got)
        raise ConfigError(_dotted(path), expected, got)


_DURATION_UNITS = {
    "ns": Decimal("1e-9"),
    "us": Decimal("1e-6"),
    "µs": Decimal("1e-6"),
    "ms": Decimal("1e-3"),
    "s": Decimal(1),
    "m": Decimal(60),
    "h": Decimal(3600),
}
_NUMBER = r"(?:\d+(?:\.\d*)?|\.\d+)"
_DURATION_PART = re.compile(rf"({_NUMBER})(ns|us|µs|ms|s|m|h)")
_DURATION = re.compile(rf"(?:{_NUMBER}(?:ns|us|µs|ms|s|m|h))+")


def parse_duration(value: str | int | float) -> float:
    """`100ms`, `10s`, `5m`, `1h`, `1m30s` or a plain number of seconds -> float seconds.
    Raises ValueError for anything else, negative values included."""
    if isinstance(value, bool):
        raise ValueError(f"not a duration: {value!r}")
    if isinstance(value, (int, float)):
        if not value >= 0 or value == float("inf"):  # also rejects NaN
            raise ValueError(f"not a duration: {value!r}")
        return float(value)
    if isinstance(value, str):
        text = value.strip()
        if re.fullmatch(_NUMBER, text):
            return float(Decimal(text))
        if _DURATION.fullmatch(text):
            total = sum(Decimal(n) * _DURATION_UNITS[u] for n, u in _DURATION_PART.findall(text))
            return float(total)
    raise ValueError(f"not a duration: {value!r}")
