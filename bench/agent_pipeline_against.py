"""bench/agent_pipeline.py's stages, this checkout against another one (an earlier commit),
in interleaved rounds: each round runs `agent_pipeline.py --rounds 1` from both, the order
alternating, so a busy machine weighs on both alike. Both runs use this interpreter.

    .venv/bin/python bench/agent_pipeline_against.py --base DIR [--exchanges 3000]
        [--rounds 7] [--out docs/performance.md]

DIR: a checkout of the other commit whose `otel_ebpf` (and `otel_ebpf.protocols`, its
`protocols/` folder) import from DIR itself, with its compiled extensions built: for an
archive of a commit, copy in the built `otel_ebpf/_fast/*.so` and `protocols/*/_*.so` of
the same sources (`setup.py build_ext --inplace` in DIR builds both) and link
`otel_ebpf/protocols` to `../protocols`. Medians [min–max] over rounds, µs of CPU
per exchange (2 spans), for the compiled path and for the pure Python one.
"""

from __future__ import annotations

import argparse
import re
import statistics
import subprocess
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from bench.side_by_side import publish, spread  # noqa: E402

ROW = re.compile(r"^\| (?P<stage>[^|]+?) \| (?P<pure>[\d.]+) \[[^]]*\] \| (?P<fast>[\d.]+) \[")


def one_run(root: Path, exchanges: int) -> dict[str, tuple[float, float]]:
    out = subprocess.run([sys.executable, str(root / "bench" / "agent_pipeline.py"),
                          "--exchanges", str(exchanges), "--rounds", "1"],
                         cwd=root, check=True, capture_output=True, text=True).stdout
    rows = {}
    for line in out.splitlines():
        m = ROW.match(line)
        if m:
            rows[m["stage"].replace("**", "")] = (float(m["pure"]), float(m["fast"]))
    return rows


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawTextHelpFormatter)
    ap.add_argument("--base", type=Path, required=True)
    ap.add_argument("--exchanges", type=int, default=3000)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", type=Path)
    args = ap.parse_args()
    runs: dict[str, list[dict]] = {"before": [], "after": []}
    roots = {"before": args.base.resolve(), "after": REPO}
    for i in range(args.rounds):
        for side in (("before", "after") if i % 2 == 0 else ("after", "before")):
            runs[side].append(one_run(roots[side], args.exchanges))

    lines = [f"### Agent CPU per HTTP/1 exchange, before and after, by stage "
             f"({time.strftime('%Y-%m-%d')}, {args.exchanges} exchanges seen at both ends, "
             f"median [min–max] of {args.rounds} interleaved rounds, µs per exchange)", "",
             "| stage | path | before | after | after / before |", "|---|---|---:|---:|---:|"]
    for stage in runs["after"][0]:
        if stage not in runs["before"][0]:
            continue
        for k, path in ((1, "compiled"), (0, "pure Python")):
            before = [r[stage][k] for r in runs["before"]]
            after = [r[stage][k] for r in runs["after"]]
            lines.append(f"| {stage} | {path} | {spread(before)} | {spread(after)} | "
                         f"{statistics.median(after) / statistics.median(before):.2f} |")
    publish(lines, args.out)


if __name__ == "__main__":
    main()
