"""ExportQueue: bounded, never blocks the caller, batches, counts, flushes on shutdown."""

import logging
import threading

from opentelemetry.sdk.trace.export import SpanExporter, SpanExportResult

from otel_ebpf.export.queue import ExportQueue
from otel_ebpf.telemetry import Stats

WAIT = 10.0  # upper bound of every wait; the tests normally pass in milliseconds


class Recorder(SpanExporter):
    """Records batches; can block in export until released, and fail. Takes what it is
    given, as the agent's own exporters take ready NeutralSpans."""

    takes_neutral_spans = True

    def __init__(self, result=SpanExportResult.SUCCESS, block=False) -> None:
        self.batches: list[list] = []
        self.result = result
        self.entered = threading.Event()
        self.release = threading.Event()
        if not block:
            self.release.set()
        self.shut_down = threading.Event()

    def export(self, spans):
        self.entered.set()
        # like the SDK's OTLP exporters in backoff: shutdown() cuts the wait short
        self.release.wait(WAIT)
        if isinstance(self.result, Exception):
            raise self.result
        self.batches.append(list(spans))
        return self.result

    def shutdown(self):
        self.shut_down.set()
        self.release.set()


def series(stats, name):
    return {labels: v for (n, labels), v in stats.snapshot().items() if n == name}


def test_flushes_on_shutdown():
    stats, exporter = Stats(), Recorder()
    queue = ExportQueue(exporter, "otlp", stats, schedule_delay_s=60)
    queue.put(["a", "b", "c"])
    queue.shutdown(WAIT)
    assert exporter.batches == [["a", "b", "c"]]
    assert exporter.shut_down.is_set()
    assert series(stats, "spans.exported") == {(("exporter", "otlp"),): 3}


def test_batches_by_size():
    stats, exporter = Stats(), Recorder()
    queue = ExportQueue(exporter, "x", stats, max_batch_size=4, schedule_delay_s=60)
    queue.put(list(range(10)))
    queue.shutdown(WAIT)
    assert [len(b) for b in exporter.batches] == [4, 4, 2]
    assert [s for b in exporter.batches for s in b] == list(range(10))


def test_exports_after_delay_without_shutdown():
    exporter = Recorder()
    queue = ExportQueue(exporter, "x", Stats(), schedule_delay_s=0.05)
    queue.put([1])
    assert exporter.entered.wait(WAIT)
    queue.shutdown(WAIT)


def test_flush():
    exporter = Recorder()
    queue = ExportQueue(exporter, "x", Stats(), schedule_delay_s=60)
    queue.put([1, 2])
    assert queue.flush(WAIT)
    assert exporter.batches == [[1, 2]]
    assert queue.flush(WAIT)  # nothing queued: at once
    queue.shutdown(WAIT)


def test_full_queue_drops_counts_and_never_blocks(caplog):
    stats, exporter = Stats(), Recorder(block=True)
    queue = ExportQueue(exporter, "slow", stats, max_queue_size=10, max_batch_size=5, schedule_delay_s=60)
    queue.put([0, 1, 2, 3, 4])  # a full batch: the worker takes it and blocks in export
    assert exporter.entered.wait(WAIT)
    with caplog.at_level(logging.WARNING, logger="otel_ebpf.export.queue"):
        queue.put(list(range(5, 15)))  # fills the queue
        queue.put(list(range(15, 18)))  # returns at once, though the exporter is stuck
        queue.put([18])
    assert series(stats, "spans.dropped") == {(("exporter", "slow"),): 4}
    warnings = [r for r in caplog.records if "queue full" in r.getMessage()]
    assert len(warnings) == 1  # at most one every 10 s
    exporter.release.set()
    queue.shutdown(WAIT)
    assert [s for b in exporter.batches for s in b] == list(range(15))
    assert stats.total("spans.exported") == 15


def test_partial_fit_keeps_what_fits():
    stats, exporter = Stats(), Recorder(block=True)
    queue = ExportQueue(exporter, "x", stats, max_queue_size=4, max_batch_size=2, schedule_delay_s=60)
    queue.put([0, 1])
    assert exporter.entered.wait(WAIT)
    queue.put([2, 3, 4, 5, 6, 7])
    exporter.release.set()
    queue.shutdown(WAIT)
    assert [s for b in exporter.batches for s in b] == [0, 1, 2, 3, 4, 5]
    assert stats.total("spans.dropped") == 2


def test_failures_are_counted():
    stats = Stats()
    queue = ExportQueue(Recorder(result=SpanExportResult.FAILURE), "bad", stats, schedule_delay_s=60)
    queue.put([1, 2])
    queue.shutdown(WAIT)
    assert series(stats, "spans.failed") == {(("exporter", "bad"),): 2}
    assert stats.total("spans.exported") == 0


def test_raising_exporter_counts_failed_and_keeps_going():
    stats, exporter = Stats(), Recorder(result=RuntimeError("bug"))
    queue = ExportQueue(exporter, "buggy", stats, max_batch_size=1, schedule_delay_s=60)
    queue.put([1, 2])
    queue.shutdown(WAIT)
    assert stats.total("spans.failed") == 2


def test_shutdown_gives_up_on_a_stuck_exporter():
    stats, exporter = Stats(), Recorder(block=True)
    queue = ExportQueue(exporter, "stuck", stats, max_batch_size=2, schedule_delay_s=60)
    queue.put([1, 2, 3, 4, 5])
    assert exporter.entered.wait(WAIT)
    queue.shutdown(0.1)  # the exporter's shutdown() releases the export in progress
    assert exporter.shut_down.is_set()
    assert exporter.batches == [[1, 2]]
    assert stats.total("spans.dropped") == 3  # never exported: counted, not lost silently


def test_put_after_shutdown_is_dropped():
    stats = Stats()
    queue = ExportQueue(Recorder(), "x", stats)
    queue.shutdown(WAIT)
    queue.put([1])
    assert stats.total("spans.dropped") == 1


class SdkRecorder(Recorder):
    """An exporter of the SDK's kind: it takes ReadableSpans only."""

    takes_neutral_spans = False


def test_an_sdk_exporter_gets_readable_spans_and_a_bad_span_costs_only_itself(caplog):
    from opentelemetry.sdk.trace import ReadableSpan  # noqa: PLC0415

    from tests.unit.otlp_samples import sample_spans  # noqa: PLC0415
    stats, exporter = Stats(), SdkRecorder()
    queue = ExportQueue(exporter, "otlphttp", stats, schedule_delay_s=60)
    spans = sample_spans()
    spans[1].trace_id = None  # unconvertible
    with caplog.at_level(logging.ERROR):
        queue.put(spans)
        queue.shutdown(WAIT)
    (batch,) = exporter.batches
    assert all(type(s) is ReadableSpan for s in batch)
    assert [s.name for s in batch] == [s.name for s in spans if s is not spans[1]]
    assert batch[0].get_span_context().span_id == int.from_bytes(spans[0].span_id, "big")
    assert series(stats, "spans.dropped") == {(("reason", "unconvertible"),): 1}
    assert "cannot convert span" in caplog.text


class Concurrent(Recorder):
    """An exporter that takes several requests at once and holds each until released,
    counting how many it holds."""

    def __init__(self, num_consumers: int) -> None:
        super().__init__(block=True)
        self.num_consumers = num_consumers
        self.active = 0
        self.most_active = 0
        self.changed = threading.Condition()

    def export(self, spans):
        with self.changed:
            self.active += 1
            self.most_active = max(self.most_active, self.active)
            self.changed.notify_all()
        try:
            return super().export(spans)
        finally:
            with self.changed:
                self.active -= 1
                self.changed.notify_all()

    def wait_active(self, n: int) -> bool:
        with self.changed:
            return self.changed.wait_for(lambda: self.active == n, WAIT)


def test_an_exporter_of_several_consumers_gets_that_many_batches_at_once():
    stats, exporter = Stats(), Concurrent(3)
    queue = ExportQueue(exporter, "otlp", stats, max_batch_size=2, schedule_delay_s=60)
    queue.put(list(range(10)))  # five batches
    assert exporter.wait_active(3)
    assert len(exporter.batches) == 0  # every sender is waiting on the backend
    flushed = threading.Event()
    threading.Thread(target=lambda: flushed.set() if queue.flush(WAIT) else None).start()
    assert not flushed.wait(0.05)  # three batches in flight, two queued: not flushed yet
    exporter.release.set()
    assert flushed.wait(WAIT)  # a flush answers once every batch in flight is answered
    assert exporter.most_active == 3
    assert sorted(x for b in exporter.batches for x in b) == list(range(10))
    assert all(len(b) == 2 for b in exporter.batches)
    assert series(stats, "spans.exported") == {(("exporter", "otlp"),): 10}
    queue.shutdown(WAIT)
    assert exporter.shut_down.is_set()


def test_one_consumer_sends_one_batch_at_a_time():
    stats, exporter = Stats(), Concurrent(1)
    queue = ExportQueue(exporter, "file", stats, max_batch_size=2, schedule_delay_s=60)
    queue.put(list(range(6)))
    assert exporter.wait_active(1)
    exporter.release.set()
    assert queue.flush(WAIT)
    assert exporter.most_active == 1
    assert [len(b) for b in exporter.batches] == [2, 2, 2]
    queue.shutdown(WAIT)


def test_shutdown_gives_up_on_stuck_senders_and_counts_what_they_held_back():
    stats, exporter = Stats(), Concurrent(2)
    queue = ExportQueue(exporter, "stuck", stats, max_batch_size=2, schedule_delay_s=60)
    queue.put(list(range(7)))
    assert exporter.wait_active(2)
    queue.shutdown(0.1)  # the exporter's shutdown() releases both exports in progress
    assert exporter.shut_down.is_set()
    assert exporter.wait_active(0)
    assert sorted(len(b) for b in exporter.batches) == [2, 2]
    assert stats.total("spans.dropped") == 3  # the three never sent: counted
