"""The admin approval queue, with headroom per request."""

from __future__ import annotations

from collections import defaultdict

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from inventory.figures import POOL, idle_now
from mig.models import MigRequest
from telemetry.renewals import annotate_renewals

from .. import demand, inbox, kueue, preview
from ..capacity import Capacity
from ..figures import usable
from ..models import (
    Grant,
    QuotaRequest,
)
from .common import (
    _staff_only,
    _usage,
)

# -- admin queue -----------------------------------------------------------------------

# Requests per page of the queue: each row costs its figures, so a long queue (members'
# pending requests are capped per team, QUOTA_MAX_PENDING_PER_TEAM) never makes a slow page.
QUEUE_PER_PAGE = 20


@login_required
def queue(request: HttpRequest) -> HttpResponse:
    """Pending quota and MIG requests in one list (quotas/inbox.py), filtered, searched and
    sorted (oldest first by default), paginated. Each quota request comes with its
    namespace's grants and usage, the capacity of its window, the effective limit
    (quotas/limits.py) and what approving would change; a MIG request links to its page,
    where it is decided on a proposed node. A fixed number of queries whatever the
    queue's length."""
    _staff_only(request.user)
    form = inbox.filter_form(request.GET)
    f = form.filters()
    quota_qs = QuotaRequest.objects.filter(status=QuotaRequest.Status.PENDING).select_related(
        "team", "namespace__cluster", "requested_by", "target_grant", "gpu_class__cluster"
    )
    mig_qs = MigRequest.objects.filter(status=MigRequest.Status.PENDING).select_related(
        "team", "namespace", "cluster", "requested_by", "requested_node"
    )
    quota_qs, mig_qs = inbox.apply_filters(quota_qs, mig_qs, f)
    page = inbox.page_of(
        quota_qs, mig_qs, sort=f.sort, number=request.GET.get("page"), per_page=QUEUE_PER_PAGE
    )
    facts = _quota_facts([r for r in page.object_list if not r.is_mig])
    rows = [{"req": r, "is_mig": True} if r.is_mig else facts[r.pk] for r in page.object_list]
    return render(
        request,
        "quotas/queue.html",
        {
            "rows": rows,
            "page": page,
            "form": form,
            "filtered": f.active,
            "next": request.get_full_path(),
            "held": preview.held_everywhere(),
        },
    )


def _quota_facts(pending: list[QuotaRequest]) -> dict:
    """Per pending quota request (by id): the figures its queue card shows, in bulk."""
    if not pending:
        return {}
    now = timezone.now()
    annotate_renewals(pending)  # the team's measured use of each grant up for renewal
    namespaces = list({r.namespace_id: r.namespace for r in pending}.values())
    cluster_ids = {ns.cluster_id for ns in namespaces}
    # The same figures as the approval computes (quotas/capacity.py free), in bulk.
    capacity = Capacity(cluster_ids, {r.resource for r in pending}, now=now)
    usage = _usage(namespaces)
    states = preview.states(namespaces, now)
    waiting = demand.pending_demand(namespaces)
    ns_grants = defaultdict(list)
    ns_ids = {ns.pk for ns in namespaces}
    for g in (
        Grant.objects.filter(ended_at__isnull=True, namespace_id__in=ns_ids)
        .select_related("namespace", "gpu_class")
        .order_by("starts_at")
    ):
        if g.state(now) == "active":
            ns_grants[g.namespace_id].append(g)
    idle = idle_now(cluster_ids, {r.resource for r in pending})
    usable_of = {ns_id: usable(st, now) for ns_id, st in states.items()}
    cohorts: dict = {}  # (cluster id, cohort) -> kueue.CohortState, once per page
    rows = {}
    for req in pending:
        idle_fig = idle.get(
            (req.namespace.cluster_id, req.gpu_class_id if req.gpu_class_id else POOL, req.resource)
        )
        mine = next(
            (u for u in usable_of[req.namespace_id] if u.resource == req.resource
             and (u.gpu_class is None or u.gpu_class.pk == req.gpu_class_id)),
            None,
        )  # fmt: skip
        room = capacity.free(
            req.namespace.cluster_id,
            req.gpu_class,
            req.resource,
            req.starts_at,
            req.ends_at,
            namespace=req.namespace.name,
        )
        grants = ns_grants[req.namespace_id]
        st = states[req.namespace_id]
        rows[req.pk] = {
            "req": req,
            "is_mig": False,
            "room": room,
            "after": room.after(req.amount),
            "grants": grants,
            "granted": sum(g.amount for g in grants if g.resource == req.resource),
            "used": usage.get((req.namespace_id, req.resource), 0),
            "effective": st.effective.get(req.resource),
            "change": st.change(req.resource, req.amount, req.gpu_class),
            "state": st,
            "pending": waiting.get((req.namespace_id, req.resource)),
            "pending_class": _for_class(waiting.get((req.namespace_id, req.resource)), req),
            "idle_now": idle_fig.idle if idle_fig else 0,
            "usable": mine,
            "cohort": _cohort_row(st, req, cohorts, now),
        }
    return rows


def _cohort_row(state, req, cohorts: dict, now) -> dict | None:
    """The request's class in its team's Kueue cohort: the cohort's queues, their quota,
    what they hold and borrow (None: not a Kueue cluster, or no cohort)."""
    if state.queue is None or not state.queue[0].cohort or req.gpu_class_id is None:
        return None
    tq = state.queue[0]
    key = (tq.cluster_id, tq.cohort)
    if key not in cohorts:
        cohorts[key] = kueue.cohort_state(tq.cluster, tq.cohort, now)
    cohort = cohorts[key]
    return {"state": cohort, "row": cohort.rows.get((req.gpu_class_id, req.resource))}


def _for_class(d, req) -> int:
    """Of what waits in the request's namespace, the GPUs asked for in its class."""
    return d.for_class(req.gpu_class_id) if d is not None and req.gpu_class_id else 0
