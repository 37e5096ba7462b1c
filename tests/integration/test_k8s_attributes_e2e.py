"""Kubernetes attributes on exported spans, end to end: two servers run in real cgroups
shaped as a kubelet and a container runtime name them (cgroup v2 with the systemd driver
and containerd; cgroup v1 with the cgroupfs driver and docker), the agent reads each
one's container.id and k8s.pod.uid from its cgroup and the pod's names from a kubelet's
pod list (a pod list server over HTTPS, in its own process), and a real OTLP receiver
(rotel) gets spans with them."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import uuid

import pytest
import trustme

from tests.support.cgroups import PodCgroup, v1_root, v2_root
from tests.support.processes import stop_process
from tests.support.rotel import Rotel

from .conftest import KEEP_ALIVE_S, REPO, VENV_BIN, free_port, run_client, wait_port

pytestmark = pytest.mark.kernel
SERVER = 2


def _pod(name: str, uid: str, cid: str, container: str) -> dict:
    rs = f"{name}-5f7d8c9b6a"
    return {"metadata": {"name": f"{rs}-q7x2z", "namespace": "inference", "uid": uid,
                         "labels": {"pod-template-hash": "5f7d8c9b6a"},
                         "ownerReferences": [{"kind": "ReplicaSet", "name": rs,
                                              "uid": str(uuid.uuid4()), "controller": True}]},
            "spec": {"nodeName": "node-test"},
            "status": {"containerStatuses": [{"name": container,
                                              "containerID": f"containerd://{cid}"}]}}


@pytest.fixture
def pods(tmp_path):
    """Two pods' cgroups, each with an HTTP server in it, and the kubelet's list of them."""
    pod_a, pod_b = str(uuid.uuid4()), str(uuid.uuid4())
    cid_a, cid_b = os.urandom(32).hex(), os.urandom(32).hex()
    tag = uuid.uuid4().hex[:8]  # parallel runs never share a cgroup
    cgroups = [
        PodCgroup(v2_root(), f"kubepods-{tag}.slice/kubepods-{tag}-burstable.slice/"
                  f"kubepods-{tag}-burstable-pod{pod_a.replace('-', '_')}.slice/"
                  f"cri-containerd-{cid_a}.scope"),
        PodCgroup(v1_root(), f"kubepods-{tag}/besteffort/pod{pod_b}/{cid_b}"),
    ]
    procs, ports = [], []
    try:
        for i, cg in enumerate(cgroups):
            port = free_port()
            log = tmp_path / f"server-{i}.log"
            procs.append(subprocess.Popen(
                cg.wrap([str(VENV_BIN / "uvicorn"), "tests.integration.peers.http_app:app",
                         "--host", "127.0.0.1", "--port", str(port), "--no-access-log",
                         "--timeout-keep-alive", str(KEEP_ALIVE_S)]),
                cwd=REPO, stdout=log.open("w"), stderr=subprocess.STDOUT))
            wait_port(port, procs[-1], log)
            ports.append(port)
        listing = tmp_path / "pods.json"
        listing.write_text(json.dumps({"kind": "PodList", "items": [
            _pod("rag", pod_a, cid_a, "rag-api"), _pod("llm", pod_b, cid_b, "llm-server")]}))
        yield {"ports": ports, "uids": (pod_a, pod_b), "cids": (cid_a, cid_b),
               "listing": listing}
    finally:
        for proc in procs:
            stop_process(proc)
        for cg in cgroups:
            cg.remove()


@pytest.fixture
def kubelet(tmp_path, pods):
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    paths = {n: tmp_path / f"{n}.pem" for n in ("cert", "key", "ca")}
    cert.cert_chain_pems[0].write_to_path(str(paths["cert"]))
    cert.private_key_pem.write_to_path(str(paths["key"]))
    ca.cert_pem.write_to_path(str(paths["ca"]))
    token = tmp_path / "token"
    token.write_text("node-agent-token")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.pod_list_server", str(port), str(paths["cert"]),
         str(paths["key"]), "node-agent-token", str(pods["listing"])],
        cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "listening"
        yield {"endpoint": f"https://127.0.0.1:{port}", "ca_file": str(paths["ca"]),
               "token_file": str(token)}
    finally:
        stop_process(proc)


def test_spans_carry_pod_attributes(start_agent, pods, kubelet, tmp_path):
    collector = Rotel(tmp_path)
    try:
        agent = start_agent(
            pods["ports"],
            exporters={"otlp": {"endpoint": f"127.0.0.1:{collector.grpc_port}",
                                "tls": {"insecure": True}, "timeout": "5s"}},
            overrides={"receivers": {"ebpf": {"kubernetes": {
                "node_name": "node-test",
                "metadata": {"source": "kubelet", "interval": "1h", **kubelet}}}}})
        paths = [f"/items/{uuid.uuid4().hex[:10]}" for _ in pods["ports"]]
        for port, path in zip(pods["ports"], paths, strict=True):
            run_client("requests", port, [path])

        def servers(spans):
            return {s.attrs.get("url.path"): s for s in spans
                    if s.kind == SERVER and s.attrs.get("url.path") in paths}

        got = servers(agent.wait_for(lambda s: len(servers(s)) == len(paths), timeout_s=60))
        assert set(got) == set(paths), [s.attrs.get("url.path") for s in agent.spans()]
        # what rotel printed: the resource of each server's spans, received over OTLP/gRPC
        collector.wait_for(*paths, *pods["uids"], *pods["cids"], "rag-api", "llm-server")
        assert agent.stop() == 0
    finally:
        collector.stop()
    for path, uid, cid, pod, container in zip(
            paths, pods["uids"], pods["cids"], ("rag", "llm"), ("rag-api", "llm-server"),
            strict=True):
        res = got[path].resource
        assert res["k8s.pod.uid"] == uid and res["container.id"] == cid, res
        assert res["k8s.pod.name"] == f"{pod}-5f7d8c9b6a-q7x2z"
        assert res["k8s.namespace.name"] == "inference"
        assert res["k8s.container.name"] == container
        assert res["k8s.deployment.name"] == pod
        assert res["k8s.replicaset.name"] == f"{pod}-5f7d8c9b6a"
        assert res["k8s.node.name"] == "node-test"
    # the client ran in no pod: nothing of a pod on its spans
    clients = [s for s in agent.spans() if s.kind == 3 and s.attrs.get("url.path") in paths]
    assert clients and all("k8s.pod.uid" not in s.resource for s in clients)
