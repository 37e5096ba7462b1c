"""Which traced request a thread was serving at an instant: server spans by (pid, tid)
and time, so a CPU sample taken on that thread during the span links to it."""

from __future__ import annotations

import bisect
import threading
from collections import OrderedDict


class ActiveSpans:
    """Server spans per thread (kernel monotonic times), the newest `per_thread` of each
    of the newest `max_threads` threads. A sample links to a span only when exactly one
    span of its thread covers its time: an event loop interleaving requests on one thread
    gives overlapping spans, and then no link is better than a wrong one."""

    def __init__(self, max_threads: int = 16384, per_thread: int = 256) -> None:
        self._spans: OrderedDict[tuple[int, int], list[tuple[int, int, bytes, bytes]]] = \
            OrderedDict()
        self.max_threads = max_threads
        self.per_thread = per_thread
        self._lock = threading.Lock()

    def add(self, pid: int, tid: int, start_ns: int, end_ns: int, trace_id: bytes,
            span_id: bytes) -> None:
        if not trace_id or not span_id or end_ns < start_ns:
            return
        key = (pid, tid)
        with self._lock:
            spans = self._spans.get(key)
            if spans is None:
                spans = self._spans[key] = []
                if len(self._spans) > self.max_threads:
                    self._spans.popitem(last=False)
            else:
                self._spans.move_to_end(key)
            bisect.insort(spans, (start_ns, end_ns, trace_id, span_id))
            if len(spans) > self.per_thread:
                del spans[0]

    def find(self, pid: int, tid: int, ts_ns: int) -> tuple[bytes, bytes] | None:
        with self._lock:
            spans = self._spans.get((pid, tid))
            if not spans:
                return None
            # spans starting at or before ts; any of them may still cover it
            i = bisect.bisect_right(spans, (ts_ns, 2**63))
            covering = [s for s in spans[:i] if s[1] >= ts_ns]
        if len(covering) != 1:
            return None
        return covering[0][2], covering[0][3]

    def prune(self, before_ns: int) -> None:
        """Forget spans that ended before `before_ns` (their samples were exported)."""
        with self._lock:
            for key in list(self._spans):
                kept = [s for s in self._spans[key] if s[1] >= before_ns]
                if kept:
                    self._spans[key] = kept
                else:
                    del self._spans[key]


class ServerThreads:
    """Feeds ActiveSpans from the trace pipeline: remembers which thread read each server
    request (frames observed by the tracker), and when the request's span is emitted with
    its IDs, records the span on that thread."""

    def __init__(self, spans: ActiveSpans, max_pending: int = 65536) -> None:
        self.spans = spans
        self.max_pending = max_pending
        self._tids: OrderedDict[tuple, int] = OrderedDict()

    def observe(self, observed: list) -> None:
        """The tracker's (conn, frame) pairs (TaskNew pairs are skipped)."""
        from otel_ebpf.protocols.base import Direction, Role  # noqa: PLC0415 (light import)
        for conn, frame in observed:
            role = getattr(conn, "role", None)
            if role == Role.SERVER and getattr(frame, "direction", None) == Direction.INGRESS:
                self._tids[(conn.key, frame.stream_pos)] = frame.tid
                if len(self._tids) > self.max_pending:
                    self._tids.popitem(last=False)

    def emitted(self, spans: list) -> None:
        from otel_ebpf.protocols.base import SpanKind  # noqa: PLC0415
        for span in spans:
            if span.kind != SpanKind.SERVER or span.request_pos is None:
                continue
            tid = self._tids.pop((span.conn.key, span.request_pos), None)
            if tid:
                self.spans.add(span.conn.pid, tid, span.start_ns, span.end_ns,
                               span.trace_id, span.span_id)
