"""Keep nodes fresh between full syncs by watching them (labels, cordon, allocatable).

A full sync every ``INVENTORY_SYNC_INTERVAL`` stays the source of truth (it also sees
pods and vanished nodes reliably); a watch is cheap and brings node changes in within
a second. It runs as a long-lived process (``manage.py watch_inventory``), one thread
per cluster, because a Celery task should not hold a worker for minutes.
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import close_old_connections, connection

from .kube import KubeError, KubeGateway
from .models import Cluster
from .sync import apply_node_changes

log = logging.getLogger(__name__)

# What a watch thread's connection depends on: a change restarts the thread.
CONNECTION_FIELDS = (
    "auth_method", "kubeconfig_path", "kubeconfig_context", "api_url", "bearer_token",
    "bearer_token_file", "ca_cert", "verify_tls",
)  # fmt: skip


class Progress:
    """When each cluster's watch thread last made progress (a watch started, an event came).

    ``manage.py watch_inventory`` touches its liveness heartbeat only while every thread
    is fresh, so one wedged thread (a hung connection) fails the probe.
    """

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._lock = threading.Lock()

    def mark(self, slug: str) -> None:
        with self._lock:
            self._last[slug] = time.monotonic()

    def forget(self, slug: str) -> None:
        with self._lock:
            self._last.pop(slug, None)

    def stalest_age(self) -> float:
        """Seconds since the least recent progress of any thread (0 without threads)."""
        with self._lock:
            oldest = min(self._last.values(), default=None)
        return 0.0 if oldest is None else time.monotonic() - oldest


def watch_cluster(
    cluster: Cluster,
    stop: threading.Event,
    *,
    timeout_s: int = 60,
    backoff_s: float = 5.0,
    progress: Progress | None = None,
) -> None:
    """Watch the cluster's nodes until ``stop`` is set; errors back off and relist."""
    progress = progress or Progress()
    try:
        _watch(cluster, stop, timeout_s, backoff_s, progress)
    finally:
        connection.close()  # this thread's own database connection


def _watch(
    cluster: Cluster, stop: threading.Event, timeout_s: int, backoff_s: float, progress: Progress
) -> None:
    while not stop.is_set():
        progress.mark(cluster.slug)
        try:
            with KubeGateway(cluster) as gw:
                version = gw.list_resource_version("nodes")
                progress.mark(cluster.slug)
                for kind, obj in gw.watch("nodes", version, timeout_seconds=timeout_s):
                    progress.mark(cluster.slug)
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


class Watchers:
    """One watching thread per enabled cluster, kept in step with the Cluster table.

    ``reconcile()`` (the command calls it every ``--rescan`` seconds) starts a thread for a
    cluster connected or enabled since, stops the thread of one disabled or deleted, and
    restarts one whose credentials changed (a cluster's thread reads the row it started
    with) or whose thread died. Stopped clusters leave ``progress``, so they never make the
    liveness heartbeat stale.
    """

    def __init__(
        self, stop: threading.Event, *, timeout_s: int = 60, progress: Progress | None = None
    ) -> None:
        self.stop = stop
        self.timeout_s = timeout_s
        self.progress = progress or Progress()
        self._running: dict = {}  # pk -> (thread, its stop event, slug, credentials key)

    @staticmethod
    def _key(cluster: Cluster) -> tuple:
        return tuple(getattr(cluster, f) for f in CONNECTION_FIELDS)

    def reconcile(self) -> tuple[list[str], list[str]]:
        """Start and stop threads to match the enabled clusters; returns their slugs."""
        wanted = {c.pk: c for c in Cluster.objects.filter(sync_enabled=True)}
        started, stopped = [], []
        for pk, (thread, own_stop, slug, key) in list(self._running.items()):
            cluster = wanted.get(pk)
            if cluster is None or not thread.is_alive() or self._key(cluster) != key:
                own_stop.set()
                del self._running[pk]
                self.progress.forget(slug)
                stopped.append(slug)
        for pk, cluster in wanted.items():
            if pk in self._running or self.stop.is_set():
                continue
            own_stop = threading.Event()
            self.progress.mark(cluster.slug)
            thread = threading.Thread(
                target=watch_cluster, args=(cluster, own_stop),
                kwargs={"timeout_s": self.timeout_s, "progress": self.progress},
                name=f"watch-{cluster.slug}", daemon=True,
            )  # fmt: skip
            thread.start()
            self._running[pk] = (thread, own_stop, cluster.slug, self._key(cluster))
            started.append(cluster.slug)
        return started, stopped

    def healthy(self) -> bool:
        return all(thread.is_alive() for thread, *_ in self._running.values())

    def close(self, join_s: float) -> None:
        for _, own_stop, *_ in self._running.values():
            own_stop.set()
        for thread, *_ in self._running.values():
            thread.join(join_s)

    def __len__(self) -> int:
        return len(self._running)
