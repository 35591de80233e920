"""What every outbox table (quota operations, node label operations) shares.

An outbox row has ``status`` (pending / running / ...), ``next_attempt_at`` and
``lease_until``; a worker claims it with a conditional UPDATE, so re-sending a message
is always harmless.
"""

from __future__ import annotations

from collections.abc import Callable
from datetime import datetime, timedelta

from django.db import models
from django.utils import timezone

# A row just written is dispatched on commit; beat re-sends it only after this grace.
DISPATCH_GRACE = timedelta(seconds=5)


def redispatch_due(
    model: type[models.Model],
    dispatch: Callable[[object], None],
    now: datetime | None = None,
    *,
    reclaim: Callable[[datetime], object] | None = None,
) -> int:
    """Reclaim rows whose worker died (lease expired) and re-send every due pending row.

    ``reclaim(now)``: the table's own reclaim (closing the abandoned attempt with its
    error, quotas/leases.py); without one, expired rows simply go back to pending.
    """
    now = now or timezone.now()
    if reclaim is not None:
        reclaim(now)
    else:
        model.objects.filter(status="running", lease_until__lt=now).update(
            status="pending", next_attempt_at=now, lease_until=None
        )
    due = list(
        model.objects.filter(
            status="pending", next_attempt_at__lte=now - DISPATCH_GRACE
        ).values_list("pk", flat=True)[:500]
    )
    for pk in due:
        dispatch(pk)
    return len(due)
