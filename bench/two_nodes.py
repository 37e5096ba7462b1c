"""A gateway on node A calling a server on node B, one agent per node: does the gateway's
outbound call meet the server's trace, called directly and through a Service?

Run as root, from the repository root:

    sudo .venv/bin/python -m bench.two_nodes [--gateway async|def|grpc[,...]] [--requests 40]
                                             [--levels 1,16]
                                             [--routes direct,vip,vip-masquerade]
                                             [--set receivers.ebpf.correlation.nat=false]
                                             [--one-host] [--misses]
                                             [--loop uvloop --gateway-python PY]

Two network namespaces joined by a veth pair (tests/support/nodes.py). Node A runs the
gateway and the load generator, node B the server. The gateways (`--gateway`, several
side by side on ports of their own, one topology):

  async  FastAPI `async def` under uvicorn on asyncio's loop, one shared
         `httpx.AsyncClient` streaming the server's answer
  def    FastAPI `def` (run in Starlette's thread pool), one `httpx.Client` shared by the
         pool's threads, streaming the same answer
  grpc   FastAPI `async def` making a unary call with `grpc.aio` (one channel per route)

Node B runs the HTTP server (Starlette under uvicorn: a chat completion streamed as
server-sent events) and, for `grpc`, a grpcio server (a generic handler on raw bytes, no
generated code, as tests/integration/peers/grpc_peer.py). Node A reaches the server by its
pod address (`direct`), or through a ClusterIP Service whose VIP kube-proxy's nftables
rules DNAT in node A (`vip`), or through one that also masquerades every connection
(`vip-masquerade`: kube-proxy's masqueradeAll, the source port rewritten). An agent per
node runs in the root namespace, selecting its node's programs by pid. With
`receivers.ebpf.propagation.enabled=true` each agent's TCP option program is put on its
own node's cgroup (unless `--set` names one): at the default, the cgroup v2 root, both
agents would act for every socket of the machine.

The load generator is one process in node A for all the loads (its start and exit would
make every agent attach and detach the Python Context probes, holding its reading of the
ring for a moment, at the start and end of each load measured); before the first load, a
few requests go through every gateway and route, and the run waits a moment more.

Each request carries a fresh rid (`?rid=`), passed on to the server: in the query for
HTTP, in the method for gRPC (`/twonodes.Upstream/Ask_<rid>`: the HTTP/2 parser exports
the method, `rpc.method`, and no metadata by default). Per gateway, route and concurrency,
counted over the requests whose gateway CLIENT span (agent A) and server SERVER span
(agent B) were both exported:

  one trace  the two spans have the same trace ID
  linked     the CLIENT span links to the server's trace: a link whose trace ID is the SERVER
             span's and whose span ID is the SERVER span's parent
  parent     the gateway's CLIENT span has its own SERVER span (the /ask request of the same
             rid) as parent: the in-process join the carrier's trace comes from

`--one-host` runs the servers on node A too (called on 127.0.0.1, route `direct`), with
node A's agent alone: the same join on one host, where the agent sees both ends.
`--misses` prints, for each request not one trace, what each end's span says.

Prints a table, agent A's conntrack lookups (`otel_ebpf.nat.lookups`) by result, and per
agent the contexts it queued for the option (sent, unsent) or took (received, unmatched),
and how many Python processes it probed during the loads: the agents probe every Python
process started on the machine, and this topology starts none during the loads, so more
than a few there says another workload's processes started or ended meanwhile (each one
holds the agents' reading for a moment, and a context decided after its connection went
idle is never sent): run it again.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import sys
import threading
import time
import uuid
from dataclasses import dataclass, field
from pathlib import Path
from urllib.parse import parse_qs, urlsplit

REPO = Path(__file__).resolve().parents[1]
GATEWAY_PORT, SERVER_PORT = 8000, 8080
GATEWAYS = ("async", "def", "grpc")
# one port per gateway kind, so that the three run side by side in one topology (one pair of
# agents: their start is what a two-node run spends most time on)
GATEWAY_PORTS = {"async": GATEWAY_PORT, "def": 8001, "grpc": 8002}
GRPC_PORT = 50051  # node B's gRPC server, and the Services' port for it
VIP, VIP_MASQUERADE, SERVICE_PORT = "10.96.100.10", "10.96.100.11", 80
ROUTES = ("direct", "vip", "vip-masquerade")
SSE_CHUNKS, SSE_GAP_S = 6, 0.002
UPSTREAM_PATH = "/v1/chat/completions"
# the rid rides in the method: the HTTP/2 parser exports `rpc.method` always, metadata only
# with protocols.http2.capture_headers (another code path than the one measured)
GRPC_SERVICE = "twonodes.Upstream"
GRPC_METHOD_PREFIX = f"{GRPC_SERVICE}/Ask_"
GRPC_WORK_S = SSE_CHUNKS * SSE_GAP_S  # the unary handler's work: as long as the SSE stream's
TIMEOUT_S = 30.0
# the load generator is one process for all of a topology's loads (serve_loads): a traced
# process's start and exit make its agent attach and detach the Python Context probes, and
# the agent reads no ring while it does (0.6-0.7 s each on a loaded 2-core machine), so a
# process per load would put that pause at the start and end of every load measured
# before the first load: a few requests through each gateway and route (connections made,
# every program's first call seen), then a pause for the agents' probing of the programs
# just started (the same pause as above, once per new process)
WARMUP_REQUESTS, WARMUP_SETTLE_S = 4, 2.0
LOADGEN_IDLE_EXIT_S = 1800.0  # no command for this long: the topology's owner is gone
LOADGEN_POLL_S = 0.05
SETTLE_S = 3.0  # > the agents' correlation window (2 s): server spans have derived their IDs
SERVER_KIND, CLIENT_KIND = 2, 3  # OTLP SpanKind


# ---- the programs, one per process, picked by argv -------------------------------------

def make_server():
    from starlette.applications import Starlette
    from starlette.responses import StreamingResponse
    from starlette.routing import Route

    async def completions(request):
        body = await request.json()

        async def events():
            for i in range(SSE_CHUNKS):
                chunk = {"object": "chat.completion.chunk", "model": body.get("model", "m"),
                         "choices": [{"index": 0, "delta": {"content": f"w{i} "}}]}
                yield f"data: {json.dumps(chunk)}\n\n".encode()
                await asyncio.sleep(SSE_GAP_S)
            yield b"data: [DONE]\n\n"

        return StreamingResponse(events(), media_type="text/event-stream")

    return Starlette(routes=[Route(UPSTREAM_PATH, completions, methods=["POST"])])


def serve_grpc(port: int) -> None:
    """A grpcio server answering every `/twonodes.Upstream/Ask_<rid>` unary call (a generic
    handler on raw bytes: no generated code), until SIGTERM."""
    import signal
    from concurrent import futures

    import grpc

    def ask(request: bytes, context) -> bytes:
        time.sleep(GRPC_WORK_S)  # some work, as the HTTP server's stream takes
        return b"answer to " + request

    unary = grpc.unary_unary_rpc_method_handler(ask)

    class Upstream(grpc.GenericRpcHandler):
        # a method per rid: the generic handler matches them by prefix
        def service(self, details):
            return unary if details.method.startswith(f"/{GRPC_METHOD_PREFIX}") else None

    # as many workers as the load's highest concurrency, so calls never queue for a thread
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=32))
    server.add_generic_rpc_handlers((Upstream(),))
    server.add_insecure_port(f"0.0.0.0:{port}")
    server.start()
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    print("serving", flush=True)
    stop.wait()
    server.stop(grace=1).wait(5)


def _chat_body(rid: str) -> dict:
    return {"model": "two-nodes", "stream": True,
            "messages": [{"role": "user", "content": rid}]}


def _words(line: str, words: list[str]) -> None:
    if line.startswith("data: ") and line != "data: [DONE]":
        words.append(json.loads(line[6:])["choices"][0]["delta"]["content"])


def make_gateway(kind: str = "async"):
    """The gateway of `kind` (GATEWAYS); the upstreams by route in $TWO_NODES_UPSTREAMS."""
    from fastapi import FastAPI

    upstreams: dict[str, str] = json.loads(os.environ["TWO_NODES_UPSTREAMS"])
    app = FastAPI()
    if kind == "async":
        import httpx

        client: dict[str, httpx.AsyncClient] = {}

        @app.get("/ask")
        async def ask(rid: str, via: str = "direct") -> dict:
            if "c" not in client:
                client["c"] = httpx.AsyncClient(timeout=TIMEOUT_S,
                                                limits=httpx.Limits(max_connections=200))
            words: list[str] = []
            async with client["c"].stream("POST", f"{upstreams[via]}{UPSTREAM_PATH}?rid={rid}",
                                          json=_chat_body(rid)) as r:
                r.raise_for_status()
                async for line in r.aiter_lines():
                    _words(line, words)
            return {"answer": "".join(words)}

    elif kind == "def":
        import httpx

        # one client for every thread of the pool (httpx.Client is thread-safe): its
        # keep-alive connections are reused by whichever thread runs the next request
        sync_client = httpx.Client(timeout=TIMEOUT_S, limits=httpx.Limits(max_connections=200))

        @app.get("/ask")
        def ask_def(rid: str, via: str = "direct") -> dict:
            words: list[str] = []
            with sync_client.stream("POST", f"{upstreams[via]}{UPSTREAM_PATH}?rid={rid}",
                                    json=_chat_body(rid)) as r:
                r.raise_for_status()
                for line in r.iter_lines():
                    _words(line, words)
            return {"answer": "".join(words)}

    elif kind == "grpc":
        import grpc

        channels: dict = {}

        @app.get("/ask")
        async def ask_grpc(rid: str, via: str = "direct") -> dict:
            # made in the running loop (grpc.aio binds a channel to it); one per route, as a
            # service keeps one channel per upstream: its calls share one HTTP/2 connection
            if via not in channels:
                channels[via] = grpc.aio.insecure_channel(
                    upstreams[via], options=[("grpc.enable_http_proxy", 0)])
            call = channels[via].unary_unary(f"/{GRPC_METHOD_PREFIX}{rid}")
            answer = await call(rid.encode(), timeout=TIMEOUT_S)
            return {"answer": answer.decode()}

    else:
        raise ValueError(f"gateway kind {kind!r}: one of {', '.join(GATEWAYS)}")
    return app


def loadgen(requests_n: int, concurrency: int, via: str, deadline_s: float,
            port: int = GATEWAY_PORT) -> dict:
    """`requests_n` requests to the gateway from `concurrency` threads; each rid is printed
    in the summary, so that spans are matched to requests that were really sent."""
    import requests

    lock = threading.Lock()
    state = {"next": 0, "ok": [], "errors": 0, "first_error": ""}
    stop_at = time.monotonic() + deadline_s

    def worker() -> None:
        s = requests.Session()
        while time.monotonic() < stop_at:
            with lock:
                if state["next"] >= requests_n:
                    return
                state["next"] += 1
            rid = uuid.uuid4().hex
            try:
                r = s.get(f"http://127.0.0.1:{port}/ask",
                          params={"rid": rid, "via": via}, timeout=TIMEOUT_S)
                r.raise_for_status()
                with lock:
                    state["ok"].append(rid)
            except Exception as e:  # counted and reported: the load goes on
                with lock:
                    state["errors"] += 1
                    state["first_error"] = state["first_error"] or repr(e)[:300]

    threads = [threading.Thread(target=worker, daemon=True) for _ in range(concurrency)]
    for t in threads:
        t.start()
    for t in threads:
        t.join(max(0.0, stop_at + TIMEOUT_S + 5 - time.monotonic()))
    return {"sent": state["next"], "rids": state["ok"], "errors": state["errors"],
            "first_error": state["first_error"]}


def serve_loads(control: Path, idle_exit_s: float = LOADGEN_IDLE_EXIT_S) -> None:
    """The topology's load generator: runs the loads `load-<n>.json` (loadgen's arguments)
    that Topology.load writes into `control`, one after the other, each one's summary to
    `load-<n>.out.json`; stops at a `stop` file, or when no command came for `idle_exit_s`.
    Files are written whole and renamed into place, so a half-written one is never read."""
    import requests  # noqa: F401  (imported before `ready`: a load's first request does not)

    control.mkdir(parents=True, exist_ok=True)
    _write_whole(control / "ready", str(os.getpid()))
    n, idle_since = 0, time.monotonic()
    while time.monotonic() - idle_since < idle_exit_s:
        command = control / f"load-{n}.json"
        if not command.exists():
            if (control / "stop").exists():
                return
            time.sleep(LOADGEN_POLL_S)
            continue
        spec = json.loads(command.read_text())
        summary = loadgen(spec["requests"], spec["concurrency"], spec["via"],
                          spec["deadline"], spec["port"])
        _write_whole(control / f"load-{n}.out.json", json.dumps(summary))
        n, idle_since = n + 1, time.monotonic()
    print(f"no load asked for {idle_exit_s:.0f} s: exiting", flush=True)


def _write_whole(path: Path, text: str) -> None:
    tmp = path.with_name(path.name + ".tmp")
    tmp.write_text(text)
    tmp.rename(path)


# ---- the topology -----------------------------------------------------------------------

@dataclass
class Topology:
    a: object  # tests.support.nodes.Node
    b: object
    workdir: Path
    procs: list = field(default_factory=list)
    gateways: tuple[str, ...] = ("async",)
    loader: object = None  # the load generator (serve_loads), a node A program
    loads: int = 0

    @property
    def control(self) -> Path:
        return self.workdir / "loadgen"

    def load(self, requests_n: int, concurrency: int, via: str, deadline_s: float = 120.0,
             gateway: str = "async", tag: str = "loadgen") -> dict:
        """Runs a load from node A's load generator (a node A program: agent A sees its
        calls) against the gateway of kind `gateway`; its summary, also kept as
        <tag>-<gateway>-<via>-c<concurrency>.json."""
        if gateway not in self.gateways:
            raise ValueError(f"no {gateway!r} gateway in this topology ({self.gateways})")
        if self.loader is None:
            raise RuntimeError("no load generator: start_topology() starts it")
        n, self.loads = self.loads, self.loads + 1
        out = self.control / f"load-{n}.out.json"
        _write_whole(self.control / f"load-{n}.json", json.dumps(
            {"requests": requests_n, "concurrency": concurrency, "via": via,
             "deadline": deadline_s, "port": GATEWAY_PORTS[gateway]}))
        give_up = time.monotonic() + deadline_s + TIMEOUT_S + 30
        while not out.exists():
            if self.loader.poll() is not None:
                raise RuntimeError(f"load generator exited with {self.loader.returncode}:\n"
                                   f"{self.loader.output()[-2000:]}")
            if time.monotonic() > give_up:
                raise RuntimeError(f"load {n} not done after its deadline; log: "
                                   f"{self.loader.log}")
            time.sleep(LOADGEN_POLL_S)
        summary = json.loads(out.read_text())
        (self.workdir / f"{tag}-{gateway}-{via}-c{concurrency}.json").write_text(
            json.dumps(summary))
        return summary

    def stop(self) -> None:
        if self.loader is not None:
            _write_whole(self.control / "stop", "")
            if self.loader.wait(5.0) is None:
                self.loader.stop()
        for proc in self.procs:
            proc.stop()


def start_topology(a, b, workdir: Path, gateways: tuple[str, ...] | list[str] = ("async",),
                   one_host: bool = False, warm: bool = True, loop: str = "asyncio",
                   gateway_python: str | None = None) -> Topology:
    """The servers in node B, the Services in node A, the gateways (GATEWAYS) in node A,
    each on its GATEWAY_PORTS port, and node A's load generator. `one_host`: the servers in
    node A too, called on 127.0.0.1 (route `direct` only; `b` is not used). `warm`: a few
    requests through every gateway and route first (their spans are not any load's), and
    WARMUP_SETTLE_S more."""
    gateways = tuple(gateways)
    if not gateways or any(g not in GATEWAYS for g in gateways):
        raise ValueError(f"gateways {gateways}: of {', '.join(GATEWAYS)}")
    workdir.mkdir(parents=True, exist_ok=True)
    topo = Topology(a, b, workdir, gateways=gateways)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    host = a if one_host else b
    address = "127.0.0.1" if one_host else b.address
    try:
        server = host.spawn([sys.executable, "-m", "bench.two_nodes", "server"],
                            log=workdir / "server.log",
                            env={**env, "OTEL_SERVICE_NAME": "server"})
        topo.procs.append(server)
        grpc_server = None
        if "grpc" in gateways:
            grpc_server = host.spawn([sys.executable, "-m", "bench.two_nodes", "grpc-server"],
                                     log=workdir / "grpc-server.log",
                                     env={**env, "OTEL_SERVICE_NAME": "grpc-server"})
            topo.procs.append(grpc_server)
        upstreams = {"direct": f"http://{address}:{SERVER_PORT}"}
        grpc_upstreams = {"direct": f"{address}:{GRPC_PORT}"}
        if not one_host:
            a.service("default/server", VIP, SERVICE_PORT, b.address, SERVER_PORT)
            a.service("default/server-masq", VIP_MASQUERADE, SERVICE_PORT, b.address,
                      SERVER_PORT, masquerade_all=True)
            upstreams["vip"] = f"http://{VIP}:{SERVICE_PORT}"
            upstreams["vip-masquerade"] = f"http://{VIP_MASQUERADE}:{SERVICE_PORT}"
            if grpc_server is not None:
                # the same VIPs, another port: kube-proxy's map is keyed by VIP, protocol
                # and port, so a Service of two ports is two entries
                a.service("default/grpc", VIP, GRPC_PORT, b.address, GRPC_PORT)
                a.service("default/grpc-masq", VIP_MASQUERADE, GRPC_PORT, b.address,
                          GRPC_PORT, masquerade_all=True)
                grpc_upstreams["vip"] = f"{VIP}:{GRPC_PORT}"
                grpc_upstreams["vip-masquerade"] = f"{VIP_MASQUERADE}:{GRPC_PORT}"
        started = []
        for kind in gateways:
            proc = a.spawn([gateway_python or sys.executable, "-m", "bench.two_nodes",
                            "gateway", "--gateway", kind, "--loop", loop],
                           log=workdir / f"gateway-{kind}.log",
                           env={**env, "OTEL_SERVICE_NAME": f"gateway-{kind}",
                                "TWO_NODES_UPSTREAMS": json.dumps(
                                    grpc_upstreams if kind == "grpc" else upstreams)})
            topo.procs.append(proc)
            started.append((kind, proc))
        host.wait_port(SERVER_PORT, server)
        if grpc_server is not None:
            host.wait_port(GRPC_PORT, grpc_server)
        # the load generator, started now so that its start (the agent probing a new
        # process) is over before the first load
        topo.control.mkdir(parents=True, exist_ok=True)
        topo.loader = a.spawn([sys.executable, "-m", "bench.two_nodes", "loadgen-serve",
                               "--control", str(topo.control)], log=workdir / "loadgen.log",
                              env={**env, "OTEL_SERVICE_NAME": "loadgen"})
        for kind, proc in started:
            a.wait_port(GATEWAY_PORTS[kind], proc)
        give_up = time.monotonic() + TIMEOUT_S
        while not (topo.control / "ready").exists():
            if topo.loader.poll() is not None or time.monotonic() > give_up:
                raise RuntimeError(f"the load generator did not start:\n"
                                   f"{topo.loader.output()[-2000:]}")
            time.sleep(LOADGEN_POLL_S)
        if warm:
            for kind in gateways:
                for route in (("direct",) if one_host else ROUTES):
                    topo.load(WARMUP_REQUESTS, 1, route, deadline_s=TIMEOUT_S, gateway=kind,
                              tag="warmup")
            time.sleep(WARMUP_SETTLE_S)
    except BaseException:
        topo.stop()
        raise
    return topo


# ---- scoring ----------------------------------------------------------------------------

def _rid(span) -> str | None:
    method = span.attrs.get("rpc.method")
    if isinstance(method, str) and method.startswith(GRPC_METHOD_PREFIX):
        return method[len(GRPC_METHOD_PREFIX):] or None
    query = span.attrs.get("url.query")
    if query is None and (full := span.attrs.get("url.full")):
        query = urlsplit(str(full)).query
    values = parse_qs(str(query or "")).get("rid")
    return values[0] if values else None


def is_upstream_call(span) -> bool:
    """A gateway's call to node B's server (HTTP or gRPC): the load generator's calls to
    the gateway carry the same rid, on another path."""
    if span.kind != CLIENT_KIND:
        return False
    if str(span.attrs.get("rpc.method", "")).startswith(GRPC_METHOD_PREFIX):
        return True
    return urlsplit(str(span.attrs.get("url.full", ""))).path == UPSTREAM_PATH


def is_upstream_serve(span) -> bool:
    """Node B's server answering a gateway's call (HTTP or gRPC)."""
    if span.kind != SERVER_KIND:
        return False
    return span.attrs.get("url.path") == UPSTREAM_PATH or \
        str(span.attrs.get("rpc.method", "")).startswith(GRPC_METHOD_PREFIX)


def _is_gateway_request(span) -> bool:
    return span.kind == SERVER_KIND and span.attrs.get("url.path") == "/ask"


@dataclass
class Score:
    requests: int  # sent and answered
    both_ends: int  # with a gateway CLIENT span and a server SERVER span exported
    one_trace: int
    linked: int
    evidence: dict[str, int] = field(default_factory=dict)  # server spans' correlation
    parent: int = 0  # gateway CLIENT spans whose parent is their own request's SERVER span
    wrong_parent: int = 0  # ... whose parent is another span (never acceptable)
    client_evidence: dict[str, int] = field(default_factory=dict)  # gateway CLIENT spans'
    misses: list[dict] = field(default_factory=list)  # requests not one trace: what each
    #                                                   end says

    def row(self) -> str:
        return (f"{self.requests} requests, both ends exported {self.both_ends}, "
                f"one trace {self.one_trace}/{self.requests}, linked {self.linked}/"
                f"{self.requests}; server spans by evidence {self.evidence}; gateway calls' "
                f"parent right {self.parent}, wrong {self.wrong_parent}, by evidence "
                f"{self.client_evidence}")


def _miss(rid: str, client, server, gateway_request) -> dict:
    def ends(span) -> dict | None:
        if span is None:
            return None
        return {"trace": span.trace_id, "span": span.span_id, "parent": span.parent_span_id,
                "correlation": span.attrs.get("otel_ebpf.correlation"),
                "start_ns": span.start, "end_ns": span.end,
                "local_port": span.attrs.get("network.local.port"),
                "peer": f"{span.attrs.get('network.peer.address')}:"
                        f"{span.attrs.get('network.peer.port')}",
                "nat_local_port": span.attrs.get("otel_ebpf.nat.local.port"),
                "links": span.links}
    return {"rid": rid, "client": ends(client), "server": ends(server),
            "gateway_request": ends(gateway_request)}


def score(rids: list[str], gateway_spans: list, server_spans: list) -> Score:
    """Gateway CLIENT spans of node A's agent against server SERVER spans of node B's."""
    clients = {r: s for s in gateway_spans if is_upstream_call(s) and (r := _rid(s))}
    servers = {r: s for s in server_spans if is_upstream_serve(s) and (r := _rid(s))}
    requests = {r: s for s in gateway_spans if _is_gateway_request(s) and (r := _rid(s))}
    result = Score(len(rids), 0, 0, 0)
    for rid in rids:
        client, server = clients.get(rid), servers.get(rid)
        if server is not None:
            why = str(server.attrs.get("otel_ebpf.correlation", ""))
            result.evidence[why] = result.evidence.get(why, 0) + 1
        if client is not None:
            why = str(client.attrs.get("otel_ebpf.correlation", ""))
            result.client_evidence[why] = result.client_evidence.get(why, 0) + 1
            request = requests.get(rid)
            if client.parent_span_id:
                right = request is not None and client.parent_span_id == request.span_id \
                    and client.trace_id == request.trace_id
                result.parent += right
                result.wrong_parent += not right
        if client is None or server is None:
            result.misses.append(_miss(rid, client, server, requests.get(rid)))
            continue
        result.both_ends += 1
        joined = client.trace_id == server.trace_id
        result.one_trace += joined
        result.linked += any(link.get("traceId") == server.trace_id
                             and link.get("spanId") == server.parent_span_id
                             for link in client.links)
        if not joined:
            result.misses.append(_miss(rid, client, server, requests.get(rid)))
    return result


def nat_lookups(path: Path) -> dict[str, int]:
    """An agent's latest otel_ebpf.nat.lookups, by result."""
    from tests.integration.conftest import read_metric_by

    out = read_metric_by(path, "otel_ebpf.nat.lookups", "result")
    out.pop("", None)
    return out


def probed_processes(path: Path) -> int:
    """How many processes an agent gave the Python Context probes so far (the latest
    otel_ebpf.context_probes.attached it exported)."""
    from tests.integration.conftest import read_metric_by

    return read_metric_by(path, "otel_ebpf.context_probes.attached", "-").get("", 0)


def agent_notes(path: Path, probed_before: int = 0) -> str:
    """What an agent's own metrics say about a run: the contexts it queued for the TCP
    option (sent) or could not (unsent: the connection's slots full, or it closed), and how
    many processes it gave the Context probes since `probed_before` (the count before the
    loads). Each probe attach and detach holds the agent's reading of the ring for a
    moment: during the loads this topology starts no process, so more than a few here
    means something else disturbed the run."""
    from tests.integration.conftest import read_metric_by

    contexts = read_metric_by(path, "otel_ebpf.propagation.contexts", "outcome")
    contexts.pop("", None)
    during = probed_processes(path) - probed_before
    return (f"contexts {contexts or 'none'}; Python processes probed during the loads "
            f"{during}")


def run(requests_n: int, levels: list[int], routes: list[str], workdir: Path,
        overrides: dict | None = None, agent_tree: Path | None = None,
        gateways: tuple[str, ...] = ("async",), one_host: bool = False,
        loop: str = "asyncio", gateway_python: str | None = None
        ) -> tuple[dict[tuple[str, str, int], Score], dict[str, int]]:
    """Everything, once: nodes, agents, topology, the load per gateway, route and level;
    every part stopped and removed in `finally`. Returns the scores by (gateway, route,
    level) and agent A's conntrack lookups. `agent_tree`: run the agents from that checkout
    (another commit), the rest from this. `one_host`: node A alone (start_topology)."""
    from tests.integration.conftest import read_spans
    from tests.support.nodes import start_node_agent, two_nodes, wait_ready

    sent: dict[tuple[str, str, int], list[str]] = {}
    with two_nodes() as (a, b):
        agents = []
        topo = None
        probed_before: list[int] = []
        try:
            env = None if agent_tree is None else {
                **os.environ, "PYTHONPATH": str(agent_tree),
                "OTEL_EBPF_BPF_DIR": str(agent_tree / "bpf" / "build")}
            # node A's agent, and node B's unless node A is the only host (`one_host`)
            agents = [start_node_agent(n, workdir / f"agent-{n.name}",
                                       node_overrides(n, overrides), env=env)
                      for n in ((a,) if one_host else (a, b))]
            wait_ready(*agents)
            topo = start_topology(a, b, workdir, gateways, one_host=one_host, loop=loop,
                                  gateway_python=gateway_python)
            probed_before = [probed_processes(agent.traces) for agent in agents]
            for gateway in gateways:
                for route in routes:
                    for level in levels:
                        out = topo.load(requests_n, level, route, gateway=gateway)
                        if out["errors"]:
                            print(f"  {gateway} {route} c{level}: {out['errors']} errors, "
                                  f"first {out['first_error']}", flush=True)
                        sent[(gateway, route, level)] = out["rids"]
            time.sleep(SETTLE_S)
        finally:
            for agent in agents:
                agent.stop()
            if topo is not None:
                topo.stop()
    spans_a = read_spans(agents[0].traces)
    spans_b = spans_a if one_host else read_spans(agents[1].traces)
    scores = {key: score(rids, spans_a, spans_b) for key, rids in sent.items()}
    for name, agent, before in zip("AB", agents, probed_before, strict=False):  # one_host: A
        print(f"agent {name}: {agent_notes(agent.traces, before)}")
    return scores, nat_lookups(agents[0].traces)


def node_overrides(node, overrides: dict | None) -> dict | None:
    """A node's agent config: `overrides`, and with propagation on, its TCP option program
    on the node's own cgroup (a DaemonSet's agent covers its node; two agents on one kernel
    must not both cover every socket)."""
    prop = ((overrides or {}).get("receivers", {}).get("ebpf", {}).get("propagation", {}))
    if not prop.get("enabled") or "cgroup" in prop:
        return overrides
    if node.cgroup is None:
        raise RuntimeError("propagation needs a cgroup v2 per node, and there is none here")
    import copy

    out = copy.deepcopy(overrides)
    out["receivers"]["ebpf"]["propagation"]["cgroup"] = str(node.cgroup)
    return out


def parse_set(items: list[str]) -> dict:
    """--set a.b.c=value (YAML value) -> nested overrides."""
    import yaml

    out: dict = {}
    for item in items:
        path, _, value = item.partition("=")
        node = out
        *parents, last = path.split(".")
        for key in parents:
            node = node.setdefault(key, {})
        node[last] = yaml.safe_load(value)
    return out


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.two_nodes", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("program", nargs="?", choices=["server", "grpc-server", "gateway",
                                                  "loadgen", "loadgen-serve"],
                   help="(internal) run one of the topology's programs")
    p.add_argument("--gateway", default="async",
                   help=f"of {', '.join(GATEWAYS)}, comma-separated (one topology)")
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--levels", default="1,16", help="concurrencies, comma-separated")
    p.add_argument("--routes", default="direct,vip", help=f"of {', '.join(ROUTES)}")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="agent config override, e.g. receivers.ebpf.correlation.nat=false")
    p.add_argument("--loop", choices=("asyncio", "uvloop"), default="asyncio",
                   help="the gateways' event loop (uvloop: needs --gateway-python with uvloop)")
    p.add_argument("--gateway-python", help="the interpreter the gateways run on (a venv's "
                   "python with the web packages, e.g. .venv-gateway/bin/python for uvloop)")
    p.add_argument("--workdir", type=Path)
    p.add_argument("--agent-tree", type=Path, help="run the agents from this checkout (its "
                   "C extensions and bpf/build built): another commit, same harness")
    p.add_argument("--one-host", action="store_true",
                   help="servers on node A too, on 127.0.0.1 (route direct), one agent")
    p.add_argument("--misses", action="store_true",
                   help="print each request that is not one trace, as each end saw it")
    # the load generator's own
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--via", default="direct")
    p.add_argument("--deadline", type=float, default=120.0)
    p.add_argument("--port", type=int, default=GATEWAY_PORT)
    p.add_argument("--out", type=Path)
    p.add_argument("--control", type=Path)
    a = p.parse_args(argv)
    gateways = tuple(g for g in a.gateway.split(",") if g)
    if not gateways or any(g not in GATEWAYS for g in gateways):
        p.error(f"--gateway: of {', '.join(GATEWAYS)}")
    if a.program in ("server", "gateway"):
        import uvicorn

        app = make_server() if a.program == "server" else make_gateway(gateways[0])
        uvicorn.run(app, host="0.0.0.0", port=SERVER_PORT if a.program == "server"  # noqa: S104
                    else GATEWAY_PORTS[gateways[0]],
                    loop=a.loop if a.program == "gateway" else "asyncio", log_level="warning",
                    access_log=False)
        return 0
    if a.program == "grpc-server":
        serve_grpc(GRPC_PORT)
        return 0
    if a.program == "loadgen-serve":
        serve_loads(a.control)
        return 0
    if a.program == "loadgen":
        summary = loadgen(a.requests, a.concurrency, a.via, a.deadline, a.port)
        a.out.write_text(json.dumps(summary))
        return 0
    if os.geteuid() != 0:
        print("needs root (network namespaces, nftables, BPF): run it with sudo",
              file=sys.stderr)
        return 1
    routes = [r for r in a.routes.split(",") if r]
    if any(r not in ROUTES for r in routes):
        p.error(f"--routes: of {', '.join(ROUTES)}")
    if a.one_host and routes != ["direct"]:
        print("--one-host: route direct only (127.0.0.1)", flush=True)
        routes = ["direct"]
    levels = [int(x) for x in a.levels.split(",") if x.strip()]
    import tempfile

    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="otel-ebpf-two-nodes-"))
    print(f"logs and spans under {workdir}", flush=True)
    scores, lookups = run(a.requests, levels, routes, workdir, parse_set(a.set),
                          a.agent_tree.resolve() if a.agent_tree else None, gateways,
                          a.one_host, a.loop, a.gateway_python)
    for (gateway, route, level), s in scores.items():
        print(f"{gateway:>5} {route:>15} c{level:<3} {s.row()}")
    if a.misses:
        for (gateway, route, level), s in scores.items():
            for miss in s.misses:
                print(f"miss {gateway} {route} c{level}: {json.dumps(miss)}")
    print(f"agent A's conntrack lookups (otel_ebpf.nat.lookups): {lookups or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
