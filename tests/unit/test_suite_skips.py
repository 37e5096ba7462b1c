"""The suite cannot pass by skipping: tests/conftest.py, run by a real pytest in a
subprocess over a small tree of its own, turns every skip of an integration or `kernel`
test into a failure under OTEL_EBPF_REQUIRE_BPF=1 (a missing peer at import included,
as a missing rotel was), and leaves skips elsewhere, and runs without the flag, alone."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

TESTS = Path(__file__).resolve().parents[1]

# each case: files of the tree, relative to its tests/ folder
CASES = {
    "skip in a test": {
        "integration/test_peer.py":
            "import pytest\n"
            "def test_needs_a_peer():\n"
            "    pytest.skip('peer binary not found')\n",
    },
    "skipif marker": {
        "integration/test_peer.py":
            "import pytest\n"
            "@pytest.mark.skipif(True, reason='no uprobes here')\n"
            "def test_needs_uprobes():\n"
            "    pass\n",
    },
    "skip in a fixture": {
        "integration/test_peer.py":
            "import pytest\n"
            "@pytest.fixture\n"
            "def peer():\n"
            "    pytest.skip('peer did not start')\n"
            "def test_with_peer(peer):\n"
            "    pass\n",
    },
    "module skipped at import": {
        "integration/test_peer.py":
            "import pytest\n"
            "pytest.importorskip('no_such_peer_package')\n"
            "def test_never_collected():\n"
            "    pass\n",
    },
    # the rotel case: integration/conftest.py imported a helper that skipped at import,
    # and the whole directory was one silent skip
    "conftest skipped at import": {
        "integration/conftest.py":
            "import pytest\n"
            "pytest.importorskip('no_such_peer_package')\n",
        "integration/test_peer.py": "def test_a():\n    pass\n",
    },
    "kernel-marked test elsewhere": {
        "unit/test_peer.py":
            "import pytest\n"
            "@pytest.mark.kernel\n"
            "def test_kernel():\n"
            "    pytest.skip('not root')\n",
    },
}


def _run(tmp_path: Path, files: dict[str, str], flag: bool) -> subprocess.CompletedProcess:
    root = tmp_path / ("flag" if flag else "noflag")
    (root / "tests").mkdir(parents=True)
    shutil.copy(TESTS / "conftest.py", root / "tests/conftest.py")  # the real hook, as is
    (root / "pytest.ini").write_text("[pytest]\nmarkers =\n    kernel: needs BPF\n")
    for sub in ("", "integration", "unit"):
        (root / "tests" / sub).mkdir(exist_ok=True)
        (root / "tests" / sub / "__init__.py").touch()
    for name, text in files.items():
        (root / "tests" / name).write_text(text)
    # a passing unit test alongside, so that a run that skips the rest would otherwise pass
    (root / "tests/unit/test_fine.py").write_text("def test_fine():\n    pass\n")
    env = {k: v for k, v in os.environ.items() if k != "OTEL_EBPF_REQUIRE_BPF"}
    if flag:
        env["OTEL_EBPF_REQUIRE_BPF"] = "1"
    return subprocess.run(
        [sys.executable, "-m", "pytest", "-q", "-rs", "-p", "no:cacheprovider", "tests"],
        cwd=root, env=env, capture_output=True, text=True, timeout=120)


def _summary(out: str) -> str:
    """pytest's closing line (what CI reads), e.g. '1 passed, 1 skipped in 0.01s'."""
    lines = [ln.strip("= ") for ln in out.splitlines() if re.search(r" in [\d.]+s\b", ln)]
    assert lines, out
    return lines[-1]


@pytest.mark.parametrize("case", sorted(CASES))
def test_a_skip_fails_the_run_under_the_flag(case, tmp_path):
    with_flag = _run(tmp_path, CASES[case], flag=True)
    out = with_flag.stdout + with_flag.stderr
    assert with_flag.returncode != 0, out
    summary = _summary(out)
    assert "skipped" not in summary and ("failed" in summary or "error" in summary), out
    assert "OTEL_EBPF_REQUIRE_BPF=1" in out, out  # the failure says why

    # the same tree without the flag: a developer without root still gets skips
    without = _run(tmp_path, CASES[case], flag=False)
    out = without.stdout + without.stderr
    assert without.returncode == 0, out
    assert "skipped" in _summary(out), out


def test_skips_outside_integration_stay_skips_under_the_flag(tmp_path):
    files = {"unit/test_other.py":
             "import pytest\n"
             "def test_optional():\n"
             "    pytest.skip('not a kernel test')\n"}
    proc = _run(tmp_path, files, flag=True)
    out = proc.stdout + proc.stderr
    assert proc.returncode == 0, out
    assert _summary(out).startswith("1 passed, 1 skipped"), out
    assert "SKIPPED [1] tests/unit/test_other.py" in out  # -rs names it


def _blocked(tmp_path: Path, package: str) -> dict[str, str]:
    """An environment where `import package` fails, as on a machine without it."""
    blocker = tmp_path / "blocked" / package
    blocker.mkdir(parents=True)
    (blocker / "__init__.py").write_text(
        f"raise ModuleNotFoundError('no {package} here (blocked by a test)', name={package!r})\n")
    env = {k: v for k, v in os.environ.items() if k != "OTEL_EBPF_REQUIRE_BPF"}
    env["PYTHONPATH"] = str(tmp_path / "blocked")
    return env


@pytest.mark.parametrize("flag", [True, False])
@pytest.mark.parametrize("package, args", [
    # tests/support/rotel.py skipped at import, and integration/conftest.py imported it:
    # the whole kernel suite was one skip
    ("rotel", ["--co", "tests/integration/test_otlp_receiver.py", "tests/unit/test_abi.py"]),
    ("atheris", ["-x", "tests/protocols/test_fuzz_targets.py"]),
])
def test_a_missing_declared_test_dependency_fails_the_real_suite(package, args, flag,
                                                                  tmp_path):
    """rotel and atheris are in pyproject's `test` extra: missing, the repository's own
    tests fail (with or without the flag), where they used to skip and pass."""
    env = _blocked(tmp_path, package)
    if flag:
        env["OTEL_EBPF_REQUIRE_BPF"] = "1"
    proc = subprocess.run([sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider",
                           *args], cwd=TESTS.parent, env=env, capture_output=True, text=True,
                          timeout=300)
    out = proc.stdout + proc.stderr
    assert proc.returncode != 0, out
    assert f"no {package} here (blocked by a test)" in out, out
    assert "error" in _summary(out) or "failed" in _summary(out), out


def test_python_symbols_looks_for_what_the_agent_probes():
    from otel_ebpf.kernel import asyncio_probes as probes

    from tests.support import python_symbols

    assert python_symbols.INTERPRETER_SYMBOLS[0] == probes.CONTEXT_COPY
    assert set(python_symbols.VERSIONS) == set(probes.TSTATE_CONTEXT)


def _pythons() -> list[str]:
    exes = [sys.executable, *sorted(Path("/usr/bin").glob("python3.1[1-9]")),
            *sorted(Path.home().glob(".pyenv/versions/3.1[1-9]*/bin/python3"))]
    return sorted({str(Path(e).resolve()) for e in exes if Path(e).is_file()})


@pytest.mark.parametrize("exe", _pythons())
def test_python_symbols_agrees_with_the_agents_symbol_reader(exe):
    """The Makefile's check (nm, standard library) and the agent's own reader (pyelftools,
    otel_ebpf.kernel.asyncio_probes.interpreter_record) call the same interpreters usable."""
    from otel_ebpf.kernel.asyncio_probes import interpreter_record, interpreters_of

    script = TESTS / "support/python_symbols.py"
    verdict = subprocess.run([exe, str(script), "--quiet"], capture_output=True, timeout=120)
    child = subprocess.Popen([exe, "-c", "import sys; print(1, flush=True); "
                              "sys.stdin.read()"], stdin=subprocess.PIPE,
                             stdout=subprocess.PIPE, text=True)
    try:
        assert child.stdout.readline().strip() == "1"
        interpreters = interpreters_of(child.pid)
    finally:
        child.communicate("", timeout=30)
    assert interpreters
    recorded = []
    for path in interpreters:
        try:
            recorded.append(interpreter_record(path))
        except ValueError:
            pass
    assert (verdict.returncode == 0) == bool(recorded), verdict.stderr


def test_this_venv_keeps_the_symbols_the_kernel_tests_need():
    """What the Makefile promises: .venv is built from an interpreter the probes cover."""
    proc = subprocess.run([sys.executable, str(TESTS / "support/python_symbols.py")],
                          capture_output=True, text=True, timeout=120)
    assert proc.returncode == 0, proc.stderr
