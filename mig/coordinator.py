"""The MIG reconfiguration coordinator: the "higher level entity" mig-manager expects.

mig-manager only reacts to the ``nvidia.com/mig.config`` label; it never evicts
workloads and can stay ``pending`` forever (GPU-FACTS.md section 3). This module does
the rest, one persisted step at a time:

    write_config -> cordon -> drain -> wait_mount -> set_label -> wait_state
                 -> wait_devices -> uncordon -> resync -> grant

(a revert: cordon -> drain -> set_label -> wait_state -> uncordon -> resync). The steps
live in ``mig.steps``, ``mig.config_steps`` and ``mig.state_steps``; docs/mig.md cites the
GPU Operator and mig-parted sources each one follows.

``advance(request_id)`` claims the request with a conditional UPDATE (a lease), executes
the first unfinished ``MigStep``, records the outcome and schedules the next call (with a
countdown while it waits). Steps are idempotent, so a worker killed at any point leaves a
run that the next claim continues; beat re-dispatches runs whose message or worker was
lost. The partial unique index ``migrequest_one_active_run_per_node`` keeps a second run
off a node while one is active, and the lease keeps two workers off one run.
"""

from __future__ import annotations

import logging
from datetime import timedelta
from typing import Any

from django.db import transaction
from django.db.models import Q, Value
from django.db.models.functions import Coalesce
from django.utils import timezone

from inventory.kube import KubeError, KubeGateway
from portal import broker
from quotas import audit

from .models import MigRequest, MigStep
from .services import alert_admins
from .stepbase import (  # noqa: F401 - CONFIG_LABEL, STATE_LABEL: the module's public names
    CONFIG_LABEL,
    STATE_LABEL,
    Ctx,
    Done,
    Fail,
    Step,
    Wait,
    conf,
    poll_seconds,
)
from .steps import HANDLERS

log = logging.getLogger(__name__)


def lease() -> timedelta:
    """How long one step may run before beat assumes its worker died."""
    return timedelta(seconds=conf("MIG_LEASE_SECONDS", 300.0))


# -- dispatching ---------------------------------------------------------------------------


def dispatch(request_id: Any, countdown: float = 0) -> None:
    from .tasks import advance_run

    broker.send(advance_run, (str(request_id),), countdown=max(countdown, 0),
                what=f"MIG run {request_id}")  # fmt: skip


def redispatch_due(now=None) -> int:
    """Re-send active runs nobody holds whose next step is overdue (lost message, dead
    worker). Safe at any time: a run executes only under the lease claimed in ``advance``."""
    now = now or timezone.now()
    grace = timedelta(seconds=conf("MIG_REDISPATCH_GRACE_SECONDS", 30.0))
    due = list(
        MigRequest.objects.filter(status__in=MigRequest.ACTIVE)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .filter(Q(next_run_at__isnull=True) | Q(next_run_at__lte=now - grace))
        .values_list("pk", flat=True)[:500]
    )
    for pk in due:
        dispatch(pk)
    return len(due)


# -- the run -------------------------------------------------------------------------------


def advance(request_id: Any, *, gateway: KubeGateway | None = None) -> str:
    """Execute the next step of a run if no one else holds it; returns what happened."""
    now = timezone.now()
    until = now + lease()
    claimed = (
        MigRequest.objects.filter(pk=request_id, status__in=MigRequest.ACTIVE)
        .filter(Q(lease_until__isnull=True) | Q(lease_until__lt=now))
        .update(
            status=MigRequest.Status.RUNNING,
            lease_until=until,
            updated_at=now,
            started_at=Coalesce("started_at", Value(now)),
        )
    )
    if not claimed:
        return "busy"
    req = MigRequest.objects.select_related("node", "cluster", "namespace", "team").get(
        pk=request_id
    )
    step = req.steps.exclude(status__in=MigStep.FINISHED).order_by("position").first()
    if step is None:  # every step finished but the request was not closed: close it
        with transaction.atomic():
            _succeed(req)
        return "succeeded"
    step.attempts += 1
    step.status = MigStep.Status.RUNNING
    step.started_at = step.started_at or now
    step.save(update_fields=["attempts", "status", "started_at"])
    ctx = Ctx(req, step, now, gateway)
    try:
        outcome = _execute(ctx)
    finally:
        if gateway is None and ctx._gw is not None:
            ctx._gw.close()
    return _record(ctx, outcome, until)


def _execute(ctx: Ctx) -> Done | Wait | Fail:
    try:
        return HANDLERS[ctx.step.name](ctx)
    except KubeError as err:
        if err.permanent:
            return Fail(f"{ctx.step.name}: {err}")
        errors = ctx.step.data.get("errors", 0) + 1
        ctx.save_data(errors=errors)
        if errors >= conf("MIG_STEP_MAX_ERRORS", 8):
            return Fail(f"{ctx.step.name}: {err} ({errors} transient errors in a row)")
        return Wait(f"retrying after: {err}", min(poll_seconds() * 2 ** (errors - 1), 60))
    except Exception as err:  # a bug must fail the run, not loop forever
        log.exception("MIG run %s: step %s crashed", ctx.req.pk, ctx.step.name)
        return Fail(f"{ctx.step.name}: {type(err).__name__}: {err}")


def _record(ctx: Ctx, outcome: Done | Wait | Fail, until) -> str:
    req, step = ctx.req, ctx.step
    now = timezone.now()
    if isinstance(outcome, Wait):
        MigStep.objects.filter(pk=step.pk).update(detail=outcome.detail[:4000])
        countdown = poll_seconds() if outcome.countdown is None else outcome.countdown
        _release(req, until, now + timedelta(seconds=countdown))
        transaction.on_commit(lambda: dispatch(req.pk, countdown))
        return "waiting"
    if isinstance(outcome, Fail):
        fail_run(ctx, outcome.error, keep_cordoned=outcome.keep_cordoned)
        return "failed"
    with transaction.atomic():
        step.status = MigStep.Status.SKIPPED if outcome.skipped else MigStep.Status.DONE
        step.detail, step.finished_at = outcome.detail[:4000], now
        step.save(update_fields=["status", "detail", "finished_at"])
        if outcome.commit is not None:
            outcome.commit()
        if not req.steps.exclude(status__in=MigStep.FINISHED).exists():
            _succeed(req)
            return "succeeded"
        _release(req, until, now)
    transaction.on_commit(lambda: dispatch(req.pk))
    return "advanced"


def _release(req: MigRequest, until, next_run_at) -> None:
    """Give the lease back (only ours: a run reclaimed after our lease expired is theirs)."""
    MigRequest.objects.filter(pk=req.pk, lease_until=until).update(
        lease_until=None, next_run_at=next_run_at, updated_at=timezone.now()
    )


def _succeed(req: MigRequest) -> None:
    req.refresh_from_db()
    req.succeed()
    req.save()
    audit.record(
        None, "mig.succeeded", req, team=req.team,
        before={"status": MigRequest.Status.RUNNING},
        after={"status": req.status, "node": req.node.name, "config": req.config_name,
               "granted": req.granted},
    )  # fmt: skip
    from .services import notify_team  # in-app notice + webhooks (notices/)

    notify_team(req, "mig_finished", f"MIG run finished: {req.layout_text} on {req.node.name}",
                f"The node is now in MIG config {req.config_name}.")  # fmt: skip


def fail_run(ctx: Ctx, error: str, keep_cordoned: str = "") -> None:
    """Fail the run: uncordon if the portal cordoned (``MIG_UNCORDON_ON_FAILURE``) unless
    ``keep_cordoned`` says why not (the stuck policy), keep the node's previous config on
    record for a revert, audit, and alert the admins."""
    req, step = ctx.req, ctx.step
    notes = [error]
    cordon = req.steps.filter(name=Step.CORDON, status=MigStep.Status.DONE).first()
    we_cordoned = cordon is not None and not cordon.data.get("was_unschedulable", False)
    uncordoned = req.steps.filter(name=Step.UNCORDON, status=MigStep.Status.DONE).exists()
    if keep_cordoned:
        notes.append(keep_cordoned)
    elif we_cordoned and not uncordoned:
        if conf("MIG_UNCORDON_ON_FAILURE", True):
            try:
                ctx.gw.set_unschedulable(ctx.node, False)
                notes.append("The node was uncordoned.")
            except KubeError as err:
                notes.append(f"Could not uncordon the node: {err}")
        else:
            notes.append("The node stays cordoned (MIG_UNCORDON_ON_FAILURE is off).")
    if req.previous_config:
        notes.append(f"Previous config: {req.previous_config}.")
    now = timezone.now()
    with transaction.atomic():
        MigStep.objects.filter(pk=step.pk).update(
            status=MigStep.Status.FAILED, detail=error[:4000], finished_at=now
        )
        req.steps.filter(status__in=[MigStep.Status.PENDING, MigStep.Status.RUNNING]).update(
            status=MigStep.Status.SKIPPED, detail="not run: the run failed"
        )
        req = (
            MigRequest.objects.select_for_update(of=("self",))
            .select_related("node", "team")
            .get(pk=req.pk)
        )
        before = req.status
        req.fail(" ".join(notes))
        req.save()
        audit.record(
            None, "mig.failed", req, team=req.team, before={"status": before},
            after={"status": req.status, "step": step.name, "node": req.node.name,
                   "config": req.config_name, "previous_config": req.previous_config},
            note=req.error,
        )  # fmt: skip
        alert_admins(req, stuck=bool(keep_cordoned))
    log.warning("MIG run %s on %s failed at %s: %s", req.pk, req.node.name, step.name, error)
