"""Capacity: reserved vs limit per cluster and resource over the coming weeks."""

from __future__ import annotations

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from inventory.models import Cluster

from ..capacity import DEFAULT_RATIO, Capacity, Headroom, bulk_limits, timeline
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
    """Per cluster and resource: reserved vs limit for each of the coming days."""
    _staff_only(request.user)
    now = timezone.now()
    clusters = list(Cluster.objects.all())
    limits = bulk_limits({c.pk for c in clusters})
    # Pods beyond their grants hold capacity on every day shown (quotas/capacity.py).
    held = Capacity({c.pk for c in clusters}, now=now).beyond
    granted = set(
        Grant.objects.filter(ended_at__isnull=True).values_list("namespace__cluster_id", "resource")
    )
    sections = []
    for cluster in clusters:
        resources = sorted({r for (c, r) in set(limits) | granted if c == cluster.pk})
        charts = []
        for resource in resources:
            room = limits.get((cluster.pk, resource)) or Headroom(resource, 0, DEFAULT_RATIO, 0, 0)
            days = timeline(cluster, resource, now, days=CAPACITY_DAYS)
            beyond = held.get((cluster.pk, None, resource), 0)
            scale = max([room.limit, *(r for _, r in days), 1])
            peak_day, peak = max(days, key=lambda d: d[1]) if days else (now, 0)
            charts.append(
                {
                    "resource": resource,
                    "room": room,
                    "beyond": beyond,
                    "days": [
                        {
                            "day": d,
                            "reserved": r,
                            "free": room.limit - r - beyond,
                            "over": r + beyond > room.limit,
                            "pct": round(100 * r / scale, 1),
                        }
                        for d, r in days
                    ],
                    "limit_pct": round(100 * room.limit / scale, 1),
                    "peak": peak,
                    "peak_day": peak_day,
                    "over_by": peak - room.limit,
                    "axis": [days[0][0], days[len(days) // 2][0], days[-1][0]],
                }
            )
        sections.append({"cluster": cluster, "charts": charts})
    return render(
        request, "quotas/capacity.html", {"sections": sections, "days": CAPACITY_DAYS, "now": now}
    )
