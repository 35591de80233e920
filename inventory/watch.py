"""Keep nodes and pods fresh between full syncs by watching them.

A full sync every ``INVENTORY_SYNC_INTERVAL`` stays the source of truth (it also sees
vanished nodes reliably); a watch is cheap and brings changes in within a second. It runs
as a long-lived process (``manage.py watch_inventory``), a node thread and a pod thread per
cluster, because a Celery task should not hold a worker for minutes.

Pods are list-then-watch: a full sync is the list, its pod list's resourceVersion where
the watch starts, each event applied at once (inventory/podwatch.py) and its version kept,
bookmarks included, so a watch the server ends after ``timeout_s`` resumes where it was. A
relist (a full sync) happens only when the version is too old (410 Gone) or the stream
broke, after ``backoff_s``. DRA clusters' pods are left to the full sync (their claims say
what they hold).
"""

from __future__ import annotations

import logging
import threading
import time

from django.db import close_old_connections, connection

from .kube import KubeError, KubeGateway
from .models import Cluster
from .podwatch import apply_pod_event
from .sync import apply_node_changes, sync_cluster
from .syncdb import SyncBusy

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
    """Watch the cluster's nodes until ``stop`` is set, errors backing off and relisting;
    its pods in a thread of their own (:func:`watch_pods`), except on a DRA cluster."""
    progress = progress or Progress()
    pods = None
    if not cluster.is_dra:
        pods = threading.Thread(
            target=watch_pods, args=(cluster, stop),
            kwargs={"timeout_s": timeout_s, "backoff_s": backoff_s, "progress": progress},
            name=f"watch-pods-{cluster.slug}", daemon=True,
        )  # fmt: skip
        pods.start()
    try:
        _watch(cluster, stop, timeout_s, backoff_s, progress)
    finally:
        connection.close()  # this thread's own database connection
        if pods is not None:
            pods.join(timeout_s + 15)


def watch_pods(
    cluster: Cluster,
    stop: threading.Event,
    *,
    timeout_s: int = 60,
    backoff_s: float = 5.0,
    progress: Progress | None = None,
) -> None:
    """List (a full sync), then watch the cluster's pods until ``stop`` is set. Its progress
    is its own (``<slug>:pods``): a wedged node or pod thread fails the liveness probe."""
    progress = progress or Progress()
    key = pods_key(cluster.slug)
    version = ""
    try:
        while not stop.is_set():
            progress.mark(key)
            if not version:
                version = _relist(cluster)
                if not version:
                    stop.wait(backoff_s)
                    continue
            try:
                version = _watch_pods(cluster, stop, version, timeout_s, progress, key)
            except KubeError as err:
                why = "version too old (410 Gone)" if err.expired else str(err)
                wait = 0.0 if err.expired else backoff_s
                log.warning("%s: pod watch: %s; relisting in %.0fs", cluster.slug, why, wait)
                version = ""
                stop.wait(wait)
    finally:
        connection.close()


def _relist(cluster: Cluster) -> str:
    """A full sync; the version its pod list was read at ("" when it failed)."""
    close_old_connections()
    try:
        run = sync_cluster(cluster, trigger="watch")
    except SyncBusy:
        return ""
    return getattr(run, "pods_resource_version", "") if not run.error else ""


def pods_key(slug: str) -> str:
    return f"{slug}:pods"


def _watch_pods(
    cluster: Cluster,
    stop: threading.Event,
    version: str,
    timeout_s: int,
    progress: Progress,
    key: str,
) -> str:
    """One watch request; returns the version to resume from."""
    with KubeGateway(cluster) as gw:
        for kind, obj in gw.watch("pods", version, timeout_seconds=timeout_s):
            progress.mark(key)
            if stop.is_set():
                break
            version = (obj.get("metadata") or {}).get("resourceVersion") or version
            if kind == "BOOKMARK":
                continue
            close_old_connections()
            if apply_pod_event(cluster, kind, obj):
                meta = obj.get("metadata") or {}
                log.info("%s: pod %s/%s %s", cluster.slug, meta.get("namespace"),
                         meta.get("name"), kind.lower())  # fmt: skip
    return version


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
                self.progress.forget(pods_key(slug))
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
