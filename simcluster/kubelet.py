"""The kubelets of every node (pod termination) and the pod garbage collector's orphan rule.

A real pod deletion is two-phase (``pkg/kubelet/kubelet.go`` ``HandlePodRemoves`` →
``killPod``, ``pkg/kubelet/status/status_manager.go`` ``syncPod`` / ``canBeDeleted``): the
API server only marks the pod (``deletionTimestamp``); the kubelet of its node stops the
containers (SIGTERM, SIGKILL once the grace period is over), posts the terminal status
(``pkg/kubelet/kubelet_pods.go`` ``getPhase``: containers killed by a signal → ``Failed``;
``Ready``/``ContainersReady`` false with reason ``PodCompleted``) and then deletes the pod
with ``gracePeriodSeconds=0`` and a UID precondition. Here the containers take
``pod_stop_s`` to stop (capped by the grace period), or the whole grace period with the
fault ``pods_ignore_sigterm``. A pod whose node is NotReady or gone stays Terminating: no
kubelet runs there. Pods bound to a node that no longer exists are force-deleted by the pod
GC (``pkg/controller/podgc/gc_controller.go`` ``gcOrphaned``) once the node has been
missing for ``podgc_quarantine_s`` (40 s in the real controller): phase ``Failed`` with a
``DisruptionTarget`` condition (``DeletionByPodGC``), then a delete with grace 0.

Terminating pods keep their node's GPUs (the MIG emulation counts them busy) until the
kubelet has posted the terminal phase.
"""

from __future__ import annotations

import copy
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from simcluster import deletion
from simcluster.errors import ApiError
from simcluster.resources import RT

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

KUBELET = "kubelet"
PODGC = "PodGC"


def _now() -> str:
    return datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def node_is_ready(node: dict[str, Any]) -> bool:
    """The node's ``Ready`` condition is ``True``."""
    for c in (node.get("status") or {}).get("conditions") or []:
        if c.get("type") == "Ready":
            return c.get("status") == "True"
    return False


def running_conditions(ts: str) -> list[dict[str, Any]]:
    """The conditions a kubelet posts for a started pod whose containers are ready."""
    return [
        {"type": t, "status": "True", "lastProbeTime": None, "lastTransitionTime": ts}
        for t in (
            "PodReadyToStartContainers",
            "Initialized",
            "Ready",
            "ContainersReady",
            "PodScheduled",
        )
    ]


def terminal_status(pod: dict[str, Any], phase: str, exit_code: int) -> dict[str, Any]:
    """The status a kubelet posts once every container has exited."""
    status = copy.deepcopy(pod.get("status") or {})
    ts = _now()
    status["phase"] = phase
    for c in status.get("conditions") or []:
        if c.get("type") in ("Ready", "ContainersReady") and c.get("status") != "False":
            c["status"] = "False"
            c["reason"] = "PodCompleted"
            c["lastTransitionTime"] = ts
    started = status.get("startTime") or ts
    status["containerStatuses"] = [
        {
            "name": c.get("name", ""),
            "state": {
                "terminated": {
                    "exitCode": exit_code,
                    "reason": "Completed" if exit_code == 0 else "Error",
                    "startedAt": started,
                    "finishedAt": ts,
                }
            },
            "lastState": {},
            "ready": False,
            "restartCount": 0,
            "image": c.get("image", ""),
            "imageID": "",
            "started": False,
        }
        for c in (pod.get("spec") or {}).get("containers") or []
    ]
    return status


class Kubelets:
    """Every node's kubelet, as far as pod termination goes."""

    def __init__(
        self, cluster: SimCluster, pod_stop_s: float = 1.0, podgc_quarantine_s: float = 40.0
    ) -> None:
        self.cluster = cluster
        self.pod_stop_s = pod_stop_s
        self.podgc_quarantine_s = podgc_quarantine_s
        self.not_ready: set[str] = set()
        # terminating pods that wait for their node to come back: node -> {(ns, name)}
        self.waiting: dict[str, set[tuple[str, str]]] = {}

    # ------------------------------------------------------------- nodes
    def load(self, nodes: list[dict[str, Any]]) -> None:
        for n in nodes:
            if not node_is_ready(n):
                self.not_ready.add(n["metadata"]["name"])

    def ready(self, node: str) -> bool:
        return node not in self.not_ready and self.cluster.store.get("nodes", "", node) is not None

    def on_node_write(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        name = (new or old or {}).get("metadata", {}).get("name", "")
        if new is None:
            self.not_ready.discard(name)
            self._queue_podgc(name)
            return
        if node_is_ready(new):
            self.not_ready.discard(name)
            for ns, pod in self.waiting.pop(name, set()):
                self._queue_finish(ns, pod, 0.0)
        else:
            self.not_ready.add(name)

    # -------------------------------------------------------------- pods
    def on_pod_write(self, ns: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is None:
            return
        meta = new["metadata"]
        node = (new.get("spec") or {}).get("nodeName")
        if not node:
            return
        if old is None and self.cluster.store.get("nodes", "", node) is None:
            self._queue_podgc(node)
        ts = meta.get("deletionTimestamp")
        if not ts:
            return
        om = (old or {}).get("metadata") or {}
        if om.get("deletionTimestamp") == ts and om.get("deletionGracePeriodSeconds") == meta.get(
            "deletionGracePeriodSeconds"
        ):
            return
        # the kubelet starts killing when it sees the deletion; the containers take
        # pod_stop_s to exit, or the whole grace period if they ignore SIGTERM
        grace = int(meta.get("deletionGracePeriodSeconds") or 0)
        if self.cluster.faults.config.pods_ignore_sigterm:
            stop = float(grace)
        else:
            stop = min(self.pod_stop_s, float(grace))
        self._queue_finish(ns, meta["name"], stop)

    def _queue_finish(self, ns: str, name: str, delay: float) -> None:
        self.cluster.controllers.add_after(
            ("kubelet", ns, name), delay, lambda: self._finish(ns, name)
        )

    def _finish(self, ns: str, name: str) -> None:
        cluster = self.cluster
        with cluster.store.lock:
            rec = cluster.store.get("pods", ns, name)
            if rec is None:
                return
            pod = rec.obj()
            meta = pod["metadata"]
            if not meta.get("deletionTimestamp"):
                return
            node = (pod.get("spec") or {}).get("nodeName", "")
            if not self.ready(node):
                self.waiting.setdefault(node, set()).add((ns, name))
                return
            phase = (pod.get("status") or {}).get("phase")
            if phase not in ("Succeeded", "Failed"):
                code = 137 if cluster.faults.config.pods_ignore_sigterm else 143
                cluster._write_status(
                    RT["pods"], ns, name, terminal_status(pod, "Failed", code), KUBELET
                )
            try:
                deletion.delete_object(
                    cluster,
                    RT["pods"],
                    ns,
                    name,
                    deletion.DeleteOptions(grace=0, uid=meta.get("uid")),
                )
            except ApiError as err:
                if err.code not in (404, 409):
                    raise

    # ------------------------------------------------------------- pod GC
    def _queue_podgc(self, node: str) -> None:
        self.cluster.controllers.add_after(
            ("podgc", node), self.podgc_quarantine_s, lambda: self._gc_orphans(node)
        )

    def _gc_orphans(self, node: str) -> None:
        cluster = self.cluster
        with cluster.store.lock:
            if cluster.store.get("nodes", "", node) is not None:
                return
            victims = [
                (r.namespace, r.name)
                for r in cluster.store.objects["pods"].values()
                if r.fields.get("spec.nodeName") == node
            ]
            for ns, name in victims:
                rec = cluster.store.get("pods", ns, name)
                if rec is None:
                    continue
                pod = rec.obj()
                if (pod.get("status") or {}).get("phase") not in ("Succeeded", "Failed"):
                    st = copy.deepcopy(pod.get("status") or {})
                    st["phase"] = "Failed"
                    conds = [
                        c for c in st.get("conditions") or [] if c.get("type") != "DisruptionTarget"
                    ]
                    conds.append(
                        {
                            "type": "DisruptionTarget",
                            "status": "True",
                            "lastProbeTime": None,
                            "lastTransitionTime": _now(),
                            "reason": "DeletionByPodGC",
                            "message": "PodGC: node no longer exists",
                        }
                    )
                    st["conditions"] = conds
                    cluster._write_status(RT["pods"], ns, name, st, PODGC)
                try:
                    deletion.delete_object(
                        cluster, RT["pods"], ns, name, deletion.DeleteOptions(grace=0)
                    )
                except ApiError as err:
                    if err.code != 404:
                        raise
