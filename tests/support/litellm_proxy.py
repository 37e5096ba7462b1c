"""A real LLM gateway for tests: the LiteLLM proxy (`litellm --config`, FastAPI under
uvicorn on uvloop, aiohttp to its upstream) in front of an OpenAI-compatible server, bound
to 127.0.0.1, kept off the network, every wait bounded.

LiteLLM lives in a venv of its own (uvloop in the main venv would change the event loop of
every uvicorn peer there), found at $OTEL_EBPF_GATEWAY_VENV, else REPO/.venv-gateway
(`make test` builds it; its `.installed` file says the install finished).

    with litellm_proxy(workdir, upstream_base_url) as gw: gw.base_url, gw.port

One model, GATEWAY_MODEL, routed to `openai/UPSTREAM_MODEL` at the upstream's /v1; the
client authenticates with MASTER_KEY, LiteLLM with UPSTREAM_KEY (both dummies, never to be
seen in an export). No database, no callbacks, no retries (one client call is one upstream
call). LiteLLM fetches a few files from GitHub unless told to use the copies it ships
(LITELLM_LOCAL_*); with those set, strace saw it connect nowhere but the upstream.
"""

from __future__ import annotations

import contextlib
import os
import subprocess
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import yaml

from tests.support.ports import free_port
from tests.support.processes import stop_process

REPO = Path(__file__).resolve().parents[2]
# LiteLLM imports a few hundred modules before it listens: ~10 s on an idle two-core
# machine; with the two cores under stress (40 runnable processes) it had printed nothing
# after 240 s. The bound is vLLM's (tests/support/vllm_server.py); the wait ends on the answer
START_TIMEOUT_S = 600.0
GATEWAY_MODEL = "gw-chat"
UPSTREAM_MODEL = "upstream-chat"
MASTER_KEY = "sk-test-gateway-SECRET-never-exported"
UPSTREAM_KEY = "sk-test-upstream-SECRET-never-exported"
# the copies LiteLLM ships of what it would otherwise fetch from GitHub (the model cost
# map at import; the others lazily), and no .env read from the working folder
OFFLINE_ENV = {
    "LITELLM_LOCAL_MODEL_COST_MAP": "True",
    "LITELLM_LOCAL_ANTHROPIC_BETA_HEADERS": "True",
    "LITELLM_LOCAL_AUTOROUTER_PRESETS": "True",
    "LITELLM_LOCAL_POLICY_TEMPLATES": "True",
    "LITELLM_LOCAL_BLOG_POSTS": "True",
    "LITELLM_MODE": "PRODUCTION",
    "LITELLM_DONT_SHOW_FEEDBACK_BOX": "True",
    "PYTHONUNBUFFERED": "1",
}


def gateway_venv() -> Path:
    return Path(os.environ.get("OTEL_EBPF_GATEWAY_VENV") or REPO / ".venv-gateway")


def gateway_python() -> Path | None:
    """The python of the venv where the LiteLLM proxy is installed, or None."""
    venv = gateway_venv()
    python = venv / "bin" / "python"
    ready = python.is_file() and (venv / "bin" / "litellm").is_file()
    return python if ready and (venv / ".installed").is_file() else None


def unavailable_reason() -> str | None:
    """Why the LiteLLM peer cannot run here (for pytest.skip), or None when it can."""
    if gateway_python() is None:
        return (f"LiteLLM proxy not installed at {gateway_venv()}: `make "
                ".venv-gateway/.installed` (or set OTEL_EBPF_GATEWAY_VENV to a venv with "
                "litellm[proxy] and a .installed file)")
    return None


def proxy_config(upstream_base_url: str) -> dict:
    return {
        "model_list": [{
            "model_name": GATEWAY_MODEL,
            "litellm_params": {"model": f"openai/{UPSTREAM_MODEL}",
                               "api_base": upstream_base_url, "api_key": UPSTREAM_KEY},
        }],
        "litellm_settings": {"num_retries": 0, "request_timeout": 60, "callbacks": []},
        "router_settings": {"num_retries": 0},
        "general_settings": {"master_key": MASTER_KEY, "disable_spend_logs": True},
    }


@dataclass
class LiteLLMProxy:
    port: int
    proc: subprocess.Popen
    log: Path

    @property
    def base_url(self) -> str:
        """For openai.OpenAI(base_url=...): includes /v1."""
        return f"http://127.0.0.1:{self.port}/v1"


def _alive(port: int) -> bool:
    # /health/liveliness answers once the app has started, without calling the upstream
    # (/health would call every model)
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/health/liveliness",
                                    timeout=2) as resp:
            return resp.status == 200
    except (OSError, urllib.error.URLError):
        return False


@contextlib.contextmanager
def litellm_proxy(workdir: Path, upstream_base_url: str, port: int | None = None,
                  env: dict[str, str] | None = None,
                  timeout_s: float = START_TIMEOUT_S) -> Iterator[LiteLLMProxy]:
    """Write the config in `workdir`, start the proxy in its own session, wait (bounded)
    until it answers; stop its whole process group on exit. The log stays in `workdir`."""
    python = gateway_python()
    if python is None:
        raise RuntimeError(unavailable_reason())
    workdir = Path(workdir)
    cfg, log = workdir / "litellm.yaml", workdir / "litellm.log"
    cfg.write_text(yaml.safe_dump(proxy_config(upstream_base_url)))
    port = port or free_port()
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(python), str(python.parent / "litellm"), "--config", str(cfg),
             "--host", "127.0.0.1", "--port", str(port), "--num_workers", "1"],
            cwd=workdir, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**os.environ, **OFFLINE_ENV, **(env or {})}, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout_s
        while not _alive(port):
            if proc.poll() is not None:
                raise RuntimeError(f"litellm exited with {proc.returncode}:\n"
                                   f"{log.read_text(errors='replace')[-4000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"litellm not serving on 127.0.0.1:{port} after "
                                   f"{timeout_s}s:\n{log.read_text(errors='replace')[-4000:]}")
            time.sleep(0.25)
        yield LiteLLMProxy(port, proc, log)
    finally:
        stop_process(proc, 20.0, group=True)
