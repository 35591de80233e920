"""A limit lowered below what a namespace's pods use waits for an admin (docs/quotas.md).

The apply (quotas/apply.py) never writes such a limit unconfirmed: :func:`held_keys` finds
the keys of the quota it would write below usage (quotas/limits.py), :func:`hold` parks the
operation in ``confirm`` with them, and :func:`confirm_lowering` (the namespace page or
the API, admins only) sends it back to the outbox with the values the admin saw.
"""

from __future__ import annotations

from django.db import transaction
from django.utils import timezone

from . import audit, limits
from .models import ForeignQuota, Operation, OperationAttempt, TeamNamespace


def held_keys(op: Operation, ns: TeamNamespace, hard: dict[str, int]) -> dict:
    """Keys of ``hard`` below what the namespace's pods use (quotas/limits.py), less
    what an admin confirmed for this operation."""
    requested = limits.requested_by_namespace([ns])[ns.pk]
    foreign = ForeignQuota.objects.filter(namespace=ns, gone_at__isnull=True)
    used = limits.usage(ns, requested, foreign)
    return limits.lowering(ns, hard, used, op.confirmed_hard)


def describe_lowering(low: dict) -> str:
    return "; ".join(
        f"{key} would be {v['hard']} while pods use {v['used']}" for key, v in sorted(low.items())
    )


@transaction.atomic
def hold(op: Operation, attempt: OperationAttempt, low: dict) -> str:
    """Never lower a limit below usage unconfirmed: the operation waits for an admin."""
    now = timezone.now()
    text = f"needs an admin's confirmation: {describe_lowering(low)}"
    held = Operation.objects.filter(
        pk=op.pk, status=Operation.Status.RUNNING, attempts=attempt.number
    ).update(status=Operation.Status.CONFIRM, lowering=low, lease_until=None, last_error=text)
    if not held:
        return "skipped"
    attempt.finished_at, attempt.error = now, text
    attempt.save(update_fields=["finished_at", "error"])
    ns = op.namespace
    audit.record(None, "quota.lowering_held", ns, team=ns.team, after=low,
                 note=f"operation {op.pk} ({op.reason}) {text}")  # fmt: skip
    from .notify import lowering_held

    lowering_held(op, text)
    return Operation.Status.CONFIRM


class NothingToConfirm(Exception):
    """No operation of the namespace waits for confirmation (or what waits changed)."""


def awaiting(ns: TeamNamespace) -> dict:
    """What the namespace's held operations would write below usage, merged: per key the
    lowest value any of them would write."""
    merged: dict = {}
    for low in Operation.objects.filter(namespace=ns, status=Operation.Status.CONFIRM).values_list(
        "lowering", flat=True
    ):
        for key, v in low.items():
            if key not in merged or v["hard"] < merged[key]["hard"]:
                merged[key] = v
    return merged


@transaction.atomic
def confirm_lowering(ns: TeamNamespace, by, *, expected: dict | None = None, note="") -> int:
    """An admin accepts the limits below usage that ``ns``'s held operations would write;
    they go back to the outbox and apply. ``expected`` (key -> value shown on the
    confirmation page) must still match, so nobody confirms a value they did not see."""
    from . import apply

    if not by.is_staff:
        raise PermissionError("Only portal admins confirm a lowering below usage.")
    held = list(
        Operation.objects.select_for_update().filter(namespace=ns, status=Operation.Status.CONFIRM)
    )
    low = awaiting(ns)
    accepted = {key: v["hard"] for key, v in low.items()}
    if not held:
        raise NothingToConfirm("Nothing in this namespace waits for confirmation.")
    if expected is not None and {k: int(v) for k, v in expected.items()} != accepted:
        raise NothingToConfirm("What waits for confirmation changed since the page was shown.")
    now = timezone.now()
    for op in held:
        op.status, op.next_attempt_at = Operation.Status.PENDING, now
        op.confirmed_hard = {**op.confirmed_hard, **accepted}
        op.confirmed_by, op.confirmed_at = by, now
        op.save(update_fields=["status", "next_attempt_at", "confirmed_hard", "confirmed_by",
                               "confirmed_at"])  # fmt: skip
        transaction.on_commit(lambda pk=op.pk: apply.dispatch(pk))
    audit.record(by, "quota.lowering_confirmed", ns, team=ns.team,
                 before={k: v["used"] for k, v in low.items()}, after=accepted,
                 note=note or describe_lowering(low))  # fmt: skip
    return len(held)
