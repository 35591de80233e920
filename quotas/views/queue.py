"""The admin approval queue, with headroom per request."""

from __future__ import annotations

from collections import defaultdict

from django.contrib.auth.decorators import login_required
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from telemetry.insight import annotate_renewals

from .. import preview
from ..capacity import DEFAULT_RATIO, Headroom, bulk_limits, peak
from ..models import (
    Grant,
    QuotaRequest,
)
from .common import (
    _staff_only,
    _usage,
)

# -- admin queue -----------------------------------------------------------------------


@login_required
def queue(request: HttpRequest) -> HttpResponse:
    """Pending requests, oldest first, each with its namespace's grants and usage and the
        capacity of its window, the effective limit (quotas/limits.py) and what approving would
    change. A fixed number of queries whatever the queue's length."""
    _staff_only(request.user)
    now = timezone.now()
    pending = list(
        QuotaRequest.objects.filter(status=QuotaRequest.Status.PENDING)
        .select_related("team", "namespace__cluster", "requested_by", "target_grant")
        .order_by("created_at")
    )
    annotate_renewals(pending)  # the team's measured use of each grant up for renewal
    namespaces = list({r.namespace_id: r.namespace for r in pending}.values())
    cluster_ids = {ns.cluster_id for ns in namespaces}
    limits = bulk_limits(cluster_ids)
    usage = _usage(namespaces)
    states = preview.states(namespaces, now)
    held = preview.held_everywhere()
    pools = defaultdict(list)  # (cluster id, resource) -> grant windows still counting
    ns_grants = defaultdict(list)
    ns_ids = {ns.pk for ns in namespaces}
    open_grants = Grant.objects.filter(ended_at__isnull=True).filter(
        Q(namespace__cluster_id__in=cluster_ids, resource__in={r.resource for r in pending})
        | Q(namespace_id__in=ns_ids)
    )
    for g in open_grants.select_related("namespace").order_by("starts_at"):
        pools[(g.namespace.cluster_id, g.resource)].append((g.starts_at, g.ends_at, g.amount))
        if g.namespace_id in ns_ids and g.state(now) == "active":
            ns_grants[g.namespace_id].append(g)
    rows = []
    for req in pending:
        key = (req.namespace.cluster_id, req.resource)
        base = limits.get(key) or Headroom(req.resource, 0, DEFAULT_RATIO, 0, 0)
        room = Headroom(
            resource=req.resource,
            allocatable=base.allocatable,
            ratio=base.ratio,
            limit=base.limit,
            reserved=peak(pools[key], req.starts_at, req.ends_at),
        )
        grants = ns_grants[req.namespace_id]
        st = states[req.namespace_id]
        rows.append(
            {
                "req": req,
                "room": room,
                "after": room.after(req.amount),
                "grants": grants,
                "granted": sum(g.amount for g in grants if g.resource == req.resource),
                "used": usage.get((req.namespace_id, req.resource), 0),
                "effective": st.effective.get(req.resource),
                "change": st.change(req.resource, req.amount),
                "state": st,
            }
        )
    return render(request, "quotas/queue.html", {"rows": rows, "next": request.path, "held": held})
