"""The config's schema: every key of the file, once, with its type, bounds and default."""

from __future__ import annotations

import copy
import ipaddress
import re
from collections.abc import Iterator
from typing import Any
from urllib.parse import urlsplit

from .nodes import (
    _ABSENT,
    _REQUIRED,
    _Any,
    _AnyMap,
    _Bool,
    _Choice,
    _Duration,
    _Int,
    _List,
    _Map,
    _Named,
    _Node,
    _Ratio,
    _Str,
    _StrMap,
)
from .values import _Ctx, _show

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

# pipes of these processes (and of their children) are captured: an MCP server run as a
# subprocess speaks JSON-RPC on its stdin and stdout (docs/llm.md); both empty: none
_PIPES = _Map(
    {
        "pids": _List(
            _Int(1, 4_194_304), "a list of process IDs (1 to 4194304)", max_items=_MAX_TARGETS
        ),
        "process_names": _List(
            _Str(expected="a process name"), "a list of process names", max_items=_MAX_TARGETS
        ),
    }
)

# networks whose hosts may send this node trace context in a TCP option, and be sent it:
# loopback and the private ranges (docs/correlation.md, "TCP option carrier")
DEFAULT_TRUSTED_NETWORKS = ("127.0.0.0/8", "10.0.0.0/8", "172.16.0.0/12", "192.168.0.0/16",
                            "::1/128", "fc00::/7")
_MAX_TRUSTED_NETWORKS = 1024  # PROP_MAX_NETS in bpf/include/abi.h


def _cidr(text: str) -> bool:
    """An IPv4 or IPv6 network in CIDR notation, without host bits (10.0.0.0/8, fc00::/7;
    a bare address is its /32 or /128)."""
    try:
        ipaddress.ip_network(text.strip(), strict=True)
    except ValueError:
        return False
    return True


_PROPAGATION = _Map({
    # off by default: it needs the agents of both hosts, and with it a request from another
    # host waits up to twice the correlation window for the context its client sends
    "enabled": _Bool(False),
    "trusted_networks": _List(
        _Str(expected="a network in CIDR notation without host bits, like 10.0.0.0/8 or "
             "fc00::/7", valid=_cidr),
        "a list of networks in CIDR notation", DEFAULT_TRUSTED_NETWORKS,
        max_items=_MAX_TRUSTED_NETWORKS),
    # how long a request on a connection that has carried contexts waits for its own (it
    # comes with the connection's next segment: the next request, or the FIN when the
    # connection idles out; uvicorn and httpx close idle ones after 5 s); then its link
    "wait": _Duration("0s", "10m", "10s"),
    # the cgroup v2 directory whose sockets (and its descendants') are covered
    "cgroup": _Str("", expected="a cgroup v2 directory path, or '' (the cgroup2 root)",
                   takes_empty=True),
})

_RECEIVER = _Map(
    {
        "targets": _TARGETS,
        "pipes": _PIPES,
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
                # a process that copies this many Contexts and never calls out loses its
                # Context probes (0: never)
                "leaf_copies": _Int(0, 1 << 30, 1000),
                # client connections through NAT (a Service's VIP) are looked up in conntrack,
                # so that their derived IDs are the server's (conntrack/nat.py)
                "nat": _Bool(True),
            }
        ),
        "tls": _Map({"openssl": _Bool(True)}),
        # trace context to and from trusted peers in a TCP header option (sock_ops)
        "propagation": _PROPAGATION,
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
            # the launch probes (the hottest call) attached duty_cycle of every period, the
            # counts scaled by the time really attached: estimates, marked so; 1 = exact
            "launches": _Map({
                "duty_cycle": _Ratio(0.02),
                "period": _Duration("100ms", "1h", "1s"),
            }, after=lambda tree, path, ctx: _check_launch_duty(tree, path, ctx)),
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


_MIN_LAUNCH_WINDOW_S = 0.01  # a launch window at least: attaching takes ~10 ms (gpu/duty.py)


def _check_launch_duty(tree: dict, path: tuple, ctx: _Ctx) -> None:
    duty, period = tree["duty_cycle"], tree["period"]
    if duty <= 0.0:
        ctx.fail(path + ("duty_cycle",), "a number above 0 and at most 1 (the share of the "
                 "time the launch probes are attached; 1: always, exact counts)", _show(duty))
    if duty < 1.0 and duty * period < _MIN_LAUNCH_WINDOW_S - 1e-12:
        ctx.fail(path + ("duty_cycle",), f"at least {_MIN_LAUNCH_WINDOW_S / period:g} with "
                 f"period {period:g}s: an attached window of at least "
                 f"{_MIN_LAUNCH_WINDOW_S * 1000:g}ms (duty_cycle x period), so attaching "
                 "and detaching stay a small part of it; or 1 (always attached)", _show(duty))


def _check_kubernetes(tree: dict, path: tuple, ctx: _Ctx) -> None:
    meta = tree["metadata"]
    if meta["source"] == "api_server" and not tree["node_name"]:
        ctx.fail(path + ("node_name",), "this node's name with metadata.source api_server "
                 "(else every pod of the cluster is listed; the chart sets it from "
                 "spec.nodeName)", "''")
    if meta["source"] == "kubelet" and not meta["endpoint"]:
        ctx.fail(path + ("metadata", "endpoint"), "the kubelet's URL with source kubelet, "
                 "like https://<node IP>:10250 (the chart sets it from status.hostIP)", "''")


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


DEFAULT_NUM_CONSUMERS = 4  # exporters.otlp*.sending_queue.num_consumers


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
            # spans only: export requests in flight at once (the Collector's key; one at a
            # time sends at most a batch per round trip to the backend)
            "sending_queue": _Map({"num_consumers": _Int(1, 64, DEFAULT_NUM_CONSUMERS)},
                                  optional=True),
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
