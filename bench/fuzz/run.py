"""Run every parser's fuzz target for a budget of inputs, one process per target, and
write what each saw (inputs, time, parse errors, crashes) as JSON.

    nice -n 19 .venv/bin/python -m bench.fuzz.run --runs 1000000 --out bench/fuzz/results.json

A crash (an exception escaping a parser) stops that target; its input is kept in
bench/fuzz/crashes/ and the run exits 1. Results are in docs/reliability.md.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from bench.fuzz import TARGETS

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
MAX_LEN = 4096  # bytes per input: many syscalls' worth of a connection


def run_target(name: str, runs: int, workdir: Path) -> dict:
    stats = workdir / f"{name}.stats.json"
    corpus = workdir / f"{name}.corpus"
    corpus.mkdir(exist_ok=True)
    crashes = HERE / "crashes"
    crashes.mkdir(exist_ok=True)
    start = time.monotonic()
    proc = subprocess.run(
        [sys.executable, "-m", "bench.fuzz.targets", name, f"-runs={runs}",
         f"-max_len={MAX_LEN}", f"-artifact_prefix={crashes}/{name}-", "-print_final_stats=1",
         str(corpus)],
        cwd=REPO, capture_output=True, text=True, env={**os.environ, "FUZZ_STATS": str(stats)},
    )
    seconds = time.monotonic() - start
    out = proc.stdout + proc.stderr
    done = re.search(r"Done (\d+) runs", out)
    cov = re.findall(r"cov: (\d+)", out)
    seen = json.loads(stats.read_text()) if stats.exists() else {}
    result = {
        "target": name, "exit": proc.returncode, "runs": int(done.group(1)) if done else None,
        "seconds": round(seconds, 1), "coverage_edges": int(cov[-1]) if cov else None,
        "corpus": len(list(corpus.iterdir())), **{k: v for k, v in seen.items() if k != "target"},
        "crashed": "Uncaught Python exception" in out or proc.returncode != 0,
    }
    if result["crashed"]:
        result["output_tail"] = out[-3000:]
    return result


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", type=int, default=1_000_000, help="inputs per target")
    ap.add_argument("--targets", nargs="*", default=list(TARGETS), choices=TARGETS)
    ap.add_argument("--out", type=Path, help="JSON results file (default: print only)")
    args = ap.parse_args()
    results = []
    with tempfile.TemporaryDirectory(prefix="otel-ebpf-fuzz-") as tmp:
        for name in args.targets:
            result = run_target(name, args.runs, Path(tmp))
            results.append(result)
            print(json.dumps({k: v for k, v in result.items() if k != "output_tail"}), flush=True)
            if args.out:
                args.out.write_text(json.dumps(results, indent=1) + "\n")
    return 1 if any(r["crashed"] for r in results) else 0


if __name__ == "__main__":
    sys.exit(main())
