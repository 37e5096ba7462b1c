"""A gateway on node A streaming from a server on node B, one agent per node: does the
gateway's outbound call meet the server's trace, called directly and through a Service?

Run as root, from the repository root:

    sudo .venv/bin/python -m bench.two_nodes [--requests 40] [--levels 1,16]
                                             [--routes direct,vip,vip-masquerade]
                                             [--set receivers.ebpf.correlation.nat=false]

Two network namespaces joined by a veth pair (tests/support/nodes.py): node A runs the
gateway (FastAPI `async def` under uvicorn on asyncio's loop, one shared
`httpx.AsyncClient` streaming the server's answer) and the load generator; node B runs the
server (Starlette under uvicorn: a chat completion streamed as server-sent events). Node A
reaches the server by its pod address (`direct`), or through a ClusterIP Service whose VIP
kube-proxy's nftables rules DNAT in node A (`vip`), or through one that also masquerades
every connection (`vip-masquerade`: kube-proxy's masqueradeAll, the source port rewritten).
An agent per node runs in the root namespace, selecting its node's programs by pid.

Each request carries a fresh rid (`?rid=`), passed on to the server. Per route and
concurrency, counted over the requests whose gateway CLIENT span (agent A) and server
SERVER span (agent B) were both exported:

  one trace  the two spans have the same trace ID
  linked     the CLIENT span links to the server's trace: a link whose trace ID is the SERVER
             span's and whose span ID is the SERVER span's parent

Prints a table, and agent A's conntrack lookups (`otel_ebpf.nat.lookups`) by result.
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
VIP, VIP_MASQUERADE, SERVICE_PORT = "10.96.100.10", "10.96.100.11", 80
ROUTES = ("direct", "vip", "vip-masquerade")
SSE_CHUNKS, SSE_GAP_S = 6, 0.002
UPSTREAM_PATH = "/v1/chat/completions"
TIMEOUT_S = 30.0
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


def make_gateway():
    import httpx
    from fastapi import FastAPI

    upstreams: dict[str, str] = json.loads(os.environ["TWO_NODES_UPSTREAMS"])
    client: dict[str, httpx.AsyncClient] = {}
    app = FastAPI()

    @app.get("/ask")
    async def ask(rid: str, via: str = "direct") -> dict:
        if "c" not in client:
            client["c"] = httpx.AsyncClient(timeout=TIMEOUT_S,
                                            limits=httpx.Limits(max_connections=200))
        words = []
        body = {"model": "two-nodes", "stream": True,
                "messages": [{"role": "user", "content": rid}]}
        async with client["c"].stream("POST", f"{upstreams[via]}{UPSTREAM_PATH}?rid={rid}",
                                      json=body) as r:
            r.raise_for_status()
            async for line in r.aiter_lines():
                if line.startswith("data: ") and line != "data: [DONE]":
                    words.append(json.loads(line[6:])["choices"][0]["delta"]["content"])
        return {"answer": "".join(words)}

    return app


def loadgen(requests_n: int, concurrency: int, via: str, deadline_s: float) -> dict:
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
                r = s.get(f"http://127.0.0.1:{GATEWAY_PORT}/ask",
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


# ---- the topology -----------------------------------------------------------------------

@dataclass
class Topology:
    a: object  # tests.support.nodes.Node
    b: object
    workdir: Path
    procs: list = field(default_factory=list)

    def load(self, requests_n: int, concurrency: int, via: str, deadline_s: float = 120.0
             ) -> dict:
        """Runs the load generator in node A (a node A program: agent A sees its calls)."""
        log = self.workdir / f"loadgen-{via}-c{concurrency}.log"
        out = self.workdir / f"loadgen-{via}-c{concurrency}.json"
        proc = self.a.spawn([sys.executable, "-m", "bench.two_nodes", "loadgen", "--requests",
                             str(requests_n), "--concurrency", str(concurrency), "--via", via,
                             "--deadline", str(deadline_s), "--out", str(out)], log=log,
                            env={**os.environ, "PYTHONPATH": str(REPO),
                                 "OTEL_SERVICE_NAME": "loadgen"})
        code = proc.wait(deadline_s + TIMEOUT_S + 30)
        if code is None:
            proc.stop()
            raise RuntimeError(f"load generator still running after its deadline; log: {log}")
        if code != 0:
            raise RuntimeError(f"load generator exited with {code}:\n{proc.output()[-2000:]}")
        return json.loads(out.read_text())

    def stop(self) -> None:
        for proc in self.procs:
            proc.stop()


def start_topology(a, b, workdir: Path) -> Topology:
    """The server in node B, the Services in node A, the gateway in node A."""
    workdir.mkdir(parents=True, exist_ok=True)
    topo = Topology(a, b, workdir)
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    try:
        server = b.spawn([sys.executable, "-m", "bench.two_nodes", "server"], log=workdir /
                         "server.log", env={**env, "OTEL_SERVICE_NAME": "server"})
        topo.procs.append(server)
        a.service("default/server", VIP, SERVICE_PORT, b.address, SERVER_PORT)
        a.service("default/server-masq", VIP_MASQUERADE, SERVICE_PORT, b.address, SERVER_PORT,
                  masquerade_all=True)
        upstreams = {"direct": f"http://{b.address}:{SERVER_PORT}",
                     "vip": f"http://{VIP}:{SERVICE_PORT}",
                     "vip-masquerade": f"http://{VIP_MASQUERADE}:{SERVICE_PORT}"}
        gateway = a.spawn([sys.executable, "-m", "bench.two_nodes", "gateway"],
                          log=workdir / "gateway.log",
                          env={**env, "OTEL_SERVICE_NAME": "gateway",
                               "TWO_NODES_UPSTREAMS": json.dumps(upstreams)})
        topo.procs.append(gateway)
        b.wait_port(SERVER_PORT, server)
        a.wait_port(GATEWAY_PORT, gateway)
    except BaseException:
        topo.stop()
        raise
    return topo


# ---- scoring ----------------------------------------------------------------------------

def _rid(span) -> str | None:
    query = span.attrs.get("url.query")
    if query is None and (full := span.attrs.get("url.full")):
        query = urlsplit(str(full)).query
    values = parse_qs(str(query or "")).get("rid")
    return values[0] if values else None


@dataclass
class Score:
    requests: int  # sent and answered
    both_ends: int  # with a gateway CLIENT span and a server SERVER span exported
    one_trace: int
    linked: int
    evidence: dict[str, int] = field(default_factory=dict)  # server spans' correlation

    def row(self) -> str:
        return (f"{self.requests} requests, both ends exported {self.both_ends}, "
                f"one trace {self.one_trace}/{self.requests}, linked {self.linked}/"
                f"{self.requests}; server spans by evidence {self.evidence}")


def score(rids: list[str], gateway_spans: list, server_spans: list) -> Score:
    """Gateway CLIENT spans of node A's agent against server SERVER spans of node B's."""
    # the gateway's call to the server (the load generator's calls to the gateway carry the
    # same rid, on another path)
    clients = {r: s for s in gateway_spans if s.kind == CLIENT_KIND and (r := _rid(s))
               and urlsplit(str(s.attrs.get("url.full", ""))).path == UPSTREAM_PATH}
    servers = {r: s for s in server_spans if s.kind == SERVER_KIND and (r := _rid(s))
               and s.attrs.get("url.path") == UPSTREAM_PATH}
    result = Score(len(rids), 0, 0, 0)
    for rid in rids:
        client, server = clients.get(rid), servers.get(rid)
        if server is not None:
            why = str(server.attrs.get("otel_ebpf.correlation", ""))
            result.evidence[why] = result.evidence.get(why, 0) + 1
        if client is None or server is None:
            continue
        result.both_ends += 1
        result.one_trace += client.trace_id == server.trace_id
        result.linked += any(link.get("traceId") == server.trace_id
                             and link.get("spanId") == server.parent_span_id
                             for link in client.links)
    return result


def nat_lookups(path: Path) -> dict[str, int]:
    """An agent's latest otel_ebpf.nat.lookups, by result."""
    out: dict[str, int] = {}
    if not path.exists():
        return out
    for line in path.read_text().splitlines():
        for rm in json.loads(line).get("resourceMetrics", []):
            for sm in rm.get("scopeMetrics", []):
                for m in sm.get("metrics", []):
                    if m["name"] != "otel_ebpf.nat.lookups":
                        continue
                    for point in m.get("sum", {}).get("dataPoints", []):
                        attrs = {a["key"]: a["value"].get("stringValue")
                                 for a in point.get("attributes", [])}
                        if "result" in attrs:  # the unlabelled zero of a declared counter
                            out[attrs["result"]] = int(point.get("asInt", 0))
    return out


def run(requests_n: int, levels: list[int], routes: list[str], workdir: Path,
        overrides: dict | None = None, agent_tree: Path | None = None
        ) -> tuple[dict[tuple[str, int], Score], dict[str, int]]:
    """Everything, once: nodes, agents, topology, the load per route and level; every part
    stopped and removed in `finally`. Returns the scores and agent A's conntrack lookups.
    `agent_tree`: run the agents from that checkout (another commit), the rest from this."""
    from tests.integration.conftest import read_spans
    from tests.support.nodes import start_node_agent, two_nodes, wait_ready

    sent: dict[tuple[str, int], list[str]] = {}
    with two_nodes() as (a, b):
        agents = []
        topo = None
        try:
            env = None if agent_tree is None else {
                **os.environ, "PYTHONPATH": str(agent_tree),
                "OTEL_EBPF_BPF_DIR": str(agent_tree / "bpf" / "build")}
            agents = [start_node_agent(n, workdir / f"agent-{n.name}",
                                       node_overrides(n, overrides), env=env) for n in (a, b)]
            wait_ready(*agents)
            topo = start_topology(a, b, workdir)
            for route in routes:
                for level in levels:
                    out = topo.load(requests_n, level, route)
                    if out["errors"]:
                        print(f"  {route} c{level}: {out['errors']} errors, first "
                              f"{out['first_error']}", flush=True)
                    sent[(route, level)] = out["rids"]
            time.sleep(SETTLE_S)
        finally:
            for agent in agents:
                agent.stop()
            if topo is not None:
                topo.stop()
    spans_a, spans_b = read_spans(agents[0].traces), read_spans(agents[1].traces)
    scores = {key: score(rids, spans_a, spans_b) for key, rids in sent.items()}
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
    p.add_argument("program", nargs="?", choices=["server", "gateway", "loadgen"],
                   help="(internal) run one of the topology's programs")
    p.add_argument("--requests", type=int, default=40)
    p.add_argument("--levels", default="1,16", help="concurrencies, comma-separated")
    p.add_argument("--routes", default="direct,vip", help=f"of {', '.join(ROUTES)}")
    p.add_argument("--set", action="append", default=[], metavar="KEY=VALUE",
                   help="agent config override, e.g. receivers.ebpf.correlation.nat=false")
    p.add_argument("--workdir", type=Path)
    p.add_argument("--agent-tree", type=Path, help="run the agents from this checkout (its "
                   "C extensions and bpf/build built): another commit, same harness")
    # the load generator's own
    p.add_argument("--concurrency", type=int, default=1)
    p.add_argument("--via", default="direct")
    p.add_argument("--deadline", type=float, default=120.0)
    p.add_argument("--out", type=Path)
    a = p.parse_args(argv)
    if a.program in ("server", "gateway"):
        import uvicorn

        app = make_server() if a.program == "server" else make_gateway()
        uvicorn.run(app, host="0.0.0.0", port=SERVER_PORT if a.program == "server"  # noqa: S104
                    else GATEWAY_PORT, loop="asyncio", log_level="warning", access_log=False)
        return 0
    if a.program == "loadgen":
        summary = loadgen(a.requests, a.concurrency, a.via, a.deadline)
        a.out.write_text(json.dumps(summary))
        return 0
    if os.geteuid() != 0:
        print("needs root (network namespaces, nftables, BPF): run it with sudo",
              file=sys.stderr)
        return 1
    routes = [r for r in a.routes.split(",") if r]
    if any(r not in ROUTES for r in routes):
        p.error(f"--routes: of {', '.join(ROUTES)}")
    levels = [int(x) for x in a.levels.split(",") if x.strip()]
    import tempfile

    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="otel-ebpf-two-nodes-"))
    print(f"logs and spans under {workdir}", flush=True)
    scores, lookups = run(a.requests, levels, routes, workdir, parse_set(a.set),
                          a.agent_tree.resolve() if a.agent_tree else None)
    for (route, level), s in scores.items():
        print(f"{route:>15} c{level:<3} {s.row()}")
    print(f"agent A's conntrack lookups (otel_ebpf.nat.lookups): {lookups or 'none'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
