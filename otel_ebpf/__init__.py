"""otel-ebpf: an OpenTelemetry-native eBPF receiver."""
__version__ = "0.1.0"
