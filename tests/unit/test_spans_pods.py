"""Pod metadata: a kubelet's PodList parsed into resource attributes, and the poller
against a pod list server over HTTPS in its own process (token, CA, RBAC errors)."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
import time
from pathlib import Path

import pytest
import trustme
import yaml

from otel_ebpf.config import ConfigError, parse_config
from otel_ebpf.spans.pods import (
    PodListError,
    PodMetadata,
    PodMetadataSettings,
    parse_pod_list,
    pod_resource,
)
from otel_ebpf.telemetry import Stats
from tests.support.ports import free_port
from tests.support.processes import stop_process

REPO = Path(__file__).resolve().parents[2]
PODS = Path(__file__).parent / "data" / "kubelet-pods.json"
UID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
CID = "4d3f5c6b7a8e9d0c1b2a3f4e5d6c7b8a99887766554433221100ffeeddccbbaa"
STATIC = "5c1a0b8e2f9d4c3b7a6e5d4c3b2a1f0e"
TOKEN = "sa-token-for-the-test"


def test_pod_list_attributes():
    pods = parse_pod_list(PODS.read_bytes())
    app = pods[UID]
    assert app.attributes == {
        "k8s.pod.name": "checkout-7d9f8b6c5d-x2k4q", "k8s.namespace.name": "shop",
        "k8s.node.name": "node-a", "k8s.replicaset.name": "checkout-7d9f8b6c5d",
        "k8s.replicaset.uid": "9f8e7d6c-5b4a-4392-8170-6f5e4d3c2b1a",
        "k8s.deployment.name": "checkout",
    }
    assert app.containers[CID] == "app"
    assert app.containers["1" * 64] == "migrate"  # init containers too
    # a static pod: known by its manifest hash, owned by a Node (no owner attribute)
    assert pods[STATIC].attributes == {"k8s.pod.name": "kube-apiserver-node-a",
                                       "k8s.namespace.name": "kube-system",
                                       "k8s.node.name": "node-a"}
    assert pods[STATIC].containers == {"3" * 64: "kube-apiserver"}  # cri-o://
    assert pods["abcdefab-cdef-4abc-8def-abcdefabcdef"].attributes["k8s.daemonset.name"] == \
        "fluent-bit"


@pytest.mark.parametrize("body", [b"<html>", b"[]", b'{"kind": "Status", "items": []}',
                                  b'{"kind": "PodList"}'])
def test_not_a_pod_list(body):
    with pytest.raises(PodListError) as info:
        parse_pod_list(body)
    assert info.value.reason == "invalid_response"


def test_pod_resource_merges_and_process_wins():
    pods = PodMetadata(PodMetadataSettings("kubelet", "https://127.0.0.1:1"))
    pods._pods = parse_pod_list(PODS.read_bytes())  # a list as refresh() would leave it
    attrs = {"service.name": "checkout", "container.id": CID, "k8s.pod.uid": UID,
             "k8s.namespace.name": "set-by-the-app"}
    out = pod_resource(attrs, pods, "node-a")
    assert out["k8s.pod.name"] == "checkout-7d9f8b6c5d-x2k4q"
    assert out["k8s.container.name"] == "app"
    assert out["k8s.namespace.name"] == "set-by-the-app"
    assert out["k8s.node.name"] == "node-a"
    host = {"service.name": "kubelet"}
    assert pod_resource(host, pods, "node-a") is host  # not in a pod: nothing added
    # a pod the list lacks: only what the node knows, and an early list is asked for
    assert pod_resource({"k8s.pod.uid": "f" * 32}, pods, "node-a") == {
        "k8s.pod.uid": "f" * 32, "k8s.node.name": "node-a"}
    assert pods._wake.is_set()


@pytest.fixture
def server(tmp_path):
    ca = trustme.CA()
    cert = ca.issue_cert("127.0.0.1")
    cert_pem, key_pem, ca_pem = (tmp_path / n for n in ("cert.pem", "key.pem", "ca.pem"))
    cert.private_key_and_cert_chain_pem.write_to_path(str(cert_pem))
    cert.private_key_pem.write_to_path(str(key_pem))
    ca.cert_pem.write_to_path(str(ca_pem))
    pods = tmp_path / "pods.json"
    shutil.copy(PODS, pods)
    token = tmp_path / "token"
    token.write_text(TOKEN + "\n")
    port = free_port()
    proc = subprocess.Popen(
        [sys.executable, "-m", "tests.support.pod_list_server", str(port), str(cert_pem),
         str(key_pem), TOKEN, str(pods)], cwd=REPO, stdout=subprocess.PIPE, text=True)
    try:
        assert proc.stdout.readline().strip() == "listening"
        yield {"endpoint": f"https://127.0.0.1:{port}", "ca": str(ca_pem),
               "token": str(token), "pods": pods}
    finally:
        stop_process(proc)


def _settings(server, **over) -> PodMetadataSettings:
    base = dict(source="kubelet", endpoint=server["endpoint"], node_name="node-a",
                interval_s=3600, timeout_s=10, token_file=server["token"],
                ca_file=server["ca"])
    return PodMetadataSettings(**{**base, **over})


@pytest.mark.parametrize("source", ["kubelet", "api_server"])
def test_lists_from_either_source(server, source):
    stats = Stats()
    pods = PodMetadata(_settings(server, source=source), stats)
    pods.refresh()
    assert pods.attributes(UID, CID)["k8s.container.name"] == "app"
    assert stats.total("kubernetes.pods") == 3 and stats.total("kubernetes.errors") == 0
    log = server["pods"].with_suffix(".log").read_text()
    assert ("/pods\n" in log) if source == "kubelet" else \
        ("fieldSelector=spec.nodeName%3Dnode-a" in log)


def test_api_server_lists_this_node_only(server):
    doc = json.loads(PODS.read_text())
    doc["items"][2]["spec"]["nodeName"] = "node-b"
    server["pods"].write_text(json.dumps(doc))
    pods = PodMetadata(_settings(server, source="api_server"))
    pods.refresh()
    assert pods.attributes(UID, CID) and not pods.attributes(
        "abcdefab-cdef-4abc-8def-abcdefabcdef", None)


def _error(server, caplog, **over) -> tuple[str, str]:
    stats = Stats()
    pods = PodMetadata(_settings(server, **over), stats)
    caplog.clear()
    with caplog.at_level("WARNING", logger="otel_ebpf.spans.pods"):
        pods.refresh()
        pods.refresh()  # the same error again: counted, not logged again
    (labels, value), = [(k[1], v) for k, v in stats.snapshot().items()
                        if k[0] == "kubernetes.errors"]
    assert value == 2
    warnings = [r.getMessage() for r in caplog.records]
    assert len(warnings) == 1, warnings
    return dict(labels)["reason"], warnings[0]


def test_wrong_token(server, tmp_path, caplog):
    bad = tmp_path / "bad-token"
    bad.write_text("nope")
    reason, msg = _error(server, caplog, token_file=str(bad))
    assert reason == "http_401" and "token in" in msg and str(bad) in msg


def test_forbidden_names_the_rbac_rule(server, caplog):
    server["pods"].with_suffix(".forbid").touch()
    reason, msg = _error(server, caplog)
    assert reason == "http_403" and "nodes/proxy" in msg
    reason, msg = _error(server, caplog, source="api_server")
    assert reason == "http_403" and "list on pods" in msg


def test_unverified_certificate(server, caplog):
    reason, msg = _error(server, caplog, ca_file="")
    assert reason == "tls" and "insecure_skip_verify" in msg
    pods = PodMetadata(_settings(server, ca_file="", insecure_skip_verify=True))
    pods.refresh()
    assert pods.attributes(UID, CID)


def test_unreachable(caplog, server):
    reason, msg = _error(server, caplog, endpoint=f"https://127.0.0.1:{free_port()}")
    assert reason == "unreachable" and "cannot reach" in msg


def test_unknown_pod_asks_for_an_early_list(server):
    """The poller lists at start, then again soon after a pod UID it lacked is asked for,
    not only at the interval (an hour here)."""
    doc = json.loads(PODS.read_text())
    new = doc["items"].pop(0)
    server["pods"].write_text(json.dumps(doc))
    pods = PodMetadata(_settings(server))
    pods.start()
    try:
        assert pods.wait_listed(30)
        assert pods.attributes(UID, CID) == {}  # not listed yet: asks for a list
        doc["items"].append(new)
        server["pods"].write_text(json.dumps(doc))
        deadline = time.monotonic() + 30
        while not pods.attributes(UID, CID) and time.monotonic() < deadline:
            time.sleep(0.1)
        assert pods.attributes(UID, CID)["k8s.pod.name"] == "checkout-7d9f8b6c5d-x2k4q"
    finally:
        pods.stop()


def _cfg(kubernetes: dict, environ: dict | None = None):
    return parse_config(yaml.safe_dump({"receivers": {"ebpf": {"kubernetes": kubernetes}}}),
                        environ or {})


def test_config_checks():
    with pytest.raises(ConfigError, match="node_name"):
        _cfg({"metadata": {"source": "api_server"}})
    with pytest.raises(ConfigError, match="kubelet's URL"):
        _cfg({"metadata": {"source": "kubelet"}})
    with pytest.raises(ConfigError, match="KUBERNETES_SERVICE_HOST"):
        _cfg({"node_name": "n", "metadata": {"source": "api_server"}})
    with pytest.raises(ConfigError, match="one of none, kubelet, api_server"):
        _cfg({"metadata": {"source": "etcd"}})
    r = _cfg({"node_name": "n", "metadata": {"source": "api_server"}},
             {"KUBERNETES_SERVICE_HOST": "10.96.0.1", "KUBERNETES_SERVICE_PORT": "443"}).receiver
    assert r.pod_metadata_endpoint == "https://10.96.0.1:443"
    r = _cfg({"node_name": "n", "metadata": {"source": "kubelet",
                                             "endpoint": "https://10.0.0.5:10250"}}).receiver
    assert (r.pod_metadata_source, r.pod_metadata_endpoint, r.k8s_node_name) == (
        "kubelet", "https://10.0.0.5:10250", "n")
