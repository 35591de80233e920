"""The kubelets of every node (starting and stopping pods) and the pod garbage collector.

Starting: a pod bound to a node (``spec.nodeName``) is stored ``Pending`` like any create
(``PrepareForCreate``); the node's kubelet then admits it and posts the started status of
:func:`simcluster.pods.started_status` through ``pods/status`` (manager ``kubelet``,
subresource ``status``). The simulator has no sandbox or image pull, so this happens in the
same request, right after the create is stored: the create's answer and the watch's
``ADDED`` event show ``Pending``, every later read ``Running``. A pod whose node is NotReady
waits for it (no kubelet runs there); a pod whose node does not exist stays ``Pending``
until the pod GC removes it. Pod IPs come from the node's pod CIDR as host-local IPAM hands
them out (``.2`` upwards, next free after the last one, wrapping; an address is free again
once its pod is terminal or gone); ``hostIP`` is the node's InternalIP.

Stopping: a real pod deletion is two-phase (``pkg/kubelet/kubelet.go`` ``HandlePodRemoves``
-> ``killPod``, ``pkg/kubelet/status/status_manager.go`` ``syncPod`` / ``canBeDeleted``):
the API server only marks the pod (``deletionTimestamp``); the kubelet of its node stops the
containers (SIGTERM, SIGKILL once the grace period is over), posts the terminal status
(``pkg/kubelet/kubelet_pods.go`` ``getPhase``: containers killed by a signal -> ``Failed``;
``Ready``/``ContainersReady`` false with reason ``PodFailed``) and then deletes the pod
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
from simcluster import pods as podstatus
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


class _NodeIPs:
    """One node's host-local IPAM state: addresses in use and where the next search starts."""

    __slots__ = ("next", "used")

    def __init__(self) -> None:
        self.used: set[str] = set()
        self.next = 0


class Kubelets:
    """Every node's kubelet, as far as starting and stopping pods goes."""

    def __init__(
        self, cluster: SimCluster, pod_stop_s: float = 1.0, podgc_quarantine_s: float = 40.0
    ) -> None:
        self.cluster = cluster
        self.pod_stop_s = pod_stop_s
        self.podgc_quarantine_s = podgc_quarantine_s
        self.not_ready: set[str] = set()
        # terminating pods that wait for their node to come back: node -> {(ns, name)}
        self.waiting: dict[str, set[tuple[str, str]]] = {}
        # bound pods not started yet because their node is NotReady: node -> {(ns, name)}
        self.unstarted: dict[str, set[tuple[str, str]]] = {}
        self._ipam: dict[str, _NodeIPs] | None = None  # built from the store on first use

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
            pending = self.unstarted.pop(name, set())
            if pending:
                self.cluster.controllers.add_after(
                    ("kubelet-start", name), 0.0, lambda: self._start_all(name, pending)
                )
        else:
            self.not_ready.add(name)

    # ---------------------------------------------------------- starting
    def admit(self, ns: str, pod: dict[str, Any]) -> None:
        """A pod was just created (caller holds the store lock): its kubelet starts it."""
        node = (pod.get("spec") or {}).get("nodeName")
        if not node or self.cluster.store.get("nodes", "", node) is None:
            return  # nobody runs it; the pod GC removes it (on_pod_write)
        if node in self.not_ready:
            self.unstarted.setdefault(node, set()).add((ns, pod["metadata"]["name"]))
            return
        self._start(ns, pod["metadata"]["name"])

    def _start_all(self, node: str, pods: set[tuple[str, str]]) -> None:
        with self.cluster.store.lock:
            for ns, name in sorted(pods):
                if self.ready(node):
                    self._start(ns, name)

    def _start(self, ns: str, name: str) -> None:
        store = self.cluster.store
        rec = store.get("pods", ns, name)
        if rec is None:
            return
        pod = rec.obj()
        status = pod.get("status") or {}
        if pod["metadata"].get("deletionTimestamp") or status.get("phase") != "Pending":
            return
        if status.get("containerStatuses"):
            return
        node = pod["spec"]["nodeName"]
        node_rec = store.get("nodes", "", node)
        host_ip, cidr = podstatus.node_addresses(node_rec.obj() if node_rec else None)
        # host-network pods inherit the node's IPs
        ip = host_ip if pod["spec"].get("hostNetwork") else self._allocate(node, cidr)
        fresh = podstatus.started_status(pod, _now(), host_ip, ip)
        fresh["qosClass"] = status.get("qosClass") or fresh["qosClass"]
        self.cluster._write_status(RT["pods"], ns, name, fresh, KUBELET)

    # -------------------------------------------------------------- IPAM
    def _ips(self) -> dict[str, _NodeIPs]:
        if self._ipam is None:
            ipam: dict[str, _NodeIPs] = {}
            for r in self.cluster.store.objects["pods"].values():
                node, ip = r.fields.get("spec.nodeName"), r.fields.get("status.podIP")
                if node and ip and not (r.info is not None and r.info.terminal):
                    ipam.setdefault(node, _NodeIPs()).used.add(ip)
            self._ipam = ipam
        return self._ipam

    def _allocate(self, node: str, cidr: str) -> str:
        """host-local's next free address after the last one handed out (wrapping)."""
        state = self._ips().setdefault(node, _NodeIPs())
        size = podstatus.usable_ips(cidr)
        for i in range(size):
            n = (state.next + i) % size
            ip = podstatus.pod_ip(cidr, n)
            if ip not in state.used:
                state.next = n + 1
                return ip
        ip = podstatus.pod_ip(cidr, state.next)  # the range is full: share (no real kubelet
        state.next += 1  # would start more pods than maxPods anyway)
        return ip

    def _track_ip(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if self._ipam is None:
            return
        for obj, keep in ((old, False), (new, True)):
            if obj is None:
                continue
            node = (obj.get("spec") or {}).get("nodeName")
            ip = (obj.get("status") or {}).get("podIP")
            if not node or not ip:
                continue
            used = self._ipam.setdefault(node, _NodeIPs()).used
            phase = (obj.get("status") or {}).get("phase")
            if keep and phase not in ("Succeeded", "Failed"):
                used.add(ip)
            else:
                used.discard(ip)

    # -------------------------------------------------------------- pods
    def on_pod_write(self, ns: str, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        self._track_ip(old, new)
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
        self.unstarted.get(node, set()).discard((ns, meta["name"]))
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
            status = pod.get("status") or {}
            phase = status.get("phase")
            if phase not in ("Succeeded", "Failed"):
                if status.get("containerStatuses"):
                    code = 137 if cluster.faults.config.pods_ignore_sigterm else 143
                    final = podstatus.terminated_status(pod, "Failed", code, _now())
                else:  # never started: getPhase of a terminal pod with nothing run
                    final = {**copy.deepcopy(status), "phase": "Failed"}
                cluster._write_status(RT["pods"], ns, name, final, KUBELET)
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
                        podstatus.cond(
                            "DisruptionTarget",
                            "True",
                            _now(),
                            "DeletionByPodGC",
                            "PodGC: node no longer exists",
                        )
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
