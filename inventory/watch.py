"""Keep nodes fresh between full syncs by watching them (labels, cordon, allocatable).

A full sync every ``INVENTORY_SYNC_INTERVAL`` stays the source of truth (it also sees
pods and vanished nodes reliably); a watch is cheap and brings node changes in within
a second. It runs as a long-lived process (``manage.py watch_inventory``), one thread
per cluster, because a Celery task should not hold a worker for minutes.
"""

from __future__ import annotations

import logging
import threading

from django.db import close_old_connections, connection

from .kube import KubeError, KubeGateway
from .models import Cluster
from .sync import apply_node_changes

log = logging.getLogger(__name__)


def watch_cluster(
    cluster: Cluster, stop: threading.Event, *, timeout_s: int = 60, backoff_s: float = 5.0
) -> None:
    """Watch the cluster's nodes until ``stop`` is set; errors back off and relist."""
    try:
        _watch(cluster, stop, timeout_s, backoff_s)
    finally:
        connection.close()  # this thread's own database connection


def _watch(cluster: Cluster, stop: threading.Event, timeout_s: int, backoff_s: float) -> None:
    while not stop.is_set():
        try:
            with KubeGateway(cluster) as gw:
                version = gw.list_resource_version("nodes")
                for kind, obj in gw.watch("nodes", version, timeout_seconds=timeout_s):
                    if stop.is_set():
                        break
                    close_old_connections()
                    name = (obj.get("metadata") or {}).get("name", "")
                    if kind in ("ADDED", "MODIFIED"):
                        written = apply_node_changes(cluster, [obj], [])
                    elif kind == "DELETED":
                        written = apply_node_changes(cluster, [], [name])
                    else:  # BOOKMARK
                        continue
                    if written:
                        log.info("%s: node %s %s (%d rows)", cluster.slug, name, kind.lower(),
                                 written)  # fmt: skip
        except KubeError as err:
            log.warning("%s: node watch: %s; retrying in %.0fs", cluster.slug, err, backoff_s)
            stop.wait(backoff_s)


def watch_all(stop: threading.Event, *, timeout_s: int = 60) -> list[threading.Thread]:
    """One watching thread per enabled cluster."""
    threads = []
    for cluster in Cluster.objects.filter(sync_enabled=True):
        thread = threading.Thread(
            target=watch_cluster, args=(cluster, stop), kwargs={"timeout_s": timeout_s},
            name=f"watch-{cluster.slug}", daemon=True,
        )  # fmt: skip
        thread.start()
        threads.append(thread)
    return threads
