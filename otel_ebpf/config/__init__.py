"""Collector-shaped YAML plus `OTEL_EBPF_*` environment -> typed, validated, frozen config.

One declarative schema (`schema.py`, of the node types in `nodes.py`) validates the file,
fills defaults, and names every key an `OTEL_EBPF_<PATH>` variable may override (`env.py`);
`load.py` reads a file through them into the typed result (`result.py`); `load_config` is
the front door. Each protocol's options are its own (`option_schema`, checked at load).
"""

from .env import default_config_path, env_name
from .load import load_config, parse_config
from .nodes import _ABSENT
from .result import (
    Config,
    EbpfReceiver,
    ExporterConfig,
    Pipeline,
    Processors,
    Targets,
    Telemetry,
)
from .schema import _SCHEMA, DEFAULT_EXPORTERS, DEFAULT_PIPELINES, _leaves
from .values import (
    ENV_BPF_DIR,
    ENV_CONFIG,
    ENV_PREFIX,
    ENV_REQUIRE_BPF,
    RESERVED_ENV,
    SIGNALS,
    ConfigError,
    parse_duration,
)

__all__ = [
    "DEFAULT_EXPORTERS",
    "DEFAULT_PIPELINES",
    "ENV_BPF_DIR",
    "ENV_CONFIG",
    "ENV_PREFIX",
    "ENV_REQUIRE_BPF",
    "RESERVED_ENV",
    "SIGNALS",
    "Config",
    "ConfigError",
    "EbpfReceiver",
    "ExporterConfig",
    "Pipeline",
    "Processors",
    "Targets",
    "Telemetry",
    "_ABSENT",
    "_SCHEMA",
    "_leaves",
    "default_config_path",
    "env_name",
    "load_config",
    "parse_config",
    "parse_duration",
]
