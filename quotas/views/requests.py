"""Requests: new, renew, release, list, detail with its timeline, approve, reject, cancel."""

from __future__ import annotations

import csv
import uuid
from datetime import datetime

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied, ValidationError
from django.db.models import Q
from django.http import HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, redirect, render
from django.urls import reverse
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme
from django.views.decorators.http import require_POST

from discussion import progress as live_progress
from discussion import thread
from mig.models import MigRequest

from .. import decision_time, inbox, notify, preview, request_wait, services
from ..capacity import Headroom, headroom
from ..forms import (
    ApproveForm,
    RejectForm,
    ReleaseForm,
    RenewForm,
    RequestFilterForm,
    RequestForm,
)
from ..models import (
    Grant,
    Membership,
    OperationAttempt,
    QuotaRequest,
    TeamNamespace,
)
from ..scoping import visible_to
from .audit import csv_cell
from .common import (
    _can_manage,
    _staff_only,
    _usage,
    visible_grants,
    visible_requests,
    visible_teams,
)

REQUESTS_PER_PAGE = 25


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


# The calendar's "Book" adds the window (quotas/views/calendar_page.py).
PREFILLED = ("resource", "gpu_class", "amount", "justification", "duration", "starts_at",
             "ends_at")  # fmt: skip


def _prefill(query) -> dict:
    """What a link may prefill besides the namespace (the waiting page's "Request N more"):
    the form validates it as any input once submitted."""
    out = {k: query[k][:2000] for k in PREFILLED if query.get(k)}
    if "amount" in out and not out["amount"].isdigit():
        del out["amount"]
    return out


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
            initial.update(_prefill(request.GET))
    form = RequestForm(
        request.POST or None, initial=initial, teams=teams_qs, member_team_ids=member_ids,
        user=user,
    )  # fmt: skip
    outlook = None
    if request.method == "POST" and "preview" in request.POST:
        # "Check what is free": the figures for the chosen class, nothing submitted.
        form.is_valid()
        d = form.cleaned_data
        if d.get("namespace") and d.get("resource"):
            outlook = preview.outlook(
                d["namespace"], d.get("gpu_class"), d["resource"], d.get("starts_at"),
                d.get("ends_at"),
            )  # fmt: skip
        form = RequestForm(initial=request.POST.dict(), teams=teams_qs, member_team_ids=member_ids)
    elif request.method == "POST" and form.is_valid():
        d = form.cleaned_data
        data = services.RequestData(
            team=d["team"], namespace=d["namespace"], resource=d["resource"],
            amount=d["amount"], justification=d["justification"],
            starts_at=d["starts_at"], ends_at=d["ends_at"], gpu_class=d["gpu_class"],
        )  # fmt: skip
        req = _submit(request, form, data)
        if req is not None:
            messages.success(request, "Request submitted: the portal admins have been told.")
            return redirect("quotas:request", pk=req.pk)
    return render(
        request,
        "quotas/request_new.html",
        {"form": form, "no_teams": not teams_qs.exists(), "outlook": outlook},
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
    change = preview.state(grant.namespace).change(grant.resource, -grant.amount, grant.gpu_class)
    return render(
        request, "quotas/grant_release.html", {"grant": grant, "form": form, "change": change}
    )


# -- requests: list and detail ---------------------------------------------------------


@login_required
def request_list(request: HttpRequest) -> HttpResponse:
    teams_list = list(visible_teams(request.user))
    form = RequestFilterForm(request.GET or None, teams=teams_list)
    qs = visible_requests(request.user).select_related("grant", "gpu_class")  # granted, class
    # The team's MIG requests are listed with its quota requests (quotas/inbox.py).
    mig_qs = visible_to(MigRequest.objects.all(), request.user).select_related(
        "team", "namespace", "cluster", "requested_by", "node"
    )
    qs, mig_qs = _filtered(form, qs, mig_qs)
    page = inbox.page_of(
        qs, mig_qs, sort="newest", number=request.GET.get("page"), per_page=REQUESTS_PER_PAGE
    )
    return render(
        request,
        "quotas/request_list.html",
        {
            "form": form,
            "page": page,
            "filtered": any(v for k, v in request.GET.items() if k != "page"),
        },
    )


def _filtered(form, qs, mig_qs):
    """The list's filters (status, team, cluster, a search), on both kinds of request; a
    refused filter matches nothing (the form says why)."""
    if not form.is_valid():
        return (qs.none(), mig_qs.none()) if form.is_bound else (qs, mig_qs)
    d = form.cleaned_data
    qs, mig_qs = inbox.by_status(qs, mig_qs, d["status"])
    if d["team"]:
        qs, mig_qs = qs.filter(team__slug=d["team"]), mig_qs.filter(team__slug=d["team"])
    if d["cluster"]:
        qs = qs.filter(namespace__cluster__slug=d["cluster"])
        mig_qs = mig_qs.filter(cluster__slug=d["cluster"])
    if text := d["q"].strip():
        qs = qs.filter(
            Q(namespace__name__icontains=text) | Q(resource__icontains=text)
            | Q(gpu_class__name__icontains=text) | Q(requested_by__username__icontains=text)
            | Q(justification__icontains=text)
        )  # fmt: skip
        mig_qs = mig_qs.filter(
            Q(namespace__name__icontains=text) | Q(product__icontains=text)
            | Q(requested_by__username__icontains=text) | Q(justification__icontains=text)
        )  # fmt: skip
    return qs, mig_qs


CSV_COLUMNS = ["id", "kind", "team", "cluster", "namespace", "resource", "gpu_class", "amount",
               "granted_amount", "status", "requested_by", "created_at", "starts_at", "ends_at",
               "granted_ends_at"]  # fmt: skip


@login_required
def request_export(request: HttpRequest) -> HttpResponse:
    """The quota requests the list's filters select, as CSV (newest first)."""
    form = RequestFilterForm(request.GET or None, teams=list(visible_teams(request.user)))
    if form.is_bound and not form.is_valid():
        reasons = "; ".join(f"{k}: {' '.join(v)}" for k, v in form.errors.items())
        return HttpResponse(f"Invalid filter, nothing exported: {reasons}", status=400,
                            content_type="text/plain; charset=utf-8")  # fmt: skip
    qs = visible_requests(request.user).select_related("gpu_class")
    qs, _ = _filtered(form, qs, MigRequest.objects.none())
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    stamp = timezone.now().strftime("%Y%m%d-%H%M")
    response["Content-Disposition"] = f'attachment; filename="requests-{stamp}.csv"'
    writer = csv.writer(response)
    writer.writerow(CSV_COLUMNS)
    for r in qs.order_by("-created_at").iterator(chunk_size=1000):
        row = (
            r.pk, r.kind, r.team.slug, r.namespace.cluster.slug, r.namespace.name, r.resource,
            r.gpu_class.name if r.gpu_class else "", r.amount, r.granted_amount, r.status,
            r.requested_by.get_username(), r.created_at, r.starts_at, r.ends_at,
            r.granted_ends_at,
        )  # fmt: skip
        writer.writerow(csv_cell(v.isoformat() if hasattr(v, "isoformat") else v) for v in row)
    return response


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
    st = preview.state(ns)
    return {
        "effective": st.effective.get(req.resource),
        "change": st.change(req.resource, req.amount, req.gpu_class),
        "grants": grants,
        "granted": sum(g.amount for g in grants if g.resource == req.resource),
        "used": usage.get((ns.pk, req.resource), 0),
    }


def _headroom(req: QuotaRequest) -> Headroom:
    return headroom(
        req.namespace.cluster, req.resource, req.starts_at, req.ends_at,
        gpu_class=req.gpu_class, namespace=req.namespace.name,
    )  # fmt: skip


def _can_cancel(user, req: QuotaRequest) -> bool:
    return user.is_staff or req.requested_by_id == user.pk or services.is_manager(user, req.team)


def _detail_context(request: HttpRequest, req: QuotaRequest, **forms) -> dict:
    user = request.user
    pending = req.status == QuotaRequest.Status.PENDING
    operations = list(req.operations.all())
    ctx = {
        "req": req,
        "gave": notify.granted(req),  # as decided; the grant itself may have changed since
        "timeline": _timeline(req),
        "operations": operations,
        "held": any(op.status == "confirm" for op in operations),
        "can_cancel": pending and _can_cancel(user, req),
        "next": reverse("quotas:request", args=[req.pk]),
    }
    from ..figures import outcome  # granted vs what the team can use now

    ctx["outcome"] = outcome(req)
    # Comment thread, live progress, typical time to a decision (discussion app).
    ctx.update(thread.context(req, forms.get("comment_form")))
    ctx.update(live_progress.quota_context(req, operations))
    if pending:
        ctx.update(decision=decision_time.quota_decisions(), apply=decision_time.quota_applies(),
                   wait=request_wait.estimate(req))  # fmt: skip
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


def _decide(request: HttpRequest, pk, form_class, act, done: str, refused: str, form_name: str):
    """Run an admin decision from the request page or the queue; errors go back on the form."""
    _staff_only(request.user)
    req = get_object_or_404(visible_requests(request.user), pk=pk)
    form = form_class(request.POST)
    if form.is_valid():
        try:
            decided = act(req, form.cleaned_data) or req
        except services.TransitionError:
            messages.warning(request, f"This request was already decided ({_status(req)}).")
            return redirect("quotas:request", pk=req.pk)
        except ValidationError as err:
            form.add_service_errors(err.message_dict)
        else:
            messages.success(request, done(decided) if callable(done) else done.format(req=req))
            return redirect(_next_url(request, req))
    messages.error(request, refused)
    return render(
        request, "quotas/request_detail.html", _detail_context(request, req, **{form_name: form})
    )


@require_POST
@login_required
def request_approve(request: HttpRequest, pk) -> HttpResponse:
    def act(req, data):
        return services.approve(
            req, request.user, amount=data["amount"], ends_at=data["ends_at"], note=data["note"]
        )

    return _decide(
        request, pk, ApproveForm, act, _approved_message,
        "Not approved: see the approval form below.", "approve_form",
    )  # fmt: skip


def _approved_message(req: QuotaRequest) -> str:
    """What was granted (not what was asked): "Approved 4 of 6 asked ... until ..."."""
    grant = notify.granted(req)
    if grant is None:  # a release: it gives nothing back
        return f"Approved: {req}. The quota is being applied."
    amount = notify.amount_text(req) + (" asked" if grant.amount != req.amount else "")
    until = "permanently" if grant.ends_at is None else f"until {grant.ends_at:%Y-%m-%d %H:%M} UTC"
    shorter = " (a shorter window than asked)" if grant.ends_at != req.ends_at else ""
    if grant.ends_at is not None and req.ends_at is None:
        shorter = " (asked permanently)"
    return (
        f"Approved {amount} {req.resource} for {req.namespace.name}, {until}{shorter}. "
        "The quota is being applied."
    )


@require_POST
@login_required
def request_reject(request: HttpRequest, pk) -> HttpResponse:
    def act(req, data):
        services.reject(req, request.user, data["reason"])

    return _decide(
        request, pk, RejectForm, act, "Rejected: {req}.", "Not rejected: say why.", "reject_form"
    )


def _status(req: QuotaRequest) -> str:
    return QuotaRequest.objects.filter(pk=req.pk).values_list("status", flat=True).first() or ""
