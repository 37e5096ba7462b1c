"""A bounded span queue and worker thread in front of one exporter.

One queue per exporter: a slow or unreachable backend fills its own queue and drops
its own spans (counted), and never holds back the agent or the other exporters. An
exporter that says it takes several requests at once (`num_consumers`, the OTLP exporters'
`sending_queue.num_consumers`) gets that many batches in flight: one request at a time
sends at most a batch per round trip, which a backend far away or slow to answer holds
below the rate spans come in.
"""

from __future__ import annotations

import logging
import threading
import time
from collections import deque
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor

from opentelemetry.sdk.trace import ReadableSpan
from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_ebpf.protocols.base import NeutralSpan
from otel_ebpf.spans.convert import to_readable
from otel_ebpf.telemetry import Stats

log = logging.getLogger(__name__)

_WARN_EVERY_S = 10.0


class ExportQueue:
    """Spans waiting for one exporter, sent in batches of max_batch_size, or whatever is
    queued after schedule_delay_s, by a worker thread of its own; with the exporter's
    `num_consumers` above 1, up to that many batches are sent at once from a pool of
    sender threads (the worker then only forms batches)."""

    def __init__(
        self,
        exporter: SpanExporter,
        name: str,
        stats: Stats,
        max_queue_size: int = 16384,
        max_batch_size: int = 512,
        schedule_delay_s: float = 1.0,
    ) -> None:
        if max_queue_size < 1 or max_batch_size < 1 or schedule_delay_s <= 0:
            raise ValueError("queue and batch sizes must be >= 1 and the delay > 0")
        self.exporter = exporter
        # the agent's own exporters encode ready NeutralSpans; the SDK's take ReadableSpans
        self._takes_neutral = bool(getattr(exporter, "takes_neutral_spans", False))
        self.name = name
        self._stats = stats
        self._max_queue = max_queue_size
        self._max_batch = min(max_batch_size, max_queue_size)
        self._delay = schedule_delay_s
        self._spans: deque[NeutralSpan] = deque()
        self._cond = threading.Condition()
        self._closing = False
        self._flushes: list[threading.Event] = []  # flush() callers waiting for an empty queue
        self._in_flight = 0  # batches taken and not yet answered
        self._max_in_flight = max(1, int(getattr(exporter, "num_consumers", 1)))
        self._senders = (ThreadPoolExecutor(self._max_in_flight, f"export-{name}-send")
                         if self._max_in_flight > 1 else None)
        self._abandoned = False
        self._dropped_unwarned = 0
        self._last_warning = float("-inf")
        self._worker = threading.Thread(target=self._run, name=f"export-{name}", daemon=True)
        self._worker.start()

    def put(self, spans: Sequence[NeutralSpan]) -> None:
        """Queue spans for export. Never blocks: what does not fit is dropped and counted."""
        with self._cond:
            if self._closing:
                dropped = len(spans)
            else:
                room = self._max_queue - len(self._spans)
                self._spans.extend(spans[:room] if room < len(spans) else spans)
                dropped = max(0, len(spans) - room)
                if len(self._spans) >= self._max_batch:
                    self._cond.notify()
        if dropped:
            self._drop(dropped)

    def flush(self, timeout_s: float = 30.0) -> bool:
        """Export everything queued now; True when it was done in time."""
        done = threading.Event()
        with self._cond:
            if not self._spans and not self._in_flight:
                return True
            self._flushes.append(done)
            self._cond.notify()
        return done.wait(timeout_s)

    def shutdown(self, timeout_s: float = 30.0) -> None:
        """Export what is queued, then shut the exporter down. Spans still queued when
        the time is up are counted as dropped."""
        with self._cond:
            if self._closing:
                return
            self._closing = True
            self._cond.notify()
        self._worker.join(timeout_s)
        if self._worker.is_alive():
            # stuck in an export (a retry backoff): stop taking batches, and shut the
            # exporter down now, which cuts short the SDK OTLP exporters' backoff sleep
            with self._cond:
                self._abandoned = True
                self._cond.notify_all()
            if self._senders is not None:
                self._senders.shutdown(wait=False, cancel_futures=True)
            self._shutdown_exporter()
            self._worker.join(1.0)
        else:
            self._shutdown_exporter()
        with self._cond:
            left = len(self._spans)
            self._spans.clear()
        if left:
            self._stats.add("spans.dropped", left, exporter=self.name)
            log.warning("exporter %s: shut down with %d spans not exported", self.name, left)

    def _shutdown_exporter(self) -> None:
        try:
            self.exporter.shutdown()
        except Exception:  # shutting down goes on for the other exporters
            log.exception("exporter %s: shutdown failed", self.name)

    # -- worker

    def _run(self) -> None:
        while True:
            with self._cond:
                batch = self._take()
                if batch is None:  # abandoned by shutdown()
                    return
                if batch:
                    self._in_flight += 1
                else:  # drained, nothing in flight: wake flush() callers; after shutdown(), stop
                    flushed, self._flushes = self._flushes, []
                    closing = self._closing
            if batch:
                if self._senders is not None:
                    self._senders.submit(self._send, batch)
                else:
                    self._send(batch)
                continue
            for event in flushed:
                event.set()
            if closing:
                if self._senders is not None:
                    self._senders.shutdown(wait=True)  # idle: every batch was answered
                return

    def _take(self) -> list[NeutralSpan] | None:
        """Under the lock, wait for the next batch: max_batch spans, or what is queued once
        the delay has passed, a flush or the shutdown, as soon as a sender is free. [] once
        the queue is drained and nothing is in flight while a flush or the shutdown waits;
        None when shutdown() gave up on the exports."""
        deadline = time.monotonic() + self._delay
        while not self._abandoned:
            free = self._in_flight < self._max_in_flight
            remaining = deadline - time.monotonic()
            hurry = self._closing or bool(self._flushes)
            if self._spans:
                if free and (hurry or remaining <= 0 or len(self._spans) >= self._max_batch):
                    return [self._spans.popleft()
                            for _ in range(min(self._max_batch, len(self._spans)))]
            elif hurry and not self._in_flight:
                return []
            elif remaining <= 0:  # nothing came in this period: start another
                deadline, remaining = time.monotonic() + self._delay, self._delay
            # a busy sender's answer, put(), flush() or shutdown() wakes it early
            self._cond.wait(remaining if free and remaining > 0 else None)
        return None

    def _send(self, batch: list[NeutralSpan]) -> None:
        try:
            self._export(batch)
        finally:
            with self._cond:
                self._in_flight -= 1
                self._cond.notify_all()

    def _export(self, batch: list[NeutralSpan]) -> None:
        if not self._takes_neutral:
            batch = self._readable(batch)
            if not batch:
                return
        try:
            result = self.exporter.export(batch)
        except Exception:  # an exporter bug must not kill the worker
            log.exception("exporter %s raised", self.name)
            result = SpanExportResult.FAILURE
        counter = "spans.exported" if result is SpanExportResult.SUCCESS else "spans.failed"
        self._stats.add(counter, len(batch), exporter=self.name)

    def _readable(self, batch: list[NeutralSpan]) -> list[ReadableSpan]:
        """The SDK's spans, for an exporter that takes only those."""
        readable = []
        for span in batch:
            try:
                readable.append(to_readable(span))
            except Exception:  # a malformed span must not cost the rest of the batch
                log.exception("exporter %s: cannot convert span %r", self.name, span.name)
                self._stats.add("spans.dropped", 1, reason="unconvertible")
        return readable

    def _drop(self, count: int) -> None:
        self._stats.add("spans.dropped", count, exporter=self.name)
        now = time.monotonic()
        with self._cond:
            self._dropped_unwarned += count
            if now - self._last_warning < _WARN_EVERY_S:
                return
            count, self._dropped_unwarned, self._last_warning = self._dropped_unwarned, 0, now
        log.warning(
            "exporter %s: queue full (%d spans), dropped %d spans; the backend is slow or unreachable",
            self.name,
            self._max_queue,
            count,
        )
