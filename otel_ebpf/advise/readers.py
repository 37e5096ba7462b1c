"""Reading the agent's outputs into advise's model: pprof files (`*.pb.gz`, `*.pprof`),
folded stacks (`*.folded`), and OTLP/JSON lines (`*.json`, `*.jsonl`: the file
exporter's traces and metrics, a Collector file exporter's profiles). A folder is read
whole (recursively); files of other kinds are listed as skipped, never silently."""

from __future__ import annotations

import gzip
import os
import re
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import orjson
from google.protobuf import json_format
from google.protobuf.message import DecodeError
from opentelemetry.proto.profiles.v1development import profiles_pb2

from otel_ebpf.export.pprof import PprofProfile
from otel_ebpf.profiling.frames import CUDA, CUDA_MODULE, KERNEL, NATIVE, PYTHON, Frame

from .model import FOLDED_KINDS, Evidence, Point, Profile, Sample, Span

PPROF_SUFFIXES = (".pb.gz", ".pprof", ".pb", ".pprof.gz")
JSON_SUFFIXES = (".json", ".jsonl", ".ndjson")
MAX_LINE = 256 << 20  # a JSON line longer than this is not the agent's


class ReadError(ValueError):
    """A file that is not what its name says (reported with its path)."""


def frame_kind(module: str) -> str:
    """What a frame is, from its file: pprof and OTLP keep the file, not the kind."""
    if module == "[kernel]":
        return KERNEL
    if module == CUDA_MODULE:
        return CUDA
    if module.endswith(".py") or module.startswith("<"):  # <frozen runpy>, <string>
        return PYTHON
    return NATIVE


# -------------------------------------------------------------------------- pprof

def read_pprof(path: Path) -> Profile:
    data = path.read_bytes()
    if data[:2] == b"\x1f\x8b":
        data = gzip.decompress(data)
    p = PprofProfile()
    try:
        p.ParseFromString(data)
    except DecodeError as exc:
        raise ReadError(f"{path}: not a pprof profile ({exc})") from exc
    st = list(p.string_table)

    def s(i: int) -> str:
        return st[i] if 0 <= i < len(st) else ""

    functions = {f.id: f for f in p.function}
    mappings = {m.id: m for m in p.mapping}
    locations: dict[int, list[Frame]] = {}
    for loc in p.location:
        frames = []
        mapping = mappings.get(loc.mapping_id)
        for line in loc.line:  # innermost (inlined) first, as pprof orders them
            f = functions.get(line.function_id)
            module = s(f.filename) if f else (s(mapping.filename) if mapping else "")
            name = s(f.name) if f else f"{loc.address:#x}"
            frames.append(Frame(name, module, frame_kind(module), loc.address,
                                int(line.line or (f.start_line if f else 0))))
        locations[loc.id] = frames or [Frame(f"{loc.address:#x}", "", NATIVE, loc.address)]
    samples = []
    for smp in p.sample:
        frames = tuple(f for lid in smp.location_id for f in locations.get(lid, ()))
        labels = {s(lb.key): (s(lb.str) if lb.str else lb.num) for lb in smp.label}
        samples.append(Sample(frames, tuple(smp.value), labels))
    types = tuple((s(t.type), s(t.unit)) for t in p.sample_type)
    return Profile(types, samples, p.time_nanos, p.duration_nanos, str(path))


# -------------------------------------------------------------------------- folded

_NATIVE_NAME = re.compile(r"::|\(|\+0x|^_?Py|^_Z|\.so|^\[")


def _folded_frame(name: str) -> Frame:
    if name.endswith("_[k]"):
        return Frame(name[:-4], "[kernel]", KERNEL)
    # folded lines keep names only: a Python function is an identifier (maybe dotted:
    # `Module.forward`, `<module>`), a native one has C++ or address punctuation
    kind = NATIVE if _NATIVE_NAME.search(name) else PYTHON
    return Frame(name, "", kind)


def read_folded(path: Path) -> Profile:
    base = path.name
    kind, sample_type = next(((k, t) for prefix, (k, t) in sorted(
        FOLDED_KINDS.items(), key=lambda kv: -len(kv[0])) if base.startswith(prefix + "-")),
        ("", ("samples", "count")))
    samples = []
    for n, line in enumerate(path.read_text(errors="replace").splitlines(), 1):
        if not line.strip():
            continue
        stack, _, count = line.rpartition(" ")
        if not stack or not count.isdigit():
            raise ReadError(f"{path}:{n}: not a folded line (`a;b;c COUNT`)")
        names = stack.split(";")
        root, names = names[0], names[1:]  # the agent writes the process name first
        frames = tuple(_folded_frame(x) for x in reversed(names))
        samples.append(Sample(frames, (int(count),), {"service.name": root}))
    return Profile((sample_type,), samples, 0, 0, str(path), kind=kind)


# -------------------------------------------------------------------------- OTLP/JSON

def _any(value: Mapping[str, Any]) -> Any:
    for key in ("stringValue", "boolValue", "doubleValue"):
        if key in value:
            return value[key]
    if "intValue" in value:
        return int(value["intValue"])
    if "arrayValue" in value:
        return [_any(v) for v in value["arrayValue"].get("values", [])]
    return None


def _attrs(kvs: Iterable[Mapping[str, Any]] | None) -> dict[str, Any]:
    return {kv["key"]: _any(kv.get("value", {})) for kv in kvs or ()}


def spans_of(tree: Mapping[str, Any]) -> Iterable[Span]:
    """The spans of one ExportTraceServiceRequest in OTLP/JSON."""
    for rs in tree.get("resourceSpans", []):
        resource = _attrs(rs.get("resource", {}).get("attributes"))
        for ss in rs.get("scopeSpans", []):
            for sp in ss.get("spans", []):
                yield Span(sp.get("traceId", ""), sp.get("spanId", ""),
                           sp.get("parentSpanId", ""), sp.get("name", ""),
                           int(sp.get("kind", 0)), int(sp.get("startTimeUnixNano", 0)),
                           int(sp.get("endTimeUnixNano", 0)), _attrs(sp.get("attributes")),
                           resource, int(sp.get("status", {}).get("code", 0)))


def _points(tree: Mapping[str, Any]) -> Iterable[Point]:
    for rm in tree.get("resourceMetrics", []):
        resource = _attrs(rm.get("resource", {}).get("attributes"))
        for sm in rm.get("scopeMetrics", []):
            for m in sm.get("metrics", []):
                for kind in ("sum", "gauge", "histogram"):
                    for dp in m.get(kind, {}).get("dataPoints", []):
                        if kind == "histogram":
                            count = int(dp.get("count", 0))
                            value = float(dp.get("sum", 0.0)) / count if count else 0.0
                        else:
                            value = float(dp.get("asDouble", dp.get("asInt", 0)))
                        yield Point(m.get("name", ""), value, _attrs(dp.get("attributes")),
                                    resource, int(dp.get("timeUnixNano", 0)))


def _otlp_profiles(line: bytes, origin: str) -> Iterable[Profile]:
    """ProfilesData (profiles v1development, with its dictionary) as profiles."""
    data = profiles_pb2.ProfilesData()
    json_format.Parse(line, data, ignore_unknown_fields=True)
    d = data.dictionary
    st = list(d.string_table)

    def s(i: int) -> str:
        return st[i] if 0 <= i < len(st) else ""

    def attr(i: int) -> tuple[str, Any]:
        a = d.attribute_table[i]
        v = a.value
        return s(a.key_strindex), getattr(v, v.WhichOneof("value")) if v.WhichOneof(
            "value") else None

    def frames_of(stack_index: int) -> tuple[Frame, ...]:
        out = []
        for li in d.stack_table[stack_index].location_indices:
            loc = d.location_table[li]
            for line_ in loc.lines:
                f = d.function_table[line_.function_index]
                module = s(f.filename_strindex)
                out.append(Frame(s(f.name_strindex), module, frame_kind(module), loc.address,
                                 int(line_.line or f.start_line)))
        return tuple(out)

    for rp in data.resource_profiles:
        resource = {kv.key: getattr(kv.value, kv.value.WhichOneof("value"))
                    for kv in rp.resource.attributes if kv.value.WhichOneof("value")}
        for sp in rp.scope_profiles:
            # OTLP holds one sample type per Profile: the profiles of one batch (same
            # time, same samples in the same order) are one profile of several types again
            groups: dict[tuple, list] = {}
            for prof in sp.profiles:
                shape = (prof.time_unix_nano, prof.duration_nano,
                         tuple((smp.stack_index, tuple(smp.attribute_indices), len(smp.values))
                               for smp in prof.samples))
                groups.setdefault(shape, []).append(prof)
            for (start, duration, _), profs in groups.items():
                types = tuple((s(p.sample_type.type_strindex), s(p.sample_type.unit_strindex))
                              for p in profs)
                samples = []
                for j, smp in enumerate(profs[0].samples):
                    labels = {**resource, **dict(attr(i) for i in smp.attribute_indices)}
                    frames = frames_of(smp.stack_index)
                    for k in range(len(smp.values)):  # a sample per point, as in pprof
                        samples.append(Sample(frames, tuple(int(p.samples[j].values[k])
                                                            for p in profs), labels))
                yield Profile(types, samples, start, duration, origin)


def read_json_lines(path: Path, ev: Evidence, since_ns: int = 0) -> None:
    with path.open("rb") as f:
        for n, line in enumerate(f, 1):
            if not line.strip():
                continue
            if len(line) > MAX_LINE:
                ev.skipped.append(f"{path}:{n}: a line of {len(line)} bytes")
                continue
            try:
                tree = orjson.loads(line)
            except orjson.JSONDecodeError as exc:
                raise ReadError(f"{path}:{n}: not JSON ({exc})") from exc
            if not isinstance(tree, dict):
                raise ReadError(f"{path}:{n}: not an OTLP/JSON request")
            if "resourceSpans" in tree:
                ev.spans.extend(s for s in spans_of(tree) if s.end_ns >= since_ns)
            elif "resourceMetrics" in tree:
                ev.points.extend(p for p in _points(tree) if p.time_ns >= since_ns)
            elif "resourceProfiles" in tree:
                ev.profiles.extend(p for p in _otlp_profiles(line, f"{path}:{n}")
                                   if not p.start_ns or p.start_ns + p.duration_ns >= since_ns)
            else:
                raise ReadError(f"{path}:{n}: no resourceSpans, resourceMetrics or "
                                "resourceProfiles")


# -------------------------------------------------------------------------- paths

def _files(paths: Iterable[str]) -> Iterable[Path]:
    for p in paths:
        path = Path(p)
        if path.is_dir():
            yield from sorted(f for f in path.rglob("*") if f.is_file())
        elif path.is_file():
            yield path
        else:
            raise ReadError(f"{p}: no such file or folder")


def read(paths: Iterable[str], since_ns: int = 0) -> Evidence:
    """Everything in `paths` (files and folders) newer than `since_ns` (wall clock; files
    last written before it are not opened)."""
    ev = Evidence()
    for path in _files(paths):
        name = path.name
        if name.endswith(".tmp"):
            continue  # an exporter's file being written
        if since_ns and os.stat(path).st_mtime_ns < since_ns:
            continue
        if name.endswith(PPROF_SUFFIXES):
            prof = read_pprof(path)
            if not prof.start_ns or prof.start_ns + prof.duration_ns >= since_ns:
                ev.profiles.append(prof)
        elif name.endswith(".folded"):
            ev.profiles.append(read_folded(path))
        elif name.endswith(JSON_SUFFIXES):
            read_json_lines(path, ev, since_ns)
        else:
            ev.skipped.append(f"{path}: not a profile, OTLP/JSON or folded file")
            continue
        ev.files.append(str(path))
    return ev
