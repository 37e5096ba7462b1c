"""A PNG of one trace's tree in Phoenix's UI, taken with Debian's headless Chromium."""

from __future__ import annotations

import shutil
import subprocess
import tempfile
from pathlib import Path

# Phoenix's UI is a JS app that loads the trace over GraphQL after the page: the virtual
# time budget lets Chromium run the page (timers, fetches) until it has settled, which is
# what makes one run of `--screenshot` show the rendered tree rather than a spinner.
VIRTUAL_TIME_MS = 20_000
WINDOW = "1400,900"
CHROMIUM_TIMEOUT_S = 180.0
# Without the background-networking flags Chromium keeps trying hosts the machine cannot
# reach; a fresh profile keeps one run from inheriting another's state.
FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--hide-scrollbars", f"--window-size={WINDOW}",
         f"--virtual-time-budget={VIRTUAL_TIME_MS}"]


def chromium() -> str:
    """The Chromium binary, or a SystemExit that says how to install it."""
    for name in ("chromium", "chromium-browser"):
        if path := shutil.which(name):
            return path
    raise SystemExit("the screenshot needs Chromium: `apt-get install chromium` "
                     "(or `make demo-screenshot`, which installs it)")


def span_url(phoenix: str, span_id: str) -> str:
    """Phoenix's own link to a span: it opens the span's trace with that span selected."""
    return f"{phoenix}/redirects/spans/{span_id}"


def _run(argv: list[str]) -> subprocess.CompletedProcess:
    try:
        return subprocess.run(argv, capture_output=True, text=True, timeout=CHROMIUM_TIMEOUT_S)
    except subprocess.TimeoutExpired as exc:
        raise SystemExit(f"Chromium did not finish within {CHROMIUM_TIMEOUT_S:.0f}s") from exc


def take(url: str, out: Path, must_show: list[str]) -> int:
    """Render `url` and write a PNG to `out`; fail unless the rendered page names every
    span in `must_show` (the page is loaded once for its DOM, once for its pixels)."""
    binary = chromium()
    with tempfile.TemporaryDirectory(prefix="otel-ebpf-chromium-") as profile:
        dom = _run([binary, *FLAGS, f"--user-data-dir={profile}/dom", "--dump-dom", url])
        if dom.returncode != 0:
            raise SystemExit(f"Chromium failed ({dom.returncode}):\n{dom.stderr[-2000:]}")
        if missing := [name for name in must_show if f">{name}<" not in dom.stdout]:
            raise SystemExit(f"{url} rendered without the spans {missing}: "
                             "the trace view did not load")
        out.parent.mkdir(parents=True, exist_ok=True)
        out.unlink(missing_ok=True)
        shot = _run([binary, *FLAGS, f"--user-data-dir={profile}/png",
                     f"--screenshot={out}", url])
        if shot.returncode != 0 or not out.exists():
            raise SystemExit(f"Chromium wrote no screenshot ({shot.returncode}):\n"
                             f"{shot.stderr[-2000:]}")
    return out.stat().st_size
