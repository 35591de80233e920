"""The ``agent`` telemetry source: the portal's own 5-minute and hourly points.

Node agents post reports (telemetry.ingest); every report adds to the GPU's 5-minute point
(sums and counts, so means stay exact when merged) and a beat task rolls closed hours up
into hourly points (telemetry.retention). Everything here reads those rows for GPUs of
clusters whose telemetry comes from the agents (telemetry.sources decides which).
"""

from __future__ import annotations

from collections import defaultdict
from datetime import UTC, datetime, timedelta

from django.db.models import Count, F, FloatField, Func, Max, Q, Sum
from django.db.models.functions import Cast, Trunc

from inventory.models import base_product

from ..models import GpuHistory1h, GpuHistory5m
from ..retention import FIVE_MINUTE_RETENTION

BUCKET = timedelta(minutes=5)
HOUR = timedelta(hours=1)
FIVE_MIN_H = 5 / 60
# A point is labelled by its start; one that started just before ``end`` still counts.
BUCKET_SLACK = timedelta(minutes=5)

NAME = "agent"
METRIC = "utilisation reported by the portal's agents (NVML)"


def history_horizon(now: datetime) -> datetime:
    """Hourly points are complete before this; 5-minute points serve from it on."""
    return now.replace(minute=0, second=0, microsecond=0) - HOUR


def _util_avg():
    return Cast(F("util_sum"), FloatField()) / Func(F("util_n"), 0, function="NULLIF")


def window_stats(gpu_ids, now: datetime, window: timedelta) -> dict[int, tuple[float, int]]:
    """{gpu id: (highest 5-minute mean utilisation, 5-minute points with data)} (one query)."""
    if not gpu_ids:
        return {}
    rows = (
        GpuHistory5m.objects.filter(gpu_id__in=gpu_ids, bucket__gte=now - window, bucket__lte=now)
        .values("gpu_id")
        .annotate(peak=Max(_util_avg()), points=Count("id", filter=Q(util_n__gt=0)))
        .values_list("gpu_id", "peak", "points")
    )
    return {gpu_id: (peak, points) for gpu_id, peak, points in rows}


def last_hour_util(gpu_ids, now: datetime) -> dict[int, float]:
    """{gpu id: mean utilisation over the last hour} (one query)."""
    if not gpu_ids:
        return {}
    rows = (
        GpuHistory5m.objects.filter(gpu_id__in=gpu_ids, bucket__gte=now - HOUR)
        .values("gpu_id")
        .annotate(s=Sum("util_sum"), n=Sum("util_n"))
        .values_list("gpu_id", "s", "n")
    )
    return {gpu_id: s / n for gpu_id, s, n in rows if n}


def last_busy(gpu_ids, now: datetime, threshold: float) -> dict[int, datetime]:
    """{gpu id: end of its last 5-minute point at or above ``threshold``} (one query)."""
    if not gpu_ids:
        return {}
    rows = (
        GpuHistory5m.objects.filter(
            gpu_id__in=gpu_ids, bucket__gte=now - FIVE_MINUTE_RETENTION, util_n__gt=0
        )
        .annotate(u=Cast(F("util_sum"), FloatField()) / F("util_n"))
        .filter(u__gte=threshold)
        .values("gpu_id")
        .annotate(last=Max("bucket"))
        .values_list("gpu_id", "last")
    )
    return {gpu_id: last + BUCKET for gpu_id, last in rows}


def gpu_hours(gpu_ids, start: datetime, end: datetime, now: datetime, *, by_hour: bool = False):
    """[(gpu id, hour or None, reported hours, utilisation-weighted hours)]: two queries.
    Hourly points for closed hours, 5-minute ones after."""
    if not gpu_ids:
        return []
    horizon = history_horizon(now)
    end = min(end, now + BUCKET_SLACK)
    parts = [
        (GpuHistory1h, start, min(end, horizon), 1.0),
        (GpuHistory5m, max(start, horizon), end, FIVE_MIN_H),
    ]
    out = []
    for model, a, b, duration in parts:
        if b <= a:
            continue
        qs = model.objects.filter(gpu_id__in=gpu_ids, bucket__gte=a, bucket__lt=b, samples__gt=0)
        keys = ["gpu_id"]
        if by_hour:
            qs = qs.annotate(hour=Trunc("bucket", "hour", tzinfo=UTC))
            keys.append("hour")
        for row in qs.values(*keys).annotate(n=Count("id"), u=Sum(_util_avg())):
            out.append(
                (
                    row["gpu_id"],
                    row.get("hour"),
                    row["n"] * duration,
                    (row["u"] or 0.0) / 100 * duration,
                )
            )
    return out


def product_series(start: datetime, now: datetime, cluster_id: int) -> dict:
    """{base product: {hour: [utilisation sum, samples]}} of one cluster's GPUs from
    ``start`` (an hour) to now. Two queries: hourly points for closed hours, 5-minute ones
    after."""
    horizon = max(history_horizon(now), start)
    out: dict = defaultdict(lambda: defaultdict(lambda: [0, 0]))
    for model, a, b in ((GpuHistory1h, start, horizon), (GpuHistory5m, horizon, None)):
        qs = model.objects.filter(bucket__gte=a, gpu__node__cluster_id=cluster_id)
        if b is not None:
            if b <= a:
                continue
            qs = qs.filter(bucket__lt=b)
        rows = (
            qs.annotate(hour=Trunc("bucket", "hour"))
            .values("gpu__node__gpu_product", "hour")
            .annotate(s=Sum("util_sum"), n=Sum("util_n"))
            .values_list("gpu__node__gpu_product", "hour", "s", "n")
        )
        for product, hour, s, n in rows:
            cell = out[base_product(product)][hour]
            cell[0] += s or 0
            cell[1] += n or 0
    return out


def node_history(node, gpus, start: datetime) -> tuple[dict, dict, dict]:
    """({gpu id: {bucket: util %}}, {...: memory used %}, {...: temperature}) from ``start``
    (one query)."""
    util: dict = defaultdict(dict)
    mem: dict = defaultdict(dict)
    temp: dict = defaultdict(dict)
    rows = GpuHistory5m.objects.filter(gpu__node=node, bucket__gte=start).values_list(
        "gpu_id", "bucket", "util_sum", "util_n", "mem_used_sum", "mem_n", "temp_max"
    )
    totals = {g.pk: g.memory_total_mib for g in gpus}
    for gpu_id, bucket, us, un, ms, mn, tmax in rows:
        if un:
            util[gpu_id][bucket] = us / un
        if mn and totals.get(gpu_id):
            mem[gpu_id][bucket] = 100 * ms / mn / totals[gpu_id]
        if tmax is not None:
            temp[gpu_id][bucket] = tmax
    return util, mem, temp
