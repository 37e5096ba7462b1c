"""Sanitizer fuzzing of the agent's C extensions, a short run (bench/fuzz/sanitize.py; `make
fuzz` is the long one): otel_ebpf/_fast/*.c built with clang under ASan and UBSan into
build/asan, then every target of bench/fuzz/sanitized.py fuzzed for a few seconds in a
process of its own, its committed regression inputs (bench/fuzz/corpus/<target>/) replayed
first, against the Python reference where the C code has one. Any sanitizer report, crash,
exception or mismatch fails the target's test, with the report and the input's path.

Each known finding's input (bench/fuzz/known.py) is replayed: a fixed one's must pass; an
open one's is expected to fail (xfail while it still fails as its signature says).

Budgets are inputs' seconds, never asserted on: FUZZ_TEST_SECONDS (default 12) per target.
No clang is a failure with what to install, not a skip: these parsers read bytes any peer
chooses, and the agent runs as root."""

from __future__ import annotations

import os

import pytest

from bench.fuzz import asan_build, known, sanitize
from otel_ebpf import _fast

SECONDS = float(os.environ.get("FUZZ_TEST_SECONDS", "12"))
pytestmark = pytest.mark.timeout(600)


@pytest.fixture(scope="module")
def built() -> tuple:
    try:
        return sanitize.prepare("auto", log=lambda msg: None)
    except (asan_build.BuildError, sanitize.SetupError) as e:
        pytest.fail(f"the sanitizer build of the C extensions could not be made: {e}",
                    pytrace=False)


def test_sanitizer_build_is_separate_and_complete(built):
    asan_dir, lib = built
    assert lib.is_file()
    exts = asan_build.extensions()
    names = {e["name"] for e in exts}
    # the core's modules and every protocol accelerator the agent would load
    assert names >= {f"otel_ebpf._fast.{m}" for m in _fast.MODULES}
    assert names >= {name for name, _ in _fast.accelerators()}
    assert "otel_ebpf.protocols.http1._parse" in names
    for e in exts:  # in its own tree, never over the in-place modules
        target = asan_build._target(asan_dir, e["name"])
        assert target.is_file(), target
        assert target.is_relative_to(asan_dir), target


@pytest.mark.parametrize("target", sanitize.TARGETS)
def test_target_fuzzed_under_sanitizers(built, target):
    asan_dir, lib = built
    lines: list[str] = []
    result = sanitize.fuzz(target, SECONDS, asan_dir, lib, log=lines.append,
                           py_coverage=False)
    print(f"{target}: {result.runs} runs in {result.seconds} s, cov {result.coverage}"
          + (f", known: {sorted(set(result.known))}" if result.known else ""))
    assert result.ok, "\n\n".join(result.failures)
    assert result.runs > 0, f"{target} ran no input:\n" + "\n".join(lines[-20:])


@pytest.mark.parametrize("finding", [k.id for k in known.KNOWN])
def test_known_finding_fixed_or_still_reproducing(built, finding):
    """A fixed finding's input is an ordinary regression input and must pass; an open one's
    must still fail as its signature says (xfail) or pass once main fixes it."""
    asan_dir, lib = built
    k = next(k for k in known.KNOWN if k.id == finding)
    assert k.path.is_file(), f"{finding}: its regression input {k.path} is missing"
    result = sanitize.replay(k.target, asan_dir, lib)
    assert result.ok, "\n\n".join(result.failures)
    if k.open and finding in result.known:
        pytest.xfail(f"known, open: {k.what}")
    assert finding not in result.known
