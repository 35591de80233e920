"""History rollup and expiry (run by the beat tasks in ``telemetry.tasks``).

- ``rollup_hours``: hourly points from the 5-minute ones of the last few closed hours.
  Recomputed from scratch and replaced (``ON CONFLICT DO UPDATE SET = EXCLUDED``), so a run
  is idempotent and late reports (accepted up to 1 hour old) are folded in by the next run.
- ``expire``: deletes 5-minute points after 30 days, hourly ones (and the GPU-hours per
  namespace and hour) after 365 days and idempotency keys after 2 hours, in batches so no
  delete holds locks for long.
"""

from __future__ import annotations

from dataclasses import dataclass
from datetime import datetime, timedelta

from django.db import connection, transaction
from django.utils import timezone

from .ingest import bucket_of

HOURLY_RETENTION = timedelta(days=365)
FIVE_MINUTE_RETENTION = timedelta(days=30)
REPORT_KEY_RETENTION = timedelta(hours=2)
# Closed hours re-rolled each run: covers reports up to 1 hour late plus a missed run.
ROLLUP_HOURS = 3
DELETE_BATCH = 50_000

_SUMS = ["samples", "util_sum", "util_n", "mem_used_sum", "mem_n", "power_sum", "power_n"]
_MAXES = ["util_max", "temp_max"]


def rollup_hours(now: datetime | None = None, hours: int = ROLLUP_HOURS) -> int:
    """Recompute the hourly points of the last ``hours`` closed hours; returns rows written."""
    now = now or timezone.now()
    end = bucket_of(now, timedelta(hours=1))
    start = end - timedelta(hours=hours)
    columns = ", ".join(_SUMS + _MAXES)
    aggregates = ", ".join([f"sum({c})" for c in _SUMS] + [f"max({c})" for c in _MAXES])
    updates = ", ".join(f"{c} = EXCLUDED.{c}" for c in _SUMS + _MAXES)
    sql = f"""
        INSERT INTO telemetry_gpuhistory1h (gpu_id, bucket, {columns})
        SELECT gpu_id, date_bin('1 hour', bucket, TIMESTAMPTZ '2000-01-01 00:00:00+00'),
               {aggregates}
        FROM telemetry_gpuhistory5m
        WHERE bucket >= %s AND bucket < %s
        GROUP BY 1, 2
        ON CONFLICT (gpu_id, bucket) DO UPDATE SET {updates}
    """  # noqa: S608 - column names are constants of this module
    with transaction.atomic(), connection.cursor() as cur:
        cur.execute(sql, [start, end])
        return cur.rowcount


def _delete_before(table: str, column: str, cutoff: datetime) -> int:
    deleted = 0
    sql = (
        f"DELETE FROM {table} WHERE ctid = ANY(ARRAY("  # noqa: S608 - constant identifiers
        f"SELECT ctid FROM {table} WHERE {column} < %s LIMIT {DELETE_BATCH}))"
    )
    with connection.cursor() as cur:
        while True:
            cur.execute(sql, [cutoff])
            deleted += cur.rowcount
            if cur.rowcount < DELETE_BATCH:
                return deleted


@dataclass(frozen=True)
class Expired:
    five_minute: int
    hourly: int
    report_keys: int
    usage_hours: int = 0


def expire(now: datetime | None = None) -> Expired:
    """Delete history past its retention and idempotency keys past 2 hours."""
    now = now or timezone.now()
    return Expired(
        five_minute=_delete_before("telemetry_gpuhistory5m", "bucket", now - FIVE_MINUTE_RETENTION),
        hourly=_delete_before("telemetry_gpuhistory1h", "bucket", now - HOURLY_RETENTION),
        report_keys=_delete_before(
            "telemetry_agentreport", "received_at", now - REPORT_KEY_RETENTION
        ),
        # GPU-hours per namespace and hour (telemetry.summary): as long as hourly points.
        usage_hours=_delete_before("telemetry_usagehour", "hour", now - HOURLY_RETENTION),
    )
