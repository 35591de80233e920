"""Celery tasks: beat fans out one sync task per enabled cluster."""

from __future__ import annotations

import logging
from datetime import timedelta

from celery import shared_task
from django.conf import settings
from django.utils import timezone

from .models import Cluster
from .sync import sync_cluster
from .syncdb import SyncBusy

log = logging.getLogger(__name__)


def clusters_to_sync() -> list:
    """The enabled clusters the watcher does not keep current (it relists those itself
    every INVENTORY_RESYNC_INTERVAL, inventory/watch.py)."""
    clusters = Cluster.objects.filter(sync_enabled=True).only("id", "watched_at", "last_success_at")
    return [c.pk for c in clusters if not c.is_watched]


@shared_task(ignore_result=True)
def sync_all_clusters() -> int:
    """Enqueue a sync for every cluster of :func:`clusters_to_sync`; returns how many."""
    ids = clusters_to_sync()
    for cluster_id in ids:
        sync_cluster_task.delay(str(cluster_id))
    return len(ids)


@shared_task(ignore_result=True, acks_late=True)
def sync_cluster_task(cluster_id: str, trigger: str = "beat") -> str | None:
    """Sync one cluster. A sync already running elsewhere makes this one a no-op."""
    cluster = Cluster.objects.filter(pk=cluster_id, sync_enabled=True).first()
    if cluster is None:
        return None
    try:
        run = sync_cluster(cluster, trigger=trigger)
    except SyncBusy:
        log.info("sync of %s skipped: another sync is running", cluster.slug)
        return None
    log.info(
        "sync of %s %s in %d ms: %d nodes, %d GPU pods, %d rows written%s",
        cluster.slug,
        run.status,
        run.duration_ms or 0,
        run.nodes_seen,
        run.gpu_pods_seen,
        run.rows_written,
        f" ({run.error})" if run.error else "",
    )
    return run.status


@shared_task(ignore_result=True)
def recheck_permissions() -> int:
    """Re-ask every enabled cluster's permissions (inventory/preflight.py); /readyz reads
    the result. Returns how many clusters miss at least one."""
    from .preflight import recheck_permissions as recheck

    missing = 0
    for cluster in Cluster.objects.filter(sync_enabled=True):
        lost = recheck(cluster)
        if lost:
            log.warning("cluster %s misses permissions: %s", cluster.slug, ", ".join(lost))
            missing += 1
    return missing


@shared_task(ignore_result=True)
def prune_pod_runs() -> int:
    """Delete ended GPU pod runs older than POD_RUN_RETENTION_DAYS (inventory/podruns.py)."""
    from .podruns import prune

    return prune(timezone.now() - timedelta(days=settings.POD_RUN_RETENTION_DAYS))
