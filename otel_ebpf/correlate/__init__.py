"""Joins spans into traces: trace, span and parent IDs."""

from otel_ebpf.correlate.ids import assign_ids

__all__ = ["assign_ids"]
