"""A namespace's limits as pages and the API show them, loaded in bulk.

:func:`states` loads, for many namespaces in a fixed number of queries, what
:mod:`quotas.limits` needs: active grants, present foreign quotas, GPU pods, held
operations and advertised resources. :meth:`NamespaceState.change` previews an approval
or a release: the effective limit after it, and whether the apply would set a limit
below usage (it would then wait for an admin's confirmation).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.conf import settings
from django.db.models import Sum
from django.utils import timezone

from inventory.models import GpuPod, NodeResource, is_gpu_resource

from . import limits
from .models import ForeignQuota, Grant, Operation, TeamNamespace


@dataclass
class Change:
    resource: str
    delta: int
    granted_after: int
    limit_after: int
    binding_after: str
    lowering: dict
    pods: list[GpuPod]

    @property
    def capped(self) -> bool:
        """A raise that a foreign quota keeps from raising the real limit."""
        return self.delta > 0 and self.limit_after < self.granted_after


@dataclass
class NamespaceState:
    ns: TeamNamespace
    effective: dict[str, limits.EffectiveLimit]
    used: dict[str, int]
    pods: list[GpuPod]
    foreign: list[ForeignQuota]
    advertised: list[str]
    awaiting: dict = field(default_factory=dict)  # merged lowering of held operations

    @property
    def needs_confirmation(self) -> bool:
        return bool(self.awaiting)

    def desired(self, resource: str = "", delta: int = 0) -> dict[str, int]:
        """What the portal would write (as ``desired_hard``), with ``delta`` applied."""
        names = set(self.advertised) | set(self.effective)
        hard = {
            f"requests.{r}": self.effective[r].granted if r in self.effective else 0
            for r in names
            if is_gpu_resource(r)
        }
        if resource:
            key = f"requests.{resource}"
            hard[key] = max(hard.get(key, 0) + delta, 0)
        return hard

    def change(self, resource: str, delta: int) -> Change:
        eff = self.effective.get(resource) or limits.EffectiveLimit(
            resource, 0, 0, settings.QUOTA_NAME
        )
        after = eff.granted + delta
        binding = settings.QUOTA_NAME
        limit_after = after
        for name, value in eff.outside:
            if value < limit_after:
                limit_after, binding = value, name
        low = limits.lowering(self.ns, self.desired(resource, delta), self.used)
        return Change(resource, delta, after, limit_after, binding, low,
                      limits.pods_over(self.pods, low))  # fmt: skip


def states(namespaces: list[TeamNamespace], now=None) -> dict:
    """NamespaceState per namespace id, in five queries whatever their number."""
    now = now or timezone.now()
    granted = defaultdict(dict)
    rows = (
        Grant.objects.filter(namespace__in=namespaces)
        .active_at(now)
        .values_list("namespace_id", "resource")
        .annotate(total=Sum("amount"))
    )
    for ns_id, resource, total in rows:
        granted[ns_id][resource] = int(total)
    foreign = limits.foreign_by_namespace(namespaces)
    pods = limits.pods_by_namespace(namespaces)
    advertised = defaultdict(set)
    for cluster_id, resource in (
        NodeResource.objects.filter(
            node__cluster_id__in={ns.cluster_id for ns in namespaces},
            node__gone_at__isnull=True,
            capacity__gt=0,
        )
        .values_list("node__cluster_id", "resource")
        .distinct()
    ):
        if is_gpu_resource(resource):
            advertised[cluster_id].add(resource)
    held = defaultdict(dict)
    for ns_id, low in Operation.objects.filter(
        namespace__in=namespaces, status=Operation.Status.CONFIRM
    ).values_list("namespace_id", "lowering"):
        for key, v in low.items():
            if key not in held[ns_id] or v["hard"] < held[ns_id][key]["hard"]:
                held[ns_id][key] = v
    out = {}
    for ns in namespaces:
        own = {r: 0 for r in advertised[ns.cluster_id]} | granted[ns.pk]
        fq = foreign.get(ns.pk, [])
        out[ns.pk] = NamespaceState(
            ns=ns,
            effective=limits.effective_limits(own, fq, settings.QUOTA_NAME),
            used=limits.usage(ns, pods.get(ns.pk, []), fq),
            pods=pods.get(ns.pk, []),
            foreign=fq,
            advertised=sorted(advertised[ns.cluster_id]),
            awaiting=held.get(ns.pk, {}),
        )
    return out


def state(ns: TeamNamespace) -> NamespaceState:
    return states([ns])[ns.pk]


@dataclass
class Held:
    ns: TeamNamespace
    awaiting: dict


def held_everywhere() -> list[Held]:
    """Every namespace with an apply waiting for confirmation (the admin queue's alert),
    with the merged keys as :func:`states` computes them. One query."""
    merged: dict = {}
    ops = Operation.objects.filter(status=Operation.Status.CONFIRM).select_related(
        "namespace__cluster"
    )
    for op in ops.order_by("created_at"):
        held = merged.setdefault(op.namespace_id, Held(op.namespace, {}))
        for key, v in op.lowering.items():
            if key not in held.awaiting or v["hard"] < held.awaiting[key]["hard"]:
                held.awaiting[key] = v
    return list(merged.values())
