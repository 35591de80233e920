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
from datetime import datetime, timedelta
from functools import cached_property

from django.conf import settings
from django.db.models import Q, Sum
from django.utils import timezone

from inventory.models import GpuClass, GpuPod, NodeResource, is_gpu_resource

from . import limits
from .capacity import Capacity, Headroom
from .models import ForeignQuota, Grant, Operation, TeamNamespace


@dataclass
class Change:
    resource: str
    delta: int
    granted_after: int
    limit_after: int
    binding_after: str
    lowering: dict
    affected: int  # pods that ask for a lowered resource (limits.affected)
    # "resourcequota": pods above a lowered limit keep running, new ones are refused at
    # creation, and the apply waits for an admin's confirmation; "kueue": admitted
    # workloads keep running, new ones queue, nothing waits (quotas/kueue_apply.py); "dra":
    # as "resourcequota", for claims of the class's DeviceClass (quotas/dra.py).
    backend: str = "resourcequota"

    @property
    def capped(self) -> bool:
        """A raise that a foreign quota keeps from raising the real limit."""
        return self.delta > 0 and self.limit_after < self.granted_after


@dataclass
class NamespaceState:
    ns: TeamNamespace
    effective: dict[str, limits.EffectiveLimit]
    used: dict[str, int]
    foreign: list[ForeignQuota]
    advertised: list[str]
    requested: limits.Requested = field(default_factory=limits.Requested)
    awaiting: dict = field(default_factory=dict)  # merged lowering of held operations
    # On a Kueue cluster: {(class id, resource): (nominal, held by admitted workloads)} of
    # the team's ClusterQueue (shared by its namespaces there); None elsewhere.
    kueue: dict | None = None
    queue: tuple | None = None  # (TeamQueue, class rows) of that ClusterQueue, when read

    @property
    def needs_confirmation(self) -> bool:
        return bool(self.awaiting)

    @cached_property
    def pods(self) -> list[limits.PodRow]:
        """The namespace's GPU pods, for the page that confirms a lowering (one query;
        ``used`` and the previews' counts come from sums, not from these rows)."""
        return limits.pods_by_namespace([self.ns]).get(self.ns.pk, [])

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

    def change(self, resource: str, delta: int, gpu_class: GpuClass | None = None) -> Change:
        if self.kueue is not None:
            return self._kueue_change(resource, delta, gpu_class)
        if self.ns.cluster.is_dra and gpu_class is not None:
            return self._dra_change(resource, delta, gpu_class)
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
        over = limits.affected(self.requested, (k.removeprefix(limits.PREFIX) for k in low))
        return Change(resource, delta, after, limit_after, binding, low, over)

    def _dra_change(self, resource: str, delta: int, gpu_class: GpuClass) -> Change:
        """Per class on a DRA cluster: the devices of the class's DeviceClass the quota
        would allow after the change, against what its claims hold (quotas/dra.py)."""
        from . import dra

        key = dra.quota_key(dra.device_class_name(gpu_class, resource))
        granted = dra.desired_hard(self.ns).get(key, 0)
        after = max(granted + delta, 0)
        limit_after, binding = after, settings.QUOTA_NAME
        for fq in self.foreign:
            value = limits._int(fq.hard.get(key))
            if fq.present and not fq.scoped and value is not None and value < limit_after:
                limit_after, binding = value, fq.name
        low = limits.lowering(self.ns, {key: after}, self.used)
        over = limits.affected(self.requested, [resource]) if low else 0
        return Change(resource, delta, after, limit_after, binding, low, over, backend="dra")

    def _kueue_change(self, resource: str, delta: int, gpu_class: GpuClass | None) -> Change:
        """Per class: the team's nominal quota after the change against what its admitted
        workloads hold in that class (the ClusterQueue's flavorsUsage as last read)."""
        from .kueue import flavor_name

        nominal, held = self.kueue.get((gpu_class.pk if gpu_class else None, resource), (0, 0))
        after = max(nominal + delta, 0)
        low = {}
        if gpu_class is not None and after < held:
            low = {f"{flavor_name(gpu_class)}/{resource}": {"hard": after, "used": held}}
        return Change(resource, delta, after, after, "Kueue", low, 0, backend="kueue")


def kueue_queues(namespaces: list[TeamNamespace], now=None) -> dict:
    """{(team id, cluster id): (TeamQueue, its quotas.kueue.class_rows)} for the namespaces
    on Kueue clusters: one query for the queues, the rows' figures per team."""
    from .kueue import class_rows
    from .models import TeamQueue

    keys = {(ns.team_id, ns.cluster_id) for ns in namespaces if ns.cluster.is_kueue}
    if not keys:
        return {}
    out: dict = {}
    for tq in TeamQueue.objects.filter(
        team_id__in={t for t, _ in keys}, cluster_id__in={c for _, c in keys}
    ).select_related("team", "cluster"):
        if (tq.team_id, tq.cluster_id) in keys:
            out[(tq.team_id, tq.cluster_id)] = (tq, class_rows(tq, now))
    return out


def states(namespaces: list[TeamNamespace], now=None) -> dict:
    """NamespaceState per namespace id, in five queries whatever their number (plus a few
    per team on a Kueue cluster, and the pods of namespaces on a DRA cluster)."""
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
    requested = limits.requested_by_namespace(namespaces)
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
    queues = kueue_queues(namespaces, now)
    out = {}
    for ns in namespaces:
        own = {r: 0 for r in advertised[ns.cluster_id]} | granted[ns.pk]
        fq = foreign.get(ns.pk, [])
        out[ns.pk] = NamespaceState(
            ns=ns,
            effective=limits.effective_limits(own, fq, settings.QUOTA_NAME),
            used=limits.usage(ns, requested[ns.pk], fq),
            requested=requested[ns.pk],
            foreign=fq,
            advertised=sorted(advertised[ns.cluster_id]),
            awaiting=held.get(ns.pk, {}),
            queue=queues.get((ns.team_id, ns.cluster_id)),
        )
        if ns.cluster.is_kueue:
            rows = (out[ns.pk].queue or (None, []))[1]
            out[ns.pk].kueue = {(r.gpu_class.pk, r.resource): (r.nominal, r.used) for r in rows}
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


@dataclass
class Outlook:
    """Before a request is sent: for its class (None: any) and resource, what the
    namespace holds (active grants), what its pods use, and what is free now and over
    the asked window, by the one definition of free (quotas/capacity.py)."""

    gpu_class: GpuClass | None
    resource: str
    held: int
    used: int
    free_now: Headroom
    free_window: Headroom
    enforced: bool
    idle_now: int = 0  # inventory/figures.py, on the class's nodes (the cluster's for any)
    usable: object = None  # quotas.figures.Usable of the namespace for this resource/class

    @property
    def usable_now(self) -> int | None:
        return None if self.usable is None else self.usable.usable

    def as_dict(self) -> dict:
        return {
            "gpu_class": self.gpu_class.slug if self.gpu_class else None,
            "capacity_text": self.gpu_class.capacity_text() if self.gpu_class else "",
            "resource": self.resource,
            "held": self.held,
            "used": self.used,
            "free_now": self.free_now.free,
            "free_window": self.free_window.free,
            "class_enforced": self.enforced,
            "idle_now": self.idle_now,
            "usable_now": self.usable_now,
            "usable_binding": self.usable.binding if self.usable is not None else "",
        }


def outlook(
    ns: TeamNamespace,
    gpu_class: GpuClass | None,
    resource: str,
    start: datetime | None = None,
    end: datetime | None = None,
) -> Outlook:
    """Held counts the namespace's active grants of this class (all classes when None)
    plus its any-class grants; used, its scheduled pods on the class's nodes (all its
    pods when None)."""
    now = timezone.now()
    start = max(start or now, now)
    grants = Grant.objects.filter(namespace=ns, resource=resource).active_at(now)
    if gpu_class is not None:
        grants = grants.filter(Q(gpu_class=gpu_class) | Q(gpu_class__isnull=True))
    pods = GpuPod.objects.filter(cluster_id=ns.cluster_id, namespace=ns.name)
    if gpu_class is not None:
        pods = pods.filter(node__gpu_class=gpu_class)
    cap = Capacity([ns.cluster_id], [resource], now=now)
    from inventory.figures import POOL, idle_now

    from .figures import usable

    idle = idle_now([ns.cluster_id], [resource]).get(
        (ns.cluster_id, gpu_class.pk if gpu_class else POOL, resource)
    )
    mine = next(
        (u for u in usable(state(ns), now) if u.resource == resource
         and (u.gpu_class is None or gpu_class is None or u.gpu_class == gpu_class)),
        None,
    )  # fmt: skip
    return Outlook(
        gpu_class=gpu_class,
        resource=resource,
        held=int(grants.aggregate(total=Sum("amount"))["total"] or 0),
        used=sum(int(p.get(resource, 0)) for p in pods.values_list("requests", flat=True)),
        free_now=cap.free(
            ns.cluster_id, gpu_class, resource, now, now + timedelta(seconds=1), namespace=ns.name
        ),
        free_window=cap.free(ns.cluster_id, gpu_class, resource, start, end, namespace=ns.name),
        enforced=ns.cluster.enforces_classes,
        idle_now=idle.idle if idle else 0,
        usable=mine,
    )
