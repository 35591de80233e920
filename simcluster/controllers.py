"""The simulated control plane's controllers, wired to the store's write hook.

:class:`ControllerOps` (a mixin of :class:`~simcluster.cluster.SimCluster`) owns the shared
:class:`~simcluster.workqueue.WorkQueue` and dispatches every write (``_after_write``) to
the controllers that watch that type, as their informers would: the quota controller
(:mod:`simcluster.quotactl`), the disruption controller (:mod:`simcluster.disruption`), the
namespace controller (:mod:`simcluster.namespaces`), the garbage collector
(:mod:`simcluster.gc`), the kubelets (:mod:`simcluster.kubelet`), their node leases
(:mod:`simcluster.leases`), the ServiceAccount controller
(:mod:`simcluster.serviceaccounts`) and the DaemonSet controller
(:mod:`simcluster.daemonsets`). Handlers only queue work; the work runs later on the
queue's thread, so API writes never wait for a controller, as on a real cluster. (The
kubelet starts a newly bound pod in the create request itself: kubelet.py.)
"""

from __future__ import annotations

import time
from typing import Any

from simcluster.daemonsets import DaemonSetController
from simcluster.disruption import DisruptionController
from simcluster.fleet import now_iso
from simcluster.gc import GarbageCollector
from simcluster.kubelet import Kubelets
from simcluster.kueue import KueueController
from simcluster.leases import NodeLeases
from simcluster.namespaces import NamespaceController
from simcluster.resources import ResourceType
from simcluster.serviceaccounts import ServiceAccountsController
from simcluster.workqueue import WorkQueue


class ControllerOps:
    """Controller set-up, write dispatch and test helpers (a mixin)."""

    def _init_controllers(
        self,
        *,
        quota_sync_s: float = 0.1,
        quota_resync_s: float = 300.0,
        pdb_sync_s: float = 0.1,
        namespace_sync_s: float = 5.0,
        pod_stop_s: float = 1.0,
        lease_renew_s: float = 10.0,
        podgc_quarantine_s: float = 40.0,
        serviceaccount_sync_s: float = 0.05,
    ) -> None:
        """Create the controllers (before the fleet loads; nothing runs until started)."""
        self.controllers = WorkQueue()
        self.quota_sync_s = quota_sync_s
        self.quota_resync_s = quota_resync_s
        self.disruption = DisruptionController(self, pdb_sync_s)
        self.namespace_controller = NamespaceController(self, namespace_sync_s)
        self.gc = GarbageCollector(self, min(0.05, quota_sync_s) if quota_sync_s > 0 else 0.0)
        self.kubelets = Kubelets(self, pod_stop_s, podgc_quarantine_s)
        self.node_leases = NodeLeases(self, lease_renew_s)
        self.serviceaccounts = ServiceAccountsController(self, serviceaccount_sync_s)
        self.daemonsets = DaemonSetController(self)  # daemonsets.py
        self.kueue = KueueController(self)  # Kueue's webhooks and controllers (kueue.py)

    def _load_controllers(self, nodes: list[dict[str, Any]]) -> None:
        """After the fleet is stored: node readiness, node leases, periodic work."""
        self.kubelets.load(nodes)
        self.serviceaccounts.load(now_iso())  # every namespace has its default already
        self.node_leases.load(nodes)
        self.node_leases.start()
        if self.quota_resync_s > 0:
            self.controllers.add_after(
                ("quota-resync",), self.quota_resync_s, self.quota_full_resync
            )

    def _stop_controllers(self) -> None:
        self.controllers.stop()

    def _gc_register(self, resource: str, ns: str, obj: dict[str, Any]) -> None:
        self.gc.register(resource, ns, obj)

    def _on_write(
        self, rt: ResourceType, ns: str, old: dict[str, Any] | None, new: dict[str, Any] | None
    ) -> None:
        """Every stored change, under the store lock: queue the controllers' work."""
        name = rt.name
        self.quota_on_write(rt, ns, old, new)
        self.gc.on_write(rt, ns, old, new)
        self.kueue.on_write(rt, ns, old, new)
        if name == "pods":
            self.disruption.on_pod_write(ns, old, new)
            self.kubelets.on_pod_write(ns, old, new)
            self.daemonsets.on_pod_write(ns, old, new)
        elif name == "daemonsets":
            self.daemonsets.on_daemonset_write(ns, new)
        elif name == "poddisruptionbudgets":
            self.disruption.on_pdb_write(new)
        elif name == "namespaces":
            self.namespace_controller.on_write(old, new)
            self.serviceaccounts.on_namespace_write(old, new)
        elif name == "serviceaccounts":
            self.serviceaccounts.on_write(ns, old, new)
        elif name == "nodes":
            self.kubelets.on_node_write(old, new)
            self.node_leases.on_node_write(old, new)
            self.daemonsets.on_node_write(old, new)

    def wait_for_controllers(self, timeout: float = 10.0, horizon: float = 2.0) -> bool:
        """Block until no controller work is running or due within ``horizon`` seconds.

        For tests: after a write, this waits for the quota and disruption controllers
        (``quota_sync_s``, ``pdb_sync_s``) and for pods the kubelets stop within the
        horizon. Periodic work (lease renewals, the quota resync) does not count, nor does
        work due later (a namespace's ``namespace_sync_s`` of 5 s, long grace periods).
        Returns False on timeout (for example while ``quota_controller_paused`` is set).
        """
        deadline = time.monotonic() + timeout
        q = self.controllers
        while time.monotonic() < deadline:
            with q._cv:
                limit = time.monotonic() + max(horizon, 0.0)
                due = [d for k, d in q._due.items() if d <= limit and k not in _PERIODIC]
                busy = q._busy
            if not due and not busy:
                return True
            time.sleep(0.01)
        return False


_PERIODIC = {("lease-renew",), ("quota-resync",), ("system-namespaces",)}
