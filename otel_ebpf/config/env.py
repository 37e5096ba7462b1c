"""`OTEL_EBPF_<PATH>` variables and `${env:NAME}` references: what the environment sets."""

from __future__ import annotations

import difflib
import logging
import os
import re
from collections.abc import Mapping
from typing import Any

from .nodes import _Any, _env_list, _Node
from .schema import _SCHEMA, _leaves
from .values import (
    ENV_CONFIG,
    ENV_PREFIX,
    RESERVED_ENV,
    ConfigError,
    _Ctx,
    _dotted,
    _env_str,
    _show,
)

log = logging.getLogger("otel_ebpf.config")  # one logger for the package, as before


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
