"""Joins spans into traces: trace, span and parent IDs from the wire and the kernel."""

from otel_ebpf.correlate.ids import assign_ids
from otel_ebpf.correlate.joiner import Correlator

__all__ = ["Correlator", "assign_ids"]
