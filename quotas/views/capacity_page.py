"""Capacity: reserved vs limit per cluster and resource over the coming weeks."""

from __future__ import annotations

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from inventory.models import Cluster, GpuClass

from ..capacity import Capacity, bulk_limits
from ..models import (
    Grant,
)
from .common import (
    _staff_only,
)

CAPACITY_DAYS = 28


# -- capacity --------------------------------------------------------------------------


@login_required
def capacity(request: HttpRequest) -> HttpResponse:
    """Per cluster and resource: reserved vs limit for each of the coming days, for the
    cluster's pool and for each GPU class (quotas/capacity.py, the one definition)."""
    _staff_only(request.user)
    now = timezone.now()
    clusters = list(Cluster.objects.all())
    limits = bulk_limits({c.pk for c in clusters})
    cap = Capacity({c.pk for c in clusters}, now=now)
    granted = set(
        Grant.objects.filter(ended_at__isnull=True).values_list("namespace__cluster_id", "resource")
    )
    classes = list(GpuClass.objects.filter(cluster__in=clusters).order_by("name"))
    sections = []
    for cluster in clusters:
        resources = sorted({r for (c, r) in set(limits) | granted if c == cluster.pk})
        charts = []
        for resource in resources:
            charts.append(_chart(cap, cluster, None, resource, now))
            for cls in classes:
                if cls.cluster_id == cluster.pk and (
                    cls.covers(resource) or cap.reserves(cluster.pk, cls.pk, resource)
                ):
                    charts.append(_chart(cap, cluster, cls, resource, now))
        sections.append({"cluster": cluster, "charts": charts})
    return render(
        request, "quotas/capacity.html", {"sections": sections, "days": CAPACITY_DAYS, "now": now}
    )


def _chart(cap: Capacity, cluster, cls: GpuClass | None, resource: str, now) -> dict:
    room = cap.free(cluster.pk, cls, resource, now, now + timedelta(seconds=1))
    limit = room.limit
    days = cap.timeline(cluster.pk, cls, resource, now, CAPACITY_DAYS)
    scale = max([limit, *(r for _, r, _ in days), 1])
    peak_day, peak, _ = max(days, key=lambda d: d[1]) if days else (now, 0, 0)
    return {
        "resource": resource,
        "gpu_class": cls,
        "room": room,
        "beyond": room.beyond,
        "days": [
            {"day": d, "reserved": r, "free": f, "over": f < 0, "pct": round(100 * r / scale, 1)}
            for d, r, f in days
        ],
        "limit_pct": round(100 * limit / scale, 1),
        "peak": peak,
        "peak_day": peak_day,
        "over_by": peak - limit,
        "axis": [days[0][0], days[len(days) // 2][0], days[-1][0]],
    }
