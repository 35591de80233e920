"""An estimated wait for a pending quota request (issue #25 section 4), with its basis, or
why none can be given ("not measured" is never shown as a figure: DESIGN.md).

A request can be approved once *free to grant* over its window (quotas/capacity.py, the
figure approval checks) covers its amount. Grants' ends are known: from the request's
start, each end of a grant reserving in its class (or the pool) is a moment the capacity
may come free, so the first such moment from which the rest of the window fits is when
the capacity it needs frees (for a window, an admin would approve the shorter rest). What
pods hold beyond their grants is taken as it is now (nobody knows when they end).

Then a person decides: the median time from submission to a decision over the last 90
days (quotas/decision_time.py), from :data:`MIN_DECISIONS` decisions on. The estimate is
the later of the two.
"""

from __future__ import annotations

from datetime import datetime

from django.utils import timezone

from .capacity import Capacity
from .decision_time import quota_decisions
from .models import QuotaRequest
from .wait_estimate import Estimate, when_text

MIN_DECISIONS = 3


def capacity_frees(req: QuotaRequest, now: datetime) -> tuple[datetime | None, int]:
    """(When free to grant over the rest of the request's window first covers its amount,
    free to grant over the whole window now); None when no grant's end makes it fit."""
    cluster = req.namespace.cluster
    cap = Capacity([cluster.pk], [req.resource], now=now)
    start = max(req.starts_at or now, now)
    end = req.ends_at

    def free_from(t: datetime) -> int:
        return cap.free(cluster.pk, req.gpu_class, req.resource, t, end,
                        namespace=req.namespace.name).free  # fmt: skip

    free_now = free_from(start)
    if free_now >= req.amount:
        return start, free_now
    windows = list(cap.windows_of(cluster.pk, None, req.resource))
    if req.gpu_class is not None:
        windows += cap.windows_of(cluster.pk, req.gpu_class, req.resource)
    ends = sorted({e for _, e, _ in windows if e is not None and e > start
                   and (end is None or e < end)})  # fmt: skip
    return next((t for t in ends if free_from(t) >= req.amount), None), free_now


def estimate(req: QuotaRequest, now: datetime | None = None) -> Estimate:
    now = now or timezone.now()
    frees, free_now = capacity_frees(req, now)
    typical = quota_decisions(now)
    need = f"{req.amount} asked, {free_now} free to grant over its window now"
    if frees is None:
        return Estimate(None, (
            f"No estimate: {need}, and no grant that holds them ends before the window does "
            "(permanent grants, or ends after it). It fits if a team releases GPUs or an "
            "admin approves less."
        ))  # fmt: skip
    if typical.count < MIN_DECISIONS or typical.median is None:
        when = "is there now" if frees <= now else f"frees at {when_text(frees, now)}"
        return Estimate(None, (
            f"No estimate of the decision: {typical.count} decision(s) in the last 90 days (an "
            f"estimate needs {MIN_DECISIONS}). The capacity it needs {when} ({need})."
        ))  # fmt: skip
    decided = req.created_at + typical.median
    at = max(frees, decided, now)
    capacity = (
        f"the capacity is there ({need})"
        if frees <= now
        else f"the capacity frees at {when_text(frees, now)}, when grants end ({need})"
    )
    decision = f"admins decide in a median of {typical.text} ({typical.count} decisions in 90 days)"
    if at <= now:
        return Estimate(now, f"Estimated decision: any time now: {capacity}; {decision}, "
                                    "and it has waited longer than that.")  # fmt: skip
    return Estimate(at, f"Estimated decision: {when_text(at, now)}: {capacity}; {decision}.")
