"""Pods: defaulting, QoS class, the status a kubelet writes, pod addresses, eviction entry.

The statuses follow what a v1.32 kubelet posts (``pkg/kubelet/kubelet_pods.go``
``generateAPIPodStatus`` / ``convertToAPIContainerStatuses``, the condition generators of
``pkg/kubelet/status/generate.go``, the probe manager's ``ready``/``started``, and
``pkg/kubelet/status/status_manager.go``, which keeps ``startTime`` and a condition's
``lastTransitionTime`` while its status does not change):

- a started pod: ``PodReadyToStartContainers``, ``Initialized``, ``Ready``,
  ``ContainersReady``, ``PodScheduled`` all ``True``; every container ``running`` with
  ``startedAt``, ``ready``/``started`` true (no probes), ``restartCount`` 0, the runtime's
  ``image``/``imageID``/``containerID``; regular init containers ``terminated`` with
  reason ``Completed`` (ready, not started), sidecars running; ``containerStatuses`` sorted
  by name (``SortedContainerStatuses``), init containers in spec order; ``hostIP(s)`` from
  the node's InternalIP, ``podIP(s)`` from the node's pod CIDR; ``volumeMounts`` echoed per
  container (RecursiveReadOnlyMounts is beta, on, in 1.32: read-only ones say
  ``recursiveReadOnly: Disabled``);
- a pod whose containers all exited: ``Ready``/``ContainersReady`` false with reason
  ``PodCompleted`` (Succeeded) or ``PodFailed``, ``PodReadyToStartContainers`` false (the
  sandbox is gone), ``Initialized`` true (``PodCompleted`` when Succeeded), containers
  ``terminated`` (``Completed`` for exit 0, else ``Error``), not ready, not started.

The runtime is containerd (the nodes' ``containerRuntimeVersion``): ``image`` is the
normalized reference (``python:3.11`` -> ``docker.io/library/python:3.11``), ``imageID`` a
``repo@sha256:`` digest, ``containerID`` ``containerd://<64 hex>``.
"""

from __future__ import annotations

import copy
import hashlib
import ipaddress
import random
import zlib
from collections.abc import Iterator
from functools import lru_cache
from typing import Any

from simcluster import quota as q

RUNTIME = "containerd"
# The cluster's pod network; each node gets a /24 of it (the node IPAM controller's
# --cluster-cidr / --node-cidr-mask-size), room for 16,384 nodes.
CLUSTER_CIDR = ipaddress.ip_network("100.64.0.0/10")
_NODE_MASK = 24
_TERMINAL_REASON = {"Succeeded": "PodCompleted", "Failed": "PodFailed"}
_KUBELET_CONDITIONS = (
    "PodReadyToStartContainers",
    "Initialized",
    "Ready",
    "ContainersReady",
    "PodScheduled",
)


class PodOps:
    """Pod-level API operations of :class:`~simcluster.cluster.SimCluster` (a mixin)."""

    # ------------------------------------------------------------- eviction
    def op_evict(self, ns: str, name: str, body: Any, params: dict[str, str]) -> tuple[int, bytes]:
        """policy/v1 Eviction (``pkg/registry/core/pod/storage/eviction.go``), see
        :mod:`simcluster.eviction`."""
        from simcluster.eviction import evict

        return evict(self, ns, name, body, params)


# ------------------------------------------------------------------ addresses
def node_pod_cidr(index: int) -> str:
    """The pod CIDR the node IPAM controller gives the ``index``-th node (wraps at 16,384)."""
    subnets = 1 << (_NODE_MASK - CLUSTER_CIDR.prefixlen)
    base = int(CLUSTER_CIDR.network_address) + ((index % subnets) << (32 - _NODE_MASK))
    return f"{ipaddress.IPv4Address(base)}/{_NODE_MASK}"


def fallback_pod_cidr(node: str) -> str:
    """A pod CIDR for a node without ``spec.podCIDR`` (created through the API: the
    simulator runs no node IPAM controller), derived from its name."""
    return node_pod_cidr(zlib.crc32(node.encode()))


@lru_cache(maxsize=65536)
def _cidr(cidr: str) -> tuple[int, int, bool]:
    """(first address as an int, usable host count, IPv4?) of a pod CIDR."""
    net = ipaddress.ip_network(cidr, strict=False)
    return int(net.network_address), max(1, net.num_addresses - 3), net.version == 4


def pod_ip(cidr: str, n: int) -> str:
    """The ``n``-th address host-local IPAM hands out in ``cidr`` (``.1`` is the bridge)."""
    base, usable, v4 = _cidr(cidr)
    value = base + 2 + (n % usable)
    if v4:  # the fleet loader asks 150,000 times: no ipaddress objects
        return f"{value >> 24}.{(value >> 16) & 255}.{(value >> 8) & 255}.{value & 255}"
    return str(ipaddress.IPv6Address(value))


def usable_ips(cidr: str) -> int:
    return _cidr(cidr)[1]


def node_addresses(node: dict[str, Any] | None) -> tuple[str, str]:
    """(InternalIP, pod CIDR) of a node object: what its kubelet uses for hostIP/podIP."""
    if node is None:
        return "", ""
    addrs = (node.get("status") or {}).get("addresses") or []
    host = next((a.get("address", "") for a in addrs if a.get("type") == "InternalIP"), "")
    if not host:  # getHostIPsAnyWay falls back to the ExternalIP
        host = next((a.get("address", "") for a in addrs if a.get("type") == "ExternalIP"), "")
    spec = node.get("spec") or {}
    cidrs = spec.get("podCIDRs") or ([spec["podCIDR"]] if spec.get("podCIDR") else [])
    name = (node.get("metadata") or {}).get("name", "")
    return host, (cidrs[0] if cidrs else fallback_pod_cidr(name))


# ------------------------------------------------------------------ runtime
@lru_cache(maxsize=4096)
def image_ref(image: str) -> tuple[str, str]:
    """(image, imageID) as containerd reports them (``ParseNormalizedNamed`` + a digest)."""
    name, at, digest = image.partition("@")
    first, slash, rest = name.partition("/")
    if not slash or ("." not in first and ":" not in first and first != "localhost"):
        name = "docker.io/" + (name if slash else "library/" + name)
    elif first == "docker.io" and "/" not in rest:
        name = f"docker.io/library/{rest}"
    repo = name
    last = name.rsplit("/", 1)[-1]
    if ":" in last:
        repo = name[: len(name) - len(last)] + last.split(":", 1)[0]
    elif not at:
        name += ":latest"
    if at:
        return f"{name}@{digest}", f"{repo}@{digest}"
    return name, f"{repo}@sha256:{hashlib.sha256(image.encode()).hexdigest()}"


def container_id() -> str:
    return f"{RUNTIME}://{random.getrandbits(256):064x}"


def _mount_statuses(c: dict[str, Any]) -> list[dict[str, Any]]:
    out = []
    for m in c.get("volumeMounts") or []:
        st: dict[str, Any] = {"name": m.get("name", ""), "mountPath": m.get("mountPath", "")}
        if m.get("readOnly"):
            st["readOnly"] = True
            st["recursiveReadOnly"] = "Disabled"  # no runtime handler supports RRO here
        out.append(st)
    return out


def _container_status(
    c: dict[str, Any],
    state: dict[str, Any],
    ready: bool,
    started: bool,
    cid: str,
    restarts: int = 0,
    last: dict[str, Any] | None = None,
) -> dict[str, Any]:
    image, image_id = image_ref(str(c.get("image") or ""))
    st: dict[str, Any] = {
        "name": c.get("name", ""),
        "state": state,
        "lastState": last if last is not None else {},
        "ready": ready,
        "restartCount": restarts,
        "image": image,
        "imageID": image_id,
    }
    if cid:
        st["containerID"] = cid
    st["started"] = started
    mounts = _mount_statuses(c)
    if mounts:
        st["volumeMounts"] = mounts
    return st


def _terminated(code: int, started_at: str, finished_at: str, cid: str) -> dict[str, Any]:
    t: dict[str, Any] = {"exitCode": code, "reason": "Completed" if code == 0 else "Error"}
    t.update(startedAt=started_at, finishedAt=finished_at)
    if cid:
        t["containerID"] = cid
    return {"terminated": t}


# ----------------------------------------------------------------- statuses
def cond(ctype: str, status: str, ts: str, reason: str = "", message: str = "") -> dict[str, Any]:
    """A PodCondition in the API's field order."""
    c: dict[str, Any] = {"type": ctype, "status": status, "lastProbeTime": None}
    c["lastTransitionTime"] = ts
    if reason:
        c["reason"] = reason
    if message:
        c["message"] = message
    return c


def running_conditions(ts: str) -> list[dict[str, Any]]:
    """The conditions a kubelet posts for a started pod whose containers are ready."""
    return [cond(t, "True", ts) for t in _KUBELET_CONDITIONS]


# Parts of fleet statuses shared by many pods (fleet loading only: such a status is
# serialized at once and never mutated): conditions and states per timestamp, hostIPs per
# node, the empty lastState.
_SHARED: dict[tuple[str, str], Any] = {}
_EMPTY: dict[str, Any] = {}


def _shared(kind: str, key: str, make: Any) -> Any:
    if len(_SHARED) > 50_000:
        _SHARED.clear()
    value = _SHARED.get((kind, key))
    if value is None:
        value = _SHARED[(kind, key)] = make()
    return value


def started_status(
    pod: dict[str, Any], ts: str, host_ip: str, ip: str, *, shared: bool = False
) -> dict[str, Any]:
    """The status a kubelet posts once every container of ``pod`` has started at ``ts``.

    ``shared``: fleet loading; the parts many pods have in common are one object
    (:data:`_SHARED`), which keeps a 150,000-pod fleet's peak memory down.
    """
    spec = pod.get("spec") or {}
    last: dict[str, Any] | None = None
    if shared:
        conditions = _shared("conditions", ts, lambda: running_conditions(ts))
        running = _shared("running", ts, lambda: {"running": {"startedAt": ts}})
        last = _EMPTY
    else:
        conditions = running_conditions(ts)
        running = {"running": {"startedAt": ts}}
    status: dict[str, Any] = {"phase": "Running", "conditions": conditions}
    status.update(_addresses(host_ip, ip, shared))
    status["startTime"] = ts
    inits = []
    for c in spec.get("initContainers") or []:
        cid = container_id()
        if c.get("restartPolicy") == "Always":  # a sidecar keeps running
            inits.append(_container_status(c, running, True, True, cid, 0, last))
        else:
            state = _terminated(0, ts, ts, cid)
            inits.append(_container_status(c, state, True, False, cid, 0, last))
    if inits:
        status["initContainerStatuses"] = inits
    cs = [
        _container_status(c, running, True, True, container_id(), 0, last) for c in _by_name(spec)
    ]
    status["containerStatuses"] = cs
    status["qosClass"] = qos(spec)
    return status


def creating_status(pod: dict[str, Any], ts: str, host_ip: str) -> dict[str, Any]:
    """A pod its kubelet admitted but whose sandbox is not up yet (a fleet's ``Pending`` pod
    on a node): containers waiting (``ContainerCreating``, ``PodInitializing`` with init
    containers), nothing ready, no pod IP."""
    spec = pod.get("spec") or {}
    inits = spec.get("initContainers") or []
    waiting = {"waiting": {"reason": "PodInitializing" if inits else "ContainerCreating"}}

    def fresh(c: dict[str, Any]) -> dict[str, Any]:
        st = _container_status(c, waiting, False, False, "")
        st["imageID"] = ""  # not pulled yet
        return st

    sidecars = [str(c.get("name", "")) for c in inits if c.get("restartPolicy") == "Always"]
    unready = sidecars + [str(c.get("name", "")) for c in spec.get("containers") or []]
    message = f"containers with unready status: [{' '.join(unready)}]"
    conditions = [cond("PodReadyToStartContainers", "False", ts)]
    if inits:
        pending = " ".join(str(c.get("name", "")) for c in inits)
        conditions.append(
            cond(
                "Initialized",
                "False",
                ts,
                "ContainersNotInitialized",
                f"containers with incomplete status: [{pending}]",
            )
        )
    else:
        conditions.append(cond("Initialized", "True", ts))
    conditions += [
        cond("Ready", "False", ts, "ContainersNotReady", message),
        cond("ContainersReady", "False", ts, "ContainersNotReady", message),
        cond("PodScheduled", "True", ts),
    ]
    status: dict[str, Any] = {"phase": "Pending", "conditions": conditions}
    status.update(_addresses(host_ip, ""))
    status["startTime"] = ts
    if inits:
        status["initContainerStatuses"] = [fresh(c) for c in inits]
    status["containerStatuses"] = [fresh(c) for c in _by_name(spec)]
    status["qosClass"] = qos(spec)
    return status


def terminated_status(
    pod: dict[str, Any], phase: str, exit_code: int, ts: str, *, shared: bool = False
) -> dict[str, Any]:
    """The status a kubelet posts once every container has exited (``phase`` terminal).

    Keeps what the running status had (addresses, start times, container IDs); without
    one (a fleet's Succeeded pod) the containers ran from ``startTime`` to ``ts``.
    """
    spec = pod.get("spec") or {}
    old = pod.get("status") or {}
    started = old.get("startTime") or ts
    before = {s.get("name"): s for s in old.get("containerStatuses") or []}
    before_init = {s.get("name"): s for s in old.get("initContainerStatuses") or []}
    reason = _TERMINAL_REASON[phase]
    kept = {c.get("type"): c for c in old.get("conditions") or []}
    want = {
        "PodReadyToStartContainers": ("False", ""),
        "Initialized": ("True", "PodCompleted" if phase == "Succeeded" else ""),
        "Ready": ("False", reason),
        "ContainersReady": ("False", reason),
        "PodScheduled": ("True", ""),
    }
    conditions = None
    if shared and not kept:
        conditions = _SHARED.get(("terminal", f"{phase}/{ts}"))
    if conditions is None:
        # conditions the kubelet does not own (DisruptionTarget, ...) stay first
        conditions = [c for t, c in kept.items() if t not in want]
        for t, (st, why) in want.items():
            prev = kept.get(t)
            same = prev is not None and prev.get("status") == st
            since = (prev or {}).get("lastTransitionTime") if same else None
            conditions.append(cond(t, st, since or ts, why))
        if shared and not kept:
            _SHARED[("terminal", f"{phase}/{ts}")] = conditions
    status: dict[str, Any] = {"phase": phase, "conditions": conditions}
    for k in ("message", "reason", "nominatedNodeName", "hostIP", "hostIPs", "podIP", "podIPs"):
        if old.get(k):
            status[k] = old[k]
    status["startTime"] = started
    inits = []
    for c in spec.get("initContainers") or []:
        prev = before_init.get(c.get("name")) or {}
        term = (prev.get("state") or {}).get("terminated")
        cid = prev.get("containerID") or container_id()
        if term is not None:
            inits.append(copy.deepcopy(prev))
            continue
        code = exit_code if c.get("restartPolicy") == "Always" else 0
        since = ((prev.get("state") or {}).get("running") or {}).get("startedAt") or started
        inits.append(_container_status(c, _terminated(code, since, ts, cid), code == 0, False, cid))
    if inits:
        status["initContainerStatuses"] = inits
    cs = []
    for c in _by_name(spec):
        prev = before.get(c.get("name")) or {}
        since = ((prev.get("state") or {}).get("running") or {}).get("startedAt") or started
        cid = prev.get("containerID") or container_id()
        restarts = int(prev.get("restartCount") or 0)
        last = prev.get("lastState")
        state = _terminated(exit_code, since, ts, cid)
        cs.append(_container_status(c, state, False, False, cid, restarts, last))
    status["containerStatuses"] = cs
    status["qosClass"] = old.get("qosClass") or qos(spec)
    return status


def _addresses(host_ip: str, ip: str, shared: bool = False) -> dict[str, Any]:
    out: dict[str, Any] = {}
    if host_ip:
        out["hostIP"] = host_ip
        out["hostIPs"] = (
            _shared("hostIPs", host_ip, lambda: [{"ip": host_ip}]) if shared else [{"ip": host_ip}]
        )
    if ip:
        out["podIP"] = ip
        out["podIPs"] = [{"ip": ip}]
    return out


def _by_name(spec: dict[str, Any]) -> list[dict[str, Any]]:
    """Regular containers in ``SortedContainerStatuses`` order (by name)."""
    cs = spec.get("containers") or []
    return cs if len(cs) < 2 else sorted(cs, key=lambda c: str(c.get("name") or ""))


def initial_status(obj: dict[str, Any]) -> dict[str, Any]:
    """``PrepareForCreate``: a new pod is ``Pending`` with its QoS class; its node's kubelet
    (:mod:`simcluster.kubelet`) starts it after the create is stored."""
    return {"phase": "Pending", "qosClass": qos(obj.get("spec") or {})}


def started_pods(pods: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Fleet pods as their kubelets report them. Fleets from :mod:`simcluster.fleet` come
    with full statuses; a hand-built Running pod on a node without container statuses gets
    the started status here."""
    for pod in pods:
        status = pod.get("status") or {}
        spec = pod.get("spec") or {}
        if (
            status.get("phase") == "Running"
            and spec.get("nodeName")
            and not status.get("containerStatuses")
        ):
            ts = status.get("startTime") or pod["metadata"].get("creationTimestamp", "")
            fresh = started_status(pod, ts, status.get("hostIP", ""), status.get("podIP", ""))
            pod["status"] = {**fresh, "qosClass": status.get("qosClass") or fresh["qosClass"]}
        yield pod


def phase_status(pod: dict[str, Any], phase: str) -> dict[str, Any]:
    """The status a kubelet posts when a pod's phase becomes ``phase`` (the in-process
    ``set_pod_phase`` helper): ``Running`` starts every container (addresses kept),
    ``Succeeded`` / ``Failed`` end them with exit code 0 / 1."""
    from simcluster.fleet import now_iso

    status = pod.get("status") or {}
    if phase in q.TERMINAL_PHASES:
        return terminated_status(pod, phase, 0 if phase == "Succeeded" else 1, now_iso())
    if phase == "Running":
        if status.get("phase") == "Running" and status.get("containerStatuses"):
            return copy.deepcopy(status)
        fresh = started_status(pod, now_iso(), status.get("hostIP", ""), status.get("podIP", ""))
        fresh["qosClass"] = status.get("qosClass") or fresh["qosClass"]
        return fresh
    out = copy.deepcopy(status)
    out["phase"] = phase
    return out


# ---------------------------------------------------------------- defaulting
def prepare_pod(obj: dict[str, Any]) -> None:
    """Pod defaulting (``SetDefaults_Pod``: requests from limits, restartPolicy, ...).

    ``spec.serviceAccountName`` is not defaulted here: the ServiceAccount admission plugin
    does it (:mod:`simcluster.serviceaccounts`). Validation (containers required, extended
    resources, ...) is in :mod:`simcluster.validation_pod`, run after this by
    :mod:`simcluster.crud`.
    """
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    if spec.get("serviceAccount") and not spec.get("serviceAccountName"):
        # v1 conversion: the deprecated field fills the real one, and echoes it back
        spec["serviceAccountName"] = spec["serviceAccount"]
    if spec.get("serviceAccountName"):
        spec["serviceAccount"] = spec["serviceAccountName"]
    spec.setdefault("terminationGracePeriodSeconds", 30)
    spec.setdefault("dnsPolicy", "ClusterFirst")
    for field_name in ("initContainers", "containers"):
        for c in spec.get(field_name) or []:
            if not isinstance(c, dict):
                continue
            res = c.setdefault("resources", {})
            if not isinstance(res, dict):
                continue
            lim = res.get("limits") or {}
            req = res.get("requests") or {}
            for k, v in lim.items():
                req.setdefault(k, v)
            if req:
                res["requests"] = req


def qos(spec: dict[str, Any]) -> str:
    cs = (spec.get("containers") or []) + (spec.get("initContainers") or [])
    any_set = False
    guaranteed = True
    for c in cs:
        res = c.get("resources") or {}
        req, lim = res.get("requests") or {}, res.get("limits") or {}
        for r in ("cpu", "memory"):
            if r in req or r in lim:
                any_set = True
            if r not in lim or q.parse_quantity(lim[r]) != q.parse_quantity(req.get(r, lim[r])):
                guaranteed = False
    if not any_set:
        return "BestEffort"
    return "Guaranteed" if guaranteed else "Burstable"
