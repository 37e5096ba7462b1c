"""The typed, frozen result: what the agent reads."""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Any

from .env import _installed_plugins
from .schema import _PROCESSORS, _RECEIVER, _TELEMETRY
from .values import SIGNALS, _Ctx


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


def _key(*path: str, convert: Callable[[Any], Any] | None = None) -> Any:
    """A receiver field read from `receivers.ebpf.<path>`: its default is the schema's (the
    key's type, bounds and default are declared there, once), and `_build` reads it by the
    same path, so no key is spelled out a second time."""
    default = _D
    for key in path:
        default = default[key]
    if convert is not None:
        default = convert(default)
    return field(default=default, metadata={"path": path, "convert": convert})


def _keyed(e: dict) -> dict[str, Any]:
    """The receiver's `_key` fields from the checked tree, by the paths they declare."""
    out = {}
    for f in dataclasses.fields(EbpfReceiver):
        path = f.metadata.get("path")
        if path is None:
            continue
        value = e
        for key in path:
            value = value[key]
        convert = f.metadata["convert"]
        out[f.name] = convert(value) if convert is not None else value
    return out


def _lower_tuple(names: list[str]) -> tuple[str, ...]:
    return tuple(n.lower() for n in names)


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
    capture_max_bytes: int = _key("capture", "max_bytes")
    pipe_pids: tuple[int, ...] = _key("pipes", "pids", convert=tuple)
    pipe_process_names: tuple[str, ...] = _key("pipes", "process_names", convert=tuple)
    capture_llm_max_bytes: int = _key("capture", "llm_max_bytes")
    capture_llm_tail_bytes: int = _key("capture", "llm_tail_bytes")
    ring_buffer_size_mib: int = _key("ring_buffer", "size_mib")
    poll_interval_s: float = _key("ring_buffer", "poll_interval")
    wakeup_fill_percent: int = _key("ring_buffer", "wakeup_fill_percent")
    max_connections: int = _key("connections", "max")
    idle_timeout_s: float = _key("connections", "idle_timeout")
    correlation_window_s: float = _key("correlation", "window")
    correlation_headers: tuple[str, ...] = _key("correlation", "headers", convert=_lower_tuple)
    correlation_asyncio_tasks: bool = _key("correlation", "asyncio_tasks")
    correlation_leaf_copies: int = _key("correlation", "leaf_copies")
    correlation_nat: bool = _key("correlation", "nat")
    tls_openssl: bool = _key("tls", "openssl")
    propagation_enabled: bool = _key("propagation", "enabled")
    propagation_trusted_networks: tuple[str, ...] = _key("propagation", "trusted_networks",
                                                         convert=tuple)
    propagation_wait_s: float = _key("propagation", "wait")
    propagation_cgroup: str = _key("propagation", "cgroup")  # "": the cgroup2 root
    profiling_frequency: int = _key("profiling", "frequency")
    profiling_interval_s: float = _key("profiling", "interval")
    profiling_unwind_tables: bool = _key("profiling", "unwind_tables")
    profiling_unwind_table_mib: int = _key("profiling", "unwind_table_mib")
    rdma_enabled: bool = _key("rdma", "enabled")
    rdma_sysfs_root: str = _key("rdma", "sysfs_root")
    rdma_interval_s: float = _key("rdma", "interval")
    gpu_enabled: bool = _key("gpu", "enabled")
    gpu_scan_interval_s: float = _key("gpu", "scan_interval")
    gpu_libraries: tuple[str, ...] = _key("gpu", "libraries", convert=tuple)
    gpu_launch_duty_cycle: float = _key("gpu", "launches", "duty_cycle")
    gpu_launch_period_s: float = _key("gpu", "launches", "period")
    redact_query_params: tuple[str, ...] = _key("redaction", "query_params", convert=tuple)
    command_args: bool = _key("resource_attributes", "process.command_args", "enabled")
    sampling_ratio: float = _key("sampling", "ratio")
    k8s_node_name: str = _key("kubernetes", "node_name")
    pod_metadata_source: str = _key("kubernetes", "metadata", "source")  # none|kubelet|api_server
    pod_metadata_endpoint: str = _key("kubernetes", "metadata", "endpoint")
    pod_metadata_interval_s: float = _key("kubernetes", "metadata", "interval")
    pod_metadata_token_file: str = _key("kubernetes", "metadata", "token_file")
    pod_metadata_ca_file: str = _key("kubernetes", "metadata", "ca_file")
    pod_metadata_insecure: bool = _key("kubernetes", "metadata", "insecure_skip_verify")
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
            **_keyed(e),
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
