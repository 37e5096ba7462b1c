"""Names of this node's pods (k8s.pod.name, namespace, owner, container name), by pod UID.

One poll per node: the kubelet's own pod list (`GET /pods` on its port, 10250) or the API
server's list of the pods bound to this node (`fieldSelector=spec.nodeName=...`), every
`interval`, and at once when a process names a pod UID the last list did not have (rate
limited). The agent already knows each process's pod UID and container ID from its
cgroup (spans/cgroups.py); this adds what only Kubernetes knows. Off by default.
"""

from __future__ import annotations

import json
import logging
import ssl
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass

from otel_ebpf.protocols.base import AttributeValue
from otel_ebpf.telemetry import Stats

log = logging.getLogger(__name__)

SOURCES = ("kubelet", "api_server")
# a pod UID the last list lacked asks for a new list, at most this often: a pod is seen
# by its first process before the kubelet's list has it, and a host process never is
MIN_REFRESH_S = 2.0
# owner kinds whose name is a resource attribute (semantic conventions' k8s.*.name)
_OWNER_ATTRIBUTES = {
    "ReplicaSet": "k8s.replicaset",
    "DaemonSet": "k8s.daemonset",
    "StatefulSet": "k8s.statefulset",
    "Job": "k8s.job",
}
# a static pod's UID (its cgroup's name) is the hash of its manifest; the kubelet's list
# carries it as config.hash, the API server's mirror pod as config.mirror
_STATIC_HASH_ANNOTATIONS = ("kubernetes.io/config.hash", "kubernetes.io/config.mirror")


@dataclass(frozen=True, slots=True)
class PodMetadataSettings:
    source: str  # kubelet | api_server
    endpoint: str  # https://host:port of the kubelet or the API server
    node_name: str = ""  # the API server's list is of this node's pods
    interval_s: float = 30.0
    timeout_s: float = 10.0
    token_file: str = "/var/run/secrets/kubernetes.io/serviceaccount/token"
    ca_file: str = "/var/run/secrets/kubernetes.io/serviceaccount/ca.crt"
    insecure_skip_verify: bool = False

    def url(self) -> str:
        base = self.endpoint.rstrip("/")
        if self.source == "kubelet":
            return base + "/pods"
        # resourceVersion=0: served from the API server's watch cache, not from etcd
        query = urllib.parse.urlencode({"fieldSelector": f"spec.nodeName={self.node_name}",
                                        "resourceVersion": "0"})
        return f"{base}/api/v1/pods?{query}"


@dataclass(frozen=True, slots=True)
class Pod:
    attributes: dict[str, AttributeValue]  # the pod's own: name, namespace, node, owner
    containers: dict[str, str]  # container ID -> container name


class PodListError(Exception):
    """A pod list that could not be had; the message names the likely fix."""

    def __init__(self, reason: str, message: str) -> None:
        super().__init__(message)
        self.reason = reason  # the label of otel_ebpf.kubernetes.errors


def _container_id(value: str) -> str:
    # containerd://<id>, cri-o://<id>, docker://<id>
    return value.partition("://")[2] or value


def parse_pod(item: Mapping) -> tuple[list[str], Pod]:
    """(the UIDs the pod is known by, its Pod) from one item of a PodList."""
    meta = item.get("metadata") or {}
    spec = item.get("spec") or {}
    status = item.get("status") or {}
    attrs: dict[str, AttributeValue] = {}
    for key, value in (("k8s.pod.name", meta.get("name")),
                       ("k8s.namespace.name", meta.get("namespace")),
                       ("k8s.node.name", spec.get("nodeName"))):
        if isinstance(value, str) and value:
            attrs[key] = value
    labels = meta.get("labels") or {}
    for ref in meta.get("ownerReferences") or ():
        prefix = _OWNER_ATTRIBUTES.get(ref.get("kind", ""))
        if not ref.get("controller") or prefix is None or not ref.get("name"):
            continue
        attrs[prefix + ".name"] = ref["name"]
        if ref.get("uid"):
            attrs[prefix + ".uid"] = ref["uid"]
        # a Deployment's ReplicaSet is named <deployment>-<pod-template-hash>
        template_hash = labels.get("pod-template-hash")
        if prefix == "k8s.replicaset" and template_hash and \
                ref["name"].endswith("-" + template_hash):
            attrs["k8s.deployment.name"] = ref["name"][: -len(template_hash) - 1]
    containers: dict[str, str] = {}
    for key in ("containerStatuses", "initContainerStatuses", "ephemeralContainerStatuses"):
        for c in status.get(key) or ():
            if c.get("containerID") and c.get("name"):
                containers[_container_id(c["containerID"])] = c["name"]
    uids = [meta["uid"]] if meta.get("uid") else []
    annotations = meta.get("annotations") or {}
    uids += [annotations[a] for a in _STATIC_HASH_ANNOTATIONS if annotations.get(a)]
    return uids, Pod(attrs, containers)


def parse_pod_list(body: bytes) -> dict[str, Pod]:
    """A PodList (the kubelet's /pods and the API server's /api/v1/pods alike), by UID."""
    try:
        doc = json.loads(body)
    except ValueError as exc:
        raise PodListError("invalid_response", f"the pod list is not JSON: {exc}") from None
    if not isinstance(doc, dict) or doc.get("kind") not in ("PodList", None) or \
            not isinstance(doc.get("items"), list):
        raise PodListError("invalid_response",
                           f"expected a PodList, got {str(doc)[:200]!r}")
    out: dict[str, Pod] = {}
    for item in doc["items"]:
        if isinstance(item, dict):
            uids, pod = parse_pod(item)
            for uid in uids:
                out[uid] = pod
    return out


class PodMetadata:
    """This node's pods, listed by a thread of its own; `attributes()` never waits on it."""

    def __init__(self, settings: PodMetadataSettings, stats: Stats | None = None) -> None:
        self.settings = settings
        self._stats = stats
        self._pods: dict[str, Pod] = {}
        # pod UIDs and container IDs a list lacked when asked for: each asks for one early
        # list, once (a host process in no pod never asks; a pod gone stays unknown)
        self._missed: set[str] = set()
        self._wake = threading.Event()
        self._stop = threading.Event()
        self._last_error = ""
        self._listed = threading.Event()  # set once a list came (tests, `ready`)
        self._thread: threading.Thread | None = None

    # ---- the lookup, from any thread

    def attributes(self, pod_uid: str, container_id: str | None) -> dict[str, AttributeValue]:
        """The pod's attributes (and its container's name), or {} until a list has it."""
        pod = self._pods.get(pod_uid)
        if pod is None:
            if pod_uid not in self._missed:
                self._missed.add(pod_uid)
                self._wake.set()
            return {}
        name = pod.containers.get(container_id or "")
        if name is None:
            if container_id and container_id not in self._missed:
                self._missed.add(container_id)  # a container (re)started since the list
                self._wake.set()
            return pod.attributes
        return {**pod.attributes, "k8s.container.name": name}

    @property
    def generation(self) -> int:
        """Changes whenever a new list arrives (callers may cache by it)."""
        return id(self._pods)

    # ---- the poller

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="otel-ebpf-pods", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._wake.set()
        if self._thread is not None:
            self._thread.join(self.settings.timeout_s + 1.0)
            self._thread = None

    def wait_listed(self, timeout_s: float) -> bool:
        return self._listed.wait(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            started = time.monotonic()
            self.refresh()
            # the next list at the interval, or sooner for a pod UID the list lacked
            self._wake.wait(self.settings.interval_s)
            self._wake.clear()
            rest = MIN_REFRESH_S - (time.monotonic() - started)
            if rest > 0:
                self._stop.wait(rest)

    def refresh(self) -> None:
        """One list; an error is logged when it differs from the last one, and counted."""
        try:
            pods = parse_pod_list(self._fetch())
        except PodListError as exc:
            if self._stats is not None:
                self._stats.add("kubernetes.errors", reason=exc.reason)
            if str(exc) != self._last_error:
                log.warning("kubernetes pod metadata (%s): %s", self.settings.source, exc)
                self._last_error = str(exc)
            return
        if self._last_error:
            log.info("kubernetes pod metadata (%s): listing again", self.settings.source)
            self._last_error = ""
        self._pods = pods  # one reference swap: readers see the old dict or the new one
        if len(self._missed) > 4096:  # bounded; an ID asked for again may ask again
            self._missed = set()
        if self._stats is not None:
            self._stats.set_total("kubernetes.pods", len({id(p) for p in pods.values()}))
        self._listed.set()

    def _fetch(self) -> bytes:
        s = self.settings
        url = s.url()
        headers = {"Accept": "application/json", "User-Agent": "otel-ebpf"}
        try:
            with open(s.token_file) as f:  # read each time: projected tokens are rotated
                headers["Authorization"] = "Bearer " + f.read().strip()
        except FileNotFoundError:
            pass  # a kubelet with anonymous reads allowed, or a local proxy
        except OSError as exc:
            raise PodListError("token", f"cannot read the token {s.token_file}: {exc}") from None
        context = None
        if url.startswith("https:"):
            context = ssl.create_default_context()
            if s.insecure_skip_verify:
                context.check_hostname = False
                context.verify_mode = ssl.CERT_NONE
            elif s.ca_file:
                try:
                    context.load_verify_locations(s.ca_file)
                except (OSError, ssl.SSLError) as exc:
                    raise PodListError("tls", f"cannot load ca_file {s.ca_file}: {exc}") from None
        request = urllib.request.Request(url, headers=headers)
        try:
            with urllib.request.urlopen(request, timeout=s.timeout_s, context=context) as resp:
                return resp.read()
        except urllib.error.HTTPError as exc:
            raise PodListError(f"http_{exc.code}", self._http_hint(exc.code, url)) from None
        except urllib.error.URLError as exc:
            reason = exc.reason
            if isinstance(reason, ssl.SSLCertVerificationError):
                raise PodListError("tls", (
                    f"{url}: TLS verification failed ({reason.verify_message}); set "
                    "kubernetes.metadata.ca_file to the CA that signed it (a kubelet's serving "
                    "certificate is often self-signed: insecure_skip_verify: true)")) from None
            raise PodListError("unreachable", f"cannot reach {url}: {reason}") from None
        except (OSError, ValueError) as exc:  # timeouts, resets, a malformed URL
            raise PodListError("unreachable", f"cannot reach {url}: {exc}") from None

    def _http_hint(self, code: int, url: str) -> str:
        s = self.settings
        if code == 401:
            return f"{url}: 401 Unauthorized: the token in {s.token_file} was refused"
        if code == 403:
            need = ("get on nodes/pods (Kubernetes 1.36+; nodes/proxy before) for the "
                    "kubelet's /pods" if s.source == "kubelet" else "list on pods")
            return (f"{url}: 403 Forbidden: the agent's service account needs RBAC {need} "
                    "(the Helm chart's ClusterRole grants it)")
        return f"{url}: HTTP {code}"


def pod_resource(attrs: Mapping[str, AttributeValue], pods: PodMetadata | None,
                 node_name: str = "") -> Mapping[str, AttributeValue]:
    """A process's attributes with its pod's names added; its own (OTEL_RESOURCE_ATTRIBUTES)
    win over the pod list's, as they would in its SDK."""
    uid = attrs.get("k8s.pod.uid")
    if not isinstance(uid, str):
        return attrs
    extra: dict[str, AttributeValue] = {"k8s.node.name": node_name} if node_name else {}
    if pods is not None:
        cid = attrs.get("container.id")
        extra.update(pods.attributes(uid, cid if isinstance(cid, str) else None))
    if not extra:
        return attrs
    return {**extra, **attrs}
