"""container.id and k8s.pod.uid from /proc/PID/cgroup: one fixture per runtime, cgroup
driver and cgroup version (tests/unit/data/cgroups), as each writes the path."""

from pathlib import Path

import pytest

from otel_ebpf.spans.cgroups import cgroup_ids
from otel_ebpf.spans.resources import ProcessResources
from tests.unit.test_spans_resources import make_proc

DATA = Path(__file__).parent / "data" / "cgroups"
UID = "0a1b2c3d-4e5f-4a6b-8c7d-9e0f1a2b3c4d"
CID = "4d3f5c6b7a8e9d0c1b2a3f4e5d6c7b8a99887766554433221100ffeeddccbbaa"

EXPECTED = {
    "containerd-systemd-v2": (CID, UID),
    "containerd-cgroupfs-v2": (CID, UID),
    "crio-systemd-v2": (CID, UID),
    "crio-guaranteed-systemd-v2": (CID, UID),
    "docker-cgroupfs-v1": (CID, UID),
    "docker-systemd-v1": (CID, UID),
    "containerd-systemd-v1-hybrid": (CID, UID),
    "containerd-private-cgroupns-v2": (CID, UID),
    "kind-nested-v2": (CID, UID),
    # a static pod's UID is its manifest's hash, as the kubelet's pod list gives it
    "static-pod-containerd-cgroupfs-v2": (CID, "5c1a0b8e2f9d4c3b7a6e5d4c3b2a1f0e"),
    "docker-plain-v2": (CID, None),
    "docker-plain-v1": (CID, None),
    "podman-v2": (CID, None),
    "host-process-v2": (None, None),
    # `pod<uid>` outside a kubepods tree is somebody else's name, not a pod
    "pod-not-kubepods-v2": (None, None),
}


def test_every_fixture_has_its_expectation():
    assert sorted(p.name for p in DATA.iterdir()) == sorted(EXPECTED)


@pytest.mark.parametrize("name", sorted(EXPECTED))
def test_ids_from_cgroup_path(name):
    assert cgroup_ids((DATA / name).read_text()) == EXPECTED[name]


@pytest.mark.parametrize("name", ["containerd-systemd-v2", "docker-cgroupfs-v1",
                                  "crio-systemd-v2", "host-process-v2"])
def test_resource_attributes_of_a_process(tmp_path, name):
    make_proc(tmp_path, 40, ["/usr/bin/server"], exe="/usr/bin/server",
              cgroup=(DATA / name).read_text())
    attrs = ProcessResources(proc_root=str(tmp_path)).get(40)
    cid, uid = EXPECTED[name]
    assert attrs.get("container.id") == cid
    assert attrs.get("k8s.pod.uid") == uid


def test_process_own_resource_attributes_win(tmp_path):
    make_proc(tmp_path, 41, ["/usr/bin/server"], exe="/usr/bin/server",
              cgroup=(DATA / "containerd-systemd-v2").read_text(),
              environ={"OTEL_RESOURCE_ATTRIBUTES": "k8s.pod.uid=set-by-the-app"})
    assert ProcessResources(proc_root=str(tmp_path)).get(41)["k8s.pod.uid"] == "set-by-the-app"
