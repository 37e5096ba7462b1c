"""A traces-only OTLP/gRPC backend, as Phoenix is: the TraceService and nothing else, so a
metrics export is answered UNIMPLEMENTED by grpcio itself. Run as a process of its own:

    python -m tests.support.traces_only_backend PORT

It prints `listening` once it serves, then one line per export it took: `spans N`."""

from __future__ import annotations

import signal
import sys
import threading
from concurrent import futures

import grpc
from opentelemetry.proto.collector.trace.v1 import trace_service_pb2, trace_service_pb2_grpc


class Traces(trace_service_pb2_grpc.TraceServiceServicer):
    def Export(self, request, context):  # noqa: N802 (the service's name)
        n = sum(len(ss.spans) for rs in request.resource_spans for ss in rs.scope_spans)
        print(f"spans {n}", flush=True)
        return trace_service_pb2.ExportTraceServiceResponse()


def main() -> None:
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    trace_service_pb2_grpc.add_TraceServiceServicer_to_server(Traces(), server)
    server.add_insecure_port(f"127.0.0.1:{int(sys.argv[1])}")
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    print("listening", flush=True)
    stop.wait()
    server.stop(grace=1).wait()


if __name__ == "__main__":
    main()
