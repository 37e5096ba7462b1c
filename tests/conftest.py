"""Suite-wide rule: with OTEL_EBPF_REQUIRE_BPF=1 no kernel or integration test may skip.

A skip there means a peer, tool or kernel feature was missing, and a CI run that reports
"passed" over skipped kernel tests proves nothing. Under the flag, every skip of a test
under tests/integration (or marked `kernel`), and every skip while collecting that
directory (a conftest or module that skips at import), is reported as a failure instead;
pytest's own summary line is kept, and then says "failed" or "error"."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

INTEGRATION = Path(__file__).resolve().parent / "integration"
FLAG = "OTEL_EBPF_REQUIRE_BPF"


def _under_integration(path) -> bool:
    if not path:
        return False
    path = Path(path).resolve()
    return path == INTEGRATION or INTEGRATION in path.parents


def _skip_location(longrepr) -> tuple[str | None, str]:
    """(file, reason) of a skip report; its longrepr is (file, line, "Skipped: reason")."""
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[0]), str(longrepr[2])
    return None, str(longrepr)


def _as_failure(report, what: str) -> None:
    _, reason = _skip_location(report.longrepr)
    report.outcome = "failed"
    report.longrepr = (f"{what} skipped under {FLAG}=1, where a kernel or integration test "
                       f"must run or fail: {reason}")


class NoSkipUnderFlag:
    """Registered as a plain plugin, not left a conftest hook: a conftest's hooks only see
    nodes below it, and a conftest that skips at import is reported by the Session."""

    @pytest.hookimpl(hookwrapper=True)
    def pytest_runtest_makereport(self, item, call):
        outcome = yield
        report = outcome.get_result()
        if (report.skipped and not hasattr(report, "wasxfail")
                and (_under_integration(item.path) or item.get_closest_marker("kernel"))):
            _as_failure(report, item.nodeid)

    @pytest.hookimpl(hookwrapper=True)
    def pytest_make_collect_report(self, collector):
        outcome = yield
        report = outcome.get_result()
        if report.skipped and (_under_integration(getattr(collector, "path", None))
                               or _under_integration(_skip_location(report.longrepr)[0])):
            _as_failure(report, collector.nodeid or str(collector.path))


def pytest_configure(config):
    if os.environ.get(FLAG) == "1":
        config.pluginmanager.register(NoSkipUnderFlag(), "otel-ebpf-no-skip-under-flag")
