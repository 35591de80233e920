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

from . import limits
from .models import TeamNamespace


@dataclass
class Demand:
    pods: int = 0
    amount: int = 0


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
    return out
