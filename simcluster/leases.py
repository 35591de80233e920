"""Node heartbeats: one ``coordination.k8s.io/v1`` Lease per node in ``kube-node-lease``.

As the kubelet's lease controller (``pkg/kubelet/nodelease`` and
``staging/src/k8s.io/component-helpers/apimachinery/lease/controller.go``) keeps them:
name and ``holderIdentity`` = the node name, ``leaseDurationSeconds: 40``, ``renewTime``
(a MicroTime) refreshed every ``lease_renew_s`` (the kubelet renews every 10 s: 0.25 of the
40 s duration), an ``ownerReference`` to the Node (``apiVersion: v1``, ``kind: Node``, the
node's uid; no ``controller`` flag) as ``setNodeOwnerFunc`` sets it; writes by field
manager ``kubelet``. A lease is created for every node of the fleet at start-up and when a
node is created, re-created if deleted while its node is Ready, and deleted with its node
(the garbage collector follows the owner reference). NotReady nodes (fleet
``ready: false``) do not renew, so their leases go stale.

Renewals are cheap on purpose: a node fleet of 5,000 writes 500 leases a second at 10 s.
They are spread evenly over the interval, write the stored object directly (the
``kubelet`` managedFields entry only gets a new ``time``) and skip the write hooks.
``lease_renew_s=0`` turns renewals off (leases are still created).
"""

from __future__ import annotations

import contextlib
import math
import time
from datetime import UTC, datetime
from typing import TYPE_CHECKING, Any

from simcluster.errors import ApiError
from simcluster.resources import RT

if TYPE_CHECKING:
    from simcluster.cluster import SimCluster

NAMESPACE = "kube-node-lease"
DURATION_S = 40
KUBELET = "kubelet"


def micro_time(ts: float | None = None) -> str:
    """``metav1.MicroTime`` text: RFC 3339 with microseconds."""
    dt = datetime.fromtimestamp(time.time() if ts is None else ts, UTC)
    return dt.strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def lease_object(node: dict[str, Any]) -> dict[str, Any]:
    """The Lease a kubelet creates for ``node`` (``newLease`` + ``setNodeOwnerFunc``)."""
    name = node["metadata"]["name"]
    return {
        "apiVersion": "coordination.k8s.io/v1",
        "kind": "Lease",
        "metadata": {
            "name": name,
            "namespace": NAMESPACE,
            "ownerReferences": [
                {
                    "apiVersion": "v1",
                    "kind": "Node",
                    "name": name,
                    "uid": node["metadata"].get("uid", ""),
                }
            ],
        },
        "spec": {
            "holderIdentity": name,
            "leaseDurationSeconds": DURATION_S,
            "renewTime": micro_time(),
        },
    }


def managed_entry(node_uid: str, ts: str) -> dict[str, Any]:
    """The ``kubelet`` managedFields entry of a node lease (what the field manager records
    for the kubelet's create; built directly because 5,000 leases load at start-up)."""
    return {
        "manager": KUBELET,
        "operation": "Update",
        "apiVersion": "coordination.k8s.io/v1",
        "time": ts,
        "fieldsType": "FieldsV1",
        "fieldsV1": {
            "f:metadata": {"f:ownerReferences": {".": {}, f'k:{{"uid":"{node_uid}"}}': {}}},
            "f:spec": {"f:holderIdentity": {}, "f:leaseDurationSeconds": {}, "f:renewTime": {}},
        },
    }


class NodeLeases:
    """The lease half of every emulated kubelet."""

    def __init__(self, cluster: SimCluster, renew_s: float = 10.0) -> None:
        self.cluster = cluster
        self.renew_s = renew_s
        self._order: list[str] = []
        self._cursor = 0.0

    def load(self, nodes: list[dict[str, Any]]) -> None:
        """Create the leases of the fleet's nodes (fleet loading: no events)."""
        from simcluster.fleet import new_uid, now_iso

        store = self.cluster.store
        if store.get("namespaces", "", NAMESPACE) is None:
            return
        ts = now_iso()
        for node in nodes:
            lease = lease_object(node)
            meta = lease["metadata"]
            meta["uid"] = new_uid()
            meta["creationTimestamp"] = ts
            meta["managedFields"] = [managed_entry(node["metadata"].get("uid", ""), ts)]
            store.put("leases", lease, "ADDED", emit=False)
            self.cluster._gc_register("leases", NAMESPACE, lease)
        self._order = [n["metadata"]["name"] for n in nodes]

    def start(self) -> None:
        if self.renew_s > 0:
            self._schedule()

    def on_node_write(self, old: dict[str, Any] | None, new: dict[str, Any] | None) -> None:
        if new is None or old is not None:
            return
        name = new["metadata"]["name"]
        self._order.append(name)
        self.cluster.controllers.add_after(("lease-create", name), 0.0, lambda: self._ensure(name))

    # ------------------------------------------------------------- renew
    def _tick_s(self) -> float:
        return max(0.05, self.renew_s / 20)

    def _schedule(self) -> None:
        self.cluster.controllers.add_after(("lease-renew",), self._tick_s(), self._tick)

    def _tick(self) -> None:
        """Renew the slice of nodes whose turn has come (each node once per ``renew_s``)."""
        if self.renew_s <= 0:
            return
        n = len(self._order)
        if n:
            step = n * self._tick_s() / self.renew_s
            start = self._cursor
            self._cursor += step
            lo, hi = math.floor(start), math.floor(self._cursor)
            if self._cursor >= n:
                self._cursor -= n
            names = [self._order[i % n] for i in range(lo, hi)]
            with self.cluster.store.lock:
                for name in names:
                    self._renew(name)
        self._schedule()

    def _renew(self, name: str) -> None:
        cluster = self.cluster
        store = cluster.store
        node = store.get("nodes", "", name)
        if node is None:
            self._order = [x for x in self._order if x != name]
            return
        if name in cluster.kubelets.not_ready:
            return
        rec = store.get("leases", NAMESPACE, name)
        if rec is None:
            self._ensure(name)
            return
        lease = rec.obj()
        now = time.time()
        lease.setdefault("spec", {})["renewTime"] = micro_time(now)
        stamp = datetime.fromtimestamp(now, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
        for m in lease["metadata"].get("managedFields") or []:
            if m.get("manager") == KUBELET and m.get("operation") == "Update":
                m["time"] = stamp
        store.put("leases", lease, "MODIFIED")

    def _ensure(self, name: str) -> None:
        """``ensureLease``: create the lease when it is missing (through the API path)."""
        cluster = self.cluster
        with cluster.store.lock:
            node = cluster.store.get("nodes", "", name)
            if node is None or cluster.store.get("leases", NAMESPACE, name) is not None:
                return
            # namespace missing or terminating: the kubelet retries next interval
            with contextlib.suppress(ApiError):
                cluster.op_create(RT["leases"], NAMESPACE, lease_object(node.obj()), {}, KUBELET)
