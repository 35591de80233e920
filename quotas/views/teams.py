"""My teams: granted vs used vs capacity per namespace and resource."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field

from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.db.models import Count
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone

from inventory.models import GpuClass

from .. import demand, kueue, offclass, preview, reclaim
from ..capacity import bulk_limits
from ..figures import usable
from ..limits import EffectiveLimit
from ..models import (
    Grant,
    Membership,
    QuotaRequest,
    TeamNamespace,
    TeamQueue,
)
from ..snippets import grant_snippets
from .common import (
    _usage,
    visible_teams,
)

ENDED_GRANTS_SHOWN = 10
# Teams per page: an admin sees every team, and each brings its namespaces' figures.
TEAMS_PER_PAGE = 20


# -- my teams --------------------------------------------------------------------------


@dataclass
class ResourceRow:
    resource: str
    granted: int
    used: int
    limit: int
    effective: EffectiveLimit | None = None
    pending: object = None  # quotas.demand.Demand of unscheduled pending pods
    pending_classes: list = field(default_factory=list)  # [(class name, GPUs)] of it
    usable: object = None  # quotas.figures.Usable (ResourceQuota clusters)

    @property
    def scale(self) -> int:
        return max(self.limit, self.granted, self.used, 1)

    @property
    def used_in_quota(self) -> int:
        return min(self.used, self.granted)

    @property
    def unused(self) -> int:
        return max(self.granted - self.used, 0)

    @property
    def over(self) -> int:
        return max(self.used - self.granted, 0)

    @property
    def rest(self) -> int:
        return max(self.scale - max(self.granted, self.used), 0)


@dataclass
class NamespaceView:
    ns: TeamNamespace
    state: preview.NamespaceState | None = None
    resources: list[ResourceRow] = field(default_factory=list)
    active: list[Grant] = field(default_factory=list)
    upcoming: list[Grant] = field(default_factory=list)
    ended: list[Grant] = field(default_factory=list)
    off_class: list = field(default_factory=list)  # quotas.offclass.OffClassPod
    queue: QueueView | None = None  # the team's Kueue ClusterQueue on a Kueue cluster
    snippets: list = field(default_factory=list)  # quotas.snippets.Snippet per active grant


@dataclass
class QueueView:
    """A team's ClusterQueue on one Kueue cluster, shared by its namespaces there."""

    tq: TeamQueue
    name: str
    rows: list  # quotas.kueue.ClassQueueRow
    namespaces: int
    usable: list = field(default_factory=list)  # quotas.figures.Usable, one per row
    # Other queues of its cohort that may preempt to take back their lent quota
    # (reclaimWithinCohort not Never): what this queue borrows may be reclaimed by them.
    reclaimers: int = 0

    @property
    def borrowed(self) -> int:
        return sum(row.borrowed for row in self.rows)


def queue_views(namespaces: list[TeamNamespace], states: dict) -> dict:
    """{(team id, cluster id): QueueView} for the namespaces on Kueue clusters, from the
    queues ``preview.states`` already loaded."""
    counts = defaultdict(int)
    for ns in namespaces:
        counts[(ns.team_id, ns.cluster_id)] += 1
    cohorts = {(s.queue[0].cluster_id, s.queue[0].cohort) for s in states.values()
               if s.queue is not None and s.queue[0].cohort}  # fmt: skip
    reclaiming = defaultdict(set)
    if cohorts:
        others = TeamQueue.objects.filter(
            cluster_id__in={c for c, _ in cohorts}, cohort__in={h for _, h in cohorts}
        ).exclude(reclaim_within_cohort="Never")
        for pk, cluster_id, cohort in others.values_list("pk", "cluster_id", "cohort"):
            reclaiming[(cluster_id, cohort)].add(pk)
    out = {}
    for ns in namespaces:
        queue = states[ns.pk].queue
        # One ClusterQueue per team and cluster: its figures once, not per namespace.
        if queue is not None and (ns.team_id, ns.cluster_id) not in out:
            tq, rows = queue
            out[(ns.team_id, ns.cluster_id)] = QueueView(
                tq,
                kueue.queue_name(tq.team),
                rows,
                counts[(ns.team_id, ns.cluster_id)],
                usable(states[ns.pk]),
                len(reclaiming.get((tq.cluster_id, tq.cohort), set()) - {tq.pk}),
            )
    return out


@login_required
def teams(request: HttpRequest) -> HttpResponse:
    user = request.user
    page = Paginator(
        visible_teams(user).order_by("name", "pk").prefetch_related("memberships__user"),
        TEAMS_PER_PAGE,
    ).get_page(request.GET.get("page"))
    team_list = list(page.object_list)
    namespaces = list(
        TeamNamespace.objects.filter(team__in=team_list).select_related("cluster", "team")
    )
    now = timezone.now()
    grants = list(
        Grant.objects.filter(namespace__in=namespaces)
        .select_related("gpu_class")
        .order_by("starts_at")
    )
    usage = _usage(namespaces)
    limits = bulk_limits({ns.cluster_id for ns in namespaces})
    open_counts = dict(
        QuotaRequest.objects.filter(team__in=team_list, status__in=QuotaRequest.OPEN)
        .values("team_id")
        .annotate(n=Count("pk"))
        .values_list("team_id", "n")
    )

    states = preview.states(namespaces, now)
    off = offclass.off_class(namespaces, now)
    waiting = demand.pending_demand(namespaces)
    queues = queue_views(namespaces, states)
    class_names = dict(
        GpuClass.objects.filter(cluster_id__in={ns.cluster_id for ns in namespaces}).values_list(
            "pk", "name"
        )
    )
    views = {ns.pk: NamespaceView(ns, states[ns.pk], off_class=off.get(ns.pk, []),
                                  queue=queues.get((ns.team_id, ns.cluster_id)))
             for ns in namespaces}  # fmt: skip
    granted = defaultdict(int)
    for g in grants:
        view = views[g.namespace_id]
        g.namespace = view.ns
        state = g.state(now)
        if state == "active":
            granted[(g.namespace_id, g.resource)] += g.amount
            view.active.append(g)
        elif state == "upcoming":
            view.upcoming.append(g)
        else:
            view.ended.append(g)
    for view in views.values():
        ns = view.ns
        usable_now = {} if view.queue else {u.resource: u for u in usable(view.state)}
        names = {r for (c, r) in limits if c == ns.cluster_id}
        names |= {r for (n, r) in granted if n == ns.pk} | {r for (n, r) in usage if n == ns.pk}
        names |= set(view.state.effective)
        for resource in sorted(names):
            lim = limits.get((ns.cluster_id, resource))
            view.resources.append(
                ResourceRow(
                    resource=resource,
                    granted=granted[(ns.pk, resource)],
                    used=usage.get((ns.pk, resource), 0),
                    limit=lim.limit if lim else 0,
                    effective=view.state.effective.get(resource),
                    pending=waiting.get((ns.pk, resource)),
                    pending_classes=_by_class(waiting.get((ns.pk, resource)), class_names),
                    usable=usable_now.get(resource),
                )
            )
        view.snippets = grant_snippets(ns, view.active)
        view.ended = sorted(view.ended, key=lambda g: g.ended_at or g.ends_at, reverse=True)[
            :ENDED_GRANTS_SHOWN
        ]

    manager_of = {
        m.team_id
        for t in team_list
        for m in t.memberships.all()
        if m.user_id == user.pk and m.role == Membership.Role.MANAGER
    }
    reclaims = reclaim.annotated(reclaim.shown_for([ns.pk for ns in namespaces], now), user)
    rows = [
        {
            "team": t,
            "reclaims": [r for r in reclaims if r.namespace.team_id == t.pk],
            "role": next((m.role for m in t.memberships.all() if m.user_id == user.pk), None),
            "can_manage": user.is_staff or t.pk in manager_of,
            "namespaces": [v for v in views.values() if v.ns.team_id == t.pk],
            "open_requests": open_counts.get(t.pk, 0),
        }
        for t in team_list
    ]
    return render(request, "quotas/teams.html", {"rows": rows, "now": now, "page": page})


def _by_class(d, names: dict) -> list[tuple[str, int]]:
    """What waits, per GPU class its pods name (only when some name one)."""
    if d is None or set(d.by_class) <= {None}:
        return []
    return sorted(
        ((names.get(c, "no class named"), n) for c, n in d.by_class.items() if n),
        key=lambda x: (-x[1], x[0]),
    )
