"""What trace context propagation across nodes costs, on against off side by side in one
run: the watched programs' CPU per request, TCP segments per request and the share of
them carrying the option, and the sock_ops program's time per run.

Run as root, from the repository root:

    sudo .venv/bin/python -m bench.propagation_cost [--rounds 5] [--requests 400]
                                                    [--concurrency 8] [--warmup 40]

The topology of bench/two_nodes.py (tests/support/nodes.py): two network namespaces as
nodes, joined by a veth pair, each in a cgroup v2 of its own; node A runs a FastAPI gateway
(`async def`, one shared `httpx.AsyncClient`) and the load generator, node B a Starlette
server streaming a chat completion as server-sent events; one agent per node. The gateway
calls the server by its pod address.

Every round starts both agents afresh, with `receivers.ebpf.propagation.enabled` on (each
agent's sock_ops program on its own node's cgroup) or off (nothing else differs), then a
fresh server and gateway (so every connection of the round is made under that agent: the
kernel asks for the option callbacks when a connection is established), then --warmup
requests and a pause past the server's keep-alive timeout (the kernel queues a call's
context at its first write, for its first segment; one it could not queue there, agent A
hands over after the fact for the connection's next segment: the warm-up's last such ones
leave on the closes of its idle connections, before the window, not in it), then
--requests requests at --concurrency, the figures taken around those, then everything of
the round stopped. Rounds alternate off, on, off, on...
(--rounds of each).

Per round:
  CPU        utime + stime of the gateway and of the server process (/proc/PID/stat) over
             the load, per request; each node's cgroup (cpu.stat usage_usec; node A's holds
             the load generator too); each agent's, over the load and the SETTLE_S after it
             (spans wait for their context up to twice the correlation window)
  segments   TcpOutSegs of each node's namespace (node A's counts the load generator's
             loopback traffic to the gateway too) and the packets each node's veth sent
             (only the traffic between the nodes), per request
  options    the kernel's counts (the capture object's `counters` map: prop_at_send,
             prop_written, prop_received, prop_no_room...) and the share of node A's packets
             to node B that carried one
  sock_ops   run_cnt and run_time_ns of each node's program (kernel.bpf_stats_enabled on
             for the run, restored after), per run and per request
  BPF        run_time_ns of every program each agent holds (the syscall programs that
             queue a context at a call's first write too), over the load, both modes: in
             all, and by program where the modes differ
  one trace  of the round's requests, those whose gateway CLIENT span and server SERVER
             span share a trace ID (bench/two_nodes.py's score): that the option did its job

Prints a line per round, then medians [min–max] of each mode and on/off ratios, and writes
every round's figures to WORKDIR/rounds.json. An "on" round in which fewer than half the
requests' contexts reached node B is flagged (its option and sock_ops figures measure a
cost hardly paid), with agent A's count of contexts by outcome: contexts handed over after
the fact ride the connection's next segment, a connection keeps at most PROP_SLOTS waiting,
and when they come after the load's connections went quiet most are never sent.
bench/tcp_option_cost.py measures the option program alone on a bare connection (no agent,
no application).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import asdict, dataclass, field
from pathlib import Path

from bench.agent_process import proc_cpu_s
from bench.tcp_option_cost import STATS, out_segs
from bench.two_nodes import node_overrides, score, start_topology
from tests.integration.conftest import read_metric_by

ROUTE = "direct"  # the pod's address: the NAT routes cost the same option, plus conntrack
SETTLE_S = 6.0  # > twice the correlation window (spans waiting for a context) and > uvicorn's
# 5 s keep-alive timeout (the idle connections close, so contexts still queued leave on the
# FINs, in the window: the same closes in both modes)
WARM_SETTLE_S = SETTLE_S  # after the warm-up, as long: a context handed over after the fact
# rides its connection's next segment, so the warm-up's last such ones wait on its idle
# connections until they close; counted in the window they would add the warm-up's requests
# to the measured ones
BPFTOOL_TIMEOUT_S = 20.0
MODES = ("off", "on")
TOOK_SHARE = 0.5  # of the requests' contexts received at node B: below, the round is flagged
PROP_COUNTERS = ("prop_written", "prop_no_room", "prop_received", "prop_refused",
                 "prop_untrusted_dst", "prop_at_send", "prop_slots_full")


def overrides(node, on: bool) -> dict | None:
    """The agent config of a mode: only `propagation` differs (bench/two_nodes.py's
    node_overrides puts each agent's program on its own node's cgroup: two agents share one
    kernel here, and a program on the root would act for both nodes' sockets)."""
    return node_overrides(node, {"receivers": {"ebpf": {"propagation": {"enabled": on}}}})


# ---- kernel readings -------------------------------------------------------------------

def bpftool(*argv: str):
    out = subprocess.run(["bpftool", "-j", *argv], capture_output=True, text=True,
                         timeout=BPFTOOL_TIMEOUT_S)
    if out.returncode:
        raise RuntimeError(f"bpftool {' '.join(argv)} failed: {out.stderr.strip()[-500:]}")
    # nothing at all (not even `[]`) where a cgroup has no program attached
    return json.loads(out.stdout) if out.stdout.strip() else None


@dataclass
class SockOps:
    """The sock_ops program attached to a node's cgroup, and its object's counters map."""

    prog_id: int
    counters_map: int

    @classmethod
    def of_cgroup(cls, cgroup: Path) -> SockOps | None:
        """None when no sock_ops program is attached there (propagation off)."""
        progs = [p for p in bpftool("cgroup", "show", str(cgroup)) or []
                 if "sock_ops" in p.get("attach_type", "")]  # cgroup_sock_ops
        if not progs:
            return None
        if len(progs) > 1:
            raise RuntimeError(f"{len(progs)} sock_ops programs on {cgroup}: {progs}")
        prog_id = int(progs[0]["id"])
        maps = [m for mid in bpftool("prog", "show", "id", str(prog_id)).get("map_ids", [])
                if (m := bpftool("map", "show", "id", str(mid))).get("name") == "counters"]
        if len(maps) != 1:
            raise RuntimeError(f"program {prog_id}: {len(maps)} maps named counters")
        return cls(prog_id, int(maps[0]["id"]))

    def stats(self) -> tuple[int, int]:
        """(run_cnt, run_time_ns): they grow only while kernel.bpf_stats_enabled is 1."""
        info = bpftool("prog", "show", "id", str(self.prog_id))
        return int(info.get("run_cnt", 0)), int(info.get("run_time_ns", 0))

    def counters(self) -> dict[str, int]:
        """The option's kernel counts, summed over CPUs (otel_ebpf/kernel/abi.py names the
        slots of the per-CPU array)."""
        from otel_ebpf.kernel.abi import COUNTER_NAMES

        out: dict[str, int] = {}
        for entry in bpftool("map", "dump", "id", str(self.counters_map)):
            key = _int(entry["key"])
            name = COUNTER_NAMES.get(key)
            if name in PROP_COUNTERS:
                out[name] = sum(_int(v["value"]) for v in entry["values"])
        return out


def _int(value) -> int:
    """bpftool's raw JSON: an int, or little-endian bytes as hex strings."""
    if isinstance(value, int):
        return value
    return int.from_bytes(bytes(int(b, 16) for b in value), "little")


def veth_tx_packets(node) -> int:
    """Packets the node's end of the veth sent: only the traffic to the other node (`ip
    netns exec` mounts the namespace's own /sys)."""
    out = node.exec(["cat", f"/sys/class/net/{node.veth}/statistics/tx_packets"])
    return int(out.stdout.strip())


def cgroup_cpu_us(node) -> int:
    """usage_usec of the node's cgroup (present without the cpu controller enabled)."""
    for line in (Path(node.cgroup) / "cpu.stat").read_text().splitlines():
        key, _, value = line.partition(" ")
        if key == "usage_usec":
            return int(value)
    raise RuntimeError(f"no usage_usec in {node.cgroup}/cpu.stat")


def agent_bpf(pid: int, names: dict[int, str], proc: str = "/proc") -> dict[str, int]:
    """run_time_ns by program name, over every BPF program the agent process holds (the
    fdinfo of its program fds: the capture's syscall and uprobe programs, the option's
    sock_ops, ...): the kernel time the agent's programs took, in both modes. `names`: the
    programs' names by id (prog_names)."""
    out: dict[str, int] = {}
    for info in Path(proc, str(pid), "fdinfo").iterdir():
        try:
            fields = dict(line.split(":", 1) for line in info.read_text().splitlines()
                          if ":" in line)
        except OSError:  # an fd closed meanwhile
            continue
        if "prog_type" in fields and "run_time_ns" in fields:  # a program, not a link or map
            name = names.get(int(fields["prog_id"]), f"id {int(fields['prog_id'])}")
            out[name] = out.get(name, 0) + int(fields["run_time_ns"])
    return out


def prog_names() -> dict[int, str]:
    return {int(p["id"]): p.get("name", "") for p in bpftool("prog", "show") or []}


def stats_enabled() -> bool:
    return STATS.read_text().strip() == "1"


# ---- one round -------------------------------------------------------------------------

@dataclass
class Round:
    mode: str
    index: int
    requests: int = 0  # answered, measured
    errors: int = 0
    load_s: float = 0.0
    cpu_s: dict[str, float] = field(default_factory=dict)  # gateway, server (the load)
    cgroup_s: dict[str, float] = field(default_factory=dict)  # node a, b (the load)
    agent_cpu_s: dict[str, float] = field(default_factory=dict)  # a, b (load + settle)
    out_segs: dict[str, int] = field(default_factory=dict)  # a, b (load + settle)
    veth_tx: dict[str, int] = field(default_factory=dict)  # a, b (load + settle)
    runs: dict[str, int] = field(default_factory=dict)  # sock_ops run_cnt, a, b
    # every program of each agent over the load, by name, a, b
    bpf_ns: dict[str, dict[str, int]] = field(default_factory=dict)
    run_ns: dict[str, int] = field(default_factory=dict)  # sock_ops run_time_ns, a, b
    options: dict[str, dict[str, int]] = field(default_factory=dict)  # kernel counts, a, b
    contexts: dict[str, dict[str, int]] = field(default_factory=dict)  # agents' metric
    stats_on: bool = True  # kernel.bpf_stats_enabled stayed 1 through the window
    one_trace: int = 0
    linked: int = 0
    both_ends: int = 0

    def per_request(self, value: float) -> float:
        return value / self.requests if self.requests else float("nan")

    @property
    def took(self) -> bool:
        """An "on" round in which most requests' contexts reached node B: one in which they
        were not (contexts handed over after the connections went quiet: at most PROP_SLOTS
        per connection, the rest counted unsent) measures a cost that was hardly paid."""
        if self.mode != "on":
            return True
        received = self.options.get("b", {}).get("prop_received", 0)
        return received >= TOOK_SHARE * self.requests


def _bpf(agents) -> dict[str, dict[str, int]]:
    names = prog_names()
    return {key: agent_bpf(agent.proc.pid, names) for key, agent in zip(("a", "b"), agents)}


def _programs(topo) -> tuple:
    """(gateway, server): the processes of start_topology's one (async) gateway and its
    HTTP server, by their argv."""
    by_role = {p.argv[p.argv.index("bench.two_nodes") + 1]: p for p in topo.procs
               if "bench.two_nodes" in p.argv}
    return by_role["gateway"], by_role["server"]


def _snapshot(a, b, topo, agents, progs: dict) -> dict:
    gateway, server = _programs(topo)
    snap = {"cpu": {"gateway": proc_cpu_s(gateway.pid), "server": proc_cpu_s(server.pid)},
            "cgroup": {"a": cgroup_cpu_us(a), "b": cgroup_cpu_us(b)},
            "agent": {"a": proc_cpu_s(agents[0].proc.pid), "b": proc_cpu_s(agents[1].proc.pid)},
            "segs": {"a": out_segs(a.netns), "b": out_segs(b.netns)},
            "veth": {"a": veth_tx_packets(a), "b": veth_tx_packets(b)},
            "bpf": _bpf(agents),
            "stats": {}, "counters": {}}
    for name, prog in progs.items():
        if prog is not None:
            snap["stats"][name] = prog.stats()
            snap["counters"][name] = prog.counters()
    return snap


def one_round(a, b, mode: str, index: int, requests_n: int, concurrency: int, warmup: int,
              workdir: Path) -> Round:
    """Agents, topology, warm-up, the measured load, the settle; all stopped in `finally`."""
    from tests.integration.conftest import read_spans
    from tests.support.nodes import start_node_agent, wait_ready

    on = mode == "on"
    out = Round(mode, index)
    agents, topo = [], None
    try:
        agents = [start_node_agent(a, workdir / "agent-a", overrides(a, on)),
                  start_node_agent(b, workdir / "agent-b", overrides(b, on))]
        wait_ready(*agents)
        # each round makes the Services again: forget the last round's, so that node A's
        # kube-proxy table is rewritten with the same two, not a growing list
        a.services.clear()
        # this bench's own warm-up below (the pod address only, at the load's concurrency):
        # not start_topology's, through every route
        topo = start_topology(a, b, workdir, warm=False)
        progs = {n.name: SockOps.of_cgroup(n.cgroup) for n in (a, b)}
        if on and None in progs.values():
            raise RuntimeError(f"propagation on, but a node has no sock_ops program: {progs}")
        if not on and any(progs.values()):
            raise RuntimeError(f"propagation off, but a sock_ops program is attached: {progs}")
        if warmup:
            topo.load(warmup, concurrency, ROUTE)
        time.sleep(WARM_SETTLE_S)
        STATS.write_text("1")  # again: another bench may have turned it off meanwhile
        before = _snapshot(a, b, topo, agents, progs)
        t0 = time.monotonic()
        load = topo.load(requests_n, concurrency, ROUTE)
        out.load_s = time.monotonic() - t0
        gateway, server = _programs(topo)
        # the watched programs over the load only; the rest after the settle
        out.cpu_s = {"gateway": proc_cpu_s(gateway.pid) - before["cpu"]["gateway"],
                     "server": proc_cpu_s(server.pid) - before["cpu"]["server"]}
        out.cgroup_s = {n.name: (cgroup_cpu_us(n) - before["cgroup"][n.name]) / 1e6
                        for n in (a, b)}
        out.bpf_ns = {key: {name: ns - before["bpf"][key].get(name, 0)
                            for name, ns in by_name.items()}
                      for key, by_name in _bpf(agents).items()}
        out.stats_on = stats_enabled()
        time.sleep(SETTLE_S)
        after = _snapshot(a, b, topo, agents, progs)
        out.stats_on = out.stats_on and stats_enabled()
        out.requests, out.errors = len(load["rids"]), load["errors"]
        for key in ("a", "b"):
            out.agent_cpu_s[key] = after["agent"][key] - before["agent"][key]
            out.out_segs[key] = after["segs"][key] - before["segs"][key]
            out.veth_tx[key] = after["veth"][key] - before["veth"][key]
            if key in after["stats"]:
                out.runs[key] = after["stats"][key][0] - before["stats"][key][0]
                out.run_ns[key] = after["stats"][key][1] - before["stats"][key][1]
                out.options[key] = {c: after["counters"][key].get(c, 0)
                                    - before["counters"][key].get(c, 0) for c in PROP_COUNTERS}
        rids = load["rids"]
    finally:
        for agent in agents:
            agent.stop()
        if topo is not None:
            topo.stop()
    # the agents flushed on the way out: their last metrics and spans are in their files
    for key, agent in zip(("a", "b"), agents):
        out.contexts[key] = read_metric_by(agent.traces, "otel_ebpf.propagation.contexts",
                                      "outcome")
    result = score(rids, read_spans(agents[0].traces), read_spans(agents[1].traces))
    out.one_trace, out.linked, out.both_ends = result.one_trace, result.linked, result.both_ends
    return out


def run(rounds: int, requests_n: int, concurrency: int, warmup: int, workdir: Path,
        progress=print) -> list[Round]:
    """`rounds` rounds of each mode, alternated (off, on, off, on...), on one pair of nodes;
    kernel.bpf_stats_enabled on meanwhile, put back as it was in `finally`."""
    from tests.support.nodes import two_nodes

    results: list[Round] = []
    stats_before = STATS.read_text().strip()
    with two_nodes() as (a, b):
        if a.cgroup is None or b.cgroup is None:
            raise RuntimeError("no cgroup v2 here: the nodes need one each")
        try:
            STATS.write_text("1")
            for i in range(rounds):
                for mode in MODES:
                    t0 = time.monotonic()
                    r = one_round(a, b, mode, i, requests_n, concurrency, warmup,
                                  workdir / f"round{i + 1}-{mode}")
                    results.append(r)
                    progress(f"round {i + 1}/{rounds} {mode:3}: {line(r)} "
                             f"({time.monotonic() - t0:.0f} s)")
        finally:
            STATS.write_text(stats_before)
    return results


# ---- the report ------------------------------------------------------------------------

def figures(r: Round) -> dict[str, float | None]:
    """A round's figures, per request unless named otherwise (None: not measured)."""
    us = 1e6
    f: dict[str, float | None] = {
        "app_us": r.per_request(r.cpu_s["gateway"] + r.cpu_s["server"]) * us,
        "gateway_us": r.per_request(r.cpu_s["gateway"]) * us,
        "server_us": r.per_request(r.cpu_s["server"]) * us,
        "node_a_us": r.per_request(r.cgroup_s["a"]) * us,
        "node_b_us": r.per_request(r.cgroup_s["b"]) * us,
        "agent_a_us": r.per_request(r.agent_cpu_s["a"]) * us,
        "agent_b_us": r.per_request(r.agent_cpu_s["b"]) * us,
        "segs_a": r.per_request(r.out_segs["a"]),
        "segs_b": r.per_request(r.out_segs["b"]),
        "veth_a": r.per_request(r.veth_tx["a"]),
        "veth_b": r.per_request(r.veth_tx["b"]),
        "bpf_a_us": r.per_request(sum(r.bpf_ns.get("a", {}).values())) / 1e3,
        "bpf_b_us": r.per_request(sum(r.bpf_ns.get("b", {}).values())) / 1e3,
        "written": None, "share": None, "received": None, "no_room": None,
        "at_send": None, "slots_full": None,
        "runs_a": None, "runs_b": None, "ns_run_a": None, "ns_run_b": None,
        "ns_req_a": None, "ns_req_b": None,
    }
    if r.options:
        written = r.options["a"]["prop_written"]
        f["written"] = r.per_request(written)
        f["share"] = written / r.veth_tx["a"] if r.veth_tx["a"] else None
        f["received"] = r.per_request(r.options["b"]["prop_received"])
        f["no_room"] = r.per_request(r.options["a"]["prop_no_room"])
        f["at_send"] = r.per_request(r.options["a"].get("prop_at_send", 0))
        f["slots_full"] = r.per_request(r.options["a"].get("prop_slots_full", 0))
    for key in r.runs:
        f[f"runs_{key}"] = r.per_request(r.runs[key])
        f[f"ns_run_{key}"] = r.run_ns[key] / r.runs[key] if r.runs[key] else None
        f[f"ns_req_{key}"] = r.per_request(r.run_ns[key])
    return f


def line(r: Round) -> str:
    f = figures(r)
    text = (f"{r.requests} requests ({r.errors} errors) in {r.load_s:.1f} s, gateway+server "
            f"{f['app_us']:.0f} µs/request, segments out A {f['segs_a']:.2f} B "
            f"{f['segs_b']:.2f} (A->B {f['veth_a']:.2f}), agents A {f['agent_a_us']:.0f} B "
            f"{f['agent_b_us']:.0f} µs/request (BPF A {f['bpf_a_us']:.1f} B "
            f"{f['bpf_b_us']:.1f}), one trace {r.one_trace}/{r.requests}")
    if r.runs:
        text += (f"; options {f['written']:.2f}/request ({100 * (f['share'] or 0):.0f} % of "
                 f"A->B, {f['at_send']:.2f} queued at send), sock_ops A {f['runs_a']:.1f} "
                 f"runs x {f['ns_run_a'] or 0:.0f} ns, B {f['runs_b']:.2f} x "
                 f"{f['ns_run_b'] or 0:.0f} ns")
    if not r.stats_on:
        text += " [kernel.bpf_stats_enabled was turned off meanwhile]"
    if not r.took:
        text += (" [propagation did not take: agent A's contexts "
                 f"{r.contexts.get('a', {})}]")
    return text


ROWS = [  # (figure, label, format)
    ("app_us", "gateway + server CPU per request (µs)", ".0f"),
    ("gateway_us", "  gateway (node A)", ".0f"),
    ("server_us", "  server (node B)", ".0f"),
    ("node_a_us", "node A's cgroup (gateway and load generator) per request (µs)", ".0f"),
    ("node_b_us", "node B's cgroup (server) per request (µs)", ".0f"),
    ("agent_a_us", "agent A CPU per request (µs, load and settle)", ".0f"),
    ("agent_b_us", "agent B CPU per request (µs, load and settle)", ".0f"),
    ("bpf_a_us", "agent A's BPF programs per request (µs, the load)", ".1f"),
    ("bpf_b_us", "agent B's BPF programs per request (µs, the load)", ".1f"),
    ("segs_a", "TCP segments out of node A per request (with loopback)", ".2f"),
    ("segs_b", "TCP segments out of node B per request", ".2f"),
    ("veth_a", "packets node A -> node B per request", ".2f"),
    ("veth_b", "packets node B -> node A per request", ".2f"),
    ("written", "options written per request (node A)", ".2f"),
    ("share", "share of A -> B packets carrying an option", ".3f"),
    ("received", "options received per request (node B)", ".2f"),
    ("no_room", "segments without room for a pending option per request", ".3f"),
    ("at_send", "contexts queued by the kernel at a call's first write per request", ".2f"),
    ("slots_full", "contexts not queued at send, 4 pending, per request", ".3f"),
    ("runs_a", "sock_ops runs per request, node A", ".2f"),
    ("ns_run_a", "sock_ops ns per run, node A", ".0f"),
    ("ns_req_a", "sock_ops ns per request, node A", ".0f"),
    ("runs_b", "sock_ops runs per request, node B", ".2f"),
    ("ns_run_b", "sock_ops ns per run, node B", ".0f"),
    ("ns_req_b", "sock_ops ns per request, node B", ".0f"),
]


def spread(values: list[float], fmt: str) -> str:
    return (f"{format(statistics.median(values), fmt)} "
            f"[{format(min(values), fmt)}–{format(max(values), fmt)}]")


def report(rounds: list[Round]) -> str:
    """Markdown: medians [min–max] per mode, the ratio of the medians, and the median
    [min–max] of the on/off ratios of each round's pair (off i, on i: run back to back)."""
    by_mode = {m: [figures(r) for r in rounds if r.mode == m] for m in MODES}
    n = min(len(v) for v in by_mode.values())
    lines = ["| per request | off | on | on / off (medians) | on / off (pairs) |",
             "|---|---:|---:|---:|---:|"]
    for key, label, fmt in ROWS:
        cells = []
        for m in MODES:
            xs = [f[key] for f in by_mode[m] if f[key] is not None]
            cells.append(spread(xs, fmt) if xs else "–")
        offs = [f[key] for f in by_mode["off"]]
        ons = [f[key] for f in by_mode["on"]]
        ratio = pairs = "–"
        if all(x for x in offs) and all(x is not None for x in ons) and offs:
            ratio = f"{statistics.median(ons) / statistics.median(offs):.3f}"
            pairs = spread([ons[i] / offs[i] for i in range(n)], ".3f")
        lines.append(f"| {label} | {cells[0]} | {cells[1]} | {ratio} | {pairs} |")
    traced = {m: f"{sum(r.one_trace for r in rounds if r.mode == m)} of "
                 f"{sum(r.requests for r in rounds if r.mode == m)}" for m in MODES}
    lines.append(f"\none trace: off {traced['off']}, on {traced['on']}; errors: "
                 f"{sum(r.errors for r in rounds)}")
    short = [f"{r.index + 1}" for r in rounds if not r.took]
    if short:
        lines.append(f"on rounds in which fewer than {TOOK_SHARE:.0%} of the requests' contexts "
                     f"reached node B (their option and sock_ops figures are short): "
                     f"{', '.join(short)}")
    if not all(r.stats_on for r in rounds):
        lines.append("kernel.bpf_stats_enabled was turned off during some round: its sock_ops "
                     "figures are short")
    return "\n".join(lines)


def program_report(rounds: list[Round], least_us: float = 0.2) -> str:
    """Markdown: each agent's programs whose median time per request differs by `least_us`
    or more between the modes, largest difference first: where the BPF time goes."""
    lines = ["| agent | program | off µs/request | on µs/request | on − off |",
             "|---|---|---:|---:|---:|"]
    for key in ("a", "b"):
        names = {name for r in rounds for name in r.bpf_ns.get(key, {})}
        rows = []
        for name in names:
            med = {m: statistics.median([r.per_request(r.bpf_ns.get(key, {}).get(name, 0))
                                         / 1e3 for r in rounds if r.mode == m] or [0.0])
                   for m in MODES}
            if abs(med["on"] - med["off"]) >= least_us:
                rows.append((med["on"] - med["off"], name, med))
        for delta, name, med in sorted(rows, key=lambda row: -row[0]):
            lines.append(f"| {key.upper()} | {name} | {med['off']:.2f} | {med['on']:.2f} | "
                         f"{delta:+.2f} |")
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m bench.propagation_cost", description=__doc__,
                                formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--rounds", type=int, default=5, help="rounds of each mode")
    p.add_argument("--requests", type=int, default=400, help="measured requests per round")
    p.add_argument("--concurrency", type=int, default=8)
    p.add_argument("--warmup", type=int, default=40, help="unmeasured requests per round")
    p.add_argument("--workdir", type=Path)
    a = p.parse_args(argv)
    if os.geteuid() != 0:
        print("needs root (network namespaces, cgroups, BPF): run it with sudo",
              file=sys.stderr)
        return 1
    if min(a.rounds, a.requests, a.concurrency) < 1 or a.warmup < 0:
        p.error("--rounds, --requests and --concurrency at least 1, --warmup at least 0")
    workdir = a.workdir or Path(tempfile.mkdtemp(prefix="otel-ebpf-propagation-cost-"))
    print(f"logs, spans and rounds.json under {workdir}", flush=True)
    rounds = run(a.rounds, a.requests, a.concurrency, a.warmup, workdir,
                 progress=lambda text: print(text, flush=True))
    (workdir / "rounds.json").write_text(json.dumps([asdict(r) for r in rounds], indent=1))
    print(f"\n{a.rounds} rounds of each mode, alternated; {a.requests} requests at "
          f"concurrency {a.concurrency} per round (after {a.warmup} unmeasured); medians "
          "[min–max]\n")
    print(report(rounds))
    print("\nBPF time by program, medians (differing by 0.2 µs per request or more)\n")
    print(program_report(rounds))
    return 0


if __name__ == "__main__":
    sys.exit(main())
