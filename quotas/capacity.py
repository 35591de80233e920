"""Capacity: what a cluster can give (allocatable x overcommit ratio) versus what grants
reserve over time. Temporary grants reserve only their window, so headroom depends on
the window asked for.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass, replace
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import BigIntegerField, Sum, TextField
from django.db.models.fields.json import KeyTextTransform
from django.db.models.functions import Cast
from django.utils import timezone

from inventory.models import Cluster, GpuClass, GpuPod, NodeResource, is_gpu_resource

from .models import Grant, OvercommitPolicy

DEFAULT_RATIO = Decimal("1.0")


def allocatable(cluster: Cluster, resource: str, gpu_class: GpuClass | None = None) -> int:
    """Allocatable units of ``resource`` on the cluster's present nodes (from inventory),
    of one GPU class's nodes when given."""
    rows = NodeResource.objects.filter(
        node__cluster=cluster, node__gone_at__isnull=True, resource=resource
    )
    if gpu_class is not None:
        rows = rows.filter(node__gpu_class=gpu_class)
    total = rows.aggregate(total=Sum("allocatable"))["total"]
    return int(total or 0)


def advertised_resources(cluster: Cluster) -> list[str]:
    """GPU resources some present node of the cluster advertises (capacity > 0)."""
    names = (
        NodeResource.objects.filter(
            node__cluster=cluster, node__gone_at__isnull=True, capacity__gt=0
        )
        .values_list("resource", flat=True)
        .distinct()
    )
    return sorted(name for name in names if is_gpu_resource(name))


def ratio(cluster: Cluster, resource: str) -> Decimal:
    policy = OvercommitPolicy.objects.filter(cluster=cluster, resource=resource).first()
    return policy.ratio if policy else DEFAULT_RATIO


def limit(cluster: Cluster, resource: str) -> int:
    """The most that grants may reserve at any instant: floor(allocatable x ratio)."""
    return math.floor(allocatable(cluster, resource) * ratio(cluster, resource))


def _grants(cluster: Cluster, resource: str, start: datetime, end: datetime | None):
    return Grant.objects.filter(namespace__cluster=cluster, resource=resource).overlapping(
        start, end
    )


def peak_reserved(
    cluster: Cluster,
    resource: str,
    start: datetime,
    end: datetime | None,
    *,
    exclude: Grant | None = None,
) -> int:
    """The largest total that grants reserve at any instant of [start, end).

    A sweep over grant start/end points: permanent grants count everywhere after they
    start, temporary ones only inside their window.
    """
    qs = _grants(cluster, resource, start, end)
    if exclude is not None:
        qs = qs.exclude(pk=exclude.pk)
    return peak(qs.values_list("starts_at", "ends_at", "amount"), start, end)


def peak(windows, start: datetime, end: datetime | None) -> int:
    """The most reserved at any instant of [start, end) by (starts_at, ends_at, amount)
    windows (ends_at None: permanent). A sweep over start and end points.

    Pure, so pages that load many grants at once can reuse it without queries.
    """
    points: list[tuple[datetime, int]] = []
    for g_start, g_end, amount in windows:
        if (g_end is not None and g_end <= start) or (end is not None and g_start >= end):
            continue
        points.append((max(g_start, start), amount))
        if g_end is not None and (end is None or g_end < end):
            points.append((g_end, -amount))
    # Ends sort before starts at the same instant: [a, b) and [b, c) do not overlap.
    points.sort(key=lambda p: (p[0], p[1]))
    level = highest = 0
    for _, delta in points:
        level += delta
        highest = max(highest, level)
    return highest


@dataclass(frozen=True)
class Headroom:
    """What grants may still reserve of one resource (in one GPU class, or any class).

    ``free`` = limit (allocatable x ratio) - what grants reserve at peak in the window -
    what pods hold beyond their namespace's grants now (``beyond``). A class figure is
    capped by the cluster's pool figure (``pool``): every grant draws from the pool too.
    """

    resource: str
    allocatable: int
    ratio: Decimal
    limit: int
    reserved: int
    beyond: int = 0
    gpu_class: GpuClass | None = None
    pool: Headroom | None = None

    @property
    def own_free(self) -> int:
        return self.limit - self.reserved - self.beyond

    @property
    def free(self) -> int:
        return self.own_free if self.pool is None else min(self.own_free, self.pool.free)

    @property
    def capped_by_pool(self) -> bool:
        return self.pool is not None and self.pool.free < self.own_free

    def after(self, amount: int) -> int:
        return self.free - amount


POOL = None  # the key part of "any class": the whole cluster's allocatable


def _text(field: str) -> Cast:
    """A uuid column read as text (see Capacity.__init__)."""
    return Cast(field, TextField())


def _key(cluster_id, class_id, resource: str) -> tuple:
    return (str(cluster_id), None if class_id is None else str(class_id), resource)


class Capacity:
    """Everything :meth:`free` needs for some clusters and resources, in a fixed number of
    queries (four, plus one per resource for pod usage), so the approval, the queue and
    the fleet page compute "free" with one definition.

    Rule (docs/quotas.md, "GPU classes"): a grant of class C reserves against C and
    against the cluster's pool; an any-class grant against the pool only. A class request
    may take min(free in C, free in the pool). With every class within its own
    allocatable and the total within the pool's, the any-class grants always fit in what
    the classes leave. Pods hold capacity beyond grants where a namespace's scheduled pods
    request more than its active grants (in a class: more on the class's nodes than its
    grants of that class; what an any-class grant covers still holds the class it runs
    on); namespaces without grants count in full.
    """

    def __init__(self, cluster_ids, resources=None, *, now: datetime | None = None,
                 exclude: Grant | None = None):  # fmt: skip
        self.now = now or timezone.now()
        cluster_ids = list(cluster_ids)
        # Keys hold ids as text, read as text: at 5,000 nodes the pod rows give some
        # 9,000 (namespace, class) sums, and hashing uuid.UUID keys (a Python __hash__)
        # cost more than the query. Callers pass UUIDs; _key() converts them.
        self.alloc: dict[tuple, int] = defaultdict(int)
        rows = NodeResource.objects.filter(
            node__cluster_id__in=cluster_ids, node__gone_at__isnull=True
        )
        if resources is not None:
            resources = sorted(set(resources))
            rows = rows.filter(resource__in=resources)
        for cluster_id, class_id, resource, total in (
            rows.values_list(_text("node__cluster_id"), _text("node__gpu_class_id"), "resource")
            .annotate(total=Sum("allocatable"))
            .order_by()
        ):
            if is_gpu_resource(resource):
                self.alloc[(cluster_id, POOL, resource)] += int(total or 0)
                if class_id is not None:
                    self.alloc[(cluster_id, class_id, resource)] += int(total or 0)
        self.ratios = {
            (str(p.cluster_id), p.resource): p.ratio
            for p in OvercommitPolicy.objects.filter(cluster_id__in=cluster_ids)
        }
        self.windows: dict[tuple, list] = defaultdict(list)
        granted: dict[tuple, dict] = defaultdict(lambda: defaultdict(int))
        grants = Grant.objects.filter(ended_at__isnull=True, namespace__cluster_id__in=cluster_ids)
        if resources is not None:
            grants = grants.filter(resource__in=resources)
        if exclude is not None:
            grants = grants.exclude(pk=exclude.pk)
        for cluster_id, ns, class_id, resource, g_start, g_end, amount in grants.values_list(
            _text("namespace__cluster_id"), "namespace__name", _text("gpu_class_id"), "resource",
            "starts_at", "ends_at", "amount",
        ).order_by("starts_at"):  # fmt: skip
            window = (g_start, g_end, amount)
            self.windows[(cluster_id, POOL, resource)].append(window)
            if class_id is not None:
                self.windows[(cluster_id, class_id, resource)].append(window)
            if g_start <= self.now and (g_end is None or g_end > self.now):
                granted[(cluster_id, ns, resource)][class_id] += amount
        if resources is None:
            resources = sorted({key[2] for key in self.alloc} | {key[2] for key in self.windows})
        used: dict[tuple, dict] = defaultdict(lambda: defaultdict(int))
        for resource in resources:
            amount = Cast(KeyTextTransform(resource, "requests"), BigIntegerField())
            for cluster_id, ns, class_id, total in (
                GpuPod.objects.filter(
                    cluster_id__in=cluster_ids, node__isnull=False, requests__has_key=resource
                )
                .values_list(_text("cluster_id"), "namespace", _text("node__gpu_class_id"))
                .annotate(total=Sum(amount))
                .order_by()
            ):
                used[(cluster_id, ns, resource)][class_id] += int(total or 0)
        self.beyond: dict[tuple, int] = defaultdict(int)
        # Per namespace too: a request's own pods beyond its grants are what the grant
        # would cover, so its figure leaves them out (see free()).
        self.beyond_ns: dict[tuple, int] = defaultdict(int)
        for (cluster_id, ns, resource), per_class in used.items():
            grant = granted.get((cluster_id, ns, resource), {})
            over = max(sum(per_class.values()) - sum(grant.values()), 0)
            self.beyond[(cluster_id, POOL, resource)] += over
            self.beyond_ns[(cluster_id, POOL, resource, ns)] = over
            for class_id, n in per_class.items():
                if class_id is not None:
                    # An any-class grant reserves against the pool only, so the pods it
                    # covers hold the class they run on (DESIGN.md, "free to grant").
                    over = max(n - grant.get(class_id, 0), 0)
                    self.beyond[(cluster_id, class_id, resource)] += over
                    self.beyond_ns[(cluster_id, class_id, resource, ns)] = over

    def reserves(self, cluster_id, class_id, resource: str) -> bool:
        """Whether some unended grant reserves ``resource`` in the class (None: the pool)."""
        return bool(self.windows.get(_key(cluster_id, class_id, resource)))

    def windows_of(self, cluster_id, gpu_class: GpuClass | None, resource: str) -> list:
        """(start, end, amount) of the unended grants reserving ``resource`` in the class
        (None: the pool), by start: the capacity calendar splits them (quotas/calendar.py)."""
        class_id = gpu_class.pk if gpu_class else POOL
        return self.windows.get(_key(cluster_id, class_id, resource), [])

    def _figure(self, cluster_id, class_id, resource, start, end, namespace) -> Headroom:
        key = _key(cluster_id, class_id, resource)
        alloc = self.alloc.get(key, 0)
        r = self.ratios.get((key[0], resource), DEFAULT_RATIO)
        beyond = self.beyond.get(key, 0)
        if namespace:
            beyond -= self.beyond_ns.get((*key, namespace), 0)
        return Headroom(
            resource=resource, allocatable=alloc, ratio=r, limit=math.floor(alloc * r),
            reserved=peak(self.windows.get(key, ()), start, end), beyond=beyond,
        )  # fmt: skip

    def timeline(
        self, cluster_id, gpu_class: GpuClass | None, resource: str, start: datetime, days: int
    ) -> list[tuple[datetime, int, int]]:
        """(day, reserved, free) at the start of each day from ``start``, in the class
        (None: the pool), free by the same definition as :meth:`free` (a class's day is
        capped by the pool's), for the capacity page."""
        class_id = gpu_class.pk if gpu_class else POOL
        keys = [_key(cluster_id, class_id, resource)]
        if class_id is not POOL:
            keys.append(_key(cluster_id, POOL, resource))
        out = []
        for day in range(days):
            t = start + timedelta(days=day)
            figures = []
            for key in keys:
                alloc = self.alloc.get(key, 0)
                r = self.ratios.get((key[0], resource), DEFAULT_RATIO)
                reserved = sum(
                    a for s, e, a in self.windows.get(key, ()) if s <= t and (e is None or e > t)
                )
                figures.append(
                    (reserved, math.floor(alloc * r) - reserved - self.beyond.get(key, 0))
                )
            out.append((t, figures[0][0], min(f for _, f in figures)))
        return out

    def free(
        self,
        cluster_id,
        gpu_class: GpuClass | None,
        resource: str,
        start: datetime,
        end: datetime | None,
        *,
        namespace: str = "",
    ) -> Headroom:
        """Headroom of ``resource`` in ``gpu_class`` (None: any class) over [start, end).

        ``namespace`` (a name on the cluster): the figure for a grant to that namespace,
        which leaves out its own pods beyond its grants: the grant covers them, so after
        it the namespace holds max(amount, their excess), and approving never takes more
        than this figure from anyone else.
        """
        pool = self._figure(cluster_id, POOL, resource, start, end, namespace)
        if gpu_class is None:
            return pool
        own = self._figure(cluster_id, gpu_class.pk, resource, start, end, namespace)
        return replace(own, gpu_class=gpu_class, pool=pool)


def free(
    cluster: Cluster,
    gpu_class: GpuClass | None,
    resource: str,
    start: datetime,
    end: datetime | None,
    *,
    exclude: Grant | None = None,
    namespace: str = "",
) -> Headroom:
    """THE definition of free capacity, used by approval, the queue and the fleet page."""
    return Capacity([cluster.pk], [resource], exclude=exclude).free(
        cluster.pk, gpu_class, resource, start, end, namespace=namespace
    )


def headroom(
    cluster: Cluster,
    resource: str,
    start: datetime,
    end: datetime | None,
    *,
    gpu_class: GpuClass | None = None,
    exclude: Grant | None = None,
    namespace: str = "",
) -> Headroom:
    return free(cluster, gpu_class, resource, start, end, exclude=exclude, namespace=namespace)


def timeline(
    cluster: Cluster, resource: str, start: datetime, days: int = 28
) -> list[tuple[datetime, int]]:
    """Reserved units of the pool at the start of each day from ``start``."""
    cap = Capacity([cluster.pk], [resource], now=start)
    return [(d, r) for d, r, _ in cap.timeline(cluster.pk, None, resource, start, days)]


def bulk_limits(cluster_ids) -> dict[tuple, Headroom]:
    """Allocatable, ratio and limit per (cluster id, resource), reserved left at 0.

    The same figures as ``capacity.allocatable`` / ``ratio`` / ``limit``, in two queries.
    """
    alloc = defaultdict(int)
    rows = (
        NodeResource.objects.filter(node__cluster_id__in=cluster_ids, node__gone_at__isnull=True)
        .values_list("node__cluster_id", "resource")
        .annotate(total=Sum("allocatable"))
    )
    for cluster_id, resource, total in rows:
        if is_gpu_resource(resource):
            alloc[(cluster_id, resource)] = int(total or 0)
    ratios = {
        (p.cluster_id, p.resource): p.ratio
        for p in OvercommitPolicy.objects.filter(cluster_id__in=cluster_ids)
    }
    out = {}
    for key in set(alloc) | set(ratios):
        r = ratios.get(key, DEFAULT_RATIO)
        a = alloc.get(key, 0)
        out[key] = Headroom(
            resource=key[1], allocatable=a, ratio=r, limit=math.floor(a * r), reserved=0
        )
    return out
