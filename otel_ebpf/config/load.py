"""Reading a config: YAML (duplicate keys refused), defaults, the environment, the schema's
checks, the plugins' own, the typed result."""

from __future__ import annotations

import copy
import dataclasses
import difflib
import os
import re
from collections.abc import Mapping
from typing import Any

import yaml

from .env import _PROTOCOLS_PATH, _apply_env, _expand_tree, _installed_plugins
from .result import Config, EbpfReceiver, _build
from .schema import _SCHEMA, _fill_defaults
from .values import ConfigError, _Ctx, _show


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
