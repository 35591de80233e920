"""Backfill: a week of history for the demo's fake agent fleet, before the agents start.

A fresh demo would draw one point per 24-hour chart, blank sparklines, no idle insight
and an empty showback month. ``backfill`` stores the reports the fleet's agents would
have sent (``gpuagent.fleet_history``: the same fake GPUs as the live fleet) one per node
per 5-minute bucket, through the same code as a posted report (``ingest.validate_report``
and ``ingest.store_report``, with the report's own time as "now"), then rolls the hours
up (``retention.rollup_hours``) as beat would have.

Idempotent: a bucket that already holds a point of the node (an earlier backfill, or
live reports) is skipped, so a restart fills only the gap since the demo last ran.
Stored AgentReport keys are dated in the past and pruned by the next expiry run.
"""

from __future__ import annotations

import time
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from typing import Any

from django.db import transaction
from django.utils import timezone

from gpuagent.fleet_history import past_reports
from inventory.models import Cluster, Node

from .ingest import BUCKET, ReportInvalid, bucket_of, store_report, validate_report
from .models import GpuHistory5m
from .retention import rollup_hours

# A GPU the device plugin marks unhealthy fell off the bus this long before the demo start.
LOST_AGO = timedelta(days=2)
# Backfilled at 5-minute resolution; hourly before (see ``instants``).
FINE = timedelta(hours=25)


@dataclass(frozen=True)
class Backfilled:
    nodes: int
    reports: int
    skipped_buckets: int
    hourly_rows: int
    seconds: float


def _existing(nodes: dict[str, Node], start: datetime) -> dict[str, set[float]]:
    """Per node name, the epochs of the buckets already holding a point of the node."""
    by_id = {n.pk: name for name, n in nodes.items()}
    out: dict[str, set[float]] = defaultdict(set)
    rows = (
        GpuHistory5m.objects.filter(gpu__node_id__in=by_id, bucket__gte=start)
        .values_list("gpu__node_id", "bucket")
        .distinct()
    )
    for node_id, bucket in rows:
        out[by_id[node_id]].add(bucket.timestamp())
    return out


def backfill(
    cluster: Cluster,
    spec: dict[str, dict[str, Any]],
    *,
    days: float = 7,
    now: datetime | None = None,
    seed: int = 0,
) -> Backfilled:
    """Store ``days`` of the fleet ``spec``'s history (tokens-file shape) for ``cluster``."""
    began = time.monotonic()
    now = now or timezone.now()
    end = bucket_of(now)  # the current bucket is the live agents' to fill
    start = bucket_of(now - timedelta(days=days))
    nodes = {n.name: n for n in Node.objects.filter(cluster=cluster, name__in=list(spec)).present()}
    spec = {name: cfg for name, cfg in spec.items() if name in nodes}
    existing = _existing(nodes, start)
    skipped = 0

    def skip(name: str, epoch: float) -> bool:
        nonlocal skipped
        bucket = bucket_of(datetime.fromtimestamp(epoch, UTC)).timestamp()
        if bucket in existing[name]:
            skipped += 1
            return True
        return False

    reports = 0
    lost_since = (now - min(LOST_AGO, (now - start) / 2)).timestamp()
    fleet = past_reports(spec, instants(start, end), seed=seed, lost_since=lost_since, skip=skip)
    with transaction.atomic():
        for name, body in fleet:
            ts = datetime.fromtimestamp(int(time_of(body)), UTC)
            try:
                report = validate_report(body, now=ts)
            except ReportInvalid:  # the live agent's reports are valid; never expected
                continue
            store_report(nodes[name].pk, report, now=ts)
            reports += 1
    hours = int((now - start) / timedelta(hours=1)) + 2
    hourly = rollup_hours(now, hours=hours)
    return Backfilled(len(spec), reports, skipped, hourly, time.monotonic() - began)


def instants(start: datetime, end: datetime) -> list[float]:
    """Mid-bucket instants: every 5 minutes over the last 24 hours (sparklines and charts
    draw 5-minute points there), one per hour before (only hourly points are drawn, and
    showback counts an hour in which the GPU reported as a whole hour)."""
    half = BUCKET / 2
    fine_from = max(start, end - FINE)
    out = []
    t = start
    while t < fine_from:
        out.append((t + half).timestamp())
        t += timedelta(hours=1)
    t = fine_from  # both bucket-aligned: end is, FINE is a whole number of buckets
    while t < end:
        out.append((t + half).timestamp())
        t += BUCKET
    return out


def time_of(body: dict[str, Any]) -> float:
    return (
        datetime.strptime(body["timestamp"], "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()
    )
