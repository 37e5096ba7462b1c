"""OTLP profiles (opentelemetry.proto.profiles.v1development): a generic encoder from
neutral samples, and the gRPC `ProfilesService/Export` exporter. Any profile signal uses
it: CPU samples (otel_ebpf.profiling), GPU memory (alloc_space/alloc_objects/inuse_space).

Interface:

    batch = ProfileBatch(
        sample_types=(("samples", "count"), ("cpu", "nanoseconds")),  # one value each
        period_type=("cpu", "nanoseconds"), period=52_631_578,        # or None, 0
        start_ns=..., end_ns=...,                                     # wall clock (unix ns)
        samples=[ProfileSample(
            stack=(Frame(...), ...),          # innermost first (otel_ebpf.profiling.frames)
            values=(1, 52_631_578),           # one per sample type
            resource={"service.name": "api", "process.pid": 42},
            attributes={"thread.id": 43, "thread.name": "worker"},
            link=(trace_id16, span_id8) or None,
            timestamp_ns=...,                 # wall clock, or 0
        ), ...],
    )
    request = encode_request(batch)           # ExportProfilesServiceRequest
    OtlpProfileExporter(settings).export(batch)   # settings: the `otlp` exporter's config

Samples with the same resource, stack, attributes and link are merged into one OTLP
Sample whose `values` and `timestamps_unix_nano` run in parallel. The proto holds one
sample type per Profile, so a batch becomes one Profile per sample type, all sharing the
request's ProfilesDictionary.
"""

from __future__ import annotations

import logging
import os
from collections.abc import Hashable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

import grpc
from opentelemetry.proto.collector.profiles.v1development import (
    profiles_service_pb2 as service_pb2,
)
from opentelemetry.proto.collector.profiles.v1development import (
    profiles_service_pb2_grpc as service_grpc,
)
from opentelemetry.proto.common.v1 import common_pb2
from opentelemetry.proto.profiles.v1development import profiles_pb2 as pb
from opentelemetry.proto.resource.v1 import resource_pb2

from otel_ebpf import __version__
from otel_ebpf.profiling.frames import Frame

log = logging.getLogger(__name__)

SCOPE_NAME = "otel-ebpf"
AttributeValue = str | int | float | bool


@dataclass(frozen=True, slots=True)
class ProfileSample:
    stack: tuple[Frame, ...]
    values: tuple[int, ...]
    resource: Mapping[str, AttributeValue] = field(default_factory=dict)
    attributes: Mapping[str, AttributeValue] = field(default_factory=dict)
    link: tuple[bytes, bytes] | None = None
    timestamp_ns: int = 0


@dataclass(frozen=True, slots=True)
class ProfileBatch:
    sample_types: tuple[tuple[str, str], ...]
    start_ns: int
    end_ns: int
    samples: Sequence[ProfileSample]
    period_type: tuple[str, str] | None = None
    period: int = 0
    # what the profile is, for file names (`gpu-launches-...`): "" for a profiler's one kind
    name: str = ""


def any_value(v: AttributeValue) -> common_pb2.AnyValue:
    if isinstance(v, bool):
        return common_pb2.AnyValue(bool_value=v)
    if isinstance(v, int):
        return common_pb2.AnyValue(int_value=v)
    if isinstance(v, float):
        return common_pb2.AnyValue(double_value=v)
    return common_pb2.AnyValue(string_value=str(v))


class _Dictionary:
    """The request-wide tables. Index 0 of every table is the zero value, as the proto
    requires (string_table[0] == "", the null mapping, location, function, link, stack)."""

    def __init__(self) -> None:
        self.d = pb.ProfilesDictionary()
        self.d.string_table.append("")
        self.d.mapping_table.add()
        self.d.location_table.add()
        self.d.function_table.add()
        self.d.link_table.add()
        self.d.stack_table.add()
        self.d.attribute_table.add()
        self._idx: dict[Hashable, int] = {}

    def _get(self, key: Hashable, make: Any) -> int:
        i = self._idx.get(key)
        if i is None:
            i = self._idx[key] = make()
        return i

    def string(self, s: str) -> int:
        def make() -> int:
            self.d.string_table.append(s)
            return len(self.d.string_table) - 1
        return self._get(("s", s), make)

    def attribute(self, key: str, value: AttributeValue) -> int:
        def make() -> int:
            self.d.attribute_table.add(key_strindex=self.string(key), value=any_value(value))
            return len(self.d.attribute_table) - 1
        return self._get(("a", key, type(value).__name__, value), make)

    def mapping(self, module: str) -> int:
        def make() -> int:
            self.d.mapping_table.add(filename_strindex=self.string(module))
            return len(self.d.mapping_table) - 1
        return self._get(("m", module), make)

    def function(self, f: Frame) -> int:
        def make() -> int:
            self.d.function_table.add(
                name_strindex=self.string(f.name), system_name_strindex=self.string(f.name),
                filename_strindex=self.string(f.module), start_line=f.line)
            return len(self.d.function_table) - 1
        return self._get(("f", f.name, f.module, f.line), make)

    def location(self, f: Frame) -> int:
        def make() -> int:
            loc = self.d.location_table.add(mapping_index=self.mapping(f.module),
                                            address=f.address)
            loc.lines.add(function_index=self.function(f), line=f.line)
            loc.attribute_indices.append(self.attribute("profile.frame.type", f.kind))
            return len(self.d.location_table) - 1
        return self._get(("l", f), make)

    def stack(self, frames: tuple[Frame, ...]) -> int:
        def make() -> int:
            st = self.d.stack_table.add()
            st.location_indices.extend(self.location(f) for f in frames)
            return len(self.d.stack_table) - 1
        return self._get(("st", frames), make)

    def link(self, link: tuple[bytes, bytes] | None) -> int:
        if link is None:
            return 0
        def make() -> int:
            self.d.link_table.add(trace_id=link[0], span_id=link[1])
            return len(self.d.link_table) - 1
        return self._get(("k", link), make)


def encode(batch: ProfileBatch) -> pb.ProfilesData:
    """The batch as ProfilesData (a ResourceProfiles per distinct resource)."""
    d = _Dictionary()
    # resource -> (stack, attrs, link) -> [(timestamp, values)]
    grouped: dict[tuple, dict[tuple, list[tuple[int, tuple[int, ...]]]]] = {}
    for s in batch.samples:
        if len(s.values) != len(batch.sample_types):
            raise ValueError(f"a sample has {len(s.values)} values for "
                             f"{len(batch.sample_types)} sample types")
        rkey = tuple(sorted(s.resource.items()))
        skey = (s.stack, tuple(sorted(s.attributes.items())), s.link)
        grouped.setdefault(rkey, {}).setdefault(skey, []).append((s.timestamp_ns, s.values))
    data = pb.ProfilesData()
    for rkey, by_stack in grouped.items():
        rp = data.resource_profiles.add()
        rp.resource.CopyFrom(resource_pb2.Resource(attributes=[
            common_pb2.KeyValue(key=k, value=any_value(v)) for k, v in rkey]))
        sp = rp.scope_profiles.add()
        sp.scope.name, sp.scope.version = SCOPE_NAME, __version__
        for t, (type_name, unit) in enumerate(batch.sample_types):
            prof = sp.profiles.add(time_unix_nano=batch.start_ns,
                                   duration_nano=max(0, batch.end_ns - batch.start_ns),
                                   profile_id=os.urandom(16))
            prof.sample_type.type_strindex = d.string(type_name)
            prof.sample_type.unit_strindex = d.string(unit)
            if batch.period_type is not None:
                prof.period_type.type_strindex = d.string(batch.period_type[0])
                prof.period_type.unit_strindex = d.string(batch.period_type[1])
                prof.period = batch.period
            for (stack, attrs, link), points in by_stack.items():
                sample = prof.samples.add(stack_index=d.stack(stack), link_index=d.link(link))
                sample.attribute_indices.extend(d.attribute(k, v) for k, v in attrs)
                sample.values.extend(v[t] for _, v in points)
                if all(ts for ts, _ in points):
                    sample.timestamps_unix_nano.extend(ts for ts, _ in points)
    data.dictionary.CopyFrom(d.d)
    return data


def encode_request(batch: ProfileBatch) -> service_pb2.ExportProfilesServiceRequest:
    data = encode(batch)
    return service_pb2.ExportProfilesServiceRequest(
        resource_profiles=data.resource_profiles, dictionary=data.dictionary)


# --------------------------------------------------------------------------- gRPC export

_ENV_ENDPOINT = ("OTEL_EXPORTER_OTLP_PROFILES_ENDPOINT", "OTEL_EXPORTER_OTLP_ENDPOINT")
_GRPC_COMPRESSION = {"gzip": grpc.Compression.Gzip, "none": grpc.Compression.NoCompression}


def _read(path: str | None) -> bytes | None:
    if not path:
        return None
    with open(path, "rb") as f:
        return f.read()


class OtlpProfileExporter:
    """Sends batches to an OTLP/gRPC ProfilesService, configured like the `otlp` exporter
    (endpoint, tls, headers, compression, timeout); keys left out come from the standard
    OTEL_EXPORTER_OTLP_[PROFILES_]* variables, as for the SDK's trace exporter."""

    def __init__(self, settings: Mapping[str, Any], environ: Mapping[str, str] = os.environ):
        endpoint = settings.get("endpoint") or next(
            (environ[v] for v in _ENV_ENDPOINT if environ.get(v)), "localhost:4317")
        tls = settings.get("tls") or {}
        insecure = tls.get("insecure")
        if insecure is None:
            env = environ.get("OTEL_EXPORTER_OTLP_PROFILES_INSECURE",
                              environ.get("OTEL_EXPORTER_OTLP_INSECURE", ""))
            insecure = endpoint.startswith("http://") or env.lower() == "true"
        target = endpoint.split("://", 1)[-1].rstrip("/")
        if insecure:
            self.channel = grpc.insecure_channel(target)
        else:
            creds = grpc.ssl_channel_credentials(
                root_certificates=_read(tls.get("ca_file")),
                private_key=_read(tls.get("key_file")),
                certificate_chain=_read(tls.get("cert_file")))
            self.channel = grpc.secure_channel(target, creds)
        self.stub = service_grpc.ProfilesServiceStub(self.channel)
        self.metadata = [(str(k).lower(), str(v))
                         for k, v in (settings.get("headers") or {}).items()]
        self.timeout = float(settings.get("timeout") or 10.0)
        self.compression = _GRPC_COMPRESSION.get(str(settings.get("compression", "none")))
        self.endpoint = target

    def export(self, batch: ProfileBatch) -> bool:
        """True when the receiver took the batch (rejected samples are logged)."""
        if not batch.samples:
            return True
        try:
            resp = self.stub.Export(encode_request(batch), timeout=self.timeout,
                                    metadata=self.metadata or None,
                                    compression=self.compression)
        except grpc.RpcError as exc:
            log.warning("exporting profiles to %s failed: %s", self.endpoint,
                        exc.code() if hasattr(exc, "code") else exc)
            return False
        rejected = resp.partial_success.rejected_profiles if resp.HasField(
            "partial_success") else 0
        if rejected:
            log.warning("the receiver rejected %d profiles: %s", rejected,
                        resp.partial_success.error_message)
        return True

    def shutdown(self) -> None:
        self.channel.close()
