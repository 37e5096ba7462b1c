"""The agent's counters about itself, exported as `otel_ebpf.*` metrics and printed at exit."""

from __future__ import annotations

import threading
from collections import Counter
from dataclasses import dataclass

# name -> (unit, description). Every counter the agent keeps is declared here, once.
COUNTERS: dict[str, tuple[str, str]] = {
    "events": ("{event}", "Ring-buffer records decoded"),
    "bytes": ("By", "Payload bytes received from the kernel"),
    "kernel.drops": ("{event}", "Records the kernel could not reserve in the ring buffer"),
    "kernel.truncations": ("{event}", "Messages longer than the capture size"),
    "kernel.widened": ("{connection}", "Connections captured wider: an LLM or vector-DB API "
                       "request was seen on them (capture.llm_max_bytes)"),
    "tls.unbound": ("{call}", "SSL_read/SSL_write calls whose socket could not be found "
                    "(their plaintext is lost)"),
    "context_probes.attached": ("{process}", "Python processes given the Context probes of "
                                "their own (at the agent's start, exec, fork, a call out)"),
    "context_probes.retired": ("{process}", "Python processes whose Context probes came off: "
                               "they copied many Contexts and never called out"),
    "tls.uncovered": ("{file}", "Executables with OpenSSL linked in without symbols: their "
                      "TLS traffic cannot be read"),
    "gaps": ("{gap}", "Stream positions missing in user space (lost or uncaptured bytes)"),
    "parse.errors": ("{error}", "Bytes a parser rejected as not its protocol (then resynced)"),
    "connections.tracked": ("{connection}", "Connections opened in the connection table"),
    "connections.evicted": ("{connection}", "Connections evicted because the table was full"),
    "connections.unparsed": ("{connection}", "Connections no parser recognized"),
    "connections.incomplete": ("{connection}", "Connections ended before every byte the "
                               "kernel counted on them up to their close had come as a "
                               "record (their last records were dropped)"),
    "records.after_close": ("{event}", "Records of a connection that came after it ended "
                            "(a thread's read or write racing another thread's close)"),
    "kernel.muted": ("{connection}", "Unrecognized connections the kernel stopped sending"),
    "protocol.events": ("{event}", "Conditions parsers counted, by protocol and event "
                        "(http2 unknown_headers: HPACK entries from before capture began)"),
    "records.timed_out": ("{record}", "Requests closed without a response after the timeout"),
    "correlation.decided": ("{span}", "Spans whose trace and parent were decided, by evidence"),
    "correlation.ambiguous": ("{span}", "Outbound calls left a root: several requests could be the parent"),
    "correlation.evicted": ("{request}", "Requests forgotten before their span came (table full)"),
    "propagation.contexts": ("{context}", "Trace contexts exchanged with other hosts' agents "
                             "in the TCP option, by outcome (at_send: sent by the kernel with the "
                             "call's first segment, and this agent's join agrees on its trace; "
                             "at_send_disagreed: sent so, the join chose another parent; "
                             "sent: handed to the kernel after the fact for a call's "
                             "connection, unsent: its connection gone or its peer untrusted or "
                             "4 pending, received, unmatched: received but no server request "
                             "waited for it, its request already settled)"),
    "propagation.options": ("{option}", "TCP options by what the kernel did (written, no_room: "
                            "a segment without room, received, refused: from an untrusted "
                            "source, untrusted_destination: a connection never written to, "
                            "queued_at_send: a call's context queued at its first write, "
                            "slots_full: not queued so, 4 pending on its connection)"),
    "nat.lookups": ("{connection}", "Client connections looked up in conntrack, by result "
                    "(translated: NAT changed it, untranslated, absent: no entry, failed, "
                    "skipped: over the lookups a second)"),
    "spans.produced": ("{span}", "Spans built from records"),
    "spans.exported": ("{span}", "Spans an exporter delivered"),
    "spans.failed": ("{span}", "Spans an exporter gave up on after retries"),
    "spans.dropped": ("{span}", "Spans dropped because an export queue was full"),
    "spans.sampled_out": ("{span}", "Spans not exported: their trace fell outside "
                          "sampling.ratio (counted in span metrics all the same)"),
    "kubernetes.pods": ("{pod}", "Pods in the last pod list read (kubernetes.metadata)"),
    "kubernetes.errors": ("{error}", "Pod lists that could not be read, by reason"),
    "profiles.samples": ("{sample}", "CPU samples received from the kernel"),
    "profiles.samples_dropped": ("{sample}", "CPU samples dropped: too many waiting for export"),
    "profiles.python_walk_failed": ("{sample}", "Samples of Python processes without Python "
                                    "frames, by reason (no_dispatcher: a native thread no "
                                    "thread of the process woke; dispatcher_not_python; "
                                    "read_error)"),
    "profiles.worker_samples": ("{sample}", "Samples of native worker threads given the Python "
                                "frames of the thread that woke them"),
    "profiles.errors": ("{error}", "Profiler steps that failed and were skipped (one sample's "
                        "part, address, file or export), by stage and reason"),
    "profiles.exported": ("{sample}", "CPU samples a profile exporter delivered, by exporter"),
    "profiles.export_failed": ("{sample}", "CPU samples a profile exporter failed to deliver"),
    "metrics.measurements_dropped": ("{measurement}", "Span measurements not recorded, by reason "
                                     "(undeclared_instrument, invalid_value, series_limit)"),
    "metrics.exports_failed": ("{export}", "Metric exports that failed, were not accepted "
                               "(a backend without metrics), timed out or were skipped "
                               "(exporter still busy), by exporter and reason"),
    "rdma.counter_resets": ("{reset}", "RDMA port counters seen going back (driver reload, "
                            "counter reset): the exported sums counted on from the new value"),
    "rdma.lost": ("{call}", "Verbs or NCCL calls the RDMA probes could not record, by reason "
                  "(ring_drops, nccl_full, pending_full)"),
    "gpu.events": ("{event}", "CUDA driver allocations and frees received from the kernel"),
    "gpu.frees.unmatched": ("{free}", "GPU frees of pointers whose allocation was not seen "
                            "(made before the agent started)"),
    "gpu.kernel.drops": ("{event}", "GPU allocation/free records lost: ring buffer full"),
    "gpu.libraries": ("{file}", "libcuda files the GPU probes are attached to"),
    "gpu.stacks.unwound": ("{stack}", "GPU allocation stacks walked with unwind tables (the "
                           "others: by frame pointers)"),
}


@dataclass
class Stats:
    """Thread-safe monotonic counters keyed by names from COUNTERS (labels optional)."""

    def __post_init__(self) -> None:
        self._lock = threading.Lock()
        self._values: Counter[tuple[str, tuple[tuple[str, str], ...]]] = Counter()

    def add(self, name: str, value: int = 1, **labels: str) -> None:
        if name not in COUNTERS:
            raise KeyError(f"undeclared counter {name!r}")
        key = (name, tuple(sorted(labels.items())))
        with self._lock:
            self._values[key] += value

    def set_total(self, name: str, value: int, **labels: str) -> None:
        """Record a total kept elsewhere (the kernel's per-CPU counters, say)."""
        if name not in COUNTERS:
            raise KeyError(f"undeclared counter {name!r}")
        with self._lock:
            self._values[(name, tuple(sorted(labels.items())))] = value

    def snapshot(self) -> dict[tuple[str, tuple[tuple[str, str], ...]], int]:
        with self._lock:
            return dict(self._values)

    def total(self, name: str) -> int:
        with self._lock:
            return sum(v for (n, _), v in self._values.items() if n == name)

    def totals(self) -> dict[str, int]:
        """Every declared counter summed over its labels, zeros included."""
        out = dict.fromkeys(COUNTERS, 0)
        with self._lock:
            for (name, _), value in self._values.items():
                out[name] += value
        return out
