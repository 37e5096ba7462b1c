"""The sanitizer campaign over otel_ebpf/_fast: build the extensions under ASan and UBSan
(bench/fuzz/asan_build.py), replay every regression input of bench/fuzz/corpus/, then fuzz
every target of bench/fuzz/sanitized.py for a time budget each; exit 1 on any sanitizer
report, crash, exception or difference from a Python reference.

    python -m bench.fuzz.sanitize [--seconds 60] [--targets T ...] [--replay-only]
    make fuzz FUZZ_SECONDS=60

Each target runs in a process of its own: the sanitizer runtime preloaded (LD_PRELOAD: the
extensions are instrumented, CPython is not), the sanitized modules put first on its
import path ($FUZZ_ASAN_DIR), PYTHONMALLOC=malloc so every Python object is a malloc'd block
ASan guards (pymalloc's arenas would hide an overread into the next object), and:
  ASAN_OPTIONS=detect_leaks=0  CPython keeps interned strings, caches and module state
      until exit and frees much of it never: LeakSanitizer would flood every run with
      reports that are not the extensions' (their leaks are not looked for here)
  UBSAN_OPTIONS=halt_on_error=1:print_stacktrace=1  (the build has
      -fno-sanitize-recover=undefined: the first report ends the process)
Runtime: atheris' asan_with_fuzzer.so where atheris ships it (its documented way to fuzz
a native extension: clang's ASan runtime with libFuzzer in it, so the extensions'
-fsanitize=fuzzer-no-link coverage guides the fuzzer), else clang's own
libclang_rt.asan-x86_64.so (`--runtime clang`: the same checks, Python-side coverage only).

A known open finding (bench/fuzz/known.py) is replayed as expected to fail; a fuzz run
that ends in a report matching one is counted as that finding and restarted for the rest
of its budget (a few times at most). New crash inputs are left in build/fuzz/artifacts/.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from bench.fuzz import asan_build, known

HERE = Path(__file__).resolve().parent
REPO = HERE.parents[1]
CORPUS = HERE / "corpus"
ARTIFACTS = REPO / "build" / "fuzz" / "artifacts"
# every target of bench/fuzz/sanitized.py, in the order a campaign runs them
TARGETS = ("ring", "http1_head", "http1_whole", "http1_chunks", "http1_conn", "sse",
           "sse_openai", "llm_openai", "http2_frames", "http2_conn", "h2span_pair",
           "h2span_span", "rtps", "rtps_sockets", "otlp", "table")
MAX_LEN = 4096
RESTARTS = 4  # runs of one target after known findings ended it, at most
# what a failed process prints: a sanitizer's report, libFuzzer's, a Python exception
REPORT = re.compile(r"ERROR: AddressSanitizer|runtime error:|ERROR: UndefinedBehaviorSanitizer|"
                    r"ERROR: libFuzzer|Uncaught Python exception|Traceback \(most recent|"
                    r"SUMMARY: \w+Sanitizer|AssertionError")


class SetupError(RuntimeError):
    pass


def runtime(which: str = "auto") -> Path:
    """The sanitizer runtime to preload."""
    if which in ("auto", "atheris"):
        try:
            import atheris  # noqa: PLC0415

            lib = Path(atheris.path()) / "asan_with_fuzzer.so"
            if lib.exists():
                return lib
        except ImportError:
            pass
        if which == "atheris":
            raise SetupError("atheris' asan_with_fuzzer.so not found (pip install atheris)")
    cc = asan_build.clang()
    out = subprocess.run([cc, "-print-file-name=libclang_rt.asan-x86_64.so"],
                         capture_output=True, text=True).stdout.strip()
    if not out or not Path(out).is_file():
        raise SetupError(f"clang's ASan runtime not found ({cc} -print-file-name gave "
                         f"{out!r}): install clang's runtimes (Debian: libclang-rt-14-dev)")
    return Path(out)


def runtime_env(asan_dir: Path, lib: Path, guards_off: tuple[str, ...] = (),
                py_coverage: bool = True) -> dict[str, str]:
    env = {k: v for k, v in os.environ.items() if k not in ("OTEL_EBPF_PURE_PYTHON",
                                                            "FUZZ_UNSANITIZED")}
    env.update({
        "FUZZ_ASAN_DIR": str(asan_dir), "LD_PRELOAD": str(lib), "PYTHONMALLOC": "malloc",
        "ASAN_OPTIONS": "detect_leaks=0:allocator_may_return_null=1:handle_abort=1",
        "UBSAN_OPTIONS": "halt_on_error=1:print_stacktrace=1",
        "PYTHONPATH": os.pathsep.join([str(REPO), env.get("PYTHONPATH", "")]).rstrip(os.pathsep),
        "PYTHONDONTWRITEBYTECODE": "1",
    })
    env.pop("FUZZ_NO_GUARDS", None)
    env["FUZZ_GUARDS_OFF"] = ",".join(guards_off)
    env["FUZZ_PY_COVERAGE"] = "1" if py_coverage else "0"
    return env


@dataclass
class Result:
    target: str
    ok: bool = True
    runs: int = 0
    coverage: int | None = None
    features: int | None = None
    seconds: float = 0.0
    known: list[str] = field(default_factory=list)
    failures: list[str] = field(default_factory=list)
    notes: list[str] = field(default_factory=list)


def _excerpt(out: str, lines: int = 80, width: int = 400) -> str:
    """The report's lines, not the fuzzer's chatter: from the first line that reports
    (a sanitizer, libFuzzer, a Python traceback) on, each cut to `width` characters."""
    all_lines = out.splitlines()
    first = next((i for i, line in enumerate(all_lines) if REPORT.search(line)),
                 max(0, len(all_lines) - lines))
    picked = [line if len(line) <= width else line[:width] + f"... ({len(line)} chars)"
              for line in all_lines[first:] if not line.startswith("INFO:")]
    if len(picked) > lines:
        picked = picked[:lines - 20] + ["..."] + picked[-20:]
    return "\n".join(picked)


def _python(cmd: list[str]) -> list[str]:
    return [sys.executable, "-m", "bench.fuzz.sanitized", *cmd]


def replay(target: str, asan_dir: Path, lib: Path, log=print,  # noqa: ANN001
           py_coverage: bool = False) -> Result:
    """Every regression input of the target (must pass), then each open known finding's
    input alone, its guard off (must still fail as its signature says, or pass: fixed)."""
    res = Result(target)
    folder = CORPUS / target
    open_known = {k.path.resolve(): k for k in known.open_for(target)}
    files = sorted(p for p in folder.glob("*") if p.is_file() and p.resolve() not in open_known) \
        if folder.is_dir() else []
    if files:
        p = subprocess.run(_python(["replay", target, *map(str, files)]), cwd=REPO,
                           env=runtime_env(asan_dir, lib, py_coverage=py_coverage),
                           capture_output=True, text=True,
                           timeout=600)
        out = p.stdout + p.stderr
        if p.returncode != 0 or REPORT.search(out):
            res.ok = False
            res.failures.append(f"regression inputs of {target} fail:\n{_excerpt(out)}")
        else:
            res.notes.append(f"{len(files)} regression inputs pass")
    for path, k in open_known.items():
        if not path.exists():
            res.ok = False
            res.failures.append(f"known finding {k.id}: its input {path} is missing")
            continue
        p = subprocess.run(_python(["replay", target, str(path)]), cwd=REPO,
                           env=runtime_env(asan_dir, lib, guards_off=(k.id,), py_coverage=py_coverage),
                           capture_output=True,
                           text=True, timeout=600)
        out = p.stdout + p.stderr
        if p.returncode == 0 and not REPORT.search(out):
            res.notes.append(f"XPASS {k.id}: its input no longer fails (fixed? set open=False "
                             f"in bench/fuzz/known.py)")
        elif k.matches(out):
            res.known.append(k.id)
            res.notes.append(f"XFAIL {k.id} (known, open): reproduces")
        else:
            res.ok = False
            res.failures.append(f"known finding {k.id}'s input fails otherwise than its "
                                f"signature says:\n{_excerpt(out)}")
    return res


_STATS = re.compile(r"#(\d+)\s+(?:NEW|REDUCE|pulse|DONE|INITED|RELOAD)\b.*?cov: (\d+) ft: (\d+)")


def fuzz(target: str, seconds: float, asan_dir: Path, lib: Path, log=print,  # noqa: ANN001
         keep: Path | None = None, progress_every: float = 10.0,
         py_coverage: bool = True, save_corpus: bool = False) -> Result:
    """The target fuzzed for `seconds` (restarted after a known finding, within the same
    budget); a new report fails it and leaves its input in build/fuzz/artifacts/."""
    res = Result(target)
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    work = Path(keep) if keep else Path(tempfile.mkdtemp(prefix=f"fuzz-{target}-"))
    corpus, seeds = work / "corpus", work / "seeds"
    corpus.mkdir(parents=True, exist_ok=True)
    start = time.monotonic()
    try:
        for attempt in range(RESTARTS + 1):
            left = seconds - (time.monotonic() - start)
            if left < 1:
                break
            dirs = [str(corpus), str(seeds)] + ([str(CORPUS / target)]
                                                if (CORPUS / target).is_dir() else [])
            cmd = _python(["fuzz", target, "--seeds", str(seeds), f"-max_total_time={int(left)}",
                           f"-max_len={MAX_LEN}", "-timeout=120", "-rss_limit_mb=6144",
                           "-print_final_stats=1", f"-artifact_prefix={ARTIFACTS}/{target}-",
                           *dirs])
            out = _watch(cmd, target, runtime_env(asan_dir, lib, py_coverage=py_coverage), log,
                         progress_every, timeout=left + 300)
            stats = _STATS.findall(out)
            if stats:
                res.coverage, res.features = int(stats[-1][1]), int(stats[-1][2])
            done = re.search(r"Done (\d+) runs", out)
            res.runs += int(done.group(1)) if done else int(stats[-1][0]) if stats else 0
            if done and not REPORT.search(out):
                break
            hit = known.matching(target, out)
            if hit is not None:
                res.known.append(hit.id)
                log(f"[{target}] known finding {hit.id} (open) hit again: restarting")
                continue
            res.ok = False
            artifact = re.findall(r"Test unit written to (\S+)", out)
            res.failures.append(f"{target}: new report" + (f", input {artifact[-1]}"
                                                           if artifact else "") +
                                f"\n{_excerpt(out)}")
            break
        if save_corpus and res.ok:
            res.notes.append(_merge(target, corpus, asan_dir, lib))
    finally:
        res.seconds = round(time.monotonic() - start, 1)
        if not keep:
            shutil.rmtree(work, ignore_errors=True)
    return res


def _merge(target: str, found: Path, asan_dir: Path, lib: Path) -> str:
    """The inputs of a run that reach C code the committed corpus does not (libFuzzer's
    -merge=1 on the extensions' coverage alone, so Python-side novelty adds nothing),
    added to bench/fuzz/corpus/<target>/ as regression inputs."""
    dest = CORPUS / target
    dest.mkdir(parents=True, exist_ok=True)
    before = {p.name for p in dest.iterdir()}
    p = subprocess.run(_python(["fuzz", target, "-merge=1", f"-max_len={MAX_LEN}", str(dest),
                                str(found)]), cwd=REPO,
                       env=runtime_env(asan_dir, lib, py_coverage=False), capture_output=True,
                       text=True, timeout=900)
    added = len({p.name for p in dest.iterdir()} - before)
    return f"corpus merge: {added} inputs added to {dest.relative_to(REPO)}" + (
        "" if p.returncode == 0 else f" (merge exit {p.returncode})")


def _watch(cmd: list[str], target: str, env: dict, log, every: float,  # noqa: ANN001
           timeout: float) -> str:
    """Run the fuzzer, print a progress line now and then, return all it said."""
    lines: list[str] = []
    last = 0.0
    deadline = time.monotonic() + timeout
    with subprocess.Popen(cmd, cwd=REPO, env=env, stdout=subprocess.PIPE,
                          stderr=subprocess.STDOUT, text=True, errors="replace") as p:
        assert p.stdout is not None
        for line in p.stdout:
            lines.append(line)
            if len(lines) > 20000:  # bounded: keep the start and the last lines
                del lines[200:10000]
            now = time.monotonic()
            if now - last >= every and _STATS.search(line):
                log(f"[{target}] {line.strip()[:120]}")
                last = now
            if now > deadline:
                p.kill()
                lines.append(f"\nsanitize.py: killed after {timeout:.0f} s\n")
                break
        p.wait()
    return "".join(lines)


def prepare(runtime_choice: str = "auto", log=print) -> tuple[Path, Path]:  # noqa: ANN001
    """Build (when out of date) and pick the runtime."""
    asan_dir = asan_build.build(quiet=False)
    lib = runtime(runtime_choice)
    log(f"sanitizer build: {asan_dir}; runtime: {lib}")
    return asan_dir, lib


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--seconds", type=float, default=float(os.environ.get("FUZZ_SECONDS", 60)),
                    help="fuzzing time per target (default 60, or $FUZZ_SECONDS)")
    ap.add_argument("--targets", nargs="*", default=list(TARGETS), choices=TARGETS)
    ap.add_argument("--replay-only", action="store_true", help="replay the corpus, no fuzzing")
    ap.add_argument("--runtime", choices=("auto", "atheris", "clang"), default="auto")
    ap.add_argument("--json", type=Path, help="write the results here")
    ap.add_argument("--save-corpus", action="store_true",
                    help="add the inputs that reach new C code to bench/fuzz/corpus/<target>/")
    args = ap.parse_args()

    def log(msg: str) -> None:
        print(msg, flush=True)

    try:
        asan_dir, lib = prepare(args.runtime, log)
    except (asan_build.BuildError, SetupError) as e:
        print(f"sanitize: {e}", file=sys.stderr)
        return 2
    results: list[Result] = []
    for target in args.targets:
        r = replay(target, asan_dir, lib, log)
        log(f"[{target}] replay: {'ok' if r.ok else 'FAILED'}; " + "; ".join(r.notes))
        results.append(r)
        if not args.replay_only and args.seconds > 0:
            f = fuzz(target, args.seconds, asan_dir, lib, log, save_corpus=args.save_corpus)
            log(f"[{target}] fuzz: {'ok' if f.ok else 'FAILED'} {f.runs} runs in {f.seconds} s, "
                f"cov {f.coverage} ft {f.features}" + (f"; known: {', '.join(sorted(set(f.known)))}"
                                                        if f.known else "")
                + "".join(f"; {n}" for n in f.notes))
            results.append(f)
    failed = [r for r in results if not r.ok]
    for r in failed:
        for failure in r.failures:
            print(f"\n=== FAILED {r.target}\n{failure}", flush=True)
    if args.json:
        args.json.write_text(json.dumps([r.__dict__ for r in results], indent=1) + "\n")
    hits = sorted({k for r in results for k in r.known})
    log(f"\nsanitize: {len(args.targets)} targets, {len(failed)} failed"
        + (f"; known open findings seen: {', '.join(hits)}" if hits else ""))
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
