"""A flame graph as one SVG file from the agent's profiles (pprof, folded or OTLP/JSON
profile lines, read as `otel-ebpf advise` reads them): CPU, GPU memory, kernel launches
(the kernel's name on top of the Python stack that launched it), copies or time waiting
in synchronize calls. Each process is a tower of its own on the root; a frame's width is
its share of the value; hovering shows the name, the value and the share. A differential
graph draws the AFTER run with each frame coloured by how its share changed since BEFORE."""

from __future__ import annotations

import zlib
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from xml.sax.saxutils import escape

from otel_ebpf.advise.model import COPIES, CPU, GPU_MEMORY, LAUNCHES, SYNC, Profile
from otel_ebpf.advise.sites import process_name, process_of
from otel_ebpf.profiling.frames import CUDA, KERNEL, PYTHON

# the value each kind is drawn by unless asked otherwise
DEFAULT_VALUE = {CPU: "samples", GPU_MEMORY: "alloc_space", LAUNCHES: "kernel_launches",
                 COPIES: "copy_time", SYNC: "sync_wait"}
KINDS = tuple(DEFAULT_VALUE)
WIDTH, ROW, FONT = 1200, 17, 11
MIN_WIDTH = 0.3  # px: narrower frames are left out (their width still counts above them)
# hue ranges per frame kind: Python yellow-green, native red-orange, kernel blue, GPU kernel
# violet; the exact tint comes from the name, so a function keeps its colour across files
_HUES = {PYTHON: (55, 95), KERNEL: (195, 225), CUDA: (265, 295)}
_NATIVE_HUES = (0, 35)


class NoSamples(ValueError):
    pass


@dataclass
class _Node:
    name: str
    kind: str
    value: int = 0
    children: dict[tuple[str, str], _Node] = field(default_factory=dict)

    def child(self, name: str, kind: str) -> _Node:
        key = (name, kind)
        node = self.children.get(key)
        if node is None:
            node = self.children[key] = _Node(name, kind)
        return node


def build_tree(profiles: Iterable[Profile], kind: str, value: str | None = None,
               process: Callable[[Mapping], str] = process_of) -> tuple[_Node, str]:
    """The merged tree of every profile of `kind`, by `value` (a sample type), its
    processes named by `process` (of a sample's labels); the value's unit. NoSamples when
    nothing of that kind has a value."""
    value = value or DEFAULT_VALUE[kind]
    root, unit = _Node("all", "root"), ""
    for prof in profiles:
        if prof.kind != kind:
            continue
        i = prof.index(value)
        if i is None:
            raise NoSamples(f"{prof.origin}: no sample type {value!r} (it has "
                            f"{', '.join(t for t, _ in prof.sample_types)})")
        unit = prof.sample_types[i][1]
        for s in prof.samples:
            n = s.values[i]
            if n <= 0:
                continue
            root.value += n
            node = root.child(process(s.labels), "process")
            node.value += n
            for f in reversed(s.frames):  # root first
                node = node.child(f.name, f.kind)
                node.value += n
    if not root.value:
        raise NoSamples(f"no {kind} samples with a {value} value in these files")
    return root, unit


def _colour(name: str, kind: str) -> str:
    if kind in ("root", "process"):
        return "rgb(200,200,200)"
    lo, hi = _HUES.get(kind, _NATIVE_HUES)
    h = zlib.crc32(name.encode())
    return f"hsl({lo + h % (hi - lo + 1)},{60 + (h >> 8) % 25}%,{58 + (h >> 16) % 12}%)"


def _fmt(n: int, unit: str) -> str:
    if unit == "bytes":
        return f"{n / (1 << 20):.1f} MiB"
    if unit == "nanoseconds":
        return f"{n / 1e6:.2f} ms"
    return f"{n} {unit}" if unit and unit != "count" else str(n)


def _depth(node: _Node) -> int:
    return 1 + max((_depth(c) for c in node.children.values()), default=0)


# a frame's fill and a note for its tooltip, from its path (the keys of the nodes from
# the root's child to it) and its node
Paint = Callable[[tuple[tuple[str, str], ...], _Node], tuple[str, str]]


def _by_name(path: tuple[tuple[str, str], ...], node: _Node) -> tuple[str, str]:
    return _colour(node.name, node.kind), ""


def render(root: _Node, unit: str, title: str, paint: Paint = _by_name) -> str:
    """The SVG text: the root at the bottom, callees above their callers."""
    depth = _depth(root)
    height = (depth + 2) * ROW + 10
    scale = (WIDTH - 20) / root.value
    out = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{WIDTH}" height="{height}" '
           f'viewBox="0 0 {WIDTH} {height}" font-family="monospace" font-size="{FONT}">',
           '<rect width="100%" height="100%" fill="#f8f8f8"/>',
           f'<text x="{WIDTH / 2}" y="{ROW}" text-anchor="middle" font-size="{FONT + 3}">'
           f'{escape(title)}</text>']

    def draw(node: _Node, x: float, level: int, path: tuple) -> None:
        w = node.value * scale
        if w < MIN_WIDTH:
            return
        y = height - (level + 1) * ROW - 5
        share = node.value / root.value
        fill, note = paint(path, node)
        label = f"{node.name} ({_fmt(node.value, unit)}, {share:.2%}{note})"
        out.append(f'<g><title>{escape(label)}</title><rect x="{x:.2f}" y="{y}" '
                   f'width="{w:.2f}" height="{ROW - 1}" fill="{fill}" rx="2"/>')
        chars = int((w - 4) / (FONT * 0.6))
        if chars >= 3:
            text = node.name if len(node.name) <= chars else node.name[:chars - 2] + ".."
            out.append(f'<text x="{x + 3:.2f}" y="{y + ROW - 5}">{escape(text)}</text>')
        out.append("</g>")
        cx = x
        # widest first: the eye finds the big ones at the left; ties by name (stable)
        for child in sorted(node.children.values(), key=lambda c: (-c.value, c.name)):
            draw(child, cx, level + 1, (*path, (child.name, child.kind)))
            cx += child.value * scale

    draw(root, 10.0, 0, ())
    out.append("</svg>")
    return "\n".join(out) + "\n"


def flamegraph(profiles: Iterable[Profile], kind: str = CPU, value: str | None = None,
               title: str | None = None) -> str:
    root, unit = build_tree(profiles, kind, value)
    value = value or DEFAULT_VALUE[kind]
    return render(root, unit, title or f"{kind} profile: {value}, {_fmt(root.value, unit)}")


def _walk(node: _Node, path: tuple = ()) -> Iterable[tuple[tuple, _Node]]:
    yield path, node
    for key, child in node.children.items():
        yield from _walk(child, (*path, key))


def differential(before: Iterable[Profile], after: Iterable[Profile], kind: str = CPU,
                 value: str | None = None, title: str | None = None) -> str:
    """The AFTER profiles' graph, each frame red where its share of all samples grew since
    BEFORE, blue where it shrank, the deeper the more (against the largest change in the
    graph). Processes are matched by name, their pids differ from run to run; a frame
    gone since BEFORE is not in AFTER's graph to colour."""
    old, _ = build_tree(before, kind, value, process_name)
    new, unit = build_tree(after, kind, value, process_name)
    share_before = {path: n.value / old.value for path, n in _walk(old)}
    change = {path: n.value / new.value - share_before.get(path, 0.0)
              for path, n in _walk(new)}
    largest = max(map(abs, change.values())) or 1.0

    def paint(path: tuple, node: _Node) -> tuple[str, str]:
        delta = change[path]
        fade = round(235 - 205 * abs(delta) / largest)  # 235: unchanged, near white
        fill = (f"rgb(255,{fade},{fade})" if delta > 0 else
                f"rgb({fade},{fade},255)" if delta < 0 else "rgb(235,235,235)")
        return fill, f", {delta * 100:+.2f} points since {share_before.get(path, 0.0):.2%}"

    value = value or DEFAULT_VALUE[kind]
    return render(new, unit, title or f"{kind} profile: {value}, {_fmt(new.value, unit)}; "
                  "red grew, blue shrank since before", paint)
