"""`otel-ebpf advise --llm-endpoint`: the top findings go to an OpenAI-compatible server
(the scripted one of tests/support, in its own process) and its answer comes back with
each of them; a server that refuses leaves the deterministic report and a clear error."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from otel_ebpf.export.pprof import ProfileFileExporter
from otel_ebpf.export.profiles import ProfileBatch, ProfileSample
from otel_ebpf.profiling.frames import PYTHON, Frame
from otel_ebpf.profiling.profiler import SAMPLE_TYPES
from tests.support.openai_server import openai_server

APP = '''def handler(body):
    return checksum(body)


def checksum(text):
    total = 0
    for ch in text:
        total += ord(ch)
    return total
'''


def _profiles(tmp_path: Path) -> Path:
    app = tmp_path / "app.py"
    app.write_text(APP)
    handler, checksum = (Frame("handler", str(app), PYTHON, 0, 1),
                         Frame("checksum", str(app), PYTHON, 0, 5))
    res = {"service.name": "api", "process.pid": 9}
    batch = ProfileBatch(SAMPLE_TYPES, 1, 10**9, [
        ProfileSample((checksum, handler), (9, 9), res),
        ProfileSample((handler,), (1, 1), res)])
    ProfileFileExporter(str(tmp_path / "p"), "pprof").export(batch)
    return tmp_path / "p"


def _advise(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "otel_ebpf.cli", "advise", *args,
                           "--format", "json"], capture_output=True, text=True, timeout=300)


def test_top_finding_gets_the_models_change(tmp_path):
    folder = _profiles(tmp_path)
    with openai_server(first_token_delay=0, token_interval=0, tokens=5) as srv:
        r = _advise(str(folder), "--llm-endpoint", srv.root_url, "--model", "test-model",
                    "--llm-findings", "1")
        assert r.returncode == 0, r.stderr
        findings = json.loads(r.stdout)["findings"]
        assert findings[0]["location"]["function"] == "checksum"
        # the scripted server's answer: five tokens, w0..w4
        assert findings[0]["llm_suggestion"] == "w0 w1 w2 w3 w4"
        assert "llm_suggestion" not in findings[1]  # only the top one was sent

        refused = _advise(str(folder), "--llm-endpoint", srv.base_url, "--model",
                          "missing-model")
    assert refused.returncode == 1
    assert "the model was not asked" in refused.stderr and "HTTP 404" in refused.stderr
    # the report itself still comes out
    assert json.loads(refused.stdout)["findings"][0]["location"]["function"] == "checksum"
