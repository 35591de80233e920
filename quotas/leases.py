"""Leases of claimed quota operations: a heartbeat while an attempt runs, and beat's
reclaim of the operations whose worker died (issue #11, docs/quotas.md "When an apply
fails").

A claimed operation holds a lease of ``QUOTA_OPERATION_LEASE_SECONDS`` (short: 5 s by
default) that a thread of the worker renews every third of it while the cluster calls
run, and that each hand-over to a confirm task extends. A lease that ran out means its
worker died or hangs: beat's re-dispatcher puts the operation back to pending at once,
closing the abandoned attempt with that error (never left open) and auditing it.
"""

from __future__ import annotations

import logging
import threading
from datetime import timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from . import audit
from .models import Operation, OperationAttempt

log = logging.getLogger(__name__)


def lease() -> timedelta:
    """How long a claimed operation may go without a heartbeat before beat assumes its
    worker died (renewed every third of it while the attempt runs)."""
    return timedelta(seconds=settings.QUOTA_OPERATION_LEASE_SECONDS)


class Heartbeat:
    """Renews a running attempt's lease from a thread of its own while the worker works.

    Use around the cluster calls only, never inside a transaction that holds the
    operation's row (the renewal would wait for it). Stops by itself once the operation
    is no longer this attempt's (finished, or reclaimed by beat).
    """

    def __init__(self, op_id, number: int) -> None:
        self.op_id, self.number = op_id, number
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, daemon=True, name="op-heartbeat")

    def __enter__(self) -> Heartbeat:
        self._thread.start()
        return self

    def __exit__(self, *exc) -> None:
        self._stop.set()
        self._thread.join()

    def _run(self) -> None:
        interval = max(settings.QUOTA_OPERATION_LEASE_SECONDS / 3, 0.2)
        try:
            while not self._stop.wait(interval):
                if not renew_lease(self.op_id, self.number):
                    return
        except Exception:  # a heartbeat that cannot reach the database lets the lease lapse
            log.warning("heartbeat of operation %s stopped", self.op_id, exc_info=True)
        finally:
            connection.close()


def renew_lease(op_id, number: int, extra: float = 0.0) -> bool:
    """Push the lease of attempt ``number`` forward; False when it is no longer running."""
    until = timezone.now() + lease() + timedelta(seconds=extra)
    return bool(
        Operation.objects.filter(pk=op_id, status=Operation.Status.RUNNING, attempts=number)
        .update(lease_until=until)
    )  # fmt: skip


def reclaim_expired(now=None) -> int:
    """Operations whose lease expired (no heartbeat: the worker died or hangs) go back
    to pending at once, their open attempt closed with what happened, audited; one past
    its last attempt fails for good. Returns how many were reclaimed."""
    from . import apply

    now = now or timezone.now()
    count = 0
    expired = Operation.objects.filter(status=Operation.Status.RUNNING, lease_until__lt=now)
    for op_id in expired.values_list("pk", flat=True)[:500]:
        with transaction.atomic():
            op = (
                Operation.objects.select_for_update(skip_locked=True)
                .select_related("namespace__team")
                .filter(pk=op_id, status=Operation.Status.RUNNING, lease_until__lt=now)
                .first()
            )
            if op is None:
                continue
            beat_at = op.lease_until - lease()
            attempt = OperationAttempt.objects.filter(operation=op, number=op.attempts).first()
            who = f"worker {attempt.worker}" if attempt is not None and attempt.worker else "worker"
            text = (f"{who} lost: no heartbeat since {beat_at:%Y-%m-%d %H:%M:%S} UTC and the "
                    f"lease expired (the worker died or hangs); attempt {op.attempts} "
                    "abandoned")  # fmt: skip
            audit.record(None, "quota.worker_lost", op.namespace, team=op.namespace.team,
                         note=f"operation {op.pk} ({op.reason}): {text}")  # fmt: skip
            apply._failed(op, attempt, text, permanent=False, retry_in=timedelta(0))
            count += 1
    return count
