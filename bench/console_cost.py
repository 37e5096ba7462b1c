"""What the console exporter costs per span, side by side with the OTLP/JSON encoding the
file exporter does for the same spans (the default config runs both), in one process (no
kernel): `basic` (a count per batch), `normal` to a file or a pipe (plain lines) and to a
terminal (SGR colours), and the same lines rendered by rich, as they were first printed.
The spans are what the HTTP/1 parser makes of real exchanges (client and server, a 200
and a 500), in batches of --batch like the batch processor's.

    .venv/bin/python bench/console_cost.py [--batch 512] [--rounds 7] [--out docs/performance.md]

Medians over interleaved rounds, µs per span, and each as a ratio to the OTLP/JSON
encoding measured in the same round.
"""

from __future__ import annotations

import argparse
import io
import statistics
import sys
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from otel_ebpf.protocols.base import Role  # noqa: E402
from rich.console import Console  # noqa: E402
from rich.text import Text  # noqa: E402

from otel_ebpf.export.debug import DebugSpanExporter, span_line  # noqa: E402
from otel_ebpf.export.otlp_json import spans_to_otlp_json  # noqa: E402
from tests.unit.test_export_debug import FAIL, OK, http_spans  # noqa: E402


def _console(tty: bool) -> Console:
    return Console(file=io.StringIO(), soft_wrap=True, highlight=False, force_terminal=tty,
                   color_system="truecolor" if tty else None, width=200)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--batch", type=int, default=512)
    ap.add_argument("--rounds", type=int, default=7)
    ap.add_argument("--out", help="append the Markdown result to this file")
    args = ap.parse_args()
    ok, fail = (http_spans(OK, Role.CLIENT, "checkout", 2_500_000),
                http_spans(FAIL, Role.SERVER, "inventory", 40_000))
    # the debug exporter takes the SDK's spans; the file exporter the agent's, ready
    spans = ((ok[1] + fail[1]) * (args.batch // 2 + 1))[: args.batch]
    ready_spans = ((ok[0] + fail[0]) * (args.batch // 2 + 1))[: args.batch]

    def rich_lines(console: Console) -> None:
        console.print(Text("\n").join(span_line(s) for s in spans))

    modes = {
        "OTLP/JSON encoding (file exporter)": lambda: spans_to_otlp_json(ready_spans),
        "debug basic": lambda e=DebugSpanExporter("basic", _console(False)): e.export(spans),
        "debug normal, file or pipe": lambda e=DebugSpanExporter("normal", _console(False)): e.export(spans),
        "debug normal, terminal": lambda e=DebugSpanExporter("normal", _console(True)): e.export(spans),
        "normal lines rendered by rich, terminal": lambda c=_console(True): rich_lines(c),
    }
    times: dict[str, list[float]] = {name: [] for name in modes}
    ratios: dict[str, list[float]] = {name: [] for name in modes}
    for _ in range(args.rounds):
        this_round = {}
        for name, run in modes.items():
            start = time.perf_counter()
            run()
            this_round[name] = (time.perf_counter() - start) / len(spans) * 1e6
        base = this_round["OTLP/JSON encoding (file exporter)"]
        for name, us in this_round.items():
            times[name].append(us)
            ratios[name].append(us / base)
    lines = [f"### Console exporter cost per span ({time.strftime('%Y-%m-%d')}, batches of "
             f"{args.batch}, median of {args.rounds} rounds)", "",
             "| mode | µs per span | spread (min–max) | to OTLP/JSON |", "|---|---:|---:|---:|"]
    for name in modes:
        t = times[name]
        lines.append(f"| {name} | {statistics.median(t):.1f} | {min(t):.1f}–{max(t):.1f} | "
                     f"{statistics.median(ratios[name]):.2f} |")
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "a") as f:
            f.write("\n`.venv/bin/python bench/console_cost.py"
                    f" --batch {args.batch} --rounds {args.rounds}`\n\n" + text)


if __name__ == "__main__":
    main()
