"""A real vector DB peer for tests: Chroma's own server (`chroma run`, the Rust frontend
that the `chromadb` wheel ships, inside a Python process) and a `chromadb.HttpClient`
in its own process. Everything is bound to 127.0.0.1 and every wait is bounded.

chromadb (about 500 MB installed with onnxruntime, kubernetes, numpy, uvloop...) lives in
a venv of its own so it does not change the main venv; it is found, in this order, at
$OTEL_EBPF_CHROMA_VENV, beside sys.executable (chromadb installed in the running venv),
then REPO/.venv-chroma:

    python -m venv .venv-chroma && .venv-chroma/bin/pip install 'chromadb>=1.5'

Server:  ``with chroma_server(tmp_path) as srv: srv.port``
Client:  ``run_client(port)`` runs ``python -m tests.support.chroma_peer client --port N``
with the chroma venv's python; it creates collection "docs", adds 3 documents with
explicit 3-d embeddings and queries with n_results=2 (no embedding function, so nothing
is downloaded), printing one JSON line per operation: {"op", "t0", "t1", ...} with
wall-clock ns around the call, then {"op": "result", "ids": [...]}.

What goes on the wire (chromadb 1.5.9; the v1 API answers 410 Gone):
    GET  /api/v2/auth/identity, /api/v2/tenants/default_tenant,
         /api/v2/tenants/default_tenant/databases/default_database, /api/v2/version
    POST /api/v2/tenants/{t}/databases/{d}/collections
         {"name":"docs","metadata":null,"configuration":null,"schema":null,"get_or_create":true}
    GET  /api/v2/pre-flight-checks
    POST /api/v2/tenants/{t}/databases/{d}/collections/{uuid}/add
         {"ids":[...],"embeddings":["<base64 float32 LE>",...],"metadatas":[...],
          "documents":[...],"uris":null}
    POST /api/v2/tenants/{t}/databases/{d}/collections/{uuid}/query
         {"ids":null,"query_embeddings":[[0.9,...]],"n_results":2,"where":null,
          "where_document":null,"include":["metadatas","documents","distances"]}
"""

from __future__ import annotations

import argparse
import contextlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import time
import urllib.request
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from tests.support.ports import free_port
from tests.support.processes import stop_process

REPO = Path(__file__).resolve().parents[2]
START_TIMEOUT_S = 30.0
CLIENT_TIMEOUT_S = 60.0
COLLECTION = "docs"
DOCS = {
    "ids": ["doc-1", "doc-2", "doc-3"],
    "documents": ["eBPF sees every socket", "spans from the wire", "no SDK needed"],
    "embeddings": [[1.0, 0.0, 0.0], [0.0, 1.0, 0.0], [0.0, 0.0, 1.0]],
    "metadatas": [{"n": 1}, {"n": 2}, {"n": 3}],
}
QUERY = [[0.9, 0.1, 0.0]]
EXPECTED_IDS = ["doc-1", "doc-2"]  # nearest two to QUERY


def chroma_bin_dir() -> Path | None:
    """The bin/ folder of a venv where chromadb is installed, or None."""
    candidates = []
    if os.environ.get("OTEL_EBPF_CHROMA_VENV"):
        candidates.append(Path(os.environ["OTEL_EBPF_CHROMA_VENV"]) / "bin")
    candidates += [Path(sys.executable).parent, REPO / ".venv-chroma" / "bin"]
    for bin_dir in candidates:
        if (bin_dir / "chroma").is_file() and os.access(bin_dir / "chroma", os.X_OK):
            return bin_dir
    return None


def unavailable_reason() -> str | None:
    """Why the Chroma peer cannot run here (for pytest.skip), or None when it can."""
    if chroma_bin_dir() is None:
        return ("chromadb not installed: python -m venv .venv-chroma && "
                ".venv-chroma/bin/pip install chromadb (or set OTEL_EBPF_CHROMA_VENV)")
    return None


@dataclass
class ChromaServer:
    port: int
    proc: subprocess.Popen
    log: Path
    path: Path

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.port}"


def _heartbeat(port: int) -> bool:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/api/v2/heartbeat",
                                    timeout=1) as resp:
            return resp.status == 200
    except OSError:
        return False


@contextlib.contextmanager
def chroma_server(workdir: Path | None = None, port: int | None = None,
                  timeout_s: float = START_TIMEOUT_S) -> Iterator[ChromaServer]:
    """`chroma run --host 127.0.0.1 --port N --path DIR` in its own process; waits
    (bounded) for /api/v2/heartbeat; stops it on exit."""
    bin_dir = chroma_bin_dir()
    if bin_dir is None:
        raise RuntimeError(unavailable_reason())
    own_dir = workdir is None
    workdir = Path(tempfile.mkdtemp(prefix="chroma-")) if own_dir else Path(workdir)
    port = port or free_port()
    data, log = workdir / "chroma-data", workdir / "chroma.log"
    env = {**os.environ, "ANONYMIZED_TELEMETRY": "False", "NO_COLOR": "1"}
    with log.open("w") as out:
        proc = subprocess.Popen(
            [str(bin_dir / "chroma"), "run", "--host", "127.0.0.1", "--port", str(port),
             "--path", str(data)],
            cwd=workdir, stdout=out, stderr=subprocess.STDOUT, stdin=subprocess.DEVNULL,
            env=env,
        )
    try:
        deadline = time.monotonic() + timeout_s
        while not _heartbeat(port):
            if proc.poll() is not None:
                raise RuntimeError(f"chroma run exited with {proc.returncode}:\n"
                                   f"{log.read_text(errors='replace')[-2000:]}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"chroma not serving on 127.0.0.1:{port} after {timeout_s}s")
            time.sleep(0.05)
        yield ChromaServer(port, proc, log, data)
    finally:
        stop_process(proc)
        if own_dir:
            shutil.rmtree(workdir, ignore_errors=True)


def run_client(port: int, timeout_s: float = CLIENT_TIMEOUT_S) -> list[dict]:
    """Run the chromadb client in its own process (the chroma venv's python); return its
    JSON lines."""
    bin_dir = chroma_bin_dir()
    if bin_dir is None:
        raise RuntimeError(unavailable_reason())
    out = subprocess.run(
        [str(bin_dir / "python"), "-m", "tests.support.chroma_peer", "client",
         "--port", str(port)],
        cwd=REPO, capture_output=True, text=True, timeout=timeout_s,
        env={**os.environ, "ANONYMIZED_TELEMETRY": "False"},
    )
    if out.returncode != 0:
        raise RuntimeError(f"chroma client failed ({out.returncode}):\n{out.stderr[-3000:]}")
    return [json.loads(line) for line in out.stdout.splitlines() if line.startswith("{")]


def client_main(port: int) -> None:
    """The client side, run in its own process: create "docs", add 3, query 2."""
    import chromadb
    from chromadb.config import Settings

    def timed(op: str, fn, **extra):
        t0 = time.time_ns()
        result = fn()
        print(json.dumps({"op": op, "t0": t0, "t1": time.time_ns(), **extra}), flush=True)
        return result

    client = chromadb.HttpClient(host="127.0.0.1", port=port,
                                 settings=Settings(anonymized_telemetry=False))
    # embedding_function=None: the embeddings are given, so no model is ever loaded
    col = timed("create_collection", lambda: client.get_or_create_collection(
        COLLECTION, embedding_function=None), collection=COLLECTION)
    timed("add", lambda: col.add(**DOCS), count=len(DOCS["ids"]))
    res = timed("query", lambda: col.query(query_embeddings=QUERY, n_results=2),
                n_results=2)
    print(json.dumps({"op": "result", "ids": res["ids"][0], "distances": [
        float(d) for d in res["distances"][0]], "chromadb": chromadb.__version__}),
        flush=True)


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description="Chroma test peer")
    sub = parser.add_subparsers(dest="cmd", required=True)
    client = sub.add_parser("client", help="run the chromadb client against a server")
    client.add_argument("--port", type=int, required=True)
    serve = sub.add_parser("serve", help="start `chroma run` until interrupted (manual use)")
    serve.add_argument("--port", type=int, default=0)
    serve.add_argument("--seconds", type=float, default=600.0)
    args = parser.parse_args(argv)
    if args.cmd == "client":
        client_main(args.port)
        return
    with chroma_server(port=args.port or None) as srv:
        print(f"chroma serving on {srv.url} (data {srv.path})", flush=True)
        with contextlib.suppress(KeyboardInterrupt, subprocess.TimeoutExpired):
            srv.proc.wait(args.seconds)


if __name__ == "__main__":
    main()
