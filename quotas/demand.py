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
from dataclasses import dataclass

from . import limits
from .models import TeamNamespace, TeamQueue


@dataclass
class Demand:
    pods: int = 0
    amount: int = 0
    workloads: int = 0  # queued Kueue workloads without pods (suspended Jobs)


def pending_demand(namespaces: list[TeamNamespace], *, pods: dict | None = None) -> dict:
    """``{(namespace id, resource): Demand}`` of unscheduled pending pods. ``pods``: the
    namespaces' pods already loaded (``limits.pods_by_namespace``, as ``preview.states``
    holds them); otherwise one query."""
    if pods is None:
        pods = limits.pods_by_namespace(namespaces)
    out: dict = defaultdict(Demand)
    for ns_id, ns_pods in pods.items():
        for pod in ns_pods:
            if pod.phase != "Pending" or pod.node_name:
                continue
            for resource, amount in (pod.requests or {}).items():
                d = out[(ns_id, resource)]
                d.pods += 1
                d.amount += int(amount)
    _queued_jobs(namespaces, out)
    return out


def _queued_jobs(namespaces: list[TeamNamespace], out: dict) -> None:
    kueue = [ns for ns in namespaces if ns.cluster.enforces_classes]
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
            jobs = row.get("pending_jobs") or {}
            for resource, (amount, count) in jobs.items():
                d = out[(ns_id, resource)]
                d.amount += int(amount)
                d.workloads += int(count)
