"""Celery tasks: apply operations, and beat's housekeeping (re-dispatch, grant windows, drift)."""

from __future__ import annotations

import logging
from collections import defaultdict
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.db import transaction
from django.utils import timezone

from inventory.kube import KubeError, KubeGateway
from inventory.models import Cluster

from . import audit, notify, preview
from .adoption import record_foreign
from .apply import (
    RECREATE,
    confirm_operation,
    desired_hard,
    enqueue_apply,
    redispatch_due,
    run_operation,
)
from .kueue_apply import reconcile_cluster
from .models import Grant, Operation, TeamNamespace

# Operations that own a namespace's quota for now: drift leaves the namespace to them.
BUSY = [Operation.Status.PENDING, Operation.Status.RUNNING, Operation.Status.CONFIRM]

log = logging.getLogger(__name__)


@shared_task(ignore_result=True, acks_late=True)
def apply_operation(op_id: str) -> str:
    return run_operation(op_id)


@shared_task(ignore_result=True, acks_late=True)
def confirm_quota(op_id: str, attempt_number: int, pause: float) -> str:
    return confirm_operation(op_id, attempt_number, pause)


@shared_task(ignore_result=True)
def redispatch_operations() -> int:
    return redispatch_due()


@shared_task(ignore_result=True)
def process_grant_windows() -> dict[str, int]:
    """Start grants whose window opened, end those whose window closed, send reminders."""
    now = timezone.now()
    counts = {"started": 0, "expired": 0, "reminded": 0, "starting": 0}
    with transaction.atomic():
        namespaces: dict[str, set] = defaultdict(set)
        starting = Grant.objects.select_for_update(skip_locked=True).filter(
            ended_at__isnull=True, start_applied=False, starts_at__lte=now
        )
        for grant in starting.select_related("namespace"):
            grant.start_applied = True
            grant.save(update_fields=["start_applied"])
            namespaces[grant.namespace_id].add("start")
            counts["started"] += 1
        expiring = Grant.objects.select_for_update(skip_locked=True).filter(
            ended_at__isnull=True, ends_at__lte=now
        )
        for grant in expiring.select_related("namespace__team"):
            grant.ended_at, grant.end_reason = grant.ends_at, "expired"
            grant.save(update_fields=["ended_at", "end_reason"])
            # The same warning as on approval and release pages: below usage waits.
            change = preview.state(grant.namespace).change(grant.resource, 0, grant.gpu_class)
            low = change.lowering
            note = f"{notify.BELOW[change.backend]}: {low}" if low else ""
            audit.record(None, "grant.expired", grant, team=grant.namespace.team,
                         after={"ended_at": grant.ends_at.isoformat()}, note=note)  # fmt: skip
            notify.grant_expired(grant, low, change.backend)
            namespaces[grant.namespace_id].add("expiry")
            counts["expired"] += 1
        for ns in TeamNamespace.objects.filter(pk__in=namespaces):
            reasons = namespaces[ns.pk]
            enqueue_apply(ns, reason="expiry" if "expiry" in reasons else "start")
        soon = now + timedelta(days=settings.QUOTA_REMINDER_DAYS)
        remind = Grant.objects.select_for_update(skip_locked=True).filter(
            ended_at__isnull=True, reminder_sent_at__isnull=True, ends_at__gt=now,
            ends_at__lte=soon,
        )  # fmt: skip
        for grant in remind.select_related("namespace__team"):
            days = max(1, round((grant.ends_at - now) / timedelta(days=1)))
            change = preview.state(grant.namespace).change(
                grant.resource, -grant.amount, grant.gpu_class
            )
            notify.grant_expiring(grant, days, change.lowering, change.backend)
            grant.reminder_sent_at = now
            grant.save(update_fields=["reminder_sent_at"])
            counts["reminded"] += 1
        # Bookings: the team hears before the start (issue #25 section 1), once.
        starts = now + timedelta(hours=settings.QUOTA_START_REMINDER_HOURS)
        booked = Grant.objects.select_for_update(skip_locked=True, of=("self",)).filter(
            ended_at__isnull=True, start_reminder_sent_at__isnull=True, starts_at__gt=now,
            starts_at__lte=starts,
        )  # fmt: skip
        for grant in booked.select_related("namespace__team", "namespace__cluster", "gpu_class"):
            notify.booking_starting(grant, now)
            grant.start_reminder_sent_at = now
            grant.save(update_fields=["start_reminder_sent_at"])
            counts["starting"] += 1
    return counts


@shared_task(ignore_result=True)
def reconcile_quotas() -> dict[str, int]:
    """Compare every managed ResourceQuota with the database; revert hand edits; read
    the foreign quotas of every team namespace (quotas/adoption.py). On Kueue clusters
    the teams' queues and flavors instead (quotas/kueue_apply.py), foreign quotas still.

    One list of the namespace's quotas serves both. Managed means the portal applied it
    before. Only the ``requests.nvidia.com/*`` keys the portal owns are compared; other
    managers' keys are theirs. A namespace with an apply in flight (or waiting for an
    admin's confirmation) is left to it, except that a deleted managed quota is recreated
    at once (no limit at all is never right, and the database's state is always safe to
    write). A quota that still holds what the portal last applied is not "edited
    outside the portal": the portal's own change is what is missing, and is applied.
    """
    counts = {"checked": 0, "reverted": 0, "recreated": 0, "created": 0, "caught_up": 0,
              "errors": 0}  # fmt: skip
    managed = set(
        TeamNamespace.objects.filter(operations__status=Operation.Status.SUCCEEDED)
        .values_list("pk", flat=True)
        .distinct()
    )
    busy = set(Operation.objects.filter(status__in=BUSY).values_list("namespace_id", flat=True))
    by_cluster: dict = defaultdict(list)
    for ns in TeamNamespace.objects.select_related("cluster", "team"):
        if ns.pk not in busy or (ns.pk in managed and not ns.cluster.is_kueue):
            by_cluster[ns.cluster].append(ns)
    kueue_teams: dict = defaultdict(list)
    for ns in TeamNamespace.objects.select_related("cluster", "team").filter(
        cluster__enforcement=Cluster.Enforcement.KUEUE
    ):
        kueue_teams[ns.cluster].append(ns)
    for cluster, namespaces in kueue_teams.items():
        reconcile_cluster(cluster, namespaces, busy, counts)
    for cluster, namespaces in by_cluster.items():
        try:
            gw = KubeGateway(cluster)
        except KubeError as err:
            log.warning("drift check of %s skipped: %s", cluster.slug, err)
            counts["errors"] += 1
            continue
        with gw:
            if cluster.is_dra:
                _reconcile_device_classes(cluster, gw, namespaces, busy, counts)
            for ns in namespaces:
                try:
                    quotas = gw.list_resource_quotas(ns.name)
                except KubeError as err:
                    log.warning("drift check of %s failed: %s", ns, err)
                    counts["errors"] += 1
                    continue
                counts["checked"] += 1
                own = [q for q in quotas if q["metadata"]["name"] == settings.QUOTA_NAME]
                if ns.pk in busy:
                    if not own and not cluster.is_kueue:
                        _recreate(ns, counts)
                    continue
                record_foreign(ns, quotas)  # records the portal quota's status too
                if ns.pk in managed and not cluster.is_kueue:
                    _reconcile_one(ns, own[0] if own else None, counts)
    return counts


def _reconcile_device_classes(cluster, gw, namespaces, busy: set, counts: dict) -> None:
    """The portal's DeviceClasses on a DRA cluster (quotas/dra.py): one edited or deleted
    outside the portal is audited and re-applied (an apply of any namespace of the cluster
    writes them all, before its quota)."""
    from . import dra

    try:
        drift = dra.device_class_drift(cluster, gw)
    except KubeError as err:
        log.warning("DeviceClass drift check of %s failed: %s", cluster.slug, err)
        counts["errors"] += 1
        return
    first = next((ns for ns in namespaces if ns.pk not in busy), None)
    if not drift or first is None:
        return
    with transaction.atomic():
        note = "DeviceClass(es) edited or deleted outside the portal"
        audit.record(None, "dra.device_classes_reverted", first, team=first.team,
                     before=drift, note=note)  # fmt: skip
        enqueue_apply(first, reason="drift")
    counts["reverted"] += 1


def _recreate(ns: TeamNamespace, counts: dict[str, int]) -> None:
    """Queue the recreation of a deleted managed quota (once: not while one waits)."""
    waiting = Operation.objects.filter(
        namespace=ns, reason=RECREATE, status=Operation.Status.PENDING, attempts=0
    ).exists()
    if waiting:
        return
    want = {k: str(v) for k, v in desired_hard(ns).items()}
    with transaction.atomic():
        audit.record(None, "quota.recreated", ns, team=ns.team, after=want,
                     note=f"ResourceQuota {settings.QUOTA_NAME} was deleted")  # fmt: skip
        enqueue_apply(ns, reason=RECREATE)
    counts["recreated"] += 1


def last_applied(namespaces) -> dict:
    """What the portal's last succeeded apply of these namespaces wrote ({} if none)."""
    op = (
        Operation.objects.filter(namespace__in=namespaces, status=Operation.Status.SUCCEEDED)
        .order_by("-finished_at")
        .only("applied_hard", "last_error")
        .first()
    )
    return op.applied_hard if op is not None else {}


def last_failure(namespaces) -> str:
    op = (
        Operation.objects.filter(namespace__in=namespaces, status=Operation.Status.FAILED)
        .order_by("-finished_at")
        .first()
    )
    return f"; operation {op.pk} failed: {op.last_error}" if op is not None else ""


def _reconcile_one(ns: TeamNamespace, quota: dict | None, counts: dict[str, int]) -> None:
    if quota is None:
        _recreate(ns, counts)
        return
    want = {k: str(v) for k, v in desired_hard(ns).items()}
    have = ((quota.get("spec") or {}).get("hard")) or {}
    ours = {k: have.get(k) for k in want}
    if ours == want:
        return
    applied = last_applied([ns])
    with transaction.atomic():
        if ours == {k: None if applied.get(k) is None else str(applied[k]) for k in want}:
            # The cluster holds what the portal last applied: the change not yet there is
            # the portal's own (an apply that failed, or one not run yet), not an edit.
            audit.record(None, "quota.catch_up", ns, team=ns.team, before=ours, after=want,
                         note="the portal's own change had not reached the cluster"
                              f"{last_failure([ns])}; applying it")  # fmt: skip
            enqueue_apply(ns, reason="catch-up")
            counts["caught_up"] += 1
            return
        audit.record(None, "quota.drift_reverted", ns, team=ns.team, before=ours, after=want,
                     note="edited outside the portal")  # fmt: skip
        enqueue_apply(ns, reason="drift")
        counts["reverted"] += 1
