"""Beat tasks: hourly rollup of GPU history, and expiry of history and idempotency keys.

Stale GPUs need no task: ingest stores ``stale_after`` (portal clock + 3 report intervals)
on every ``GpuState`` and ``NodeTelemetry`` row, and ``GpuState.objects.stale()`` compares
it with the clock.

Beat entries (portal/settings.py ``CELERY_BEAT_SCHEDULE``)::

    "telemetry-rollup": {"task": "telemetry.tasks.rollup_history",
                         "schedule": timedelta(minutes=10)},
    "telemetry-expire": {"task": "telemetry.tasks.expire_history",
                         "schedule": timedelta(minutes=10)},
    "telemetry-prometheus": {"task": "telemetry.tasks.sync_prometheus",
                             "schedule": timedelta(seconds=60)},
    "telemetry-summaries": {"task": "telemetry.tasks.refresh_summaries",
                            "schedule": timedelta(seconds=TELEMETRY_SUMMARY_INTERVAL_SECONDS)},
"""

from __future__ import annotations

import logging

from celery import shared_task

from . import promstate, retention, summary

log = logging.getLogger(__name__)


@shared_task(ignore_result=True)
def rollup_history() -> int:
    """Recompute the hourly points of the last closed hours from the 5-minute points."""
    rows = retention.rollup_hours()
    log.info("telemetry rollup: %d hourly points written", rows)
    return rows


@shared_task(ignore_result=True)
def expire_history() -> dict[str, int]:
    """Delete expired 5-minute / hourly points and idempotency keys older than 2 hours."""
    expired = retention.expire()
    log.info(
        "telemetry expiry: %d 5-minute points, %d hourly points, %d report keys deleted",
        expired.five_minute,
        expired.hourly,
        expired.report_keys,
    )
    return {
        "usage_hours": expired.usage_hours,
        "five_minute": expired.five_minute,
        "hourly": expired.hourly,
        "report_keys": expired.report_keys,
    }


@shared_task(ignore_result=True)
def sync_prometheus() -> dict[str, int | str]:
    """Copy the latest GPU state of every Prometheus-sourced cluster (telemetry.promstate)."""
    out = {}
    for slug, result in promstate.sync_all().items():
        out[slug] = result if isinstance(result, str) else result.gpus
    if out:
        log.info("telemetry from Prometheus: %s", out)
    return out


@shared_task(ignore_result=True, expires=60)
def refresh_summaries() -> dict[str, float | str]:
    """Compute every measured cluster's telemetry figures before anyone asks
    (telemetry.summary); a cluster another worker is computing is skipped."""
    out = summary.refresh_all()
    if out:
        log.info("telemetry summaries (seconds per cluster): %s", out)
    return out


@shared_task(ignore_result=True, expires=600)
def reclaim_idle_grants() -> dict[str, int]:
    """Idle grants under a reclaim policy: warn, lower after the grace, withdraw what is in
    use again (telemetry.reclaim, issue #25 section 2)."""
    from . import reclaim

    counts = reclaim.run()
    if any(counts.values()):
        log.info("reclaim of idle grants: %s", counts)
    return counts
