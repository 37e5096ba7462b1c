"""Two Kubernetes-like nodes on one machine, for kernel tests and benchmarks: one network
namespace per node, joined by a veth pair, each with a pod address, and a Service VIP on
node A made the way kube-proxy's nftables mode makes it.

    with two_nodes() as (a, b):
        server = b.spawn([python, "-m", "uvicorn", ...], log=tmp / "server.log")
        a.service("default/server", VIP, 80, b.address, 8080)  # kube-proxy's DNAT
        agent_a = start_node_agent(a, tmp / "a")      # one agent per node, in the root
        agent_b = start_node_agent(b, tmp / "b")      # namespace (BPF is global)
        gateway = a.spawn([...])

Addresses. Each node's pods get a /24 of the cluster's pod network 10.244.0.0/16 (node A
10.244.1.0/24, node B 10.244.2.0/24; each node's namespace holds one address of its /24 and
a route to the other's /24 over the veth, as flannel's host-gw backend routes between
nodes), and Services take VIPs from 10.96.0.0/12. These are the defaults a kubeadm cluster
with flannel uses, so the spans a test reads carry the addresses a user's would. They
cannot clash with the host's own networks: every namespace has its own addresses and routes,
and neither node has a default route, so nothing can leave them.

Selection. An agent runs in the root namespace (BPF programs see every namespace) and
selects a node by pid: every program of a node is started by that node's parent process
(tests/support/node_launcher.py, `Node.pid`), and `targets.pids` selects a process with its
descendants (bpf/include/ancestry.bpf.h: up to 4 generations). A command run with
`Node.exec` instead is a child of the test, in the node's namespace but outside its
selection: an untraced client on a traced node's network.

Cgroups. Where cgroup v2 is mounted (alone, or beside v1 at /sys/fs/cgroup/unified), each
node's parent, and so every program it starts, runs in a cgroup of its own,
`Node.cgroup`: what a per-node cgroup-attached BPF program (sock_ops) would be given.

Everything made is removed on the way out, in `finally`: the programs (their process
groups), the namespaces (and with them the veth pair and the nftables tables), the cgroups.
Names carry this process's pid and a random suffix, so runs side by side never share one.
"""

from __future__ import annotations

import base64
import contextlib
import hashlib
import itertools
import json
import os
import secrets
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass, field
from pathlib import Path

from tests.support.cgroups import PodCgroup, v2_root

REPO = Path(__file__).resolve().parents[2]
CLUSTER_CIDR = "10.244.0.0/16"
NODE_CIDRS = {"a": "10.244.1.0/24", "b": "10.244.2.0/24"}
NODE_ADDRESSES = {"a": "10.244.1.2", "b": "10.244.2.2"}
SERVICE_CIDR = "10.96.0.0/12"
COMMAND_TIMEOUT_S = 30.0
LAUNCHER_TIMEOUT_S = 30.0
AGENT_START_TIMEOUT_S = 420.0  # two at once on a loaded machine: their /proc scans and uprobes take a while
_serial = itertools.count()


def require_tools() -> str | None:
    """Why the harness cannot run here (None: it can): root, `ip`, `nft`."""
    if os.geteuid() != 0:
        return "two nodes need root (network namespaces, nftables)"
    for tool in ("ip", "nft"):
        if subprocess.run(["sh", "-c", f"command -v {tool}"], capture_output=True).returncode:
            return f"`{tool}` not installed (make deps: iproute2, nftables)"
    return None


def _run(argv: list[str], timeout_s: float = COMMAND_TIMEOUT_S, stdin: str | None = None
         ) -> str:
    out = subprocess.run(argv, input=stdin, capture_output=True, text=True, timeout=timeout_s)
    if out.returncode:
        raise RuntimeError(f"{' '.join(argv)} failed ({out.returncode}): {out.stderr.strip()}")
    return out.stdout


@dataclass(frozen=True)
class Service:
    """A ClusterIP Service with one endpoint (a pod's address and port)."""

    name: str  # namespace/name
    vip: str
    port: int
    endpoint: str
    target_port: int
    masquerade_all: bool = False  # kube-proxy's masqueradeAll: SNAT every connection


def _hash(text: str) -> str:
    """kube-proxy's chain-name hash: base32 of the SHA-256, first 8 characters."""
    return base64.b32encode(hashlib.sha256(text.encode()).digest()).decode()[:8]


def kube_proxy_rules(services: list[Service]) -> str:
    """An `nft -f` script that replaces the table with the ruleset kube-proxy's nftables
    mode (Kubernetes 1.31+, pkg/proxy/nftables/proxier.go) writes for ClusterIP Services of
    one endpoint each: the same table, chains, map and rules, in the same shapes (those of
    its unit tests' expected output, TestOverallNFTablesRules). Copied:

    - table `ip kube-proxy`; base chains `nat-prerouting` and `nat-output` (type nat, hooks
      prerouting and output, priority dstnat = -100) jumping to `services`, and
      `nat-postrouting` (hook postrouting, priority srcnat = 100) jumping to `masquerading`.
      The numbers are written where kube-proxy's library writes the names: nft before 1.0.7
      takes `dstnat` on the prerouting hook only;
    - `services`: `ip daddr . meta l4proto . th dport vmap @service-ips`, the map
      `service-ips` (ipv4_addr . inet_proto . inet_service : verdict) holding
      `VIP . tcp . port : goto service-<hash>-<namespace>/<name>/tcp/<port name>`;
    - each service chain: mark for masquerade what does not come from the cluster's pod
      network (`ip saddr != <cluster CIDR>`; every packet with masqueradeAll), then
      `numgen random mod <endpoints> vmap { 0 : goto endpoint-<hash>-...__<IP>/<port> }`;
    - each endpoint chain: hairpin traffic (`ip saddr <endpoint>`) marked for masquerade,
      then `meta l4proto tcp dnat to <endpoint>:<port>`;
    - `mark-for-masquerade` (`mark set mark or 0x4000`) and `masquerading` (`mark and
      0x4000 == 0 return`, `mark set mark xor 0x4000`, `masquerade fully-random`).

    Left out: the filter chains (firewall, reject of Services without endpoints), the
    nodeport and external IP maps, the endpoint affinity sets: none applies to a ClusterIP
    Service with a ready endpoint. Like kube-proxy's, the script replaces the whole table in
    one transaction."""
    t = "ip kube-proxy"
    head = [
        f"add table {t}",
        f"delete table {t}",
        f'add table {t} {{ comment "rules for kube-proxy" ; }}',
        f"add chain {t} mark-for-masquerade",
        f"add chain {t} masquerading",
        f"add chain {t} services",
        f"add chain {t} nat-prerouting {{ type nat hook prerouting priority -100 ; }}",
        f"add chain {t} nat-output {{ type nat hook output priority -100 ; }}",
        f"add chain {t} nat-postrouting {{ type nat hook postrouting priority 100 ; }}",
        f"add map {t} service-ips {{ type ipv4_addr . inet_proto . inet_service : verdict ; "
        'comment "ClusterIP, ExternalIP and LoadBalancer IP traffic" ; }',
    ]
    rules = [
        f"add rule {t} mark-for-masquerade mark set mark or 0x4000",
        f"add rule {t} masquerading mark and 0x4000 == 0 return",
        f"add rule {t} masquerading mark set mark xor 0x4000",
        f"add rule {t} masquerading masquerade fully-random",
        f"add rule {t} nat-prerouting jump services",
        f"add rule {t} nat-output jump services",
        f"add rule {t} nat-postrouting jump masquerading",
        f"add rule {t} services ip daddr . meta l4proto . th dport vmap @service-ips",
    ]
    for svc in services:
        port_name = f"{svc.name}/tcp/p{svc.port}"
        service = f"service-{_hash(port_name)}-{port_name}"
        target = f"{svc.endpoint}/{svc.target_port}"
        endpoint = f"endpoint-{_hash(port_name + target)}-{port_name}__{target}"
        masq = "" if svc.masquerade_all else f" ip saddr != {CLUSTER_CIDR}"
        head += [f"add chain {t} {service}", f"add chain {t} {endpoint}"]
        rules += [
            f"add rule {t} {service} ip daddr {svc.vip} tcp dport {svc.port}{masq} "
            "jump mark-for-masquerade",
            f"add rule {t} {service} numgen random mod 1 vmap {{ 0 : goto {endpoint} }}",
            f"add rule {t} {endpoint} ip saddr {svc.endpoint} jump mark-for-masquerade",
            f"add rule {t} {endpoint} meta l4proto tcp dnat to {svc.endpoint}:"
            f"{svc.target_port}",
            f"add element {t} service-ips {{ {svc.vip} . tcp . {svc.port} : goto {service} }}",
        ]
    return "\n".join(head + rules) + "\n"


@dataclass
class NodeProcess:
    """A program a node's parent started (its child, in its own process group)."""

    node: Node
    pid: int
    argv: list[str]
    log: Path | None = None
    returncode: int | None = None

    def poll(self) -> int | None:
        if self.returncode is None:
            self.returncode = self.node._ask({"op": "poll", "pid": self.pid})["returncode"]
        return self.returncode

    def wait(self, timeout_s: float) -> int | None:
        """The exit status, or None when it still runs after `timeout_s`."""
        if self.returncode is None:
            self.returncode = self.node._ask({"op": "wait", "pid": self.pid,
                                              "timeout": timeout_s})["returncode"]
        return self.returncode

    def signal(self, sig: int, group: bool = True) -> None:
        if self.returncode is None:
            self.node._ask({"op": "signal", "pid": self.pid, "signal": int(sig),
                            "group": group})

    def stop(self, grace_s: float = 10.0) -> int | None:
        """SIGTERM to its group, a bounded wait, then SIGKILL."""
        self.signal(signal.SIGTERM)
        if self.wait(grace_s) is None:
            self.signal(signal.SIGKILL)
            self.wait(10.0)
        return self.returncode

    def output(self) -> str:
        return self.log.read_text(errors="replace") if self.log and self.log.exists() else ""


@dataclass
class Node:
    """One node: its network namespace, address, and parent process (`pid`)."""

    name: str
    netns: str
    address: str
    cidr: str
    veth: str
    cgroup: Path | None = None
    launcher: subprocess.Popen | None = None
    processes: list[NodeProcess] = field(default_factory=list)
    services: list[Service] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock)

    @property
    def pid(self) -> int:
        """The node's parent process: `targets.pids` of its agent."""
        assert self.launcher is not None
        return self.launcher.pid

    def exec(self, argv: list[str], timeout_s: float = COMMAND_TIMEOUT_S, check: bool = True,
             **kw) -> subprocess.CompletedProcess:
        """Run a command in this node's namespace, as a child of the test (so outside the
        node's agent's selection), to completion."""
        out = subprocess.run(["ip", "netns", "exec", self.netns, *argv], capture_output=True,
                             text=True, timeout=timeout_s, **kw)
        if check and out.returncode:
            raise RuntimeError(f"in node {self.name}: {' '.join(argv)} failed "
                               f"({out.returncode}): {out.stderr.strip()[-2000:]}")
        return out

    def spawn(self, argv: list[str], env: dict[str, str] | None = None,
              cwd: str | Path | None = None, log: Path | None = None) -> NodeProcess:
        """Start a program as a child of the node's parent: in the node's namespace (and
        cgroup), selected by the node's agent."""
        answer = self._ask({"op": "spawn", "argv": [str(a) for a in argv],
                            "env": dict(os.environ if env is None else env),
                            "cwd": str(cwd or REPO), "log": str(log) if log else None})
        proc = NodeProcess(self, int(answer["pid"]), list(argv), log)
        self.processes.append(proc)
        return proc

    def service(self, name: str, vip: str, port: int, endpoint: str, target_port: int,
                masquerade_all: bool = False) -> Service:
        """A ClusterIP Service seen from this node: kube-proxy's nftables rules in this
        node's namespace (`kube_proxy_rules`, the table rewritten with every Service so
        far) DNAT `vip:port` to `endpoint:target_port`; the Service CIDR is routed over the
        veth, as a node routes it (towards its default gateway)."""
        svc = Service(name, vip, port, endpoint, target_port, masquerade_all)
        self.services.append(svc)
        self.exec(["nft", "-f", "-"], input=kube_proxy_rules(self.services))
        self.exec(["ip", "route", "replace", SERVICE_CIDR, "dev", self.veth])
        return svc

    def conntrack(self) -> str:
        """This namespace's conntrack table, as the kernel prints it."""
        return self.exec(["cat", "/proc/net/nf_conntrack"]).stdout

    def wait_port(self, port: int, proc: NodeProcess | None = None, timeout_s: float = 30.0
                  ) -> None:
        """Until something listens on `port` of this node (or `proc` ended: fail)."""
        deadline = time.monotonic() + timeout_s
        probe = ("import socket,sys\ntry:\n socket.create_connection(('127.0.0.1', "
                 f"{port}), timeout=1).close()\nexcept OSError:\n sys.exit(1)")
        while time.monotonic() < deadline:
            if proc is not None and proc.poll() is not None:
                raise RuntimeError(f"{proc.argv[:4]} in node {self.name} exited with "
                                   f"{proc.returncode}:\n{proc.output()[-2000:]}")
            if self.exec([sys.executable, "-c", probe], check=False).returncode == 0:
                return
            time.sleep(0.2)
        raise TimeoutError(f"nothing listens on port {port} of node {self.name} "
                           f"after {timeout_s}s")

    def _ask(self, request: dict) -> dict:
        assert self.launcher is not None and self.launcher.stdin and self.launcher.stdout
        with self._lock:
            if self.launcher.poll() is not None:
                raise RuntimeError(f"node {self.name}'s parent exited "
                                   f"({self.launcher.returncode})")
            self.launcher.stdin.write(json.dumps(request) + "\n")
            self.launcher.stdin.flush()
            line = self.launcher.stdout.readline()  # it answers every line, at once
        if not line:
            raise RuntimeError(f"node {self.name}'s parent closed its output")
        answer = json.loads(line)
        if "error" in answer:
            raise RuntimeError(f"node {self.name}: {answer['error']}")
        return answer


def _start_launcher(node: Node) -> None:
    argv = ["ip", "netns", "exec", node.netns, sys.executable, "-m",
            "tests.support.node_launcher"]
    if node.cgroup is not None:
        # joined before the exec (`ip netns exec` mounts a /sys of the namespace's own,
        # without the cgroup trees): every child starts inside
        argv = ["sh", "-c", f'echo $$ > "{node.cgroup}/cgroup.procs" && exec "$@"', "sh",
                *argv]
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(
        p for p in (str(REPO), os.environ.get("PYTHONPATH", "")) if p)}
    node.launcher = subprocess.Popen(
        argv, stdin=subprocess.PIPE,
        stdout=subprocess.PIPE, text=True, cwd=REPO, env=env)
    ready: list[str] = []
    reader = threading.Thread(target=lambda: ready.append(node.launcher.stdout.readline()),
                              daemon=True)
    reader.start()
    reader.join(LAUNCHER_TIMEOUT_S)
    if not ready or not ready[0]:
        raise RuntimeError(f"node {node.name}'s parent did not start "
                           f"(exit {node.launcher.poll()})")
    # sh and `ip netns exec` exec what follows (no fork): the pid it reports is the one
    # we started
    assert json.loads(ready[0])["ready"] == node.launcher.pid, ready[0]


def _stop_launcher(node: Node) -> None:
    launcher = node.launcher
    if launcher is None:
        return
    with contextlib.suppress(OSError):
        launcher.stdin.close()  # it stops every child, then exits
    try:
        launcher.wait(30)
    except subprocess.TimeoutExpired:
        launcher.kill()
        launcher.wait(10)
    with contextlib.suppress(OSError):
        launcher.stdout.close()


@contextlib.contextmanager
def two_nodes(cgroups: bool = True) -> Iterator[tuple[Node, Node]]:
    """Nodes A and B, joined by a veth pair; see the module's docstring."""
    why = require_tools()
    if why:
        raise RuntimeError(why)
    tag = f"{os.getpid()}-{next(_serial)}-{secrets.token_hex(2)}"
    nodes = [Node(name, f"otel-ebpf-node{name}-{tag}", NODE_ADDRESSES[name], NODE_CIDRS[name],
                  veth=f"eth-{tag[-4:]}-{name}") for name in ("a", "b")]
    a, b = nodes
    made: list[str] = []
    groups: list[PodCgroup] = []
    try:
        for node in nodes:
            _run(["ip", "netns", "add", node.netns])
            made.append(node.netns)
        # the veth is made inside A (so it goes with A's namespace), its peer moved to B
        _run(["ip", "-n", a.netns, "link", "add", a.veth, "type", "veth", "peer", "name",
              b.veth, "netns", b.netns])
        for node, other in ((a, b), (b, a)):
            ns = ["ip", "-n", node.netns]
            _run([*ns, "link", "set", "lo", "up"])
            _run([*ns, "addr", "add", f"{node.address}/32", "dev", node.veth])
            _run([*ns, "link", "set", node.veth, "up"])
            _run([*ns, "route", "add", other.cidr, "dev", node.veth])
        if cgroups:
            try:
                root = v2_root()
            except RuntimeError:  # no cgroup v2 here: the nodes go without
                root = None
            for node in nodes if root else ():
                group = PodCgroup(root, f"otel-ebpf-nodes-{tag}/{node.name}")
                groups.append(group)
                node.cgroup = group.path
        for node in nodes:
            _start_launcher(node)
        yield a, b
    finally:
        for node in nodes:
            _stop_launcher(node)
        for netns in made:  # takes its veth end and nftables tables with it
            with contextlib.suppress(Exception):
                _run(["ip", "netns", "del", netns])
        for group in reversed(groups):  # the first made their common parent
            with contextlib.suppress(OSError):
                group.remove()


def start_node_agent(node: Node, workdir: Path, overrides: dict | None = None,
                     env: dict[str, str] | None = None):
    """The real agent, in the root namespace, selecting node `node`'s programs (its parent's
    pid and descendants); spans and metrics in workdir/traces.jsonl. Returns an AgentRun
    (tests/integration/conftest.py) at once: `wait_ready` waits for it (agents start side
    by side); stop it with .stop()."""
    from tests.integration.conftest import AgentRun, agent_config  # noqa: PLC0415

    workdir.mkdir(parents=True, exist_ok=True)
    traces, cfg, err = workdir / "traces.jsonl", workdir / "agent.yaml", workdir / "agent.err"
    cfg.write_text(agent_config(traces, [], targets={"pids": [node.pid]},
                                overrides=overrides))
    with err.open("w") as err_file:
        proc = subprocess.Popen([str(Path(sys.executable).parent / "otel-ebpf"), "run", "-c",
                                 str(cfg)], stdout=subprocess.DEVNULL, stderr=err_file,
                                cwd=workdir, env=env)
    return AgentRun(proc, traces, err, extra={"config": cfg, "node": node.name})


def wait_ready(*agents, timeout_s: float = AGENT_START_TIMEOUT_S) -> None:
    """Until every agent printed `otel-ebpf ready` (they start side by side); raises with
    the log of one that ended or did not get there in time, after stopping them all."""
    deadline = time.monotonic() + timeout_s
    while True:
        pending = [a for a in agents if "otel-ebpf ready" not in a.stderr]
        if not pending:
            return
        dead = [a for a in pending if a.proc.poll() is not None]
        if dead or time.monotonic() > deadline:
            for agent in agents:
                agent.stop(5)
            culprit = (dead or pending)[0]
            raise RuntimeError(f"agent of node {culprit.extra.get('node')} not ready (exit "
                               f"{culprit.proc.returncode}):\n{culprit.stderr[-3000:]}")
        time.sleep(0.2)
