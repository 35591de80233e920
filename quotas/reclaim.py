"""Idle grants reclaimed by policy: the rules (issue #25 section 2; docs/quotas.md).

Telemetry decides what is unused (telemetry/reclaim.py, which calls these); this module
decides what happens to it, without reading telemetry:

- :func:`warn`: the team is told that ``unused`` GPUs of a namespace's grants of one class
  go back at ``grace_ends_at`` unless a manager answers;
- :func:`answer`: a manager (or an admin) says "still needed" with a reason before the grace
  ends: the grants are held until ``held_until``, audited; admins see the answer;
- :func:`lower`: the grace ended: the namespace's request grants of that class lose up to
  the unused part (newest first: the grant ends, "reclaimed", and a grant of the rest
  starts now with the same end), never below what its pods hold (the caller's figure, and
  the apply refuses a limit under usage anyway, quotas/lowering.py), through the normal
  apply path, audited and notified;
- :func:`withdraw`: nothing to take any more (the GPUs were used, the grants ended, the
  policy was turned off or its hold ran out).
"""

from __future__ import annotations

from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.core.exceptions import ValidationError
from django.db import transaction
from django.db.models import Q
from django.utils import timezone

from portal.validation import CONFLICT

from . import audit, notify
from .apply import enqueue_apply
from .models import CapacityLock, Grant, Membership, TeamNamespace
from .models_reclaim import GrantReclaim, ReclaimPolicy
from .services import is_manager

REASON_MAX = 1000
Status = GrantReclaim.Status


@dataclass
class Finding:
    """What telemetry says of one namespace's grants of one class (telemetry/reclaim.py)."""

    namespace: TeamNamespace
    gpu_class_id: object  # None: any-class grants
    resource: str
    granted: int  # every grant of the class, active now
    unused: int  # what may go back (never what pods hold), from old request grants only
    basis: dict = field(default_factory=dict)
    policy: ReclaimPolicy | None = None  # the policy that judged it


def policies_by_scope(cluster_ids=None) -> dict:
    """{(cluster id, class id or None): ReclaimPolicy} (one query)."""
    qs = ReclaimPolicy.objects.select_related("cluster", "gpu_class")
    if cluster_ids is not None:
        qs = qs.filter(cluster_id__in=list(cluster_ids))
    return {(p.cluster_id, p.gpu_class_id): p for p in qs}


def policy_for(policies: dict, cluster_id, gpu_class_id) -> ReclaimPolicy | None:
    """The class's own policy, else the cluster's (a class policy that is off wins)."""
    own = policies.get((cluster_id, gpu_class_id)) if gpu_class_id is not None else None
    return own or policies.get((cluster_id, None))


def reclaimable_grants(
    ns: TeamNamespace, gpu_class_id, resource: str, now: datetime, started_by: datetime
):
    """The grants a policy may lower: approved requests' grants of the class, active now
    and started by the idle window's start (baselines are the admins' own floor; a grant
    younger than the window was not idle that long), newest first."""
    return (
        Grant.objects.active_at(now)
        .filter(namespace=ns, gpu_class_id=gpu_class_id, resource=resource)
        .filter(kind=Grant.Kind.REQUEST, starts_at__lte=started_by)
        .order_by("-starts_at", "-created_at")
    )


@transaction.atomic
def warn(policy: ReclaimPolicy, finding: Finding, now: datetime | None = None) -> GrantReclaim:
    now = now or timezone.now()
    reclaim = GrantReclaim.objects.create(
        policy=policy, namespace=finding.namespace, gpu_class_id=finding.gpu_class_id,
        resource=finding.resource, granted=finding.granted, unused=finding.unused,
        basis=finding.basis, warned_at=now,
        grace_ends_at=now + timedelta(hours=policy.grace_hours),
    )  # fmt: skip
    audit.record(None, "reclaim.warned", reclaim, team=finding.namespace.team,
                 after=_snapshot(reclaim), note=explain(reclaim))  # fmt: skip
    notify.reclaim_warned(reclaim)
    return reclaim


def explain(reclaim: GrantReclaim) -> str:
    """Why, in one sentence (the warning, the pages and the audit say the same)."""
    b = reclaim.basis or {}
    hours = b.get("hours", reclaim.policy.idle_hours)
    busy = b.get("busy_peak", 0)
    held = b.get("held_now", 0)
    return (
        f"{reclaim.unused} of the {reclaim.granted} {reclaim.resource} granted to "
        f"{reclaim.namespace} ({reclaim.class_name}) were not used for {hours} h: its pods request "
        f"{held} now and used at most {busy} in any hour of that time"
        + (f" (telemetry: {b['source']})" if b.get("source") else "")
        + "."
    )


def clean_reason(reason: str | None) -> str:
    reason = (reason or "").strip()
    if not reason:
        raise ValidationError({"reason": "Say why the GPUs are still needed."})
    if len(reason) > REASON_MAX:
        raise ValidationError({"reason": f"At most {REASON_MAX} characters."})
    return reason


def may_answer(user, reclaim: GrantReclaim) -> bool:
    return bool(user.is_staff or is_manager(user, reclaim.namespace.team))


@transaction.atomic
def answer(reclaim: GrantReclaim, by, reason: str, now: datetime | None = None) -> GrantReclaim:
    """A manager's "still needed": hold the grants for the policy's hold hours."""
    now = now or timezone.now()
    if not may_answer(by, reclaim):
        raise PermissionError("Only the team's managers and portal admins answer a reclaim.")
    reason = clean_reason(reason)
    reclaim = GrantReclaim.objects.select_for_update().select_related("policy").get(pk=reclaim.pk)
    if reclaim.status != Status.WARNED or now >= reclaim.grace_ends_at:
        state = "the grace ended" if reclaim.status == Status.WARNED else reclaim.status
        late = ValidationError(f"Too late to answer: this reclaim is {state}.", code=CONFLICT)
        raise ValidationError({"reason": late})
    before = _snapshot(reclaim)
    reclaim.status, reclaim.reason = Status.HELD, reason
    reclaim.answered_by, reclaim.answered_at = by, now
    reclaim.held_until = now + timedelta(hours=reclaim.policy.hold_hours)
    reclaim.save(update_fields=["status", "reason", "answered_by", "answered_at", "held_until"])
    audit.record(by, "reclaim.still_needed", reclaim, team=reclaim.namespace.team,
                 before=before, after=_snapshot(reclaim), note=reason)  # fmt: skip
    return reclaim


@transaction.atomic
def withdraw(reclaim: GrantReclaim, note: str, now: datetime | None = None) -> bool:
    """Close an open reclaim without lowering anything; False if it was closed already."""
    now = now or timezone.now()
    changed = GrantReclaim.objects.filter(pk=reclaim.pk, status__in=GrantReclaim.OPEN).update(
        status=Status.WITHDRAWN, closed_at=now, note=note[:300]
    )
    if changed:
        reclaim.refresh_from_db()
        audit.record(None, "reclaim.withdrawn", reclaim, team=reclaim.namespace.team,
                     after=_snapshot(reclaim), note=note)  # fmt: skip
    return bool(changed)


@transaction.atomic
def grants_left(reclaim: GrantReclaim, now: datetime) -> bool:
    """Whether any grant the reclaim could lower is still active."""
    ns = reclaim.namespace
    started_by = window_start(reclaim)
    return reclaimable_grants(ns, reclaim.gpu_class_id, reclaim.resource, now, started_by).exists()


def lower(reclaim: GrantReclaim, amount: int, now: datetime | None = None) -> int:
    """The grace ended: take back ``amount`` (at most the warning's unused part) from the
    namespace's request grants of the class, newest first. Returns how many went back."""
    now = now or timezone.now()
    ns = reclaim.namespace
    lock, _ = CapacityLock.objects.get_or_create(cluster=ns.cluster, resource=reclaim.resource)
    CapacityLock.objects.select_for_update().get(pk=lock.pk)
    reclaim = GrantReclaim.objects.select_for_update().get(pk=reclaim.pk)
    if reclaim.status != Status.WARNED or now < reclaim.grace_ends_at:
        return 0
    left = min(amount, reclaim.unused)
    taken = 0
    changes = []
    started_by = window_start(reclaim)
    for grant in reclaimable_grants(ns, reclaim.gpu_class_id, reclaim.resource, now, started_by):
        if left <= 0:
            break
        cut = min(left, grant.amount)
        grant.ended_at, grant.end_reason = now, "reclaimed"
        grant.save(update_fields=["ended_at", "end_reason"])
        rest = None
        if grant.amount > cut:
            rest = Grant.objects.create(
                namespace=ns, gpu_class_id=grant.gpu_class_id, resource=grant.resource,
                amount=grant.amount - cut, starts_at=now, ends_at=grant.ends_at,
                kind=grant.kind, start_applied=True,
            )  # fmt: skip
        audit.record(
            None, "grant.reclaimed", grant, team=ns.team,
            before={"amount": grant.amount}, after={"amount": grant.amount - cut},
            note=f"reclaim {reclaim.pk}" + (f"; the rest is grant {rest.pk}" if rest else ""),
        )  # fmt: skip
        changes.append((grant, cut))
        left -= cut
        taken += cut
    if not taken:
        withdraw(reclaim, "the grants ended before the grace did", now)
        return 0
    reclaim.status, reclaim.closed_at, reclaim.lowered_by = Status.LOWERED, now, taken
    reclaim.save(update_fields=["status", "closed_at", "lowered_by"])
    audit.record(None, "reclaim.lowered", reclaim, team=ns.team, after=_snapshot(reclaim),
                 note=explain(reclaim))  # fmt: skip
    enqueue_apply(ns, reason="reclaim")
    notify.reclaim_lowered(reclaim)
    return taken


def window_start(reclaim: GrantReclaim) -> datetime:
    """The idle window's start at the warning (grants started later are not lowered)."""
    start = (reclaim.basis or {}).get("window_start")
    if start:
        return datetime.fromisoformat(start)
    return reclaim.warned_at - timedelta(hours=reclaim.policy.idle_hours)


def _snapshot(reclaim: GrantReclaim) -> dict:
    return {
        "namespace": str(reclaim.namespace),
        "gpu_class": reclaim.gpu_class.slug if reclaim.gpu_class_id else None,
        "resource": reclaim.resource,
        "status": reclaim.status,
        "granted": reclaim.granted,
        "unused": reclaim.unused,
        "grace_ends_at": reclaim.grace_ends_at.isoformat(),
        "held_until": reclaim.held_until.isoformat() if reclaim.held_until else None,
        "lowered_by": reclaim.lowered_by,
    }


@transaction.atomic
def set_policy(cluster, gpu_class, by, **values) -> ReclaimPolicy:
    """Create or change the policy of a cluster (or one of its classes); audited. Turning
    it off withdraws its open reclaims."""
    if not by.is_staff:
        raise PermissionError("Only portal admins set reclaim policies.")
    if gpu_class is not None and gpu_class.cluster_id != cluster.pk:
        raise ValidationError({"gpu_class": "This class belongs to another cluster."})
    policy, created = ReclaimPolicy.objects.select_for_update().get_or_create(
        cluster=cluster, gpu_class=gpu_class
    )
    before = None if created else policy.snapshot()
    for name, value in values.items():
        setattr(policy, name, value)
    policy.full_clean()
    policy.updated_at, policy.updated_by = timezone.now(), by
    policy.save()
    audit.record(by, "reclaim.policy_set", policy, before=before, after=policy.snapshot(),
                 note=str(policy))  # fmt: skip
    if not policy.enabled:
        for r in GrantReclaim.objects.open().filter(policy=policy).select_related("namespace"):
            withdraw(r, "the policy was turned off")
    return policy


def shown_for(namespace_ids=None, now: datetime | None = None) -> list[GrantReclaim]:
    """The reclaims a team page (``namespace_ids``) or the idle page (None: all) shows:
    open ones, and those closed in the last week."""
    week = (now or timezone.now()) - timedelta(days=7)
    qs = GrantReclaim.objects.filter(Q(status__in=GrantReclaim.OPEN) | Q(closed_at__gte=week))
    if namespace_ids is not None:
        qs = qs.filter(namespace_id__in=list(namespace_ids))
    return list(qs.select_related("namespace__team", "namespace__cluster", "gpu_class", "policy"))


def annotated(reclaims, user) -> list[GrantReclaim]:
    """Set ``why`` (:func:`explain`) and ``can_answer`` on each, for the pages (one query
    for the teams ``user`` manages, whatever the number of reclaims)."""
    managed = set(
        Membership.objects.filter(user=user, role=Membership.Role.MANAGER).values_list(
            "team_id", flat=True
        )
    )
    for r in reclaims:
        r.why = explain(r)
        allowed = user.is_staff or r.namespace.team_id in managed
        r.can_answer = r.status == Status.WARNED and allowed
    return reclaims
