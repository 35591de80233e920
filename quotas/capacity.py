"""Capacity: what a cluster can give (allocatable x overcommit ratio) versus what grants
reserve over time. Temporary grants reserve only their window, so headroom depends on
the window asked for.
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta
from decimal import Decimal

from django.db.models import Sum

from inventory.models import Cluster, NodeResource, is_gpu_resource

from .models import Grant, OvercommitPolicy

DEFAULT_RATIO = Decimal("1.0")


def allocatable(cluster: Cluster, resource: str) -> int:
    """Allocatable units of ``resource`` on the cluster's present nodes (from inventory)."""
    total = NodeResource.objects.filter(
        node__cluster=cluster, node__gone_at__isnull=True, resource=resource
    ).aggregate(total=Sum("allocatable"))["total"]
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
    resource: str
    allocatable: int
    ratio: Decimal
    limit: int
    reserved: int

    @property
    def free(self) -> int:
        return self.limit - self.reserved

    def after(self, amount: int) -> int:
        return self.free - amount


def headroom(
    cluster: Cluster,
    resource: str,
    start: datetime,
    end: datetime | None,
    *,
    exclude: Grant | None = None,
) -> Headroom:
    alloc = allocatable(cluster, resource)
    r = ratio(cluster, resource)
    return Headroom(
        resource=resource,
        allocatable=alloc,
        ratio=r,
        limit=math.floor(alloc * r),
        reserved=peak_reserved(cluster, resource, start, end, exclude=exclude),
    )


def timeline(
    cluster: Cluster, resource: str, start: datetime, days: int = 28
) -> list[tuple[datetime, int]]:
    """Reserved units at the start of each day from ``start`` (for the capacity page)."""
    end = start + timedelta(days=days)
    grants = list(
        _grants(cluster, resource, start, end).values_list("starts_at", "ends_at", "amount")
    )
    out = []
    for day in range(days):
        t = start + timedelta(days=day)
        reserved = sum(a for s, e, a in grants if s <= t and (e is None or e > t))
        out.append((t, reserved))
    return out


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
