"""`otel-ebpf run | check | advise | diff | flamegraph | top | version`: the command line.
Exit codes: 0 fine, 1 cannot run here (privileges, kernel, BPF objects; advise: the
model's server failed), 2 invalid configuration (advise, diff, flamegraph: unreadable
input)."""

from __future__ import annotations

import argparse
import logging
import os
import sys
import time

from rich.console import Console
from rich.table import Table

from otel_ebpf import __version__
from otel_ebpf.config import ConfigError, default_config_path, load_config

EXIT_OK, EXIT_CANNOT_RUN, EXIT_BAD_CONFIG = 0, 1, 2

err_console = Console(stderr=True, highlight=False)
log = logging.getLogger("otel_ebpf")


def _setup_logging(level: str) -> None:
    logging.basicConfig(
        level=getattr(logging, level.upper(), logging.INFO),
        format="%(asctime)s %(levelname)s %(name)s: %(message)s",
        stream=sys.stderr,
    )


def _load(path: str | None):
    path = path or default_config_path(os.environ)
    return load_config(path, os.environ)


def cmd_run(args: argparse.Namespace) -> int:
    try:
        cfg = _load(args.config)
    except ConfigError as exc:
        err_console.print(f"otel-ebpf: {exc}", markup=False)
        return EXIT_BAD_CONFIG
    _setup_logging(cfg.telemetry.log_level)

    # Import late: these pull in libbpf, which `check` reports on when missing.
    from otel_ebpf.export.factory import ExporterConfigError
    from otel_ebpf.export.file import FileExporterError
    from otel_ebpf.kernel.features import (
        configured_features,
        missing_privileges,
        privilege_message,
        probe_needs,
        unmet_needs,
    )
    from otel_ebpf.kernel.loader import BPFError

    missing = missing_privileges()
    if missing:
        err_console.print(f"otel-ebpf: {privilege_message(missing)}", markup=False)
        return EXIT_CANNOT_RUN
    # a feature the kernel is too old for: say which and what it needs, before libbpf
    # fails on it with a verifier log
    features = configured_features(cfg)
    unmet = unmet_needs(features, probe_needs(list(features)))
    for line in unmet:
        err_console.print(f"otel-ebpf: {line}", markup=False)
    if unmet:
        return EXIT_CANNOT_RUN

    from otel_ebpf.agent import Agent
    from otel_ebpf.protocols.registry import PluginOptionsError

    try:
        agent = Agent(cfg)
    except (ExporterConfigError, FileExporterError, KeyError, PluginOptionsError) as exc:
        err_console.print(f"otel-ebpf: config error: {exc}", markup=False)
        return EXIT_BAD_CONFIG
    agent.install_signal_handlers()
    try:
        agent.start()
    except BPFError as exc:
        err_console.print(f"otel-ebpf: {exc}", markup=False)
        agent.shutdown()
        return EXIT_CANNOT_RUN
    try:
        agent.run()
    finally:
        agent.shutdown()
        _print_summary(agent.summary())
    return EXIT_OK


def _print_summary(totals: dict[str, int]) -> None:
    table = Table(title="otel-ebpf: totals", show_header=True)
    table.add_column("counter")
    table.add_column("value", justify="right")
    for name, value in totals.items():
        table.add_row(f"otel_ebpf.{name}", str(value))
    err_console.print(table)


def cmd_check(args: argparse.Namespace) -> int:
    try:
        from otel_ebpf.kernel.features import run_checks
    except Exception as exc:  # libbpf itself missing
        err_console.print(f"otel-ebpf: {exc}", markup=False)
        return EXIT_CANNOT_RUN
    checks = run_checks() + _protocol_checks()
    table = Table(title=f"otel-ebpf {__version__}: can this host run the agent?")
    table.add_column("feature")
    table.add_column("status")
    table.add_column("detail", overflow="fold")
    for c in checks:
        status = "ok" if c.ok else "not probed" if c.unknown else (
            "MISSING" if c.required else "absent (optional)")
        style = "green" if c.ok else ("bold red" if c.required else "yellow")
        table.add_row(c.name, f"[{style}]{status}[/]", c.detail)
    Console().print(table)
    failed = [c.name for c in checks if c.required and not c.ok]
    if failed:
        err_console.print(f"otel-ebpf cannot run here: {', '.join(failed)}", markup=False)
        return EXIT_CANNOT_RUN
    return EXIT_OK


def _protocol_checks() -> list:
    """The installed parsers and layers, by the names receivers.ebpf.protocols.enabled takes."""
    from otel_ebpf.kernel.features import Check
    from otel_ebpf.protocols.registry import available_layers, available_parsers

    from otel_ebpf import _fast

    parsers, layers = available_parsers(), available_layers()
    compiled, detail = _fast.status()
    return [
        Check("compiled path", compiled, detail, required=False),
        Check("protocol parsers", bool(parsers), ", ".join(parsers) or "none installed",
              required=False),
        Check("layers over HTTP", bool(layers), ", ".join(layers) or "none installed",
              required=False),
    ]


def _say(line: str) -> None:
    """A line on stderr as it is: paths in it are not wrapped to the terminal's width."""
    sys.stderr.write(line + "\n")


def cmd_advise(args: argparse.Namespace) -> int:
    from otel_ebpf.advise.llm import LLMError, ask
    from otel_ebpf.advise.readers import ReadError
    from otel_ebpf.advise.render import RENDERERS
    from otel_ebpf.advise.report import advise
    from otel_ebpf.config import parse_duration

    if bool(args.llm_endpoint) != bool(args.model):
        _say("otel-ebpf advise: --llm-endpoint and --model go together")
        return EXIT_BAD_CONFIG
    try:
        since = parse_duration(args.since) if args.since else None
    except (ConfigError, ValueError) as exc:
        _say(f"otel-ebpf advise: --since {args.since!r}: {exc}")
        return EXIT_BAD_CONFIG
    try:
        findings, evidence = advise(args.paths, since, args.top)
    except (ReadError, OSError) as exc:
        _say(f"otel-ebpf advise: {exc}")
        return EXIT_BAD_CONFIG
    rc = EXIT_OK
    if args.llm_endpoint and findings:
        try:
            ask(args.llm_endpoint, args.model, findings[:args.llm_findings])
        except LLMError as exc:  # the deterministic report still comes out
            _say(f"otel-ebpf advise: the model was not asked: {exc}")
            rc = EXIT_CANNOT_RUN
    sys.stdout.write(RENDERERS[args.format](findings, evidence))
    return rc


def cmd_diff(args: argparse.Namespace) -> int:
    from otel_ebpf.advise.diff import diff
    from otel_ebpf.advise.readers import ReadError
    from otel_ebpf.advise.render_diff import RENDERERS
    from otel_ebpf.config import parse_duration

    try:
        since = parse_duration(args.since) if args.since else None
    except (ConfigError, ValueError) as exc:
        _say(f"otel-ebpf diff: --since {args.since!r}: {exc}")
        return EXIT_BAD_CONFIG
    if args.top < 1:
        _say("otel-ebpf diff: --top must be 1 or more")
        return EXIT_BAD_CONFIG
    try:
        result = diff([args.before], [args.after], since)
    except (ReadError, OSError) as exc:
        _say(f"otel-ebpf diff: {exc}")
        return EXIT_BAD_CONFIG
    sys.stdout.write(RENDERERS[args.format](result, args.top))
    return EXIT_OK


def cmd_flamegraph(args: argparse.Namespace) -> int:
    from otel_ebpf.advise.readers import ReadError, read
    from otel_ebpf.config import parse_duration
    from otel_ebpf.views.flamegraph import NoSamples, differential, flamegraph

    if bool(args.paths) == bool(args.diff):
        _say("otel-ebpf flamegraph: give PATH... or --diff BEFORE AFTER")
        return EXIT_BAD_CONFIG
    try:
        since = parse_duration(args.since) if args.since else 0.0
    except (ConfigError, ValueError) as exc:
        _say(f"otel-ebpf flamegraph: --since {args.since!r}: {exc}")
        return EXIT_BAD_CONFIG
    since_ns = time.time_ns() - int(since * 1e9) if since else 0
    try:
        if args.diff:
            before, after = (read([p], since_ns).profiles for p in args.diff)
            svg = differential(before, after, args.kind, args.value, args.title)
        else:
            svg = flamegraph(read(args.paths, since_ns).profiles, args.kind, args.value,
                             args.title)
    except (ReadError, NoSamples, OSError) as exc:
        _say(f"otel-ebpf flamegraph: {exc}")
        return EXIT_BAD_CONFIG
    if args.output == "-":
        sys.stdout.write(svg)
    else:
        with open(args.output, "w") as f:
            f.write(svg)
        _say(f"otel-ebpf flamegraph: wrote {args.output}")
    return EXIT_OK


def cmd_top(args: argparse.Namespace) -> int:
    from otel_ebpf.config import parse_duration
    from otel_ebpf.views.top import run

    try:
        window, interval = parse_duration(args.window), parse_duration(args.interval)
    except ValueError as exc:
        _say(f"otel-ebpf top: {exc}")
        return EXIT_BAD_CONFIG
    if window <= 0 or interval <= 0:
        _say("otel-ebpf top: --window and --interval must be more than 0")
        return EXIT_BAD_CONFIG
    if not os.path.exists(args.file) and args.once:
        _say(f"otel-ebpf top: {args.file}: no such file")
        return EXIT_BAD_CONFIG
    try:
        run(args.file, window, interval, args.once, Console())
    except KeyboardInterrupt:
        pass
    return EXIT_OK


def build_parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="otel-ebpf",
        description="OpenTelemetry-native eBPF receiver: traces from the wire, no SDKs.",
    )
    sub = parser.add_subparsers(dest="command", required=True)
    run = sub.add_parser("run", help="trace until SIGINT/SIGTERM, then flush")
    run.add_argument("-c", "--config", help="YAML config (default: $OTEL_EBPF_CONFIG or "
                     "built-in defaults, the same as config/default.yaml)")
    run.set_defaults(func=cmd_run)
    check = sub.add_parser("check", help="report privileges and kernel features")
    check.set_defaults(func=cmd_check)
    adv = sub.add_parser("advise", help="ranked findings from the agent's profiles, spans "
                         "and metrics (files or folders)")
    adv.add_argument("paths", nargs="+", metavar="PATH",
                     help="pprof, folded or OTLP/JSON files, or folders of them")
    adv.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    adv.add_argument("--since", help="only data of the last D (e.g. 15m, 2h)")
    adv.add_argument("--top", type=int, default=10, help="findings shown (default 10)")
    adv.add_argument("--llm-endpoint", metavar="URL", help="an OpenAI-compatible server "
                     "to ask for a code change per top finding (nothing is sent without it)")
    adv.add_argument("--model", metavar="NAME", help="the model to ask (with --llm-endpoint)")
    adv.add_argument("--llm-findings", type=int, default=3, metavar="N",
                     help="top findings sent to the model (default 3)")
    adv.set_defaults(func=cmd_advise)
    dif = sub.add_parser("diff", help="two runs' profiles, spans and metrics compared: what "
                         "changed beyond the noise between export windows")
    dif.add_argument("before", metavar="BEFORE", help="a file or folder, as advise reads them")
    dif.add_argument("after", metavar="AFTER", help="the same, of the run after the change")
    dif.add_argument("--format", choices=("text", "markdown", "json"), default="text")
    dif.add_argument("--since", help="only data of the last D (e.g. 15m, 2h)")
    dif.add_argument("--top", type=int, default=20, help="rows shown per table (default 20)")
    dif.set_defaults(func=cmd_diff)
    from otel_ebpf.views.flamegraph import KINDS

    flame = sub.add_parser("flamegraph", help="an SVG flame graph of the agent's profiles")
    flame.add_argument("paths", nargs="*", metavar="PATH",
                       help="pprof, folded or OTLP/JSON profile files, or folders of them")
    flame.add_argument("--diff", nargs=2, metavar=("BEFORE", "AFTER"),
                       help="AFTER's graph coloured by each frame's change of share since "
                       "BEFORE (red grew, blue shrank)")
    flame.add_argument("--kind", choices=KINDS, default="cpu",
                       help="which profiles (default cpu)")
    flame.add_argument("--value", help="the sample type to draw by (default: samples, "
                       "alloc_space, kernel_launches, copy_time, sync_wait by kind)")
    flame.add_argument("--since", help="only profiles of the last D (e.g. 15m)")
    flame.add_argument("--title")
    flame.add_argument("-o", "--output", default="flamegraph.svg",
                       help="the SVG file (default flamegraph.svg; - for stdout)")
    flame.set_defaults(func=cmd_flamegraph)
    top = sub.add_parser("top", help="a live table per service from the spans file the "
                         "agent's file exporter writes")
    top.add_argument("file", help="the file exporter's path (OTLP/JSON lines)")
    top.add_argument("--window", default="60s", help="spans counted (default 60s)")
    top.add_argument("--interval", default="2s", help="refresh period (default 2s)")
    top.add_argument("--once", action="store_true", help="print the table once and exit")
    top.set_defaults(func=cmd_top)
    version = sub.add_parser("version", help="print the version")
    version.set_defaults(func=lambda _a: print(__version__) or EXIT_OK)
    return parser


def main(argv: list[str] | None = None) -> int:
    args = build_parser().parse_args(argv)
    return args.func(args)


if __name__ == "__main__":
    sys.exit(main())
