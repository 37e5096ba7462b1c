"""The launch probes' duty cycle: cuLaunchKernel's uprobes attached for `window` out of
every `period` by a timer thread (links created and destroyed), the time each window was
really attached logged on the monotonic clock, and the scale that turns the launches
counted in an interval into an estimate of all of them."""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Callable

log = logging.getLogger(__name__)

# the config refuses windows under 10 ms (config/schema.py: _MIN_LAUNCH_WINDOW_S): attaching
# takes 8-10 ms on an H200 host, detaching blocks this thread for longer but the probes stop
# counting when it starts (docs/gpu.md, "Launch probes in duty cycles: estimated launch counts")
MAX_WINDOWS = 100_000  # windows remembered (at one a second: more than a day)


def _now() -> int:
    return time.clock_gettime_ns(time.CLOCK_MONOTONIC)


class AttachLog:
    """Windows the launch probes were attached, as (open_ns, close_ns) on the monotonic
    clock; the one still open has close_ns None. A window opens when the attach call
    returns (a program counts once it is attached to its uprobe, the last step) and closes
    when the detach call starts: destroying a link detaches its program first, then waits
    for the kernel's grace periods (~50 ms a link on a 2-core VM)."""

    def __init__(self) -> None:
        self._windows: deque[list[int | None]] = deque(maxlen=MAX_WINDOWS)
        self._lock = threading.Lock()

    def opened(self, at_ns: int) -> None:
        with self._lock:
            if not self._windows or self._windows[-1][1] is not None:
                self._windows.append([at_ns, None])

    def closed(self, at_ns: int) -> None:
        with self._lock:
            if self._windows and self._windows[-1][1] is None:
                self._windows[-1][1] = max(at_ns, self._windows[-1][0])

    def attached_ns(self, start_ns: int, end_ns: int) -> int:
        """How long the probes were attached within [start_ns, end_ns] (an open window
        counts up to end_ns)."""
        total = 0
        with self._lock:
            for w_open, w_close in reversed(self._windows):
                hi = end_ns if w_close is None else min(w_close, end_ns)
                lo = max(w_open, start_ns)
                if hi > lo:
                    total += hi - lo
                if (w_close if w_close is not None else end_ns) < start_ns:
                    break  # windows are in time order: the older ones end earlier still
        return total


def launch_scale(elapsed_ns: int, attached_ns: int) -> float:
    """What the launches counted while attached are multiplied by to estimate all the
    launches of `elapsed_ns`: elapsed / attached (1.0 when always attached). 0.0 when the
    probes were never attached in the interval: nothing to estimate from yet, and the
    caller keeps the interval open (its counts, if any, go into the next estimate)."""
    if attached_ns <= 0:
        return 0.0
    return max(1.0, elapsed_ns / attached_ns)


class LaunchDuty:
    """Attaches the launch probes for `duty_cycle * period_s` out of every `period_s` from
    a thread of its own. duty_cycle 1: always attached, counts exact, no thread.
    `set_launches(on)` attaches or detaches them (CudaProbes.set_launches)."""

    def __init__(self, set_launches: Callable[[bool], None], duty_cycle: float,
                 period_s: float, clock: Callable[[], int] = _now) -> None:
        if not 0.0 < duty_cycle <= 1.0:
            raise ValueError(f"duty_cycle must be in (0, 1], not {duty_cycle}")
        self.duty_cycle = duty_cycle
        self.period_s = period_s
        self.window_s = duty_cycle * period_s
        self._set = set_launches
        self._clock = clock
        self.log = AttachLog()
        self.windows = 0
        self.attach_ns = 0  # time spent attaching and detaching, in all
        self.detach_ns = 0
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self.started_ns = clock()
        if self.exact:
            self.log.opened(self.started_ns)  # attached from the start, for good

    @property
    def exact(self) -> bool:
        return self.duty_cycle >= 1.0

    def attached_ns(self, start_ns: int, end_ns: int) -> int:
        return self.log.attached_ns(start_ns, end_ns)

    def start(self) -> None:
        """Detach the launch probes and start cycling them (nothing for duty 1)."""
        if self.exact or self._thread is not None:
            return
        self._toggle(False)
        self._thread = threading.Thread(target=self._run, name="otel-ebpf-gpu-duty",
                                        daemon=True)
        self._thread.start()
        log.info("GPU launch probes attached %.0f ms of every %g s (duty cycle %g): launch "
                 "counts are estimates (gpu.launch.count.estimated)", self.window_s * 1000,
                 self.period_s, self.duty_cycle)

    def _toggle(self, on: bool) -> None:
        before = self._clock()
        self._set(on)
        after = self._clock()
        if on:
            self.attach_ns += after - before
            self.windows += 1
            self.log.opened(after)
        else:
            self.detach_ns += after - before
            self.log.closed(before)

    def _run(self) -> None:
        period_ns = int(self.period_s * 1e9)
        window_ns = int(self.window_s * 1e9)
        # windows start on the period's grid, so one late wake-up does not shift the rest;
        # the first at once, so the first interval has one
        next_open = self._clock()
        while not self._stop.is_set():
            if self._stop.wait(max(0, next_open - self._clock()) / 1e9):
                break
            try:
                self._toggle(True)
                close_at = next_open + window_ns
                self._stop.wait(max(0, close_at - self._clock()) / 1e9)
                self._toggle(False)
            except Exception:  # keep cycling: the next window may attach
                log.exception("GPU launch probes: duty cycle step failed")
            next_open += period_ns
            now = self._clock()
            if next_open <= now:  # fell behind (a stalled host): skip, keep the grid
                next_open += ((now - next_open) // period_ns + 1) * period_ns

    def stop(self, attach: bool = False) -> None:
        """Stop cycling; the probes are left detached (attach=True: attached, exact from
        then on)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(10.0)
            self._thread = None
            if attach:
                self._toggle(True)
