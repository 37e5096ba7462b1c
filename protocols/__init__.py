"""Pluggable, sans-IO protocol parsers (installed as otel_ebpf.protocols)."""
