"""Collector-shaped YAML plus `OTEL_EBPF_*` environment -> typed, validated, frozen config.

One declarative schema (`_SCHEMA`) validates the file, fills defaults, and names every key
an `OTEL_EBPF_<PATH>` variable may override; `load_config` is the front door.
"""

from __future__ import annotations

import copy
import dataclasses
import difflib
import logging
import os
import re
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass, field
from decimal import Decimal
from typing import Any, NoReturn
from urllib.parse import urlsplit

import yaml

__all__ = [
    "Config",
    "ConfigError",
    "EbpfReceiver",
    "ExporterConfig",
    "Pipeline",
    "Processors",
    "Targets",
    "Telemetry",
    "default_config_path",
    "env_name",
    "load_config",
    "parse_config",
    "parse_duration",
]

log = logging.getLogger(__name__)

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


# --------------------------------------------------------------------------- schema

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

_MAX_TARGETS = 1024  # entries in each kernel target map (MAX_TARGETS in bpf/include/abi.h)
_TARGETS = _Map(
    {
        "pids": _List(
            _Int(1, 4_194_304), "a list of process IDs (1 to 4194304)", max_items=_MAX_TARGETS
        ),
        "process_names": _List(
            _Str(expected="a process name"), "a list of process names", max_items=_MAX_TARGETS
        ),
        "ports": _List(
            _Int(1, 65535), "a list of port numbers (1 to 65535)", max_items=_MAX_TARGETS
        ),
    }
)

_RECEIVER = _Map(
    {
        "targets": _TARGETS,
        "capture": _Map({
            "max_bytes": _Int(1, 65536, 4096),
            # connections that call an LLM API (the request paths the enabled layers name)
            "llm_max_bytes": _Int(0, 65536, 16384),
            "llm_tail_bytes": _Int(0, 65536, 4096),
        }),
        "ring_buffer": _Map(
            {
                "size_mib": _Int(1, 1024, 16, power_of_two=True),
                "poll_interval": _Duration("1ms", "10s", "100ms"),
                "wakeup_fill_percent": _Int(1, 100, 50),
            }
        ),
        "connections": _Map(
            {
                "max": _Int(64, 4_194_304, 65536),
                "idle_timeout": _Duration("1s", "24h", "300s"),
            }
        ),
        "correlation": _Map(
            {
                "window": _Duration("10ms", "10m", "2s"),
                "headers": _List(
                    _Str(expected="a header name"), "a list of header names", ("x-request-id",)
                ),
                "asyncio_tasks": _Bool(True),
            }
        ),
        "tls": _Map({"openssl": _Bool(True)}),
        # CPU profiles (a `profiles` pipeline turns them on): samples per second per CPU,
        # and how often a profile is cut and exported
        "profiling": _Map({
            "frequency": _Int(1, 999, 19),
            "interval": _Duration("1s", "1h", "10s"),
            # native stacks of code without frame pointers from its unwind tables
            # (docs/profiling.md), and the kernel memory their rows may take in all
            "unwind_tables": _Bool(False),
            "unwind_table_mib": _Int(1, 1024, 32),
        }),
        # RDMA port counters (sysfs) and verbs/NCCL uprobes, exported as metrics (docs/rdma.md)
        "rdma": _Map({
            "enabled": _Bool(False),
            "sysfs_root": _Str("/sys", expected="a directory path"),
            "interval": _Duration("100ms", "1h", "10s"),
        }),
        # GPU memory from CUDA driver uprobes: profiles and metrics (docs/gpu.md)
        "gpu": _Map({
            "enabled": _Bool(False),
            "scan_interval": _Duration("100ms", "1h", "2s"),
            "libraries": _List(_Str(expected="a file path"), "a list of libcuda file paths"),
        }),
        # optional resource attributes, as a Collector receiver's `resource_attributes`
        "resource_attributes": _Map({
            # the full command line (redacted): off, it is where secrets are passed
            "process.command_args": _Map({"enabled": _Bool(False)}),
        }),
        # head sampling by trace ID: every agent keeps the same traces (docs/deploy.md)
        "sampling": _Map({"ratio": _Ratio(1.0)}),
        # pods' names from the kubelet or the API server (container.id and k8s.pod.uid come
        # from each process's cgroup without them)
        "kubernetes": _Map({
            "node_name": _Str("", expected="a node name", takes_empty=True),
            "metadata": _Map({
                "source": _Choice(("none", "kubelet", "api_server"), "none"),
                "endpoint": _Str("", expected="a URL https://host:port, or ''",
                                 valid=lambda t: _http_url(t), takes_empty=True),
                "interval": _Duration("1s", "1h", "30s"),
                "token_file": _Str("/var/run/secrets/kubernetes.io/serviceaccount/token",
                                   expected="a file path, or ''", takes_empty=True),
                "ca_file": _Str("/var/run/secrets/kubernetes.io/serviceaccount/ca.crt",
                                expected="a file path, or ''", takes_empty=True),
                "insecure_skip_verify": _Bool(False),
            }),
        }, after=lambda tree, path, ctx: _check_kubernetes(tree, path, ctx)),
        "redaction": _Map({
            # query parameters whose values become REDACTED in url.query/url.full ("*": all)
            "query_params": _List(_Str(expected="a query parameter name or *"),
                                  "a list of query parameter names (or *)"),
        }),
        "protocols": _Map(
            {
                # absent: the installed protocols that are on by default (entry points)
                "enabled": _List(_Str(expected="a protocol name"), "a list of protocol names",
                                 _ABSENT),
            },
            # protocols.<name>: a plugin's options, checked against its own option_schema
            extra=_AnyMap(),
        ),
    }
)


def _check_kubernetes(tree: dict, path: tuple, ctx: _Ctx) -> None:
    meta = tree["metadata"]
    if meta["source"] == "api_server" and not tree["node_name"]:
        ctx.fail(path + ("node_name",), "this node's name with metadata.source api_server "
                 "(else every pod of the cluster is listed; the chart sets it from "
                 "spec.nodeName)", "''")
    if meta["source"] == "kubelet" and not meta["endpoint"]:
        ctx.fail(path + ("metadata", "endpoint"), "the kubelet's URL with source kubelet, "
                 "like https://<node IP>:10250 (the chart sets it from status.hostIP)", "''")


def _api_server(r: EbpfReceiver, environ: Mapping[str, str], ctx: _Ctx) -> EbpfReceiver:
    """source api_server without an endpoint: the in-cluster address every pod is given."""
    if r.pod_metadata_source != "api_server" or r.pod_metadata_endpoint:
        return r
    host, port = environ.get("KUBERNETES_SERVICE_HOST"), environ.get("KUBERNETES_SERVICE_PORT")
    if not host:
        ctx.fail(("receivers", "ebpf", "kubernetes", "metadata", "endpoint"),
                 "the API server's URL (KUBERNETES_SERVICE_HOST is not set: not in a pod)",
                 "''")
    host = f"[{host}]" if ":" in host else host
    return dataclasses.replace(r, pod_metadata_endpoint=f"https://{host}:{port or 443}")


def _check_batch(batch: dict, path: tuple, ctx: _Ctx) -> None:
    if batch["max_queue_size"] < batch["send_batch_size"]:
        ctx.fail(
            path + ("max_queue_size",),
            f"at least send_batch_size ({batch['send_batch_size']})",
            _show(batch["max_queue_size"]),
        )


_PROCESSORS = _Map(
    {
        "batch": _Map(
            {
                "send_batch_size": _Int(1, 1_048_576, 512),
                "timeout": _Duration("1ms", "60s", "1s"),
                "max_queue_size": _Int(1, 16_777_216, 16384),
            },
            after=_check_batch,
        )
    }
)


_HOST_PORT = re.compile(r"(?:https?://)?(?:\[[0-9A-Fa-f:.]+\]|[A-Za-z0-9_.-]+)(?::(\d{1,5}))?/?")


def _grpc_endpoint(text: str) -> bool:
    if text == "":
        return True
    m = _HOST_PORT.fullmatch(text)
    return m is not None and (m.group(1) is None or 1 <= int(m.group(1)) <= 65535)


def _http_url(text: str) -> bool:
    if text == "":
        return True
    if any(c.isspace() for c in text):
        return False
    try:
        url = urlsplit(text)
        url.port  # noqa: B018  (raises ValueError when out of range)
    except ValueError:
        return False
    return url.scheme in ("http", "https") and bool(url.hostname)


def _check_tls(tls: dict, path: tuple, ctx: _Ctx) -> None:
    for key, other in (("cert_file", "key_file"), ("key_file", "cert_file")):
        if key in tls and other not in tls:
            ctx.fail(path + (other,), f"{other} together with {key} (mutual TLS)", None)
    for key in ("ca_file", "cert_file", "key_file"):
        if key in tls:
            _check_readable(tls[key], path + (key,), ctx)


def _check_readable(file: str, path: tuple, ctx: _Ctx) -> None:
    """The file opens for reading, as the user running `run` (so before the privilege
    check, an unprivileged user is told about a missing certificate, not about root)."""
    try:
        with open(file, "rb"):
            pass
    except OSError as exc:
        ctx.fail(path, "a readable file", f"{_show(file)} ({exc.strerror or exc})")


def _otlp(endpoints: dict[str, _Node], compressions: tuple[str, ...]) -> _Map:
    # Every key stays out of the settings when the file leaves it out: the OTel SDK then
    # reads OTEL_EXPORTER_OTLP_* as usual (an explicit insecure=false would even force TLS
    # on an http:// endpoint). The SDK's defaults: TLS unless http://, no compression, 10s.
    return _Map(
        {
            **endpoints,
            "tls": _Map(
                {
                    "insecure": _Bool(_ABSENT),
                    "ca_file": _Str(_ABSENT, expected="a file path"),
                    "cert_file": _Str(_ABSENT, expected="a file path"),
                    "key_file": _Str(_ABSENT, expected="a file path"),
                },
                after=_check_tls,
                optional=True,
            ),
            "headers": _StrMap(_ABSENT),
            "compression": _Choice(compressions, _ABSENT),
            "timeout": _Duration("100ms", "10m", _ABSENT),
        }
    )


_BASE_URL = "a base URL http(s)://host[:port][/path], or '' to disable"
_SIGNAL_URL = "a full URL http(s)://host[:port]/path"
EXPORTER_SCHEMAS: dict[str, _Map] = {
    "otlp": _otlp(
        {
            "endpoint": _Str(
                _ABSENT,
                expected="host:port, optionally with http:// or https://, or '' to disable",
                valid=_grpc_endpoint,
                takes_empty=True,
            )
        },
        ("gzip", "none"),
    ),
    "otlphttp": _otlp(
        {
            # as in the Collector: <endpoint>/v1/traces, unless traces_endpoint says where
            "endpoint": _Str(_ABSENT, expected=_BASE_URL, valid=_http_url, takes_empty=True),
            "traces_endpoint": _Str(_ABSENT, expected=_SIGNAL_URL, valid=_http_url),
            "metrics_endpoint": _Str(_ABSENT, expected=_SIGNAL_URL, valid=_http_url),
        },
        ("gzip", "deflate", "none"),
    ),
    "file": _Map({"path": _Str(expected="a file path")}),
    "debug": _Map({"verbosity": _Choice(("basic", "normal", "detailed"), "normal")}),
    # profiles only: one gzipped pprof file, or one folded-stacks file, per interval
    "pprof": _Map({"path": _Str(expected="a directory path")}),
    "folded": _Map({"path": _Str(expected="a directory path")}),
}
_INSTANCE_NAME = re.compile(r"([a-z]+)(?:/[A-Za-z0-9_-]+)?")


def _pick_exporter(key: str) -> _Node | None:
    m = _INSTANCE_NAME.fullmatch(key)
    return EXPORTER_SCHEMAS.get(m.group(1)) if m else None


_PIPELINE = _Map(
    {
        "receivers": _List(_Str(expected="a receiver name"), "a list of receiver names", _REQUIRED),
        "processors": _List(_Str(expected="a processor name"), "a list of processor names"),
        "exporters": _List(
            _Str(expected="an exporter name"), "a list of exporter names", _REQUIRED
        ),
    }
)
_PIPELINE_NAME = re.compile(r"(?:traces|metrics|profiles)(?:/[A-Za-z0-9_-]+)?")
# exporter types each signal can use (otlphttp has no profiles endpoint here)
_PROFILE_EXPORTERS = ("otlp", "pprof", "folded")
_PROFILE_ONLY_EXPORTERS = ("pprof", "folded")

# What `exporters:` and `service.pipelines:` are when the file leaves them out; the same
# as config/default.yaml (a unit test holds the two together).
DEFAULT_EXPORTERS = {
    "debug": {"verbosity": "normal"},
    "file": {"path": "./otel-ebpf-traces.jsonl"},
    "otlp": {"endpoint": "${env:OTEL_EXPORTER_OTLP_ENDPOINT}"},
}
DEFAULT_PIPELINES = {
    "traces": {
        "receivers": ["ebpf"],
        "processors": ["batch"],
        "exporters": ["debug", "file", "otlp"],
    },
    "metrics": {"receivers": ["ebpf"], "exporters": ["file", "otlp"]},
}


def _check_pipelines(tree: dict, path: tuple, ctx: _Ctx) -> None:
    pipelines = tree["service"]["pipelines"]
    where = ("service", "pipelines")
    # a file that defines its own exporters but no pipelines gets the default pipelines,
    # which name debug, file and otlp: say where those names come from
    note = ""
    if where in ctx.defaulted:
        note = " (service.pipelines is not set, so the default pipelines apply)"
    if not pipelines:
        example = "traces: {receivers: [ebpf], exporters: [debug]}"
        ctx.fail(where, f"at least one pipeline, like {example}", None)
    for name, pipe in pipelines.items():
        for kind in ("receivers", "processors", "exporters"):
            defined = list(tree[kind])
            seen: set[str] = set()
            for i, ref in enumerate(pipe[kind]):
                at = where + (name, kind, i)
                if ref not in defined:
                    listed = ", ".join(defined) or "none"
                    expected = f"one of the {kind} defined under {kind}: {listed}{note}"
                    ctx.fail(at, expected, _show(ref))
                if ref in seen:
                    ctx.fail(at, f"each of the {kind} at most once", f"{ref!r} again")
                seen.add(ref)
        signal = name.split("/")[0]
        for i, ref in enumerate(pipe["exporters"]):
            kind = ref.split("/")[0]
            if signal == "profiles" and kind not in _PROFILE_EXPORTERS:
                ctx.fail(where + (name, "exporters", i),
                         f"an exporter of type {' or '.join(_PROFILE_EXPORTERS)}", _show(ref))
            if signal != "profiles" and kind in _PROFILE_ONLY_EXPORTERS:
                ctx.fail(where + (name, "exporters", i),
                         f"an exporter for {signal} (pprof and folded write profiles only)",
                         _show(ref))
        if signal in ("traces", "profiles") and "ebpf" not in pipe["receivers"]:
            ctx.fail(where + (name, "receivers"),
                     f"a list that includes ebpf, the receiver {signal} come from",
                     _show(pipe["receivers"]))
        if not pipe["receivers"]:
            ctx.fail(where + (name, "receivers"), "at least one receiver", "[]")
        if not pipe["exporters"]:
            ctx.fail(where + (name, "exporters"), "at least one exporter", "[]")


_TELEMETRY = _Map(
    {
        "logs": _Map(
            {
                "level": _Choice(
                    ("debug", "info", "warning", "error"), "info", aliases={"warn": "warning"}
                )
            }
        ),
        "metrics": _Map({"interval": _Duration("100ms", "1h", "10s")}),
    }
)

_SCHEMA = _Map(
    {
        "receivers": _Map({"ebpf": _RECEIVER}),
        "processors": _PROCESSORS,
        "exporters": _Named(
            _pick_exporter,
            "an exporter named type or type/name, with type one of " + ", ".join(EXPORTER_SCHEMAS),
            DEFAULT_EXPORTERS,
        ),
        "service": _Map(
            {
                "pipelines": _Named(
                    lambda key: _PIPELINE if _PIPELINE_NAME.fullmatch(key) else None,
                    "a pipeline named traces, metrics or profiles, or <one of those>/<name>",
                    DEFAULT_PIPELINES,
                ),
                "telemetry": _TELEMETRY,
            }
        ),
    },
    after=_check_pipelines,
)


def _fill_defaults(node: _Map, raw: dict, ctx: _Ctx, path: tuple[str, ...] = ()) -> None:
    """Put each absent or null `_Named` section's default in place, so that it is expanded
    and overridden by the environment like one written in the file."""
    for key, child in node.fields.items():
        if isinstance(child, _Named) and raw.get(key) is None:
            raw[key] = copy.deepcopy(child.default_raw)
            ctx.defaulted.add(path + (key,))
        elif isinstance(child, _Map):
            if raw.get(key) is None and _has_named(child):
                raw[key] = {}
            if isinstance(raw.get(key), dict):
                _fill_defaults(child, raw[key], ctx, path + (key,))


def _has_named(node: _Map) -> bool:
    return any(
        isinstance(c, _Named) or (isinstance(c, _Map) and _has_named(c))
        for c in node.fields.values()
    )


def _leaves(
    node: _Node, raw: Any, prefix: tuple[str, ...] = ()
) -> Iterator[tuple[tuple[str, ...], _Node]]:
    """Every settable key's path: the schema's fixed keys, plus those of the user-named
    exporters and pipelines present in `raw`."""
    if isinstance(node, _Map):
        for key, child in node.fields.items():
            sub = raw.get(key) if isinstance(raw, dict) else None
            yield from _leaves(child, sub, prefix + (key,))
    elif isinstance(node, _Named):
        if isinstance(raw, dict):
            for key, sub in raw.items():
                child = node.pick(key) if isinstance(key, str) else None
                if child is not None:
                    yield from _leaves(child, sub, prefix + (key,))
    elif not isinstance(node, _Any):
        yield prefix, node


# --------------------------------------------------------------------------- environment


def env_name(path: str | tuple[str, ...]) -> str:
    """The variable that overrides a YAML path: `exporters.otlp/x.tls.insecure` ->
    `OTEL_EBPF_EXPORTERS_OTLP_X_TLS_INSECURE`."""
    dotted = path if isinstance(path, str) else ".".join(path)
    return ENV_PREFIX + re.sub(r"[^A-Za-z0-9]", "_", dotted).upper()


def default_config_path(environ: Mapping[str, str] = os.environ) -> str | None:
    """The config file `run` reads when -c is not given: $OTEL_EBPF_CONFIG, else None
    (the built-in defaults)."""
    return environ.get(ENV_CONFIG) or None


_REFERENCE = re.compile(r"\$(\$|\{([^}]*)\})")
_REFERENCE_BODY = re.compile(r"(?:env:)?([A-Za-z_][A-Za-z0-9_]*)(?::-(.*))?", re.S)


def _expand(text: str, path: tuple, environ: Mapping[str, str], ctx: _Ctx) -> str:
    """`${env:NAME}`, `${env:NAME:-default}`, `${NAME}` -> the variable's value (unset:
    '' or the default; `:-` also takes the default when the value is empty); `$$` -> `$`."""
    if "$" not in text:
        return text
    pieces: list[str] = []
    pos = refs = 0
    for m in _REFERENCE.finditer(text):
        pieces.append(text[pos : m.start()])
        pos = m.end()
        if m.group(1) == "$":
            pieces.append("$")
            continue
        body = _REFERENCE_BODY.fullmatch(m.group(2))
        if body is None:
            expected = "a reference like ${env:NAME} or ${env:NAME:-default}"
            ctx.fail(path, expected, _show(m.group(0)))
        value = environ.get(body.group(1), "")
        pieces.append(value if value or body.group(2) is None else body.group(2))
        refs += 1
    pieces.append(text[pos:])
    if any("${" in p for p in pieces[::2] if p):  # what no reference matched: an open ${
        ctx.fail(path, "a closed ${...} reference", _show(text))
    out = "".join(pieces)
    if not refs:
        return out
    whole = len(pieces) == 3 and pieces[0] == pieces[2] == ""  # one reference, nothing else
    return _env_str(out, whole)


def _expand_tree(value: Any, path: tuple, environ: Mapping[str, str], ctx: _Ctx) -> Any:
    if isinstance(value, str):
        return _expand(value, path, environ, ctx)
    if isinstance(value, dict):
        return {k: _expand_tree(v, path + (k,), environ, ctx) for k, v in value.items()}
    if isinstance(value, list):
        return [_expand_tree(v, path + (i,), environ, ctx) for i, v in enumerate(value)]
    return value


def _apply_env(raw: dict, environ: Mapping[str, str], ctx: _Ctx) -> None:
    """Set each key named by an OTEL_EBPF_<PATH> variable; warn about variables naming none."""
    names: dict[str, list[tuple[tuple[str, ...], _Node]]] = {}
    for path, node in _leaves(_SCHEMA, raw):
        names.setdefault(env_name(path), []).append((path, node))
    unknown = []
    for var, value in environ.items():
        if not var.startswith(ENV_PREFIX) or var in RESERVED_ENV:
            continue
        paths = names.get(var)
        if not paths and (plugin_path := _plugin_option_path(var, raw, environ)):
            paths = [(plugin_path, _Any())]
        if not paths:
            unknown.append(var)
            continue
        if len(paths) > 1:
            either = " or ".join(_dotted(p) for p, _ in paths)
            raise ConfigError(var, "a variable that names one key", f"ambiguous: {either}")
        path, node = paths[0]
        if value == "" and not node.takes_empty:
            continue  # set but empty, as `VAR=` or compose's unset ${VAR}: the file decides
        if _set(raw, path, _env_str(value)):
            ctx.overrides[path] = var
    for var in sorted(unknown):
        notes = [f"did you mean {m}?" for m in difflib.get_close_matches(var, names, 1, 0.8)]
        if var.startswith((ENV_PREFIX + "EXPORTERS_", ENV_PREFIX + "SERVICE_PIPELINES_")):
            notes.append("exporters and pipelines can be set only where the config defines them")
        if var.startswith(_PROTOCOLS_ENV):
            installed = ", ".join(sorted(_installed_plugins())) or "none"
            notes.append(f"protocol options are {_PROTOCOLS_ENV}<NAME>_<KEY> for an installed "
                         f"protocol: {installed}")
        why = f" ({'; '.join(notes)})" if notes else ""
        log.warning("ignoring %s: it names no config key%s", var, why)


_PROTOCOLS_PATH = ("receivers", "ebpf", "protocols")
_PROTOCOLS_ENV = env_name(_PROTOCOLS_PATH) + "_"


def _plugin_option_path(var: str, raw: dict, environ: Mapping[str, str]
                        ) -> tuple[str, ...] | None:
    """`OTEL_EBPF_RECEIVERS_EBPF_PROTOCOLS_<NAME>_<KEY>` -> `receivers.ebpf.protocols.<name>.
    <key>`, for a parser or layer installed, enabled or configured in the file. Their keys
    are the plugins' own (the schema has only some), so the name is matched, the longest
    first, and the rest is the key, in lower case as every option is written."""
    if not var.startswith(_PROTOCOLS_ENV):
        return None
    section = raw.get("receivers", {}).get("ebpf", {}) if isinstance(raw, dict) else {}
    section = section.get("protocols") if isinstance(section, dict) else None
    names = set(_installed_plugins())
    if isinstance(section, dict):
        names |= {k for k in section if isinstance(k, str) and k != "enabled"}
        if isinstance(section.get("enabled"), list):
            names |= {n for n in section["enabled"] if isinstance(n, str)}
    enabled = environ.get(_PROTOCOLS_ENV + "ENABLED")
    if enabled:
        names |= {str(n) for n in _env_list(enabled) if isinstance(n, str)}
    rest = var[len(_PROTOCOLS_ENV):]
    for name in sorted(names - {"enabled"}, key=len, reverse=True):
        token = env_name(name)[len(ENV_PREFIX):] + "_"
        if rest.startswith(token) and len(rest) > len(token):
            return (*_PROTOCOLS_PATH, name, rest[len(token):].lower())
    return None


def _installed_plugins() -> dict[str, type]:
    """Installed parsers and layers, by name (entry points: loaded once per process)."""
    global _PLUGINS
    if _PLUGINS is None:
        from otel_ebpf.protocols.registry import (  # noqa: PLC0415 (plugins import late)
            available_layers,
            available_parsers,
        )
        _PLUGINS = {**available_parsers(), **available_layers()}
    return _PLUGINS


_PLUGINS: dict[str, type] | None = None


def _set(raw: dict, path: tuple[str, ...], value: Any) -> bool:
    node = raw
    for key in path[:-1]:
        if node.get(key) is None:
            node[key] = {}
        node = node[key]
        if not isinstance(node, dict):  # the file's own error is reported instead
            return False
    node[path[-1]] = value
    return True


# --------------------------------------------------------------------------- loading


class _Loader(yaml.SafeLoader):
    """SafeLoader that rejects a key given twice in one mapping (PyYAML keeps the last)."""


def _construct_mapping(loader: _Loader, node: yaml.MappingNode) -> dict:
    seen = set()
    for key_node, _ in node.value:
        if key_node.tag == "tag:yaml.org,2002:merge":
            continue
        key = loader.construct_object(key_node, deep=True)
        try:
            duplicate = key in seen
        except TypeError:
            continue  # unhashable: construct_mapping reports it
        if duplicate:
            raise yaml.constructor.ConstructorError(
                "while constructing a mapping", node.start_mark,
                f"found duplicate key {key!r}", key_node.start_mark,
            )
        seen.add(key)
    return loader.construct_mapping(node, deep=True)


_Loader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _construct_mapping)


def _parse_yaml(text: str, source: str) -> Any:
    try:
        return yaml.load(text, Loader=_Loader)  # noqa: S506  (a SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        problem = exc.problem or exc.context or str(exc)
        if mark is None:
            raise ConfigError(source, "valid YAML", problem) from None
        line, column = mark.line + 1, mark.column + 1
        raise ConfigError(source, "valid YAML", problem, line=line, column=column) from None
    except yaml.YAMLError as exc:
        raise ConfigError(source, "valid YAML", str(exc)) from None


def load_config(path: str | os.PathLike | None, environ: Mapping[str, str] = os.environ) -> Config:
    """Read, expand, override and validate a config file; None means the built-in defaults
    (the same as config/default.yaml). Raises ConfigError."""
    if path is None:
        return _load({}, environ)
    source = os.fspath(path)
    try:
        with open(source, encoding="utf-8") as f:
            text = f.read()
    except FileNotFoundError:
        raise ConfigError(source, "an existing config file", "no such file") from None
    except IsADirectoryError:
        raise ConfigError(source, "a config file", "a directory") from None
    except (OSError, UnicodeDecodeError) as exc:
        raise ConfigError(source, "a readable UTF-8 config file", str(exc)) from None
    return _load(_parse_yaml(text, source), environ)


def parse_config(
    text: str, environ: Mapping[str, str] = os.environ, source: str = "<string>"
) -> Config:
    """load_config for YAML text already in hand; `source` names it in syntax errors."""
    return _load(_parse_yaml(text, source), environ)


def _load(raw: Any, environ: Mapping[str, str]) -> Config:
    if raw is None:
        raw = {}
    if not isinstance(raw, dict):
        raise ConfigError("(top level)", _SCHEMA.expected, _show(raw))
    ctx = _Ctx()
    raw = copy.deepcopy(raw)
    _fill_defaults(_SCHEMA, raw, ctx)
    raw = _expand_tree(raw, (), environ, ctx)
    _apply_env(raw, environ, ctx)
    cfg = _build(_SCHEMA.check(raw, (), ctx))
    receiver = _check_plugins(cfg.receiver, ctx)
    cfg = dataclasses.replace(cfg, receiver=_api_server(receiver, environ, ctx))
    return cfg


def _check_plugins(r: EbpfReceiver, ctx: _Ctx) -> EbpfReceiver:
    """Every enabled protocol is installed, and every parser and layer takes its options:
    each is built once here, as the agent will build it, so that a bad value is a config
    error at load time (exit 2, before privileges are needed), not one inside the agent.
    Returns the receiver with each v2 plugin's options typed by its schema."""
    from otel_ebpf.protocols.base import typed_options  # noqa: PLC0415
    from otel_ebpf.protocols.registry import PluginOptionsError, build  # noqa: PLC0415
    plugins = _installed_plugins()
    installed = ", ".join(sorted(plugins)) or "none"
    typed = copy.deepcopy(r.protocol_options)
    seen: set[str] = set()
    for i, name in enumerate(r.protocols_enabled):
        at = (*_PROTOCOLS_PATH, "enabled", i)
        if name not in plugins:
            hint = difflib.get_close_matches(name, plugins, n=1)
            got = _show(name) + (f" (did you mean {hint[0]}?)" if hint else "")
            ctx.fail(at, f"an installed protocol: {installed}", got)
        if name in seen:
            ctx.fail(at, "each protocol at most once", f"{name!r} again")
        seen.add(name)
    for name, options in r.plugin_options().items():
        if name not in plugins:  # options of a protocol not installed: a typo, or stale
            hint = difflib.get_close_matches(name, plugins, n=1)
            got = f"unknown key {name!r}" + (f" (did you mean {hint[0]}?)" if hint else "")
            ctx.fail((*_PROTOCOLS_PATH, name), f"enabled or an installed protocol: {installed}",
                     got)
        try:
            build(name, plugins[name], options)
        except PluginOptionsError as exc:
            if exc.option is not None:  # a schema's refusal: key, expected and got as said
                key = exc.option.key.partition(".")[2]
                ctx.fail((*_PROTOCOLS_PATH, name, key), exc.option.expected, exc.option.got)
            ctx.fail(*_plugin_failure(name, exc.reason))
        if getattr(plugins[name], "option_schema", None) is not None:
            given = r.protocol_options.get(name, {})
            typed[name] = {k: v for k, v in typed_options(plugins[name], given).items()
                           if k != "correlation_headers"}
    return dataclasses.replace(r, protocol_options=typed)


_KEYED_REASON = re.compile(r"([A-Za-z0-9_]+): (.*)", re.S)
_MUST_BE = re.compile(r"(?:([A-Za-z0-9_]+) )?must be (.*?)(?:, got (.*))?", re.S)


def _plugin_failure(name: str, reason: str) -> tuple[tuple[str, ...], str, str | None]:
    """A plugin's refusal (`llm.provider: expected a non-empty string, got 7`, `http2:
    max_streams must be >= 1, got 0`) as (YAML path, expected, got) for a ConfigError."""
    path: tuple[str, ...] = (*_PROTOCOLS_PATH, name)
    if reason.startswith(name + "."):
        m = _KEYED_REASON.fullmatch(reason[len(name) + 1:])
        if m:
            path, reason = (*path, m.group(1)), m.group(2)
    elif reason.startswith(name + ": "):
        reason = reason[len(name) + 2:]
    if reason.startswith("expected "):
        expected, sep, got = reason[len("expected "):].rpartition(", got ")
        return (path, expected, got) if sep else (path, reason[len("expected "):], None)
    m = _MUST_BE.fullmatch(reason)
    if m:
        if m.group(1) and len(path) == 4:
            path = (*path, m.group(1))
        return path, m.group(2), m.group(3)
    return path, f"a value {name} accepts", reason


# --------------------------------------------------------------------------- the result


def _protocol_options(protocols: dict) -> dict[str, dict]:
    return {k: copy.deepcopy(v) for k, v in protocols.items() if k != "enabled"}


def _default_protocols() -> tuple[str, ...]:
    from otel_ebpf.protocols.registry import default_protocols  # noqa: PLC0415
    return default_protocols()


def _default_protocol_options() -> dict[str, dict]:
    """Each default protocol's options at their defaults (from its option_schema)."""
    from otel_ebpf.protocols.options import defaults  # noqa: PLC0415
    plugins = _installed_plugins()
    return {name: defaults(plugins[name].option_schema) for name in _default_protocols()
            if getattr(plugins[name], "option_schema", None) is not None}


_D = _RECEIVER.check({}, ("receivers", "ebpf"), _Ctx())  # the receiver's defaults
_P = _PROCESSORS.check({}, ("processors",), _Ctx())["batch"]
_T = _TELEMETRY.check({}, (), _Ctx())


@dataclass(frozen=True, slots=True)
class Targets:
    """What to trace: a connection whose process has one of the pids, or one of the names,
    or whose local or remote port is one of the ports. All empty = every connection."""

    pids: tuple[int, ...] = ()
    process_names: tuple[str, ...] = ()
    ports: tuple[int, ...] = ()

    @property
    def trace_all(self) -> bool:
        return not (self.pids or self.process_names or self.ports)


@dataclass(frozen=True, slots=True)
class EbpfReceiver:
    targets: Targets = Targets()
    capture_max_bytes: int = _D["capture"]["max_bytes"]
    capture_llm_max_bytes: int = _D["capture"]["llm_max_bytes"]
    capture_llm_tail_bytes: int = _D["capture"]["llm_tail_bytes"]
    ring_buffer_size_mib: int = _D["ring_buffer"]["size_mib"]
    poll_interval_s: float = _D["ring_buffer"]["poll_interval"]
    wakeup_fill_percent: int = _D["ring_buffer"]["wakeup_fill_percent"]
    max_connections: int = _D["connections"]["max"]
    idle_timeout_s: float = _D["connections"]["idle_timeout"]
    correlation_window_s: float = _D["correlation"]["window"]
    correlation_headers: tuple[str, ...] = tuple(_D["correlation"]["headers"])
    correlation_asyncio_tasks: bool = _D["correlation"]["asyncio_tasks"]
    tls_openssl: bool = _D["tls"]["openssl"]
    profiling_frequency: int = _D["profiling"]["frequency"]
    profiling_interval_s: float = _D["profiling"]["interval"]
    profiling_unwind_tables: bool = _D["profiling"]["unwind_tables"]
    profiling_unwind_table_mib: int = _D["profiling"]["unwind_table_mib"]
    rdma_enabled: bool = _D["rdma"]["enabled"]
    rdma_sysfs_root: str = _D["rdma"]["sysfs_root"]
    rdma_interval_s: float = _D["rdma"]["interval"]
    gpu_enabled: bool = _D["gpu"]["enabled"]
    gpu_scan_interval_s: float = _D["gpu"]["scan_interval"]
    gpu_libraries: tuple[str, ...] = tuple(_D["gpu"]["libraries"])
    redact_query_params: tuple[str, ...] = tuple(_D["redaction"]["query_params"])
    command_args: bool = _D["resource_attributes"]["process.command_args"]["enabled"]
    sampling_ratio: float = _D["sampling"]["ratio"]
    k8s_node_name: str = _D["kubernetes"]["node_name"]
    pod_metadata_source: str = _D["kubernetes"]["metadata"]["source"]  # none|kubelet|api_server
    pod_metadata_endpoint: str = _D["kubernetes"]["metadata"]["endpoint"]
    pod_metadata_interval_s: float = _D["kubernetes"]["metadata"]["interval"]
    pod_metadata_token_file: str = _D["kubernetes"]["metadata"]["token_file"]
    pod_metadata_ca_file: str = _D["kubernetes"]["metadata"]["ca_file"]
    pod_metadata_insecure: bool = _D["kubernetes"]["metadata"]["insecure_skip_verify"]
    # the protocols on by default (each plugin's default_enabled) unless the config says
    protocols_enabled: tuple[str, ...] = field(default_factory=_default_protocols)
    # plugin name -> the options the file or environment gave it (typed by the plugin's
    # option_schema once loaded: durations as seconds, sizes as bytes)
    protocol_options: dict[str, dict] = field(default_factory=_default_protocol_options)

    def plugin_options(self) -> dict[str, dict]:
        """The options each parser and layer is built with: its `protocols.<name>` section
        and the headers correlate/ links spans by, for every enabled or configured name."""
        names = dict.fromkeys([*self.protocols_enabled, *self.protocol_options])
        return {name: {"correlation_headers": list(self.correlation_headers),
                       **copy.deepcopy(self.protocol_options.get(name, {}))}
                for name in names}


@dataclass(frozen=True, slots=True)
class Processors:
    batch_size: int = _P["send_batch_size"]
    batch_timeout_s: float = _P["timeout"]
    max_queue_size: int = _P["max_queue_size"]


@dataclass(frozen=True, slots=True)
class ExporterConfig:
    """One exporter instance. `settings` is plain data, validated, durations in float
    seconds. debug's defaults are filled in; otlp/otlphttp keys the file leaves out stay
    out (`endpoint` too), for the SDK to take from OTEL_EXPORTER_OTLP_*. An `endpoint`
    of '' means the exporter is disabled."""

    name: str  # "otlp" or "otlp/backup"
    type: str  # otlp | otlphttp | file | debug
    settings: dict[str, Any]


@dataclass(frozen=True, slots=True)
class Pipeline:
    name: str  # "traces", "metrics/x"
    signal: str  # traces | metrics | profiles
    receivers: tuple[str, ...]
    processors: tuple[str, ...]
    exporters: tuple[str, ...]


@dataclass(frozen=True, slots=True)
class Telemetry:
    log_level: str = _T["logs"]["level"]  # debug | info | warning | error
    metrics_interval_s: float = _T["metrics"]["interval"]


@dataclass(frozen=True, slots=True)
class Config:
    receiver: EbpfReceiver
    processors: Processors
    exporters: dict[str, ExporterConfig]
    pipelines: dict[str, Pipeline]
    telemetry: Telemetry

    def exporters_for(self, signal: str) -> dict[str, dict]:
        """{instance name: settings (a copy)} of the exporters that pipelines of `signal`
        use, in the order the pipelines name them."""
        if signal not in SIGNALS:
            raise ValueError(f"signal must be one of {SIGNALS}, not {signal!r}")
        out: dict[str, dict] = {}
        for pipe in self.pipelines.values():
            if pipe.signal == signal:
                for name in pipe.exporters:
                    if name not in out:
                        out[name] = copy.deepcopy(self.exporters[name].settings)
        return out


def _build(tree: dict) -> Config:
    e = tree["receivers"]["ebpf"]
    batch = tree["processors"]["batch"]
    tel = tree["service"]["telemetry"]
    return Config(
        receiver=EbpfReceiver(
            targets=Targets(**{k: tuple(v) for k, v in e["targets"].items()}),
            capture_max_bytes=e["capture"]["max_bytes"],
            capture_llm_max_bytes=e["capture"]["llm_max_bytes"],
            capture_llm_tail_bytes=e["capture"]["llm_tail_bytes"],
            ring_buffer_size_mib=e["ring_buffer"]["size_mib"],
            poll_interval_s=e["ring_buffer"]["poll_interval"],
            wakeup_fill_percent=e["ring_buffer"]["wakeup_fill_percent"],
            max_connections=e["connections"]["max"],
            idle_timeout_s=e["connections"]["idle_timeout"],
            correlation_window_s=e["correlation"]["window"],
            correlation_headers=tuple(h.lower() for h in e["correlation"]["headers"]),
            correlation_asyncio_tasks=e["correlation"]["asyncio_tasks"],
            tls_openssl=e["tls"]["openssl"],
            profiling_frequency=e["profiling"]["frequency"],
            profiling_interval_s=e["profiling"]["interval"],
            profiling_unwind_tables=e["profiling"]["unwind_tables"],
            profiling_unwind_table_mib=e["profiling"]["unwind_table_mib"],
            rdma_enabled=e["rdma"]["enabled"],
            rdma_sysfs_root=e["rdma"]["sysfs_root"],
            rdma_interval_s=e["rdma"]["interval"],
            gpu_enabled=e["gpu"]["enabled"],
            gpu_scan_interval_s=e["gpu"]["scan_interval"],
            gpu_libraries=tuple(e["gpu"]["libraries"]),
            redact_query_params=tuple(e["redaction"]["query_params"]),
            command_args=e["resource_attributes"]["process.command_args"]["enabled"],
            sampling_ratio=e["sampling"]["ratio"],
            k8s_node_name=e["kubernetes"]["node_name"],
            pod_metadata_source=e["kubernetes"]["metadata"]["source"],
            pod_metadata_endpoint=e["kubernetes"]["metadata"]["endpoint"],
            pod_metadata_interval_s=e["kubernetes"]["metadata"]["interval"],
            pod_metadata_token_file=e["kubernetes"]["metadata"]["token_file"],
            pod_metadata_ca_file=e["kubernetes"]["metadata"]["ca_file"],
            pod_metadata_insecure=e["kubernetes"]["metadata"]["insecure_skip_verify"],
            protocols_enabled=(tuple(e["protocols"]["enabled"]) if "enabled" in e["protocols"]
                               else _default_protocols()),
            protocol_options=_protocol_options(e["protocols"]),
        ),
        processors=Processors(batch["send_batch_size"], batch["timeout"], batch["max_queue_size"]),
        exporters={
            name: ExporterConfig(name, name.split("/")[0], settings)
            for name, settings in tree["exporters"].items()
        },
        pipelines={
            name: Pipeline(
                name,
                name.split("/")[0],
                tuple(p["receivers"]),
                tuple(p["processors"]),
                tuple(p["exporters"]),
            )
            for name, p in tree["service"]["pipelines"].items()
        },
        telemetry=Telemetry(tel["logs"]["level"], tel["metrics"]["interval"]),
    )
