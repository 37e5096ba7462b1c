"""container.id and k8s.pod.uid from a process's cgroup path (/proc/PID/cgroup), v1 or v2.

The kubelet names a pod's cgroup after the pod's UID and the container runtime names the
container's cgroup after the container's ID, whichever cgroup driver is used:

  systemd driver  /kubepods.slice/kubepods-burstable.slice/
                    kubepods-burstable-pod<uid, '-' written '_'>.slice/
                    cri-containerd-<id>.scope | crio-<id>.scope | docker-<id>.scope
  cgroupfs driver /kubepods/burstable/pod<uid>/<id>
  Guaranteed QoS  the same without the QoS level (kubepods-pod<uid>.slice, /kubepods/pod<uid>)
  kind, k3s...    a prefix before kubepods (/kubelet.slice/kubelet-kubepods.slice/...)

Read from the host's cgroup namespace the paths are whole; from a private cgroup namespace
(an agent in a pod without the host's) they are relative, `/../../kubepods.slice/...`, and
still hold both names.
"""

from __future__ import annotations

import re

# a container runtime names the container's cgroup after its 64-hex ID: /docker/<id>,
# docker-<id>.scope, cri-containerd-<id>.scope, crio-<id>.scope, libpod-<id>.scope...
_CONTAINER_ID = re.compile(r"(?<![0-9a-f])[0-9a-f]{64}(?![0-9a-f])")
# a pod's cgroup: `pod<uid>` (cgroupfs) or `<parent>-pod<uid>.slice` (systemd, which
# cannot have '-' inside a unit name's part and writes '_'); a static pod's UID is the
# 32-hex hash of its manifest
_POD = re.compile(
    r"(?:[a-z0-9_-]+-)?pod("
    r"[0-9a-f]{8}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{4}[-_][0-9a-f]{12}"
    r"|[0-9a-f]{32})(?:\.slice)?")


def _pod_uid(path: str) -> str | None:
    """The pod UID of the first `pod<uid>` component below a kubepods component."""
    parts = path.split("/")
    for i, part in enumerate(parts):
        if part.startswith(("kubepods", "kubelet-kubepods")):
            for below in parts[i:]:
                if m := _POD.fullmatch(below):
                    return m.group(1).replace("_", "-")
            return None
    return None


def container_id(cgroup: str) -> str | None:
    """The container ID in /proc/PID/cgroup text (cgroup v1 or v2), or None."""
    return cgroup_ids(cgroup)[0]


def cgroup_ids(cgroup: str) -> tuple[str | None, str | None]:
    """(container.id, k8s.pod.uid) from /proc/PID/cgroup text; None where a name is absent.

    Both come from the same line: the first that names a pod, else the first that names a
    container. On a hybrid host (v1 controllers beside the v2 tree) some hierarchies put
    every process at `/` or in a cgroup of their own; the one the runtime manages names it.
    """
    first_container = None
    for line in cgroup.splitlines():
        path = line.split(":", 2)[-1]
        found = _CONTAINER_ID.findall(path)
        cid = found[-1] if found else None  # the innermost: the container, not a parent
        if uid := _pod_uid(path):
            return cid, uid
        if cid and first_container is None:
            first_container = cid
    return first_container, None
