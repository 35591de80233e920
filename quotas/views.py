"""Server-rendered quota pages: my teams, requests, the admin queue, capacity, audit,
notification preferences.

Thin views: rules and transitions live in ``quotas.services`` (their ValidationErrors go
back onto the forms), capacity in ``quotas.capacity``. Every query is scoped to what the
user may see: staff see everything, others only their teams' objects (404 otherwise).
Lists run a fixed number of queries whatever their length.
"""

from __future__ import annotations

import csv
import json
import math
import re
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.core.paginator import Paginator
from django.db.models import Count, Q, QuerySet, Sum
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from inventory.models import Cluster, NamespaceUsage, NodeResource, is_gpu_resource

from . import services
from .capacity import DEFAULT_RATIO, Headroom, headroom, timeline
from .forms import (
    ApproveForm,
    AuditFilterForm,
    NotificationForm,
    RejectForm,
    ReleaseForm,
    RenewForm,
    RequestFilterForm,
    RequestForm,
    audit_actions,
)
from .models import (
    AuditEvent,
    Grant,
    Membership,
    NotificationOptOut,
    OperationAttempt,
    OvercommitPolicy,
    QuotaRequest,
    Team,
    TeamNamespace,
)

REQUESTS_PER_PAGE = 25
AUDIT_PER_PAGE = 50
ENDED_GRANTS_SHOWN = 10
CAPACITY_DAYS = 28

# -- scoping ---------------------------------------------------------------------------


def visible_teams(user) -> QuerySet[Team]:
    return Team.objects.all() if user.is_staff else Team.objects.filter(memberships__user=user)


def visible_requests(user) -> QuerySet[QuotaRequest]:
    qs = QuotaRequest.objects.select_related(
        "team", "namespace__cluster", "requested_by", "decided_by", "target_grant"
    )
    return qs if user.is_staff else qs.filter(team__memberships__user=user)


def visible_grants(user) -> QuerySet[Grant]:
    qs = Grant.objects.select_related("namespace__cluster", "namespace__team")
    return qs if user.is_staff else qs.filter(namespace__team__memberships__user=user)


def visible_audit(user) -> QuerySet[AuditEvent]:
    qs = AuditEvent.objects.select_related("team")
    return qs if user.is_staff else qs.filter(team__memberships__user=user)


def _staff_only(user) -> None:
    if not user.is_staff:
        raise PermissionDenied("Only portal admins can do this.")


def _can_manage(user, team: Team) -> bool:
    return user.is_staff or services.is_manager(user, team)


# -- capacity in bulk (a fixed number of queries for any number of rows) ---------------


def _limits(cluster_ids) -> dict[tuple, Headroom]:
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


def _peak(windows, start: datetime, end: datetime | None) -> int:
    """Most reserved at any instant of [start, end) by (starts_at, ends_at, amount) windows:
    the sweep of ``capacity.peak_reserved`` over grants already loaded."""
    points = []
    for g_start, g_end, amount in windows:
        if (g_end is not None and g_end <= start) or (end is not None and g_start >= end):
            continue
        points.append((max(g_start, start), amount))
        if g_end is not None and (end is None or g_end < end):
            points.append((g_end, -amount))
    points.sort(key=lambda p: (p[0], p[1]))
    level = peak = 0
    for _, delta in points:
        level += delta
        peak = max(peak, level)
    return peak


def _usage(namespaces) -> dict[tuple, int]:
    """Pod requests now per (namespace id, resource), from the inventory sync."""
    by_key = {(ns.cluster_id, ns.name): ns.pk for ns in namespaces}
    rows = NamespaceUsage.objects.filter(
        cluster_id__in={ns.cluster_id for ns in namespaces},
        namespace__in={ns.name for ns in namespaces},
    ).values_list("cluster_id", "namespace", "resource", "requested")
    out = {}
    for cluster_id, name, resource, requested in rows:
        ns_id = by_key.get((cluster_id, name))
        if ns_id is not None:
            out[(ns_id, resource)] = requested
    return out


# -- my teams --------------------------------------------------------------------------


@dataclass
class ResourceRow:
    resource: str
    granted: int
    used: int
    limit: int

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
    resources: list[ResourceRow] = field(default_factory=list)
    active: list[Grant] = field(default_factory=list)
    upcoming: list[Grant] = field(default_factory=list)
    ended: list[Grant] = field(default_factory=list)


@login_required
def teams(request: HttpRequest) -> HttpResponse:
    user = request.user
    team_list = list(visible_teams(user).prefetch_related("memberships__user"))
    namespaces = list(
        TeamNamespace.objects.filter(team__in=team_list).select_related("cluster", "team")
    )
    now = timezone.now()
    grants = list(Grant.objects.filter(namespace__in=namespaces).order_by("starts_at"))
    usage = _usage(namespaces)
    limits = _limits({ns.cluster_id for ns in namespaces})
    open_counts = dict(
        QuotaRequest.objects.filter(team__in=team_list, status__in=QuotaRequest.OPEN)
        .values("team_id")
        .annotate(n=Count("pk"))
        .values_list("team_id", "n")
    )

    views = {ns.pk: NamespaceView(ns) for ns in namespaces}
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
        names = {r for (c, r) in limits if c == ns.cluster_id}
        names |= {r for (n, r) in granted if n == ns.pk} | {r for (n, r) in usage if n == ns.pk}
        for resource in sorted(names):
            lim = limits.get((ns.cluster_id, resource))
            view.resources.append(
                ResourceRow(
                    resource=resource,
                    granted=granted[(ns.pk, resource)],
                    used=usage.get((ns.pk, resource), 0),
                    limit=lim.limit if lim else 0,
                )
            )
        view.ended = sorted(view.ended, key=lambda g: g.ended_at or g.ends_at, reverse=True)[
            :ENDED_GRANTS_SHOWN
        ]

    manager_of = {
        m.team_id
        for t in team_list
        for m in t.memberships.all()
        if m.user_id == user.pk and m.role == Membership.Role.MANAGER
    }
    rows = [
        {
            "team": t,
            "role": next((m.role for m in t.memberships.all() if m.user_id == user.pk), None),
            "can_manage": user.is_staff or t.pk in manager_of,
            "namespaces": [v for v in views.values() if v.ns.team_id == t.pk],
            "open_requests": open_counts.get(t.pk, 0),
        }
        for t in team_list
    ]
    return render(request, "quotas/teams.html", {"rows": rows, "now": now})


# -- requests: new, renew, release -----------------------------------------------------


def _submit(request: HttpRequest, form, data: services.RequestData):
    """Run ``services.submit``; on a rule violation put its messages on the form."""
    try:
        return services.submit(request.user, data)
    except ValidationError as err:
        form.add_service_errors(err.message_dict)
    except PermissionError as err:
        raise PermissionDenied(str(err)) from err
    return None


@login_required
def request_new(request: HttpRequest) -> HttpResponse:
    user = request.user
    teams_qs = visible_teams(user)
    member_ids = set(Membership.objects.filter(user=user).values_list("team_id", flat=True))
    initial = {}
    ns_id = request.GET.get("namespace")
    if ns_id:
        ns = TeamNamespace.objects.filter(team__in=teams_qs, pk=_uuid_or_none(ns_id)).first()
        if ns:
            initial = {"team": ns.team_id, "namespace": ns.pk}
    form = RequestForm(
        request.POST or None, initial=initial, teams=teams_qs, member_team_ids=member_ids
    )
    if request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        data = services.RequestData(
            team=d["team"], namespace=d["namespace"], resource=d["resource"],
            amount=d["amount"], justification=d["justification"],
            starts_at=d["starts_at"], ends_at=d["ends_at"],
        )  # fmt: skip
        req = _submit(request, form, data)
        if req is not None:
            messages.success(request, "Request submitted: the portal admins have been told.")
            return redirect("quotas:request", pk=req.pk)
    return render(
        request,
        "quotas/request_new.html",
        {"form": form, "no_teams": not teams_qs.exists()},
    )


def _uuid_or_none(value: str):
    try:
        return uuid.UUID(value)
    except ValueError:
        return None


@login_required
def grant_renew(request: HttpRequest, pk) -> HttpResponse:
    grant = get_object_or_404(visible_grants(request.user), pk=pk)
    form = RenewForm(request.POST or None, initial={"ends_at": grant.ends_at})
    if request.method == "POST" and form.is_valid():
        data = services.RequestData(
            team=grant.namespace.team, namespace=grant.namespace, resource=grant.resource,
            amount=grant.amount, justification=form.cleaned_data["justification"],
            ends_at=form.cleaned_data["ends_at"], kind=QuotaRequest.Kind.RENEWAL,
            target_grant=grant,
        )  # fmt: skip
        req = _submit(request, form, data)
        if req is not None:
            messages.success(request, "Renewal requested: the portal admins have been told.")
            return redirect("quotas:request", pk=req.pk)
    return render(request, "quotas/grant_renew.html", {"grant": grant, "form": form})


@login_required
def grant_release(request: HttpRequest, pk) -> HttpResponse:
    """GET asks for confirmation; POST files a release, which takes effect at once."""
    grant = get_object_or_404(visible_grants(request.user), pk=pk)
    if not _can_manage(request.user, grant.namespace.team):
        raise PermissionDenied("Only a team manager or a portal admin can release a grant.")
    form = ReleaseForm(request.POST or None)
    if request.method == "POST" and form.is_valid():
        data = services.RequestData(
            team=grant.namespace.team, namespace=grant.namespace, resource=grant.resource,
            amount=grant.amount, justification=form.cleaned_data["justification"],
            kind=QuotaRequest.Kind.RELEASE, target_grant=grant,
        )  # fmt: skip
        req = _submit(request, form, data)
        if req is not None:
            messages.success(
                request, f"Released {grant.amount} {grant.resource}; the quota is being updated."
            )
            return redirect("quotas:request", pk=req.pk)
    return render(request, "quotas/grant_release.html", {"grant": grant, "form": form})


# -- requests: list and detail ---------------------------------------------------------


@login_required
def request_list(request: HttpRequest) -> HttpResponse:
    teams_list = list(visible_teams(request.user))
    form = RequestFilterForm(request.GET or None, teams=teams_list)
    qs = visible_requests(request.user)
    if form.is_valid():
        status, team = form.cleaned_data["status"], form.cleaned_data["team"]
        if status == "open":
            qs = qs.filter(status__in=QuotaRequest.OPEN)
        elif status:
            qs = qs.filter(status=status)
        if team:
            qs = qs.filter(team__slug=team)
    elif form.is_bound:
        qs = qs.none()
    page = Paginator(qs, REQUESTS_PER_PAGE).get_page(request.GET.get("page"))
    return render(
        request,
        "quotas/request_list.html",
        {
            "form": form,
            "page": page,
            "filtered": any(v for k, v in request.GET.items() if k != "page"),
        },
    )


def _timeline(req: QuotaRequest) -> list[dict]:
    """Status changes and apply attempts, interleaved by time."""
    items = [
        {"at": e.at, "kind": "event", "event": e}
        for e in req.events.select_related("actor").order_by("at", "id")
    ]
    attempts = OperationAttempt.objects.filter(operation__requests=req).select_related("operation")
    items += [
        {
            "at": a.started_at,
            "kind": "attempt",
            "attempt": a,
            "seconds": (a.finished_at - a.started_at).total_seconds() if a.finished_at else None,
        }
        for a in attempts
    ]
    return sorted(items, key=lambda i: (i["at"], i["kind"] == "attempt"))


def _namespace_context(req: QuotaRequest, now: datetime) -> dict:
    """The team's active grants and usage in the request's namespace."""
    ns = req.namespace
    grants = list(Grant.objects.filter(namespace=ns).active_at(now).order_by("starts_at"))
    usage = _usage([ns])
    return {
        "grants": grants,
        "granted": sum(g.amount for g in grants if g.resource == req.resource),
        "used": usage.get((ns.pk, req.resource), 0),
    }


def _headroom(req: QuotaRequest) -> Headroom:
    return headroom(req.namespace.cluster, req.resource, req.starts_at, req.ends_at)


def _can_cancel(user, req: QuotaRequest) -> bool:
    return user.is_staff or req.requested_by_id == user.pk or services.is_manager(user, req.team)


def _detail_context(request: HttpRequest, req: QuotaRequest, **forms) -> dict:
    user = request.user
    pending = req.status == QuotaRequest.Status.PENDING
    ctx = {
        "req": req,
        "timeline": _timeline(req),
        "operations": list(req.operations.all()),
        "can_cancel": pending and _can_cancel(user, req),
        "next": reverse("quotas:request", args=[req.pk]),
    }
    if pending and user.is_staff:
        room = _headroom(req)
        ctx.update(
            approve_form=forms.get("approve_form") or ApproveForm(),
            reject_form=forms.get("reject_form") or RejectForm(),
            room=room,
            after=room.after(req.amount),
            **_namespace_context(req, timezone.now()),
        )
    return ctx


@login_required
def request_detail(request: HttpRequest, pk) -> HttpResponse:
    req = get_object_or_404(visible_requests(request.user), pk=pk)
    return render(request, "quotas/request_detail.html", _detail_context(request, req))


@login_required
def request_cancel(request: HttpRequest, pk) -> HttpResponse:
    """GET asks for confirmation; POST withdraws the pending request."""
    req = get_object_or_404(visible_requests(request.user), pk=pk)
    if not _can_cancel(request.user, req):
        raise PermissionDenied("Only the requester, a team manager or an admin may cancel.")
    if request.method == "POST":
        try:
            services.cancel(req, request.user, note=request.POST.get("note", "")[:2000])
        except PermissionError as err:
            raise PermissionDenied(str(err)) from err
        except services.TransitionError:
            messages.warning(request, f"This request is already {req.status}: nothing to cancel.")
        else:
            messages.success(request, "Request cancelled.")
        return redirect("quotas:request", pk=req.pk)
    return render(request, "quotas/request_cancel.html", {"req": req})


def _next_url(request: HttpRequest, req: QuotaRequest) -> str:
    target = request.POST.get("next", "")
    if url_has_allowed_host_and_scheme(target, {request.get_host()}, request.is_secure()):
        return target
    return reverse("quotas:request", args=[req.pk])


@require_POST
@login_required
def request_approve(request: HttpRequest, pk) -> HttpResponse:
    _staff_only(request.user)
    req = get_object_or_404(visible_requests(request.user), pk=pk)
    form = ApproveForm(request.POST)
    if form.is_valid():
        try:
            services.approve(
                req,
                request.user,
                amount=form.cleaned_data["amount"],
                ends_at=form.cleaned_data["ends_at"],
                note=form.cleaned_data["note"],
            )
        except services.TransitionError:
            messages.warning(request, f"This request was already decided ({_status(req)}).")
            return redirect("quotas:request", pk=req.pk)
        except ValidationError as err:
            form.add_service_errors(err.message_dict)
        else:
            messages.success(request, f"Approved: {req}. The quota is being applied.")
            return redirect(_next_url(request, req))
    messages.error(request, "Not approved: see the approval form below.")
    return render(
        request,
        "quotas/request_detail.html",
        _detail_context(request, req, approve_form=form),
    )


@require_POST
@login_required
def request_reject(request: HttpRequest, pk) -> HttpResponse:
    _staff_only(request.user)
    req = get_object_or_404(visible_requests(request.user), pk=pk)
    form = RejectForm(request.POST)
    if form.is_valid():
        try:
            services.reject(req, request.user, form.cleaned_data["reason"])
        except services.TransitionError:
            messages.warning(request, f"This request was already decided ({_status(req)}).")
            return redirect("quotas:request", pk=req.pk)
        except ValidationError as err:
            form.add_service_errors(err.message_dict)
        else:
            messages.success(request, f"Rejected: {req}.")
            return redirect(_next_url(request, req))
    messages.error(request, "Not rejected: say why.")
    return render(
        request,
        "quotas/request_detail.html",
        _detail_context(request, req, reject_form=form),
    )


def _status(req: QuotaRequest) -> str:
    return QuotaRequest.objects.filter(pk=req.pk).values_list("status", flat=True).first() or ""


# -- admin queue -----------------------------------------------------------------------


@login_required
def queue(request: HttpRequest) -> HttpResponse:
    """Pending requests, oldest first, each with its namespace's grants and usage and the
    capacity of its window. Seven queries whatever the queue's length."""
    _staff_only(request.user)
    now = timezone.now()
    pending = list(
        QuotaRequest.objects.filter(status=QuotaRequest.Status.PENDING)
        .select_related("team", "namespace__cluster", "requested_by", "target_grant")
        .order_by("created_at")
    )
    namespaces = list({r.namespace_id: r.namespace for r in pending}.values())
    cluster_ids = {ns.cluster_id for ns in namespaces}
    limits = _limits(cluster_ids)
    usage = _usage(namespaces)
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
            reserved=_peak(pools[key], req.starts_at, req.ends_at),
        )
        grants = ns_grants[req.namespace_id]
        rows.append(
            {
                "req": req,
                "room": room,
                "after": room.after(req.amount),
                "grants": grants,
                "granted": sum(g.amount for g in grants if g.resource == req.resource),
                "used": usage.get((req.namespace_id, req.resource), 0),
            }
        )
    return render(request, "quotas/queue.html", {"rows": rows, "next": request.path})


# -- capacity --------------------------------------------------------------------------


@login_required
def capacity(request: HttpRequest) -> HttpResponse:
    """Per cluster and resource: reserved vs limit for each of the coming days."""
    _staff_only(request.user)
    now = timezone.now()
    clusters = list(Cluster.objects.all())
    limits = _limits({c.pk for c in clusters})
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
            scale = max([room.limit, *(r for _, r in days), 1])
            peak_day, peak = max(days, key=lambda d: d[1]) if days else (now, 0)
            charts.append(
                {
                    "resource": resource,
                    "room": room,
                    "days": [
                        {
                            "day": d,
                            "reserved": r,
                            "free": room.limit - r,
                            "over": r > room.limit,
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


# -- audit -----------------------------------------------------------------------------


def _audit_filtered(request: HttpRequest) -> tuple[AuditFilterForm, QuerySet[AuditEvent]]:
    form = AuditFilterForm(
        request.GET or None, teams=list(visible_teams(request.user)), actions=audit_actions()
    )
    qs = visible_audit(request.user)
    if form.is_bound:
        qs = form.filter(qs) if form.is_valid() else qs.none()
    return form, qs


@login_required
def audit(request: HttpRequest) -> HttpResponse:
    form, qs = _audit_filtered(request)
    page = Paginator(qs, AUDIT_PER_PAGE).get_page(request.GET.get("page"))
    for e in page.object_list:
        e.changes = _changes(e.before, e.after)
    query = request.GET.copy()
    query.pop("page", None)
    return render(
        request,
        "quotas/audit.html",
        {
            "form": form,
            "page": page,
            "filtered": any(v for k, v in request.GET.items() if k != "page"),
            "export_query": query.urlencode(),
        },
    )


_ISO = re.compile(r"^(\d{4}-\d\d-\d\d)T(\d\d:\d\d)[^ ]*$")


def _shown(value) -> str:
    """A before/after value for the page: ISO times to the minute, JSON otherwise."""
    if value is None:
        return "—"
    if isinstance(value, str):
        match = _ISO.match(value)
        return f"{match[1]} {match[2]}" if match else value
    return json.dumps(value, ensure_ascii=False)


def _changes(before, after) -> list[tuple[str, str | None, str]]:
    """(key, before or None when there was no before, after) per key, for the audit page."""
    before, after = before or {}, after or {}
    if not isinstance(before, dict) or not isinstance(after, dict):
        return [("", _shown(before), _shown(after))]
    return [
        (k, _shown(before[k]) if k in before else None, _shown(after.get(k)))
        for k in sorted(set(before) | set(after))
    ]


def _compact(value) -> str:
    if value is None:
        return ""
    return json.dumps(value, sort_keys=True, separators=(", ", ": "), ensure_ascii=False)


def _cell(value) -> str:
    """A CSV cell a spreadsheet will not run as a formula."""
    text = "" if value is None else str(value)
    return "'" + text if text[:1] in ("=", "+", "-", "@", "\t", "\r") else text


@login_required
def audit_export(request: HttpRequest) -> HttpResponse:
    _, qs = _audit_filtered(request)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M")
    response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.csv"'
    writer = csv.writer(response)
    writer.writerow(
        ["at", "actor", "action", "object_type", "object_id", "team", "before", "after", "note"]
    )
    for e in qs.iterator(chunk_size=1000):
        writer.writerow(
            _cell(v)
            for v in (
                e.at.isoformat(),
                e.actor_name,
                e.action,
                e.object_type,
                e.object_id,
                e.team.slug if e.team else "",
                _compact(e.before),
                _compact(e.after),
                e.note,
            )
        )
    return response


# -- notification preferences ----------------------------------------------------------


@login_required
def notifications(request: HttpRequest) -> HttpResponse:
    user = request.user
    kinds = NotificationForm.kinds_for(user)
    opted_out = set(NotificationOptOut.objects.filter(user=user).values_list("kind", flat=True))
    initial = {k: k not in opted_out for k, _ in kinds}
    form = NotificationForm(request.POST or None, initial=initial, kinds=kinds)
    if request.method == "POST" and form.is_valid():
        off = {k for k, _ in kinds if not form.cleaned_data[k]}
        shown = {k for k, _ in kinds}
        NotificationOptOut.objects.filter(user=user, kind__in=shown - off).delete()
        NotificationOptOut.objects.bulk_create(
            [NotificationOptOut(user=user, kind=k) for k in off - opted_out],
            ignore_conflicts=True,
        )
        messages.success(request, "Notification preferences saved.")
        return redirect("quotas:notifications")
    return render(request, "quotas/notifications.html", {"form": form})
