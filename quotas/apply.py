"""Turn the database's grants into each namespace's managed ResourceQuota (the outbox).

``enqueue_apply`` writes an Operation row in the caller's transaction and dispatches it
after commit; ``run_operation`` claims it with a conditional UPDATE, server-side-applies
the quota through the inventory gateway and records the attempt; it is done once the quota
controller has copied ``spec.hard`` to ``status.hard`` (admission enforces that), which
``confirm_operation`` checks in short follow-up tasks so no worker waits for it.
Failures retry with backoff; beat re-dispatches operations whose message or worker was
lost. The desired quota is recomputed at apply time from the
grants active then, so running an operation twice, or late, changes nothing.

Faults (issue #11, docs/quotas.md "When an apply fails"): a claimed operation holds a
short lease that a heartbeat renews while its attempt runs, so beat reclaims the
operation of a dead worker within a lease and closes its attempt with that error
(:func:`reclaim_expired`). A request whose apply fails for good withdraws its grant
(end_reason ``apply_failed``): it stops reserving capacity and counting in the quota.
"""

from __future__ import annotations

import logging
import os
import socket
from datetime import timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Sum
from django.utils import timezone

from inventory.kube import KubeError, KubeGateway
from inventory.models import Cluster
from portal import broker, outbox

from . import audit, lowering
from .capacity import advertised_resources
from .leases import Heartbeat, lease, reclaim_expired, renew_lease
from .models import Grant, Operation, OperationAttempt, QuotaRequest, TeamNamespace

log = logging.getLogger(__name__)

MANAGED_BY = {"app.kubernetes.io/managed-by": "gpu-quota-portal"}
# The reason of an operation the drift check queues for a deleted managed quota: it runs
# even while another operation of the namespace is in flight, and is never held.
RECREATE = "recreate"
# run_operation's result while the quota controller has yet to confirm (a confirm task
# follows); the operation itself stays running.
CONFIRMING = "confirming"
NOT_CONFIRMED = "status.hard not yet updated by the quota controller"
# Re-reads of an applied quota: the first after about the time a quota controller takes
# to sync a changed quota (tens to a hundred milliseconds), then doubling, capped. Each
# re-read is a task of its own: fewer, well-timed ones keep the workers free.
CONFIRM_FIRST_PAUSE = 0.15
# Where the watcher confirms from quota events, the first confirm task only catches what it
# missed (a watch that broke): it comes this much later.
CONFIRM_FALLBACK_S = 1.0
CONFIRM_MAX_PAUSE = 0.6


def quota_key(resource: str) -> str:
    """Extended resources are only counted under ``requests.`` (GPU-FACTS.md section 1)."""
    return f"requests.{resource}"


def desired_hard(namespace: TeamNamespace, now=None) -> dict[str, int]:
    """``requests.<resource>`` for every GPU resource the cluster advertises or that has
    a grant: the sum of the grants active now, 0 where there is none.

    A resource never leaves the quota once managed: a missing key would mean *no limit*.
    On a DRA cluster the keys count devices per DeviceClass instead (quotas/dra.py).
    """
    if namespace.cluster.is_dra:
        from . import dra

        return dra.desired_hard(namespace, now)
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

    broker.send(apply_operation, (str(op_id),), what=f"operation {op_id}")


def worker_id() -> str:
    """This process as an attempt records it: ``host/pid``."""
    return f"{socket.gethostname()}/{os.getpid()}"


def attempt_gateway(cluster: Cluster) -> KubeGateway:
    """The gateway of one attempt: every call of it ends within QUOTA_ATTEMPT_SECONDS, so
    a cluster that does not answer fails the attempt in time (#24 finding 5: an attempt
    showed "running" for 67 s, three calls of KUBE_REQUEST_TIMEOUT with retries)."""
    return KubeGateway(cluster, deadline=settings.QUOTA_ATTEMPT_SECONDS)


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
        applied_hard={},  # an earlier attempt's: the watcher must not confirm this one by it
    )
    if not claimed:
        return "skipped"
    op = Operation.objects.select_related("namespace__cluster", "namespace__team").get(pk=op_id)
    attempt = OperationAttempt.objects.create(
        operation=op, number=op.attempts, started_at=now, worker=worker_id()
    )
    with transaction.atomic():
        for req in op.requests.select_for_update():
            from .services import mark_applying

            mark_applying(req)
    ns = op.namespace
    if ns.cluster.enforcement == Cluster.Enforcement.KUEUE:
        return _run_kueue(op, attempt, ns, gateway)
    hard = desired_hard(ns)
    # Recreating a deleted quota with the database's state lowers no limit in force.
    low = {} if op.reason == RECREATE else lowering.held_keys(op, ns, hard)
    if low:
        return lowering.hold(op, attempt, low)
    try:
        with Heartbeat(op.pk, attempt.number):
            gw = gateway or attempt_gateway(ns.cluster)
            try:
                if ns.cluster.is_dra:  # the classes the quota's keys name, first
                    from . import dra

                    dra.apply_device_classes(ns.cluster, gw)
                result = gw.apply_resource_quota(
                    ns.name, settings.QUOTA_NAME, hard, labels=MANAGED_BY
                )
                _confirm_spec(result, hard)
                # Where the watcher keeps the cluster current it confirms from the quota's
                # events (quotas/quotawatch.py) and no worker waits; elsewhere the task
                # watches the quota itself for a while first.
                watched = ns.cluster.is_watched
                inline = 0.0 if watched else settings.QUOTA_CONFIRM_INLINE_SECONDS
                inline = min(inline, settings.QUOTA_CONFIRM_SECONDS)
                result = _await_status(
                    gw, result, hard, inline, final=inline >= settings.QUOTA_CONFIRM_SECONDS
                )
                if _differences(_status_hard(result), hard):
                    # what the watcher waits for, then one more read: a status.hard the
                    # controller wrote before that is in no event the watcher will act on
                    Operation.objects.filter(pk=op.pk).update(applied_hard=hard)
                    result = gw.get_resource_quota(ns.name, settings.QUOTA_NAME) or result
            finally:
                if gateway is None:
                    gw.close()
    except KubeError as err:
        return _failed_call(op, attempt, err)
    if _differences(_status_hard(result), hard):
        # the status we know stays until confirmed
        return _hand_over(op, attempt, hard, CONFIRM_FALLBACK_S if watched else CONFIRM_FIRST_PAUSE)
    record_status(ns, result)
    return _succeeded(op, attempt, hard)


def _run_kueue(op: Operation, attempt: OperationAttempt, ns: TeamNamespace, gateway) -> str:
    """The Kueue backend (quotas/kueue_apply.py): done once the ClusterQueue is applied."""
    from .kueue_apply import apply_team

    try:
        with Heartbeat(op.pk, attempt.number):
            nominal, note = apply_team(ns, gateway or attempt_gateway(ns.cluster))
    except KubeError as err:
        return _failed_call(op, attempt, err)
    return _succeeded(op, attempt, nominal, note=note)


def confirm_operation(op_id, attempt_number: int, pause: float = CONFIRM_FIRST_PAUSE) -> str:
    """Re-read a just-applied quota until its controller copied spec.hard to status.hard.

    Runs as its own short task after ``run_operation`` handed over, so no worker sleeps
    while the quota controller catches up. Another attempt of the operation, or its end,
    makes this a no-op; after ``QUOTA_CONFIRM_SECONDS`` the attempt fails as transient.
    """
    op = (
        Operation.objects.select_related("namespace__cluster", "namespace__team")
        .filter(pk=op_id, status=Operation.Status.RUNNING, attempts=attempt_number)
        .first()
    )
    if op is None:
        return "skipped"
    attempt = OperationAttempt.objects.get(operation=op, number=attempt_number)
    ns, hard = op.namespace, op.applied_hard
    try:
        with Heartbeat(op.pk, attempt_number), attempt_gateway(ns.cluster) as gw:
            quota = gw.get_resource_quota(ns.name, settings.QUOTA_NAME)
    except KubeError as err:
        return _failed_call(op, attempt, err)
    if quota is None:
        return _failed(op, attempt, "the ResourceQuota vanished before its controller "
                       "confirmed it", permanent=False)  # fmt: skip
    record_status(ns, quota)
    wrong = _differences(_status_hard(quota), hard)
    if not wrong:
        return _succeeded(op, attempt, hard)
    waited = (timezone.now() - attempt.started_at).total_seconds()
    if waited >= settings.QUOTA_CONFIRM_SECONDS:
        return _failed(op, attempt, f"{NOT_CONFIRMED}: {wrong}", permanent=False)
    renew_lease(op.pk, attempt_number, extra=pause)  # the next confirm task carries it on
    _schedule_confirm(op, attempt_number, min(pause * 2, CONFIRM_MAX_PAUSE), countdown=pause)
    return CONFIRMING


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


def _status_hard(quota: dict | None) -> dict:
    return ((quota or {}).get("status") or {}).get("hard") or {}


def _await_status(
    gw: KubeGateway,
    quota: dict,
    hard: dict[str, int],
    seconds: float,
    *,
    final: bool,
) -> dict:
    """Watch the quota for up to ``seconds`` until the quota controller has copied
    spec.hard to status.hard: only then does admission enforce the new values.

    Returns the last quota seen (confirmed or not). With ``final`` (no hand-over to
    :func:`confirm_operation` follows) an unconfirmed quota is a transient failure.
    """
    quota = gw.await_resource_quota(
        quota, lambda q: not _differences(_status_hard(q), hard), seconds
    )
    wrong = _differences(_status_hard(quota), hard)
    if wrong and final:
        raise KubeError(f"{NOT_CONFIRMED}: {wrong}")
    return quota


def _hand_over(op: Operation, attempt: OperationAttempt, hard: dict[str, int], first: float) -> str:
    """spec.hard is applied, status.hard not yet: the watcher's quota events or, after
    ``first`` seconds, a confirm task take it from here."""
    Operation.objects.filter(pk=op.pk).update(applied_hard=hard)
    renew_lease(op.pk, attempt.number, extra=first)
    _schedule_confirm(op, attempt.number, CONFIRM_FIRST_PAUSE, countdown=first)
    return CONFIRMING


def _schedule_confirm(op: Operation, number: int, pause: float, *, countdown: float) -> None:
    from .tasks import confirm_quota

    transaction.on_commit(
        lambda: broker.send(confirm_quota, (str(op.pk), number, pause), countdown=countdown,
                            what=f"confirmation of operation {op.pk}")
    )  # fmt: skip


@transaction.atomic
def _succeeded(
    op: Operation, attempt: OperationAttempt, hard: dict[str, int], *, note: str = ""
) -> str:
    now = timezone.now()
    finished = Operation.objects.filter(
        pk=op.pk, status=Operation.Status.RUNNING, attempts=attempt.number
    ).update(
        status=Operation.Status.SUCCEEDED, finished_at=now, lease_until=None,
        applied_hard=hard, last_error="", unreachable_since=None,
    )  # fmt: skip
    if not finished:  # a duplicate confirm, or beat reclaimed the operation meanwhile
        return "skipped"
    attempt.finished_at, attempt.ok = now, True
    attempt.save(update_fields=["finished_at", "ok"])
    _mark_enforced(op, now)
    audit.record(None, "quota.applied", op.namespace, team=op.namespace.team, after=hard,
                 note=f"operation {op.pk} ({op.reason})")  # fmt: skip
    from .services import mark_applied

    note = note or f"ResourceQuota {settings.QUOTA_NAME} applied"
    for req in op.requests.select_for_update():
        mark_applied(req, note=note)
    # Held operations that computed their quota before this one did are settled by it:
    # the cluster now holds what the database says.
    stale = Operation.objects.select_for_update().filter(
        namespace_id=op.namespace_id, status=Operation.Status.CONFIRM,
        started_at__lte=op.started_at,
    )  # fmt: skip
    for other in stale:
        other.status, other.finished_at, other.applied_hard = Operation.Status.SUCCEEDED, now, hard
        other.last_error = f"superseded by operation {op.pk}"
        other.save(update_fields=["status", "finished_at", "applied_hard", "last_error"])
        for req in other.requests.select_for_update():
            mark_applied(req, note=note)
    return Operation.Status.SUCCEEDED


def _mark_enforced(op: Operation, now) -> None:
    """The grants this apply counted are enforced now: those active when the attempt
    computed its desired state (the namespace's; on Kueue the team's on the cluster)."""
    ns = op.namespace
    grants = Grant.objects.filter(applied_at__isnull=True, created_at__lte=op.started_at)
    if ns.cluster.enforcement == Cluster.Enforcement.KUEUE:
        grants = grants.filter(namespace__team_id=ns.team_id, namespace__cluster_id=ns.cluster_id)
    else:
        grants = grants.filter(namespace_id=ns.pk)
    grants.active_at(op.started_at).update(applied_at=now)


@transaction.atomic
def _failed_call(op: Operation, attempt: OperationAttempt, err: KubeError) -> str:
    return _failed(op, attempt, str(err), permanent=err.permanent, unreachable=err.unreachable)


def _failed(
    op: Operation,
    attempt: OperationAttempt | None,
    error: str,
    *,
    permanent: bool,
    retry_in: timedelta | None = None,
    unreachable: bool = False,
) -> str:
    """Record a failed attempt; retry with backoff (or after ``retry_in``), or give up.

    ``unreachable``: the cluster gave no answer at all; the operation then says since when
    (the start of the first attempt of this run of unanswered ones), not just the error."""
    now = timezone.now()
    op = Operation.objects.select_for_update().select_related("namespace__team").get(pk=op.pk)
    if attempt is None:  # the worker died between its claim and the attempt row
        attempt, _ = OperationAttempt.objects.get_or_create(
            operation=op, number=op.attempts, defaults={"started_at": op.started_at or now}
        )
    attempt = OperationAttempt.objects.select_for_update().get(pk=attempt.pk)
    if attempt.finished_at is None:
        attempt.finished_at, attempt.error = now, error[:2000]
        attempt.save(update_fields=["finished_at", "error"])
    if op.status != Operation.Status.RUNNING or op.attempts != attempt.number:
        return "skipped"  # a later attempt (beat reclaimed the lease) owns the operation
    give_up = permanent or op.attempts >= op.max_attempts
    if unreachable:
        op.unreachable_since = op.unreachable_since or attempt.started_at
        since = timezone.localtime(op.unreachable_since).strftime("%Y-%m-%d %H:%M:%S %Z")
        error = f"cluster {op.namespace.cluster.slug} unreachable since {since}: {error}"
    else:
        op.unreachable_since = None
    op.last_error = error[:2000]
    op.lease_until = None
    if give_up:
        op.status, op.finished_at = Operation.Status.FAILED, now
    else:
        op.status = Operation.Status.PENDING
        op.next_attempt_at = now + (backoff(op.attempts) if retry_in is None else retry_in)
    op.save(update_fields=["status", "finished_at", "next_attempt_at", "last_error", "lease_until",
                           "unreachable_since"])  # fmt: skip
    log.warning("operation %s attempt %d failed%s: %s", op.pk, op.attempts,
                " (giving up)" if give_up else "", error)  # fmt: skip
    if give_up:
        audit.record(None, "quota.apply_failed", op.namespace, team=op.namespace.team,
                     note=f"operation {op.pk}: {error}")  # fmt: skip
        _give_up_requests(op, error, now)
    else:
        from .tasks import apply_operation

        delay = max((op.next_attempt_at - now).total_seconds(), 0)
        transaction.on_commit(
            lambda: broker.send(apply_operation, (str(op.pk),), countdown=delay,
                                what=f"retry of operation {op.pk}")
        )  # fmt: skip
    return op.status


def _give_up_requests(op: Operation, error: str, now) -> None:
    """The operation's requests after it failed for good. A new grant that no apply
    enforced is withdrawn (end_reason ``apply_failed``): it no longer reserves capacity
    nor counts in the quota or Kueue's nominal, so the request's "failed" is the whole
    truth; one that another apply of the namespace enforced meanwhile is applied."""
    from .services import mark_applied, mark_failed

    withdrawn = False
    for req in op.requests.select_for_update():
        grant = None
        if req.kind == QuotaRequest.Kind.NEW and req.grant_id:
            grant = Grant.objects.select_for_update().get(pk=req.grant_id)
        if grant is not None and grant.applied_at is not None:
            mark_applied(req, note=f"enforced by another apply of the namespace "
                                   f"(operation {op.pk} failed: {error})")  # fmt: skip
            continue
        if grant is not None and grant.ended_at is None:
            grant.ended_at, grant.end_reason = now, "apply_failed"
            grant.save(update_fields=["ended_at", "end_reason"])
            audit.record(None, "grant.apply_failed", grant, team=op.namespace.team,
                         before={"ended_at": None},
                         after={"ended_at": now.isoformat(), "end_reason": "apply_failed"},
                         note=f"withdrawn: its apply failed for good (operation {op.pk}: "
                              f"{error}); it no longer reserves capacity")  # fmt: skip
            withdrawn = True
            error_note = f"{error}; the grant was withdrawn and reserves nothing"
        else:
            error_note = error
        mark_failed(req, error_note)
    if withdrawn:
        # An attempt may have written part of it (a confirm that timed out, one Kueue
        # object of several): the cluster is brought back to what the database says.
        enqueue_apply(op.namespace, reason="apply_failed")


def redispatch_due(now=None) -> int:
    """Re-send due pending operations and reclaim ones whose worker died (lease expired)."""
    return outbox.redispatch_due(Operation, dispatch, now, reclaim=reclaim_expired)
