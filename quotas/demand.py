"""Pending demand: GPUs that a namespace's pods ask for but do not have yet.

On a ResourceQuota cluster a pod over quota is refused at creation and never exists, so
what waits is pods the quota admitted that no node has room for yet: phase ``Pending``
without a node, from the inventory mirror (GPU-FACTS.md section 1: such pods already count
in ``status.used``). Queued Kueue workloads join this figure with the Kueue backend. One
function, used by the team page, the approval queue and ``/metrics``.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from inventory.models import GpuPod

from .models import TeamNamespace


@dataclass
class Demand:
    pods: int = 0
    amount: int = 0


def pending_demand(namespaces: list[TeamNamespace]) -> dict:
    """``{(namespace id, resource): Demand}`` of unscheduled pending pods, in one query."""
    by_key = {(ns.cluster_id, ns.name): ns.pk for ns in namespaces}
    out: dict = defaultdict(Demand)
    if not by_key:
        return out
    pods = GpuPod.objects.filter(
        phase="Pending",
        node_name="",
        cluster_id__in={c for c, _ in by_key},
        namespace__in={n for _, n in by_key},
    ).values_list("cluster_id", "namespace", "requests")
    for cluster_id, namespace, requests in pods:
        ns_id = by_key.get((cluster_id, namespace))
        if ns_id is None:
            continue
        for resource, amount in (requests or {}).items():
            d = out[(ns_id, resource)]
            d.pods += 1
            d.amount += int(amount)
    return out
