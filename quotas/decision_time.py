"""Typical time to a decision (issue #12 section 2): "what happens next" on pending pages.

The median time from submission (``created_at``) to an admin's decision (``decided_at``:
approved or rejected) over the decisions of the last 90 days, with their count. Quota
requests and MIG requests are measured apart (a MIG approval means picking a node and
draining it, a different review); releases are left out (they are granted at once, no
one reviews them), as are cancelled requests (no decision). The typical apply time is
the median from an approval's apply operation being queued to its success.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db.models import Aggregate, Count, DurationField, ExpressionWrapper, F, QuerySet
from django.utils import timezone

from .models import Operation, QuotaRequest

WINDOW = timedelta(days=90)
APPLY_REASONS = ("approval", "renewal")


class Median(Aggregate):
    """PostgreSQL's ``percentile_cont(0.5)``: the median (of intervals, here)."""

    function = "percentile_cont"
    template = "%(function)s(0.5) WITHIN GROUP (ORDER BY %(expressions)s)"
    output_field = DurationField()


@dataclass(frozen=True)
class Typical:
    count: int
    median: timedelta | None  # None: nothing measured in the window

    @property
    def text(self) -> str:
        return "" if self.median is None else duration_text(self.median)


def _median(qs: QuerySet, start: str, end: str) -> Typical:
    took = ExpressionWrapper(F(end) - F(start), output_field=DurationField())
    row = qs.aggregate(n=Count("pk"), median=Median(took))
    return Typical(count=row["n"], median=row["median"] if row["n"] else None)


def quota_decisions(now: datetime | None = None, window: timedelta = WINDOW) -> Typical:
    now = now or timezone.now()
    qs = QuotaRequest.objects.filter(
        decided_at__isnull=False, decided_at__gt=now - window, decided_at__lte=now
    ).exclude(kind=QuotaRequest.Kind.RELEASE)
    return _median(qs, "created_at", "decided_at")


def mig_decisions(now: datetime | None = None, window: timedelta = WINDOW) -> Typical:
    from mig.models import MigRequest  # mig depends on quotas, not the other way round

    now = now or timezone.now()
    qs = MigRequest.objects.filter(
        decided_at__isnull=False, decided_at__gt=now - window, decided_at__lte=now
    )
    return _median(qs, "created_at", "decided_at")


def quota_applies(now: datetime | None = None, window: timedelta = WINDOW) -> Typical:
    """From an approval's apply being queued to the cluster enforcing it."""
    now = now or timezone.now()
    qs = Operation.objects.filter(
        status=Operation.Status.SUCCEEDED, reason__in=APPLY_REASONS,
        finished_at__isnull=False, finished_at__gt=now - window, finished_at__lte=now,
    )  # fmt: skip
    return _median(qs, "created_at", "finished_at")


def duration_text(value: timedelta) -> str:
    """``45 s``, ``12 min``, ``3 h 20 min``, ``2 days 4 h``: two units at most."""
    seconds = max(int(value.total_seconds()), 0)
    if seconds < 60:
        return f"{max(seconds, 1)} s"
    minutes, hours, days = seconds // 60, seconds // 3600, seconds // 86400
    if hours == 0:
        return f"{minutes} min"
    if days == 0:
        rest = minutes % 60
        return f"{hours} h" + (f" {rest} min" if rest else "")
    rest = hours % 24
    return f"{days} day{'s' if days != 1 else ''}" + (f" {rest} h" if rest else "")
