"""Turn the database's grants into each namespace's managed ResourceQuota (the outbox).

``enqueue_apply`` writes an Operation row in the caller's transaction and dispatches it
after commit; ``run_operation`` claims it with a conditional UPDATE, server-side-applies
the quota through the inventory gateway, reads ``status.hard`` back to confirm, and
records the attempt. Failures retry with backoff; beat re-dispatches operations whose
message or worker was lost. The desired quota is recomputed at apply time from the
grants active then, so running an operation twice, or late, changes nothing.
"""

from __future__ import annotations

import logging
import time
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone

from inventory.kube import KubeError, KubeGateway
from portal import outbox

from . import audit
from .capacity import advertised_resources
from .models import Grant, Operation, OperationAttempt, QuotaRequest, TeamNamespace

log = logging.getLogger(__name__)

MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-quota-portal"}


def lease() -> timedelta:
    """How long a claimed operation may run before beat assumes its worker died."""
    return timedelta(seconds=settings.QUOTA_OPERATION_LEASE_SECONDS)


def quota_key(resource: str) -> str:
    """Extended resources are only counted under ``requests.`` (GPU-FACTS.md section 1)."""
    return f"requests.{resource}"


def desired_hard(namespace: TeamNamespace, now=None) -> dict[str, int]:
    """``requests.<resource>`` for every GPU resource the cluster advertises or that has
    a grant: the sum of the grants active now, 0 where there is none.

    A resource never leaves the quota once managed: a missing key would mean *no limit*.
    """
    now = now or timezone.now()
    sums = dict(
        Grant.objects.filter(namespace=namespace)
        .active_at(now)
        .values("resource")
        .annotate(total=Sum("amount"))
        .values_list("resource", "total")
    )
    granted_ever = set(
        Grant.objects.filter(namespace=namespace).values_list("resource", flat=True).distinct()
    )
    resources = set(advertised_resources(namespace.cluster)) | granted_ever | set(sums)
    return {quota_key(r): int(sums.get(r, 0)) for r in sorted(resources)}


def enqueue_apply(
    namespace: TeamNamespace, *, reason: str, requests: list[QuotaRequest] = ()
) -> Operation:
    """Queue an apply of this namespace's quota; call inside the changing transaction."""
    op = Operation.objects.create(namespace=namespace, reason=reason)
    if requests:
        op.requests.add(*requests)
    transaction.on_commit(lambda: dispatch(op.pk))
    return op


def dispatch(op_id) -> None:
    from .tasks import apply_operation

    try:
        apply_operation.delay(str(op_id))
    except Exception:  # the broker being down loses nothing: beat re-dispatches
        log.warning("could not enqueue operation %s; beat will re-dispatch it", op_id)


def backoff(attempt: int) -> timedelta:
    """5 s, 10 s, 20 s, … capped at 10 minutes."""
    return timedelta(seconds=min(5 * 2 ** max(attempt - 1, 0), 600))


def run_operation(op_id, *, gateway: KubeGateway | None = None) -> str:
    """Claim and run one operation; returns its resulting status (or "skipped")."""
    now = timezone.now()
    claimed = Operation.objects.filter(
        pk=op_id, status__in=[Operation.Status.PENDING], next_attempt_at__lte=now
    ).update(
        status=Operation.Status.RUNNING,
        attempts=F("attempts") + 1,
        started_at=now,
        lease_until=now + lease(),
    )
    if not claimed:
        return "skipped"
    op = Operation.objects.select_related("namespace__cluster", "namespace__team").get(pk=op_id)
    attempt = OperationAttempt.objects.create(operation=op, number=op.attempts, started_at=now)
    with transaction.atomic():
        for req in op.requests.select_for_update():
            from .services import mark_applying

            mark_applying(req)
    ns = op.namespace
    hard = desired_hard(ns)
    try:
        gw = gateway or KubeGateway(ns.cluster)
        try:
            result = gw.apply_resource_quota(ns.name, settings.QUOTA_NAME, hard, labels=MANAGED_BY)
            _confirm_spec(result, hard)
            result = _await_status(gw, ns, result, hard)
        finally:
            if gateway is None:
                gw.close()
        record_status(ns, result)
    except KubeError as err:
        return _failed(op, attempt, str(err), permanent=err.permanent)
    return _succeeded(op, attempt, hard)


def record_status(namespace: TeamNamespace, quota: dict | None) -> None:
    """Keep the quota's status (hard, used) as the cluster reported it."""
    status = (quota or {}).get("status") or {}
    TeamNamespace.objects.filter(pk=namespace.pk).update(
        quota_status={"hard": status.get("hard") or {}, "used": status.get("used") or {}},
        quota_status_at=timezone.now(),
    )


def _differences(actual: dict, hard: dict[str, int]) -> dict:
    return {k: actual.get(k) for k, v in hard.items() if str(actual.get(k)) != str(v)}


def _confirm_spec(quota: dict, hard: dict[str, int]) -> None:
    """The API server must return what we applied in spec.hard."""
    wrong = _differences((quota.get("spec") or {}).get("hard") or {}, hard)
    if wrong:
        raise KubeError(f"quota read back differs from what was applied: {wrong}")


def _await_status(gw: KubeGateway, ns: TeamNamespace, quota: dict, hard: dict[str, int]) -> dict:
    """Wait (bounded) until the quota controller copies spec.hard to status.hard.

    Only then does admission enforce the new values. A real controller takes a moment;
    if it takes longer than ``QUOTA_CONFIRM_SECONDS`` the attempt fails as transient and
    the operation retries later.
    """
    deadline = time.monotonic() + settings.QUOTA_CONFIRM_SECONDS
    while True:
        wrong = _differences((quota.get("status") or {}).get("hard") or {}, hard)
        if not wrong:
            return quota
        if time.monotonic() >= deadline:
            raise KubeError(f"status.hard not yet updated by the quota controller: {wrong}")
        time.sleep(0.25)
        quota = gw.get_resource_quota(ns.name, settings.QUOTA_NAME) or {}


@transaction.atomic
def _succeeded(op: Operation, attempt: OperationAttempt, hard: dict[str, int]) -> str:
    now = timezone.now()
    attempt.finished_at, attempt.ok = now, True
    attempt.save(update_fields=["finished_at", "ok"])
    Operation.objects.filter(pk=op.pk).update(
        status=Operation.Status.SUCCEEDED, finished_at=now, lease_until=None,
        applied_hard=hard, last_error="",
    )  # fmt: skip
    audit.record(None, "quota.applied", op.namespace, team=op.namespace.team, after=hard,
                 note=f"operation {op.pk} ({op.reason})")  # fmt: skip
    from .services import mark_applied

    for req in op.requests.select_for_update():
        mark_applied(req, note=f"ResourceQuota {settings.QUOTA_NAME} applied")
    return Operation.Status.SUCCEEDED


@transaction.atomic
def _failed(op: Operation, attempt: OperationAttempt, error: str, *, permanent: bool) -> str:
    now = timezone.now()
    attempt.finished_at, attempt.error = now, error[:2000]
    attempt.save(update_fields=["finished_at", "error"])
    op = Operation.objects.select_for_update().get(pk=op.pk)
    give_up = permanent or op.attempts >= op.max_attempts
    op.last_error = error[:2000]
    op.lease_until = None
    if give_up:
        op.status, op.finished_at = Operation.Status.FAILED, now
    else:
        op.status, op.next_attempt_at = Operation.Status.PENDING, now + backoff(op.attempts)
    op.save(update_fields=["status", "finished_at", "next_attempt_at", "last_error", "lease_until"])
    log.warning("operation %s attempt %d failed%s: %s", op.pk, op.attempts,
                " (giving up)" if give_up else "", error)  # fmt: skip
    if give_up:
        audit.record(None, "quota.apply_failed", op.namespace, team=op.namespace.team,
                     note=f"operation {op.pk}: {error}")  # fmt: skip
        from .services import mark_failed

        for req in op.requests.select_for_update():
            mark_failed(req, error)
    else:
        from .tasks import apply_operation

        delay = (op.next_attempt_at - now).total_seconds()
        transaction.on_commit(
            lambda: _safe(lambda: apply_operation.apply_async((str(op.pk),), countdown=delay))
        )
    return op.status


def _safe(fn) -> None:
    try:
        fn()
    except Exception:  # beat re-dispatches
        log.warning("could not schedule a retry; beat will re-dispatch")


def redispatch_due(now=None) -> int:
    """Re-send due pending operations and reclaim ones whose worker died (lease expired)."""
    return outbox.redispatch_due(Operation, dispatch, now)
