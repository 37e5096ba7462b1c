"""Reads the OTLP/JSON metric lines the file exporter writes into flat points, for tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class Point:
    metric: str
    kind: str  # sum | gauge
    resource: dict
    attributes: dict
    value: int | float
    start_ns: int
    time_ns: int
    monotonic: bool = False
    cumulative: bool = False


def _value(v: dict):
    (kind, val), = v.items()
    return int(val) if kind == "intValue" else val


def read_points(path: Path) -> list[list[Point]]:
    """One list of points per exported line (per export call)."""
    out = []
    for line in path.read_text().splitlines():
        points = []
        for rm in json.loads(line).get("resourceMetrics", []):
            resource = {a["key"]: _value(a["value"]) for a in rm["resource"].get("attributes", [])}
            for sm in rm.get("scopeMetrics", []):
                for m in sm.get("metrics", []):
                    kind = "sum" if "sum" in m else "gauge"
                    body = m[kind]
                    for dp in body.get("dataPoints", []):
                        value = int(dp["asInt"]) if "asInt" in dp else float(dp.get("asDouble", 0))
                        points.append(Point(
                            m["name"], kind, resource,
                            {a["key"]: _value(a["value"]) for a in dp.get("attributes", [])},
                            value, int(dp.get("startTimeUnixNano", 0)), int(dp["timeUnixNano"]),
                            bool(body.get("isMonotonic")),
                            body.get("aggregationTemporality") in (2, "AGGREGATION_TEMPORALITY_CUMULATIVE"),
                        ))
        out.append(points)
    return out


def find(points: list[Point], metric: str, **attributes) -> list[Point]:
    """The points of `metric` whose attributes include `attributes` (dots as __)."""
    want = {k.replace("__", "."): v for k, v in attributes.items()}
    return [p for p in points if p.metric == metric
            and all(p.attributes.get(k) == v for k, v in want.items())]
