"""Profile files: pprof (gzipped `perftools.profiles.Profile`, what `go tool pprof`,
Pyroscope and speedscope read) and folded stacks (`a;b;c 12` lines, what flamegraph.pl,
inferno and speedscope read), from the same ProfileBatch as the OTLP encoder.

The pprof message classes are built at import from profile.proto's field list below
(github.com/google/pprof proto/profile.proto, Apache License 2.0): a descriptor in code
needs neither protoc nor a generated module at build time.
"""

from __future__ import annotations

import gzip
import os
import time
from collections import Counter
from collections.abc import Hashable
from pathlib import Path

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

from otel_ebpf.profiling.frames import KERNEL, Frame

from .profiles import ProfileBatch

_F = descriptor_pb2.FieldDescriptorProto
_REP, _OPT = _F.LABEL_REPEATED, _F.LABEL_OPTIONAL
_I64, _U64, _BOOL, _STR, _MSG = _F.TYPE_INT64, _F.TYPE_UINT64, _F.TYPE_BOOL, _F.TYPE_STRING, \
    _F.TYPE_MESSAGE
# message -> [(field, number, label, type, message type)]
_PROFILE_PROTO = {
    "Profile": [("sample_type", 1, _REP, _MSG, "ValueType"), ("sample", 2, _REP, _MSG, "Sample"),
                ("mapping", 3, _REP, _MSG, "Mapping"), ("location", 4, _REP, _MSG, "Location"),
                ("function", 5, _REP, _MSG, "Function"), ("string_table", 6, _REP, _STR, ""),
                ("drop_frames", 7, _OPT, _I64, ""), ("keep_frames", 8, _OPT, _I64, ""),
                ("time_nanos", 9, _OPT, _I64, ""), ("duration_nanos", 10, _OPT, _I64, ""),
                ("period_type", 11, _OPT, _MSG, "ValueType"), ("period", 12, _OPT, _I64, ""),
                ("comment", 13, _REP, _I64, ""), ("default_sample_type", 14, _OPT, _I64, ""),
                ("doc_url", 15, _OPT, _I64, "")],
    "ValueType": [("type", 1, _OPT, _I64, ""), ("unit", 2, _OPT, _I64, "")],
    "Sample": [("location_id", 1, _REP, _U64, ""), ("value", 2, _REP, _I64, ""),
               ("label", 3, _REP, _MSG, "Label")],
    "Label": [("key", 1, _OPT, _I64, ""), ("str", 2, _OPT, _I64, ""),
              ("num", 3, _OPT, _I64, ""), ("num_unit", 4, _OPT, _I64, "")],
    "Mapping": [("id", 1, _OPT, _U64, ""), ("memory_start", 2, _OPT, _U64, ""),
                ("memory_limit", 3, _OPT, _U64, ""), ("file_offset", 4, _OPT, _U64, ""),
                ("filename", 5, _OPT, _I64, ""), ("build_id", 6, _OPT, _I64, ""),
                ("has_functions", 7, _OPT, _BOOL, ""), ("has_filenames", 8, _OPT, _BOOL, ""),
                ("has_line_numbers", 9, _OPT, _BOOL, ""),
                ("has_inline_frames", 10, _OPT, _BOOL, "")],
    "Location": [("id", 1, _OPT, _U64, ""), ("mapping_id", 2, _OPT, _U64, ""),
                 ("address", 3, _OPT, _U64, ""), ("line", 4, _REP, _MSG, "Line"),
                 ("is_folded", 5, _OPT, _BOOL, "")],
    "Line": [("function_id", 1, _OPT, _U64, ""), ("line", 2, _OPT, _I64, ""),
             ("column", 3, _OPT, _I64, "")],
    "Function": [("id", 1, _OPT, _U64, ""), ("name", 2, _OPT, _I64, ""),
                 ("system_name", 3, _OPT, _I64, ""), ("filename", 4, _OPT, _I64, ""),
                 ("start_line", 5, _OPT, _I64, "")],
}
_PACKAGE = "perftools.profiles"


def _build_classes() -> dict[str, type]:
    fdp = descriptor_pb2.FileDescriptorProto(name="otel_ebpf/pprof/profile.proto",
                                             package=_PACKAGE, syntax="proto3")
    for msg, fields in _PROFILE_PROTO.items():
        m = fdp.message_type.add(name=msg)
        for name, number, label, ftype, ref in fields:
            f = m.field.add(name=name, number=number, label=label, type=ftype)
            if ref:
                f.type_name = f".{_PACKAGE}.{ref}"
    pool = descriptor_pool.DescriptorPool()
    pool.Add(fdp)
    return {msg: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"{_PACKAGE}.{msg}"))
            for msg in _PROFILE_PROTO}


CLASSES = _build_classes()
PprofProfile = CLASSES["Profile"]


def encode_pprof(batch: ProfileBatch) -> bytes:
    """The batch as an uncompressed pprof Profile. Resource attributes, sample attributes
    and the span link become labels (trace_id/span_id as hex, as Pyroscope reads them)."""
    p = PprofProfile()
    strings: dict[str, int] = {}

    def s(text: str) -> int:
        i = strings.get(text)
        if i is None:
            i = strings[text] = len(p.string_table)
            p.string_table.append(text)
        return i

    s("")
    ids: dict[Hashable, int] = {}

    def mapping(module: str) -> int:
        key = ("m", module)
        if key not in ids:
            ids[key] = len(p.mapping) + 1
            p.mapping.add(id=ids[key], filename=s(module), has_functions=True)
        return ids[key]

    def function(f: Frame) -> int:
        key = ("f", f.name, f.module, f.line)
        if key not in ids:
            ids[key] = len(p.function) + 1
            p.function.add(id=ids[key], name=s(f.name), system_name=s(f.name),
                           filename=s(f.module), start_line=f.line)
        return ids[key]

    def location(f: Frame) -> int:
        key = ("l", f)
        if key not in ids:
            ids[key] = len(p.location) + 1
            loc = p.location.add(id=ids[key], mapping_id=mapping(f.module), address=f.address)
            loc.line.add(function_id=function(f), line=f.line)
        return ids[key]

    for type_name, unit in batch.sample_types:
        p.sample_type.add(type=s(type_name), unit=s(unit))
    if batch.period_type is not None:
        p.period_type.type, p.period_type.unit = s(batch.period_type[0]), s(batch.period_type[1])
        p.period = batch.period
    p.time_nanos = batch.start_ns
    p.duration_nanos = max(0, batch.end_ns - batch.start_ns)
    for sample in batch.samples:
        out = p.sample.add(value=list(sample.values))
        out.location_id.extend(location(f) for f in sample.stack)
        labels = {**sample.resource, **sample.attributes}
        if sample.link is not None:
            labels["trace_id"], labels["span_id"] = sample.link[0].hex(), sample.link[1].hex()
        for k, v in labels.items():
            if isinstance(v, int) and not isinstance(v, bool):
                out.label.add(key=s(k), num=v)
            else:
                out.label.add(key=s(k), str=s(str(v)))
    return p.SerializeToString()


def folded_name(f: Frame) -> str:
    # flamegraph.pl colours frames ending in _[k] as kernel; ';' separates frames
    name = f.name.replace(";", ":").replace(" ", "_") or "?"
    return name + "_[k]" if f.kind == KERNEL else name


def encode_folded(batch: ProfileBatch, value_index: int = 0) -> str:
    """`root;...;leaf value` lines, one per distinct stack, process name first."""
    counts: Counter[str] = Counter()
    for sample in batch.samples:
        root = str(sample.resource.get("service.name") or sample.resource.get("process.pid", ""))
        names = [folded_name(f) for f in reversed(sample.stack)]
        counts[";".join([root, *names] if root else names)] += sample.values[value_index]
    return "".join(f"{stack} {n}\n" for stack, n in sorted(counts.items()))


def _stamp(batch: ProfileBatch) -> str:
    return time.strftime("%Y%m%dT%H%M%S", time.gmtime(batch.start_ns / 1e9))


class ProfileFileExporter:
    """Writes each batch into a directory: `<prefix>[-<batch name>]-<UTC time>.pb.gz`
    (pprof) or `....folded`; written to a temporary name, then renamed, so a reader
    never sees half a file."""

    def __init__(self, directory: str, fmt: str, prefix: str = "cpu") -> None:
        if fmt not in ("pprof", "folded"):
            raise ValueError(f"format must be pprof or folded, not {fmt!r}")
        self.directory = Path(directory)
        self.directory.mkdir(parents=True, exist_ok=True)
        self.fmt = fmt
        self.prefix = prefix
        self.written: list[Path] = []

    def export(self, batch: ProfileBatch) -> bool:
        if not batch.samples:
            return True
        if self.fmt == "pprof":
            data, suffix = gzip.compress(encode_pprof(batch)), ".pb.gz"
        else:
            data, suffix = encode_folded(batch).encode(), ".folded"
        prefix = f"{self.prefix}-{batch.name}" if batch.name else self.prefix
        path = self.directory / f"{prefix}-{_stamp(batch)}{suffix}"
        n = 1
        while path.exists():  # two batches in one second
            path = self.directory / f"{prefix}-{_stamp(batch)}.{n}{suffix}"
            n += 1
        tmp = path.with_name(path.name + ".tmp")
        tmp.write_bytes(data)
        os.replace(tmp, path)
        self.written.append(path)
        return True

    def shutdown(self) -> None:
        pass
