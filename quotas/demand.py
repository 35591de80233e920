"""Pending demand: GPUs that a namespace's pods ask for but do not have yet.

On a ResourceQuota cluster a pod over quota is refused at creation and never exists, so
what waits is pods the quota admitted that no node has room for yet: phase ``Pending``
without a node, from the inventory mirror (GPU-FACTS.md section 1: such pods already count
in ``status.used``). On a Kueue cluster a queued pod is such a pod too (gated, no node), and
a queued Job has no pod yet: its Workload's GPUs, as the last drift check read them
(``TeamQueue.workloads``), join the figure. One function, used by the team page, the
approval queue and ``/metrics``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from inventory.models import GpuClass

from . import limits
from .models import TeamNamespace, TeamQueue


@dataclass
class Demand:
    pods: int = 0
    amount: int = 0
    workloads: int = 0  # queued Kueue workloads without pods (suspended Jobs)
    # amount per GPU class id the pods' node selectors ask for (None: no class named)
    by_class: dict = field(default_factory=lambda: defaultdict(int))

    def add(self, amount: int, class_id) -> None:
        self.amount += amount
        self.by_class[class_id] += amount

    def for_class(self, class_id) -> int:
        """What waits for this class (None: for no class in particular)."""
        return self.by_class.get(class_id, 0)


def pending_demand(namespaces: list[TeamNamespace]) -> dict:
    """``{(namespace id, resource): Demand}`` of unscheduled pending pods: one query for
    those pods (plus the classes and, on Kueue clusters, the queued Jobs)."""
    pods = limits.pods_by_namespace(namespaces, waiting=True)
    cluster_of = {ns.pk: ns.cluster_id for ns in namespaces}
    classes = class_matcher({ns.cluster_id for ns in namespaces})
    out: dict = defaultdict(Demand)
    for ns_id, ns_pods in pods.items():
        for pod in ns_pods:
            if pod.phase != "Pending" or pod.node_name:
                continue
            class_id = classes(cluster_of[ns_id], pod.gpu_selector)
            for resource, amount in (pod.requests or {}).items():
                d = out[(ns_id, resource)]
                d.pods += 1
                d.add(int(amount), class_id)
    _queued_jobs(namespaces, out, classes)
    return out


def class_matcher(cluster_ids):
    """(cluster id, node-selector labels) -> the id of the GPU class those labels name
    (its selector is part of them), or None. One query."""
    by_cluster = defaultdict(list)
    for cls in GpuClass.objects.filter(cluster_id__in=cluster_ids).order_by("derived", "slug"):
        by_cluster[cls.cluster_id].append(cls)

    def match(cluster_id, labels) -> object:
        if not labels:
            return None
        return next((c.pk for c in by_cluster[cluster_id] if c.matches(labels)), None)

    return match


def _queued_jobs(namespaces: list[TeamNamespace], out: dict, classes) -> None:
    kueue = [ns for ns in namespaces if ns.cluster.is_kueue]
    if not kueue:
        return
    by_key = {(ns.team_id, ns.cluster_id, ns.name): ns.pk for ns in kueue}
    queues = TeamQueue.objects.filter(
        team_id__in={ns.team_id for ns in kueue}, cluster_id__in={ns.cluster_id for ns in kueue}
    ).values_list("team_id", "cluster_id", "workloads")
    for team_id, cluster_id, workloads in queues:
        for name, row in (workloads or {}).items():
            ns_id = by_key.get((team_id, cluster_id, name))
            if ns_id is None:
                continue
            for job in row.get("pending_jobs") or []:
                class_id = classes(cluster_id, job.get("selector"))
                for resource, amount in (job.get("gpus") or {}).items():
                    d = out[(ns_id, resource)]
                    d.add(int(amount), class_id)
                    d.workloads += 1
