"""Neutral span -> OpenTelemetry: kernel clock to wall time, per-process resources, conversion."""

from otel_ebpf.spans.clock import KernelClock
from otel_ebpf.spans.convert import SCOPE, ready, resource_for, to_readable
from otel_ebpf.spans.resources import ProcessResources

__all__ = ["SCOPE", "KernelClock", "ProcessResources", "ready", "resource_for", "to_readable"]
