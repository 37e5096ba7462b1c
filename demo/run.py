"""`make demo`: Arize Phoenix, a small traced inference path and the agent, on 127.0.0.1.

    gateway (FastAPI) -> rag (FastAPI) -> Chroma (query) -> LLM server (streaming chat)

Nothing in the path is instrumented: the agent (root) sees the traffic and sends its spans
to Phoenix over OTLP/HTTP. A few questions are asked, then the URL to open is printed and
everything runs until Ctrl-C (`--once`: exit after checking that Phoenix has the spans;
`--screenshot PNG`: check, save a picture of the first question's trace tree, exit).
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import signal
import subprocess
import sys
import tempfile
import time
import urllib.parse
import urllib.request
from pathlib import Path

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from demo import screenshot  # noqa: E402
from tests.support.chroma_peer import chroma_server  # noqa: E402
from tests.support.openai_server import openai_server  # noqa: E402
from tests.support.ports import free_port  # noqa: E402

VENV = REPO / ".venv" / "bin"
DEMO_VENV = REPO / ".venv-demo" / "bin"
QUESTIONS = ["What does eBPF see?", "What is OTLP for?", "How do ROS 2 nodes talk?",
             "What does Phoenix show?"]
START_TIMEOUT_S = 180.0
# The spans every question's trace must hold: the gateway's GET, the vector query, the
# streaming chat call (the LLM span comes last: the screenshot selects it).
PATH_SPANS = ("GET", "query docs", "chat demo-7b")


def _wait_http(url: str, proc: subprocess.Popen, log: Path, timeout_s: float) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if proc.poll() is not None:
            raise SystemExit(f"{url}: the server exited:\n{log.read_text()[-2000:]}")
        try:
            with urllib.request.urlopen(url, timeout=2):
                return
        except OSError:
            time.sleep(0.5)
    raise SystemExit(f"{url} did not answer within {timeout_s:.0f}s:\n{log.read_text()[-2000:]}")


@contextlib.contextmanager
def _process(argv: list[str], log: Path, env: dict | None = None):
    proc = subprocess.Popen(argv, cwd=REPO, stdout=log.open("w"), stderr=subprocess.STDOUT,
                            env={**os.environ, **(env or {})})
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(10)


def _uvicorn(app: str, port: int, work: Path, env: dict):
    return _process([str(VENV / "uvicorn"), app, "--host", "127.0.0.1", "--port", str(port),
                     "--no-access-log"], work / f"{app.rsplit(':', 1)[1]}.log", env)


def _phoenix_spans(base: str) -> list[dict]:
    """Spans Phoenix holds in its default project (its REST API)."""
    try:
        with urllib.request.urlopen(f"{base}/v1/projects/default/spans?limit=1000",
                                    timeout=5) as resp:
            return json.load(resp).get("data", [])
    except OSError:
        return []


def _whole_traces(spans: list[dict]) -> set[str]:
    """Traces holding a question's whole path (PATH_SPANS)."""
    names: dict[str, set[str]] = {}
    for s in spans:
        names.setdefault(s["context"]["trace_id"], set()).add(s["name"])
    return {t for t, n in names.items() if set(PATH_SPANS) <= n}


def _first_llm_span(spans: list[dict], whole: set[str]) -> str:
    """The span id of the LLM call in the earliest whole trace (the first question's)."""
    llm = [s for s in spans if s["context"]["trace_id"] in whole and s["name"] == PATH_SPANS[-1]]
    return min(llm, key=lambda s: s["start_time"])["context"]["span_id"]


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--phoenix-port", type=int, default=6006)
    parser.add_argument("--once", action="store_true",
                        help="exit once Phoenix has the spans, instead of running on")
    parser.add_argument("--screenshot", type=Path, metavar="PNG",
                        help="once Phoenix has the spans, save a PNG of the first question's "
                             "trace tree (headless Chromium) and exit")
    args = parser.parse_args()
    if args.screenshot:
        screenshot.chromium()  # fail before starting anything if it is not installed
        args.screenshot = args.screenshot.resolve()
    if os.geteuid() != 0:
        print("the agent loads eBPF programs: run `sudo make demo`", file=sys.stderr)
        return 1
    if not (DEMO_VENV / "phoenix").exists():
        print("Phoenix is not installed: `make demo` installs it in .venv-demo",
              file=sys.stderr)
        return 1
    work = Path(tempfile.mkdtemp(prefix="otel-ebpf-demo-"))
    phoenix = f"http://127.0.0.1:{args.phoenix_port}"
    gateway_port, rag_port = free_port(), free_port()
    with contextlib.ExitStack() as stack:
        print(f"starting Phoenix at {phoenix} (logs in {work})", flush=True)
        ph = stack.enter_context(_process(
            [str(DEMO_VENV / "phoenix"), "serve"], work / "phoenix.log",
            {"PHOENIX_HOST": "127.0.0.1", "PHOENIX_PORT": str(args.phoenix_port),
             "PHOENIX_GRPC_PORT": str(free_port()), "PHOENIX_WORKING_DIR": str(work / "phx")}))
        _wait_http(f"{phoenix}/healthz", ph, work / "phoenix.log", START_TIMEOUT_S)
        chroma = stack.enter_context(chroma_server(work))
        llm = stack.enter_context(openai_server(first_token_delay=0.3, token_interval=0.03,
                                                tokens=24, log=work / "llm.log"))
        env = {"RAG_URL": f"http://127.0.0.1:{rag_port}", "CHROMA_URL": chroma.url,
               "LLM_URL": llm.base_url.removesuffix("/v1")}
        for app, port in (("demo.services:rag", rag_port),
                          ("demo.services:gateway", gateway_port)):
            proc = stack.enter_context(_uvicorn(app, port, work, env))
            _wait_http(f"http://127.0.0.1:{port}/docs", proc,
                       work / f"{app.rsplit(':', 1)[1]}.log", 60)
        config = work / "agent.yaml"
        config.write_text(json.dumps({
            "receivers": {"ebpf": {"targets": {"ports": [
                gateway_port, rag_port, chroma.port, llm.port]}}},
            "exporters": {"otlphttp/phoenix": {"endpoint": phoenix}, "debug": {}},
            "service": {"pipelines": {"traces": {
                "receivers": ["ebpf"], "processors": ["batch"],
                "exporters": ["otlphttp/phoenix", "debug"]}}},
        }))
        agent_log = work / "agent.log"
        agent = stack.enter_context(_process([str(VENV / "otel-ebpf"), "run", "-c",
                                              str(config)], agent_log))
        deadline = time.monotonic() + START_TIMEOUT_S
        while "otel-ebpf ready" not in agent_log.read_text(errors="replace"):
            if agent.poll() is not None or time.monotonic() > deadline:
                print(agent_log.read_text()[-3000:], file=sys.stderr)
                return 1
            time.sleep(0.5)
        for question in QUESTIONS:
            url = f"http://127.0.0.1:{gateway_port}/ask?" + urllib.parse.urlencode({"q": question})
            with urllib.request.urlopen(url, timeout=120) as resp:
                print(f"  {question} -> {json.load(resp)['answer'][:60]}...", flush=True)
        deadline = time.monotonic() + 60
        while len(whole := _whole_traces(_phoenix_spans(phoenix))) < len(QUESTIONS) \
                and time.monotonic() < deadline:
            time.sleep(1)
        spans = _phoenix_spans(phoenix)
        print(f"\nPhoenix has {len(spans)} spans; {len(whole)} of the {len(QUESTIONS)} "
              "questions are one trace each from the gateway to the LLM call. Open "
              f"{phoenix} (project 'default')", flush=True)
        for name in sorted({s["name"] for s in spans}):
            print(f"  span: {name}")
        if args.once or args.screenshot:
            if len(whole) != len(QUESTIONS):
                return 1
            if args.screenshot:
                url = screenshot.span_url(phoenix, _first_llm_span(spans, whole))
                size = screenshot.take(url, args.screenshot, list(PATH_SPANS))
                print(f"screenshot of {url}: {args.screenshot} ({size // 1024} KiB)")
            return 0
        print("Ctrl-C stops everything", flush=True)
        try:
            while agent.poll() is None:
                time.sleep(1)
        except KeyboardInterrupt:
            pass
    return 0


if __name__ == "__main__":
    sys.exit(main())
