"""A host whose wall clock a test moves against the monotonic one, measured by KernelClock."""

from __future__ import annotations

from otel_ebpf.spans.clock import KernelClock


class HostClock:
    """The two clocks of a host, as KernelClock's measure reads them: the test advances
    the monotonic clock and steps or slews the wall clock against it, as a VM host's time
    sync does (slews of 5 ms per second and steps were measured on our machines)."""

    def __init__(self, mono: int = 10_000_000_000, offset: int = 1_700_000_000_000_000_000):
        self.mono = mono
        self.offset = offset  # wall minus monotonic

    def measure(self) -> tuple[int, int]:
        return self.mono, self.offset

    def clock(self) -> KernelClock:
        return KernelClock(measure=self.measure)
