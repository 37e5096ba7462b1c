"""Asking an OpenAI-compatible server (the user's own vLLM, Ollama, a hosted API) for a
concrete code change per top finding: the finding and its source lines, redacted, go in
one chat completion request each; nothing is sent unless an endpoint is given."""

from __future__ import annotations

import json
import os
import urllib.error
import urllib.request
from urllib.parse import urlsplit

from .model import Finding
from .redact import redact

SYSTEM = (
    "You are a performance engineer for Python, PyTorch and CUDA programs. You get one "
    "finding from a profiler that watched the program from the outside (eBPF): what it "
    "measured, where, and the source of the function. Propose one concrete change to that "
    "code that removes the cost measured, as a unified diff of the function when you can, "
    "then one sentence on why it helps. Do not invent measurements.")
API_KEY_ENV = "OTEL_EBPF_LLM_API_KEY"  # sent as a bearer token when set


class LLMError(RuntimeError):
    pass


def completions_url(endpoint: str) -> str:
    """The chat completions URL of a server given by its base (`http://h:8000`, `.../v1`)
    or by the full URL."""
    parts = urlsplit(endpoint)
    if parts.scheme not in ("http", "https") or not parts.netloc:
        raise LLMError(f"--llm-endpoint {endpoint!r}: an http:// or https:// URL is needed")
    path = parts.path.rstrip("/")
    if path.endswith("/chat/completions"):
        return endpoint
    if not path.endswith("/v1"):
        path += "/v1"
    return f"{parts.scheme}://{parts.netloc}{path}/chat/completions"


def prompt(f: Finding) -> str:
    """What is sent about one finding: redacted."""
    lines = [f"Finding ({f.kind}): {f.title}",
             f"Location: {f.location.function} in {f.location.file or '?'} at line "
             f"{f.location.line or '?'}",
             "Measured:"] + [f"- {e}" for e in f.evidence] + [
             f"Profiler's suggestion: {f.suggestion}"]
    if f.source:
        lines += ["Source:", "```python"] + [t for _, t in f.source] + ["```"]
    return redact("\n".join(lines))


def ask(endpoint: str, model: str, findings: list[Finding], timeout_s: float = 120.0,
        max_tokens: int = 1024) -> None:
    """Each finding's `advice` from the model; LLMError when the server fails."""
    url = completions_url(endpoint)
    headers = {"Content-Type": "application/json"}
    if os.environ.get(API_KEY_ENV):
        headers["Authorization"] = f"Bearer {os.environ[API_KEY_ENV]}"
    for f in findings:
        body = json.dumps({"model": model, "max_tokens": max_tokens, "temperature": 0,
                           "messages": [{"role": "system", "content": SYSTEM},
                                        {"role": "user", "content": prompt(f)}]}).encode()
        req = urllib.request.Request(url, body, headers, method="POST")
        try:
            with urllib.request.urlopen(req, timeout=timeout_s) as resp:  # noqa: S310 (http(s) checked)
                answer = json.load(resp)
        except urllib.error.HTTPError as exc:
            detail = exc.read(500).decode(errors="replace")
            raise LLMError(f"{url}: HTTP {exc.code}: {detail}") from exc
        except (urllib.error.URLError, OSError, ValueError) as exc:
            raise LLMError(f"{url}: {exc}") from exc
        try:
            f.advice = str(answer["choices"][0]["message"]["content"]).strip()
        except (KeyError, IndexError, TypeError) as exc:
            raise LLMError(f"{url}: no choices[0].message.content in the answer") from exc
