"""An OTLP/gRPC ProfilesService receiver (from opentelemetry-proto's service definition):
`python -m ... PORT COUNT_FILE` serves on 127.0.0.1:PORT and appends a line to COUNT_FILE
per Export request it takes; prints READY once it listens."""

import sys
from concurrent import futures

import grpc
from opentelemetry.proto.collector.profiles.v1development import (
    profiles_service_pb2 as service_pb2,
)
from opentelemetry.proto.collector.profiles.v1development import (
    profiles_service_pb2_grpc as service_grpc,
)


class Receiver(service_grpc.ProfilesServiceServicer):
    def __init__(self, count_file: str) -> None:
        self.count_file = count_file

    def Export(self, request, context):  # noqa: N802 (the proto's name)
        with open(self.count_file, "a") as f:
            f.write(f"{len(request.resource_profiles)}\n")
        return service_pb2.ExportProfilesServiceResponse()


def main() -> None:
    port, count_file = int(sys.argv[1]), sys.argv[2]
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    service_grpc.add_ProfilesServiceServicer_to_server(Receiver(count_file), server)
    server.add_insecure_port(f"127.0.0.1:{port}")
    server.start()
    print("READY", flush=True)
    server.wait_for_termination()


if __name__ == "__main__":
    main()
