"""Pods: defaulting and resource validation, QoS class, initial status, eviction entry."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

from simcluster import quota as q


class PodOps:
    """Pod-level API operations of :class:`~simcluster.cluster.SimCluster` (a mixin)."""

    # ------------------------------------------------------------- eviction
    def op_evict(self, ns: str, name: str, body: Any, params: dict[str, str]) -> tuple[int, bytes]:
        """policy/v1 Eviction (``pkg/registry/core/pod/storage/eviction.go``), see
        :mod:`simcluster.eviction`."""
        from simcluster.eviction import evict

        return evict(self, ns, name, body, params)


def initial_status(obj: dict[str, Any], now: str) -> dict[str, Any]:
    """Status of a newly created pod: ``Pending``, or (bound to a node) already started by
    its kubelet with every container ready (the simulator has no image pulls)."""
    from simcluster.kubelet import running_conditions

    spec = obj.get("spec") or {}
    node = spec.get("nodeName")
    status: dict[str, Any] = {"phase": "Running" if node else "Pending", "qosClass": qos(spec)}
    if node:
        status["conditions"] = running_conditions(now)
        status["startTime"] = now
    return status


def started_pods(pods: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """Fleet pods as their kubelets report them: a ``Running`` pod on a node gets the
    ``Ready`` condition, which PDBs and eviction read. Only that one (API-created pods get
    all five): the other four would add 45 % to every pod of a 150,000-pod list."""
    for pod in pods:
        status = pod.get("status") or {}
        if (
            status.get("phase") == "Running"
            and (pod.get("spec") or {}).get("nodeName")
            and not status.get("conditions")
        ):
            ts = status.get("startTime") or pod["metadata"].get("creationTimestamp", "")
            status["conditions"] = [
                {"type": "Ready", "status": "True", "lastProbeTime": None, "lastTransitionTime": ts}
            ]
        yield pod


def phase_status(pod: dict[str, Any], phase: str) -> dict[str, Any]:
    """The status a kubelet posts when a pod's phase becomes ``phase``: ``Running`` brings
    the started conditions, terminal phases make ``Ready``/``ContainersReady`` false
    (reason ``PodCompleted``)."""
    import copy

    from simcluster.fleet import now_iso

    status = copy.deepcopy(pod.get("status") or {})
    status["phase"] = phase
    if phase == "Running" and not any(
        c.get("type") == "Ready" for c in status.get("conditions") or []
    ):
        from simcluster.kubelet import running_conditions

        status["conditions"] = running_conditions(now_iso())
        status.setdefault("startTime", now_iso())
    if phase in q.TERMINAL_PHASES:
        for c in status.get("conditions") or []:
            if c.get("type") in ("Ready", "ContainersReady") and c.get("status") != "False":
                c.update(status="False", reason="PodCompleted", lastTransitionTime=now_iso())
    return status


def prepare_pod(obj: dict[str, Any]) -> None:
    """Pod defaulting (``SetDefaults_Pod``: requests from limits, restartPolicy, ...).

    Validation (containers required, extended resources, ...) is in
    :mod:`simcluster.validation_pod`, run after this by :mod:`simcluster.crud`.
    """
    spec = obj.setdefault("spec", {})
    if not isinstance(spec, dict):
        return
    spec.setdefault("restartPolicy", "Always")
    spec.setdefault("schedulerName", "default-scheduler")
    spec.setdefault("serviceAccountName", "default")
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
