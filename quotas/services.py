"""Quota requests: validation, submission and the approve / reject / cancel transitions.

Forms, the REST API and the admin queue all call these functions, so a rule lives in one
place. Every function is one transaction; side effects (applying the quota, e-mails)
are queued to run after it commits.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.core.exceptions import ValidationError
from django.db import transaction
from django.utils import timezone

from inventory.models import GpuClass, is_gpu_resource
from portal.validation import CONFLICT

from . import audit, notify, preview
from .apply import enqueue_apply
from .capacity import Headroom, advertised_resources, allocatable, free, headroom
from .models import (
    CapacityLock,
    Grant,
    Membership,
    QuotaRequest,
    RequestEvent,
    Team,
    TeamNamespace,
)

# Requests may start this long "ago": a form filled in a minute ago still means "now".
START_GRACE = timedelta(minutes=10)
JUSTIFICATION_MIN = 10
JUSTIFICATION_MAX = 2000

Status = QuotaRequest.Status
ALLOWED = {
    Status.PENDING: {Status.APPROVED, Status.REJECTED, Status.CANCELLED},
    Status.APPROVED: {Status.APPLYING, Status.APPLIED, Status.FAILED},
    Status.APPLYING: {Status.APPLIED, Status.FAILED},
    Status.FAILED: {Status.APPLYING, Status.APPLIED},
}


class TransitionError(Exception):
    """An illegal state change (e.g. approving a cancelled request)."""


class CapacityError(ValidationError):
    """Approving would reserve more than the cluster can give in the requested window."""


# -- permissions -----------------------------------------------------------------------


def teams_of(user) -> list[Team]:
    return list(Team.objects.filter(memberships__user=user))


def is_member(user, team: Team) -> bool:
    return Membership.objects.filter(user=user, team=team).exists()


def is_manager(user, team: Team) -> bool:
    return Membership.objects.filter(user=user, team=team, role=Membership.Role.MANAGER).exists()


def check_may_file(user, team: Team) -> None:
    """Members (and admins, on the team's behalf) may file requests for a team."""
    if not (user.is_staff or is_member(user, team)):
        raise ValidationError({"team": "You are not a member of this team."})


def max_duration() -> timedelta:
    return timedelta(days=settings.QUOTA_MAX_DURATION_DAYS)


# -- validation ------------------------------------------------------------------------


@dataclass
class RequestData:
    team: Team
    namespace: TeamNamespace
    resource: str
    amount: int
    justification: str
    starts_at: datetime | None = None
    ends_at: datetime | None = None
    kind: str = QuotaRequest.Kind.NEW
    target_grant: Grant | None = None
    gpu_class: GpuClass | None = None  # None: any class


def validate(user, data: RequestData, now: datetime | None = None) -> RequestData:
    """Check every rule and raise ValidationError with a message per field.

    Fills in defaults (start now; renewals and releases take the grant's resource,
    amount and namespace). Returns the normalised data.
    """
    now = now or timezone.now()
    errors: dict[str, str] = {}
    check_may_file(user, data.team)
    if data.namespace.team_id != data.team.pk:
        errors["namespace"] = f"Namespace {data.namespace} does not belong to team {data.team}."

    if data.kind == QuotaRequest.Kind.RELEASE and not (
        user.is_staff or is_manager(user, data.team)
    ):
        raise ValidationError({"target_grant": "Only a team manager may release a grant."})
    if data.kind in (QuotaRequest.Kind.RENEWAL, QuotaRequest.Kind.RELEASE):
        _validate_change(data, errors, now)
    else:
        data.starts_at = data.starts_at or now
        if data.starts_at < now - START_GRACE:
            errors["starts_at"] = "The start is in the past."
        elif data.starts_at > now + timedelta(days=settings.QUOTA_MAX_START_DAYS):
            errors["starts_at"] = (
                f"At most {settings.QUOTA_MAX_START_DAYS} days ahead: file the request "
                "closer to the time."
            )
        if data.ends_at is not None:
            if data.ends_at <= data.starts_at:
                errors["ends_at"] = "The end must be after the start."
            elif data.ends_at - data.starts_at > max_duration():
                errors["ends_at"] = (
                    f"At most {settings.QUOTA_MAX_DURATION_DAYS} days; ask for a permanent "
                    "grant or a shorter window."
                )
        cluster = data.namespace.cluster
        if not is_gpu_resource(data.resource):
            errors["resource"] = "Only nvidia.com/gpu and nvidia.com/mig-* resources."
        elif data.resource not in advertised_resources(cluster):
            errors["resource"] = f"Cluster {cluster.slug} does not advertise {data.resource}."
        cls = data.gpu_class
        if cls is None and cluster.enforces_classes:
            errors["gpu_class"] = (
                f"Cluster {cluster.slug} enforces GPU classes through {cluster.backend_name}: "
                "choose a class."
            )
        elif cls is not None and cls.cluster_id != cluster.pk:
            errors["gpu_class"] = f"GPU class {cls.slug} is not on cluster {cluster.slug}."
        elif cls is not None and "resource" not in errors and not cls.covers(data.resource):
            errors["gpu_class"] = (
                f"GPU class {cls.slug} does not cover {data.resource} "
                f"(it covers {', '.join(cls.resources) or 'nothing now'})."
            )
        if not isinstance(data.amount, int) or isinstance(data.amount, bool) or data.amount < 1:
            errors["amount"] = "A positive whole number."
        elif "resource" not in errors and "gpu_class" not in errors:
            total = allocatable(cluster, data.resource, cls)
            where = cluster.slug if cls is None else f"{cls.slug} on {cluster.slug}"
            if data.amount > total:
                errors["amount"] = f"More than the {total} {data.resource} allocatable on {where}."
    data.justification = clean_justification(data.justification, errors)
    if data.kind != QuotaRequest.Kind.RELEASE and not user.is_staff:
        check_pending_cap(data.team, errors)
    if errors:
        raise ValidationError(errors)
    return data


def check_pending_cap(team: Team, errors: dict[str, str]) -> None:
    """Members may keep at most ``QUOTA_MAX_PENDING_PER_TEAM`` requests of a team pending
    (all members together), so nobody can bloat the admins' queue. Releases (granted at
    once) and admins filing on a team's behalf are not capped. ``submit`` locks the team
    row first, so two submissions cannot both take the last place."""
    cap = settings.QUOTA_MAX_PENDING_PER_TEAM
    pending = QuotaRequest.objects.filter(team=team, status=Status.PENDING).count()
    if pending >= cap:
        errors["team"] = (
            f"Team {team.slug} already has {pending} pending request(s), the most allowed "
            f"({cap}); wait for a decision or cancel one first."
        )


def _validate_change(data: RequestData, errors: dict[str, str], now: datetime) -> None:
    grant = data.target_grant
    if grant is None:
        errors["target_grant"] = "Name the grant to renew or release."
        return
    if grant.namespace_id != data.namespace.pk or grant.namespace.team_id != data.team.pk:
        errors["target_grant"] = "That grant does not belong to this team and namespace."
        return
    if grant.state(now) not in ("active", "upcoming"):
        errors["target_grant"] = f"That grant is {grant.state(now)}."
        return
    data.resource, data.amount, data.gpu_class = grant.resource, grant.amount, grant.gpu_class
    if data.kind == QuotaRequest.Kind.RELEASE:
        data.starts_at, data.ends_at = now, None
        return
    if grant.ends_at is None:
        errors["target_grant"] = "A permanent grant needs no renewal."
        return
    data.starts_at = grant.ends_at
    if data.ends_at is None or data.ends_at <= grant.ends_at:
        errors["ends_at"] = (
            f"A renewal must end after the grant's end ({grant.ends_at:%Y-%m-%d %H:%M})."
        )
    elif data.ends_at - grant.starts_at > max_duration():
        errors["ends_at"] = (
            f"The grant with its renewal may last at most {settings.QUOTA_MAX_DURATION_DAYS} days."
        )


# -- transitions -----------------------------------------------------------------------


def _move(req: QuotaRequest, to: str, actor, note: str = "") -> None:
    if to not in ALLOWED.get(req.status, set()):
        raise TransitionError(f"A {req.status} request cannot become {to}.")
    before = req.status
    req.status = to
    req.updated_at = timezone.now()
    req.save(update_fields=["status", "updated_at"])
    RequestEvent.objects.create(
        request=req, from_status=before, to_status=to, actor=actor if actor and actor.pk else None,
        note=note,
    )  # fmt: skip
    audit.record(
        actor, f"request.{to}", req, team=req.team,
        before={"status": before}, after={"status": to}, note=note,
    )  # fmt: skip


@transaction.atomic
def submit(user, data: RequestData) -> QuotaRequest:
    """Validate and store a request; releases are granted at once (giving back needs no
    approval)."""
    Team.objects.select_for_update().filter(pk=data.team.pk).first()  # the pending cap
    data = validate(user, data)
    on_behalf = user.is_staff and not is_member(user, data.team)
    req = QuotaRequest.objects.create(
        team=data.team, namespace=data.namespace, kind=data.kind,
        target_grant=data.target_grant, gpu_class=data.gpu_class, resource=data.resource,
        amount=data.amount,
        starts_at=data.starts_at, ends_at=data.ends_at, justification=data.justification,
        requested_by=user, on_behalf=on_behalf,
    )  # fmt: skip
    RequestEvent.objects.create(
        request=req, to_status=Status.PENDING, actor=user,
        note="filed by an admin on behalf of the team" if on_behalf else "",
    )  # fmt: skip
    audit.record(
        user, "request.submitted", req, team=data.team,
        after=_snapshot(req), note="on behalf of the team" if on_behalf else "",
    )  # fmt: skip
    if data.kind == QuotaRequest.Kind.RELEASE:
        req = approve(req, user, note="release: capacity given back", _system=True)
    else:
        notify.new_request(req)
    return req


@transaction.atomic
def approve(
    req: QuotaRequest,
    by,
    *,
    amount: int | None = None,
    ends_at: datetime | None = None,
    note: str = "",
    _system: bool = False,
) -> QuotaRequest:
    """Approve (optionally less, or a shorter window) after checking capacity under lock.

    The (cluster, resource) capacity row is locked first, then the request: concurrent
    approvals drawing from the same pool run one after the other, and the second sees
    the first one's grant, so no window can exceed allocatable x ratio. The row is per
    pool, not per class, on purpose: a class grant draws from its class AND the pool
    (any-class grants draw from the pool), so approvals in different classes of one
    resource compete for the same pool and must not run side by side.
    """
    if not (_system or by.is_staff):
        raise PermissionError("Only portal admins approve requests.")
    cluster = req.namespace.cluster
    lock, _ = CapacityLock.objects.get_or_create(cluster=cluster, resource=req.resource)
    CapacityLock.objects.select_for_update().get(pk=lock.pk)
    # The class comes along (one query fewer per approval, bench/quota_bench.py --classes);
    # only the request's row is locked.
    req = (
        QuotaRequest.objects.select_for_update(of=("self",))
        .select_related("gpu_class")
        .get(pk=req.pk)
    )
    if req.status != Status.PENDING:
        raise TransitionError(f"This request is already {req.status}.")
    now = timezone.now()

    if req.kind == QuotaRequest.Kind.RELEASE:
        grant = Grant.objects.select_for_update().get(pk=req.target_grant_id)
        before = {"ended_at": None}
        # What the release does to running and queued work, as the release page showed it.
        change = preview.state(grant.namespace).change(
            grant.resource, -grant.amount, grant.gpu_class
        )
        grant.ended_at, grant.end_reason = now, "released"
        grant.save(update_fields=["ended_at", "end_reason"])
        audit.record(
            by, "grant.released", grant, team=req.team,
            before=before, after={"ended_at": now.isoformat()},
            note=f"{notify.BELOW[change.backend]}: {change.lowering}" if change.lowering else "",
        )  # fmt: skip
    else:
        amount = req.amount if amount is None else amount
        if req.kind == QuotaRequest.Kind.RENEWAL and amount != req.amount:
            # A renewal extends the grant as it is; "less" would be accepted and ignored.
            raise ValidationError({"amount": (
                f"A renewal extends the grant of {req.amount} as it is: approve it (a shorter "
                "window is fine) or reject it and ask for a smaller new grant."
            )})  # fmt: skip
        if amount < 1 or amount > req.amount:
            raise ValidationError({"amount": ValidationError(
                f"Approve between 1 and {req.amount}.", code=CONFLICT)})  # fmt: skip
        window_end = req.ends_at if ends_at is None else ends_at
        if ends_at is not None and (
            ends_at <= req.starts_at or (req.ends_at is not None and ends_at > req.ends_at)
        ):
            raise ValidationError({"ends_at": ValidationError(
                "A shorter window only: after the start, not after the request's end.",
                code=CONFLICT)})  # fmt: skip
        room = free(cluster, req.gpu_class, req.resource, req.starts_at, window_end,
                    namespace=req.namespace.name)  # fmt: skip
        if amount > room.free:
            raise CapacityError({"amount": refusal(room, cluster, amount)})
        if req.kind == QuotaRequest.Kind.RENEWAL:
            grant = Grant.objects.select_for_update().get(pk=req.target_grant_id)
            before = {"ends_at": grant.ends_at.isoformat() if grant.ends_at else None}
            grant.ends_at = window_end
            grant.save(update_fields=["ends_at"])
            audit.record(by, "grant.renewed", grant, team=req.team, before=before,
                         after={"ends_at": window_end.isoformat()})  # fmt: skip
        else:
            grant = Grant.objects.create(
                namespace=req.namespace, gpu_class=req.gpu_class, resource=req.resource,
                amount=amount,
                starts_at=req.starts_at, ends_at=window_end, start_applied=req.starts_at <= now,
            )  # fmt: skip
            audit.record(by, "grant.created", grant, team=req.team, after=_grant_snapshot(grant))
        req.grant = grant if req.kind == QuotaRequest.Kind.NEW else None
        req.granted_amount, req.granted_ends_at = amount, window_end  # as decided
        if amount != req.amount or window_end != req.ends_at:
            detail = f"approved {amount}" + (
                f" until {window_end:%Y-%m-%d %H:%M} UTC" if window_end else ""
            )
            note = f"{note} ({detail})" if note else detail
    req.decided_by = by if by is not None and by.pk else None
    req.decided_at = now
    req.decision_note = note
    req.save(update_fields=["grant", "decided_by", "decided_at", "decision_note",
                            "granted_amount", "granted_ends_at"])  # fmt: skip
    _move(req, Status.APPROVED, by, note)
    enqueue_apply(
        req.namespace, reason=req.kind if req.kind != "new" else "approval", requests=[req]
    )
    notify.decided(req)
    return req


def refusal(room: Headroom, cluster, amount: int) -> str:
    """Why an approval does not fit: the class's figure, or the pool's where it binds."""
    fig = room.pool if room.capped_by_pool else room
    where = f"on {cluster.slug}"
    if room.gpu_class is not None:
        where = (
            f"on {cluster.slug} (all classes)"
            if room.capped_by_pool
            else (f"in class {room.gpu_class.slug} on {cluster.slug}")
        )
    held = f", {fig.beyond} held by pods beyond their grants" if fig.beyond else ""
    return (
        f"Only {max(room.free, 0)} {room.resource} free {where} in this window "
        f"({fig.reserved} of {fig.limit} reserved{held}, "
        f"allocatable {fig.allocatable} x ratio {fig.ratio}); {amount} asked."
    )


def clean_justification(text: str | None, errors: dict[str, str]) -> str:
    """A request says why, in 10 to 2,000 characters; adds a field error otherwise."""
    text = (text or "").strip()
    if len(text) < JUSTIFICATION_MIN:
        errors["justification"] = f"Say why, in at least {JUSTIFICATION_MIN} characters."
    elif len(text) > JUSTIFICATION_MAX:
        errors["justification"] = f"At most {JUSTIFICATION_MAX} characters."
    return text


def clean_reason(reason: str | None) -> str:
    """A rejection must say why (the requester reads it); at most 2,000 characters."""
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": "Say why the request is rejected."})
    return reason[:2000]


@transaction.atomic
def reject(req: QuotaRequest, by, reason: str) -> QuotaRequest:
    if not by.is_staff:
        raise PermissionError("Only portal admins reject requests.")
    reason = clean_reason(reason)
    req = QuotaRequest.objects.select_for_update().get(pk=req.pk)
    req.decided_by, req.decided_at, req.decision_note = by, timezone.now(), reason[:2000]
    req.save(update_fields=["decided_by", "decided_at", "decision_note"])
    _move(req, Status.REJECTED, by, reason)
    notify.decided(req)
    return req


@transaction.atomic
def cancel(req: QuotaRequest, by, note: str = "") -> QuotaRequest:
    """The requester, a team manager or an admin withdraws a pending request."""
    req = QuotaRequest.objects.select_for_update().get(pk=req.pk)
    if not (by.is_staff or req.requested_by_id == by.pk or is_manager(by, req.team)):
        raise PermissionError("Only the requester, a team manager or an admin may cancel.")
    _move(req, Status.CANCELLED, by, note)
    return req


def _snapshot(req: QuotaRequest) -> dict:
    return {
        "kind": req.kind,
        "namespace": str(req.namespace),
        "gpu_class": req.gpu_class.slug if req.gpu_class else None,
        "resource": req.resource,
        "amount": req.amount,
        "starts_at": req.starts_at.isoformat(),
        "ends_at": req.ends_at.isoformat() if req.ends_at else None,
        "status": req.status,
    }


def _grant_snapshot(grant: Grant) -> dict:
    return {
        "namespace": str(grant.namespace),
        "gpu_class": grant.gpu_class.slug if grant.gpu_class else None,
        "resource": grant.resource,
        "amount": grant.amount,
        "starts_at": grant.starts_at.isoformat(),
        "ends_at": grant.ends_at.isoformat() if grant.ends_at else None,
    }


def mark_applying(req: QuotaRequest) -> None:
    if req.status == Status.APPROVED or req.status == Status.FAILED:
        _move(req, Status.APPLYING, None)


def mark_applied(req: QuotaRequest, note: str = "") -> None:
    if req.status in (Status.APPROVED, Status.APPLYING, Status.FAILED):
        _move(req, Status.APPLIED, None, note)
        notify.applied(req)


def mark_failed(req: QuotaRequest, error: str) -> None:
    if req.status in (Status.APPROVED, Status.APPLYING):
        _move(req, Status.FAILED, None, error)
        notify.failed(req, error)


@transaction.atomic
def set_baseline(namespace: TeamNamespace, resource: str, amount: int, by) -> Grant | None:
    """Set a team namespace's permanent baseline of one resource (0 removes it).

    Replaces the previous baseline grant; checked against capacity like any approval.
    """
    if not by.is_staff:
        raise PermissionError("Only portal admins set baselines.")
    if amount < 0:
        raise ValidationError({"amount": "Zero or more."})
    cluster = namespace.cluster
    if cluster.enforces_classes and amount > 0:
        raise ValidationError({"amount": (
            f"Cluster {cluster.slug} enforces GPU classes through {cluster.backend_name} and "
            "a baseline names no class: grant a class through a request instead."
        )})  # fmt: skip
    lock, _ = CapacityLock.objects.get_or_create(cluster=cluster, resource=resource)
    CapacityLock.objects.select_for_update().get(pk=lock.pk)
    now = timezone.now()
    current = (
        Grant.objects.select_for_update()
        .filter(namespace=namespace, resource=resource, kind=Grant.Kind.BASELINE)
        .active_at(now)
        .first()
    )
    if current is not None:
        if current.amount == amount:
            return current
        current.ended_at, current.end_reason = now, "replaced"
        current.save(update_fields=["ended_at", "end_reason"])
        audit.record(by, "grant.baseline_replaced", current, team=namespace.team,
                     before={"amount": current.amount}, after={"amount": amount})  # fmt: skip
    grant = None
    if amount > 0:
        room = headroom(cluster, resource, now, None, namespace=namespace.name)
        if amount > room.free:
            raise CapacityError(
                {"amount": f"Only {max(room.free, 0)} {resource} free on {cluster.slug}."}
            )
        grant = Grant.objects.create(
            namespace=namespace, resource=resource, amount=amount, starts_at=now,
            kind=Grant.Kind.BASELINE, start_applied=True,
        )  # fmt: skip
        audit.record(by, "grant.baseline_set", grant, team=namespace.team,
                     after=_grant_snapshot(grant))  # fmt: skip
    enqueue_apply(namespace, reason="baseline")
    return grant
