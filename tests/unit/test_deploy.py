"""deploy/: the manifest the chart renders with its default values is valid against the
Kubernetes schemas and says what the chart's values say; the agent config in its
ConfigMap loads; the Collector gateway's pipelines name only components it defines; the
systemd unit runs the agent. Where `helm` is installed, the chart is rendered and
compared with the committed manifest."""

from __future__ import annotations

import configparser
import hashlib
import re
import shutil
import subprocess
from pathlib import Path

import kubernetes_validate
import pytest
import yaml

from otel_ebpf.config import parse_config

ROOT = Path(__file__).resolve().parents[2]
DEPLOY = ROOT / "deploy"
CHART = DEPLOY / "helm" / "otel-ebpf"
MANIFEST = DEPLOY / "kubernetes" / "otel-ebpf.yaml"
# the chart's kubeVersion floor and the newest schemas kubernetes-validate ships
VERSIONS = ["1.25.0", kubernetes_validate.latest_version()]


def _docs(text: str) -> dict[tuple[str, str], dict]:
    return {(d["kind"], d["metadata"]["name"]): d for d in yaml.safe_load_all(text) if d}


@pytest.fixture(scope="module")
def manifest() -> dict[tuple[str, str], dict]:
    return _docs(MANIFEST.read_text())


@pytest.fixture(scope="module")
def values() -> dict:
    return yaml.safe_load((CHART / "values.yaml").read_text())


@pytest.mark.parametrize("version", VERSIONS)
def test_manifest_validates_against_the_schemas(manifest, version):
    assert sorted(kind for kind, _ in manifest) == [
        "ClusterRole", "ClusterRoleBinding", "ConfigMap", "DaemonSet", "ServiceAccount"]
    for doc in manifest.values():
        kubernetes_validate.validate(doc, version, strict=True)


def test_schema_validation_is_not_a_formality(manifest):
    bad = yaml.safe_load(yaml.safe_dump(manifest[("DaemonSet", "otel-ebpf")]))
    bad["spec"]["template"]["spec"]["hostPid"] = True  # misspelt: must be refused
    with pytest.raises(kubernetes_validate.ValidationError):
        kubernetes_validate.validate(bad, VERSIONS[-1], strict=True)


def test_daemonset_says_what_the_values_say(manifest, values):
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text())
    ds = manifest[("DaemonSet", "otel-ebpf")]
    pod = ds["spec"]["template"]["spec"]
    assert pod["hostPID"] is True
    assert ds["spec"]["selector"]["matchLabels"].items() <= \
        ds["spec"]["template"]["metadata"]["labels"].items()
    (agent,) = pod["containers"]
    assert agent["image"] == f"{values['image']['repository']}:{chart['appVersion']}"
    assert agent["resources"] == values["resources"]
    caps = agent["securityContext"]["capabilities"]
    assert caps["add"] == values["capabilities"] and caps["drop"] == ["ALL"]
    assert {"BPF", "PERFMON", "SYS_PTRACE"} <= set(caps["add"])
    assert agent["securityContext"]["privileged"] is values["privileged"] is False
    env = {e["name"]: e["valueFrom"]["fieldRef"]["fieldPath"] for e in agent["env"]}
    assert env == {"K8S_NODE_NAME": "spec.nodeName", "K8S_NODE_IP": "status.hostIP"}
    host_paths = {v["name"]: v["hostPath"]["path"] for v in pod["volumes"] if "hostPath" in v}
    assert host_paths == {"tracefs": "/sys/kernel/tracing", "btf": "/sys/kernel/btf"}
    mounts = {m["name"]: m["mountPath"] for m in agent["volumeMounts"]}
    assert mounts["tracefs"] == "/sys/kernel/tracing" and mounts["btf"] == "/sys/kernel/btf"
    config_volume = next(v for v in pod["volumes"] if v["name"] == "config")
    assert ("ConfigMap", config_volume["configMap"]["name"]) in manifest
    assert agent["args"] == ["run", "-c", mounts["config"] + "/config.yaml"]
    assert ("ServiceAccount", pod["serviceAccountName"]) in manifest
    binding = manifest[("ClusterRoleBinding", "otel-ebpf")]
    assert binding["roleRef"]["name"] == "otel-ebpf"
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": pod["serviceAccountName"],
                                    "namespace": "otel-ebpf"}]
    rules = manifest[("ClusterRole", "otel-ebpf")]["rules"]
    assert {r for rule in rules for r in rule["resources"]} == {"pods", "nodes/pods"}


def test_configmap_config_loads_as_the_agent_loads_it(manifest, values):
    text = manifest[("ConfigMap", "otel-ebpf")]["data"]["config.yaml"]
    cfg = parse_config(text, {"K8S_NODE_NAME": "node-a", "K8S_NODE_IP": "10.0.0.5"})
    r = cfg.receiver
    assert r.k8s_node_name == "node-a"
    assert r.sampling_ratio == values["sampling"]["ratio"]
    assert r.pod_metadata_source == values["kubernetes"]["metadata"]["source"]
    assert cfg.exporters["otlp"].settings["endpoint"] == values["collector"]["endpoint"]
    assert cfg.exporters["otlp"].settings["tls"] == {"insecure": values["collector"]["insecure"]}
    assert cfg.pipelines["traces"].exporters == ("otlp",)
    assert cfg.pipelines["metrics"].exporters == ("otlp",)


def test_chart_renders_the_committed_manifest():
    helm = shutil.which("helm")
    if helm is None:
        pytest.skip("helm is not installed: the committed manifest is checked by the tests "
                    "above, not against a render")
    out = subprocess.run([helm, "template", "otel-ebpf", str(CHART), "--namespace",
                          "otel-ebpf"], capture_output=True, text=True, timeout=60,
                         check=True).stdout
    assert _docs(out) == _docs(MANIFEST.read_text())


def test_a_changed_config_rolls_the_pods(manifest):
    """The pod template carries the ConfigMap's hash (as helm's sha256sum of the rendered
    template), so `kubectl apply` or `helm upgrade` with a new config restarts the agents."""
    docs = MANIFEST.read_text().split("\n---\n")
    config_doc = next(d for d in docs if d.startswith("# Source: otel-ebpf/templates/configmap.yaml"))
    rendered = config_doc.split("\n", 1)[1].rstrip("\n") + "\n"
    pod = manifest[("DaemonSet", "otel-ebpf")]["spec"]["template"]["metadata"]
    assert pod["annotations"]["checksum/config"] == hashlib.sha256(rendered.encode()).hexdigest()
    template = (CHART / "templates" / "daemonset.yaml").read_text()
    assert '"/configmap.yaml") . | sha256sum' in template


@pytest.mark.parametrize("template", sorted(p.name for p in (CHART / "templates").glob("*.yaml")))
def test_manifest_keeps_every_literal_line_of_the_templates(template):
    """Without helm, a template edited and not rendered again is caught here: each line of
    a template outside its conditional blocks and with no template action in it is in the
    manifest, in the same order, in the documents rendered from that template."""
    rendered = MANIFEST.read_text().split("\n---\n")
    mine = [doc for doc in rendered if doc.startswith(f"# Source: otel-ebpf/templates/{template}")]
    assert mine, template
    lines = iter(line.rstrip() for doc in mine for line in doc.splitlines())
    depth = 0  # inside if/with/range blocks, whose lines depend on the values
    for line in (CHART / "templates" / template).read_text().splitlines():
        depth += len(re.findall(r"\{\{-?\s*(?:if|with|range)\b", line))
        depth -= len(re.findall(r"\{\{-?\s*end\b", line))
        if depth or "{{" in line or not line.strip() or line.strip() == "---":
            continue
        assert any(got == line.rstrip() for got in lines), (template, line)


def test_gateway_pipelines_use_defined_components():
    gw = yaml.safe_load((DEPLOY / "collector" / "gateway.yaml").read_text())
    pipelines = gw["service"]["pipelines"]
    used = {section: set() for section in ("receivers", "processors", "exporters")}
    for name, pipe in pipelines.items():
        assert pipe["receivers"] and pipe["exporters"], name
        for section in used:
            used[section] |= set(pipe.get(section, []))
    for section, names in used.items():
        assert names == set(gw[section]), section  # every one defined, none left unused
    assert set(gw["service"]["extensions"]) == set(gw["extensions"])
    k8s = gw["processors"]["k8sattributes"]["pod_association"]
    assert [s["sources"][0]["name"] for s in k8s] == ["k8s.pod.uid", "container.id"]
    assert gw["exporters"]["loadbalancing"]["routing_key"] == "traceID"
    stores = pipelines["traces/sample"]["exporters"]
    assert stores == ["otlphttp/tempo", "otlphttp/jaeger", "otlphttp/phoenix",
                      "otlphttp/langfuse"]
    assert all(name.startswith("otlphttp/") for name in stores)  # OTLP/HTTP only
    policies = {p["name"]: p["type"] for p in gw["processors"]["tail_sampling"]["policies"]}
    assert policies == {"errors": "status_code", "slow-llm-calls": "ottl_condition",
                        "baseline": "probabilistic"}
    # the sampling tier takes routed traces only: a trace is sampled where it is whole
    assert pipelines["traces/sample"]["receivers"] == ["otlp/sampling"]
    assert gw["receivers"]["otlp/sampling"]["protocols"]["grpc"]["endpoint"].endswith(
        ":" + str(gw["exporters"]["loadbalancing"]["resolver"]["dns"]["port"]))


def test_systemd_unit_runs_the_agent():
    unit = configparser.ConfigParser(strict=False, interpolation=None)
    unit.optionxform = str  # keys are case-sensitive in systemd
    unit.read(DEPLOY / "systemd" / "otel-ebpf.service")
    service = unit["Service"]
    argv = service["ExecStart"].split()
    assert argv[0].endswith("/bin/otel-ebpf") and argv[1:3] == ["run", "-c"]
    assert service["RestartPreventExitStatus"].split() == ["1", "2"]  # config / host errors
    caps = set(service["AmbientCapabilities"].split())
    assert {"CAP_BPF", "CAP_PERFMON", "CAP_SYS_PTRACE"} <= caps
    assert caps == set(service["CapabilityBoundingSet"].split())
    assert unit["Install"]["WantedBy"] == "multi-user.target"


def test_image_recipe_builds_in_one_stage_and_runs_without_compilers():
    stages = (DEPLOY / "Dockerfile").read_text().split("\nFROM ")
    assert len(stages) == 3, "a build stage and a run stage"
    build, run = stages[1], stages[2]
    assert "make -C bpf" in build and "clang" in build
    assert "COPY --from=build" in run
    for compiler in ("clang", "gcc", "llvm", "bpftool", "-dev"):
        assert compiler not in run, compiler
    assert "OTEL_EBPF_BPF_DIR=" in run
