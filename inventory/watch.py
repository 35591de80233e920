"""Keep nodes and pods current by list-then-watch, per cluster, in the watcher process.

A full sync (inventory/sync.py) is the list: it records the resourceVersion each of its
node and pod lists was read at (``SyncRun.nodes_version``, ``pods_version``), and a node
thread and a pod thread per cluster watch from there, applying each event at once
(:func:`inventory.sync.apply_node_changes`, :func:`inventory.podwatch.apply_pod_event`) and
keeping the version the stream reached, bookmarks included, so a watch the server ends
after ``timeout_s`` resumes where it was. A relist (a full sync) happens only when the
version is too old (410 Gone, at once) or the stream broke (after ``backoff_s``), and every
``INVENTORY_RESYNC_INTERVAL`` as a safety net; the pod thread also tells the portal the
data is current (``Cluster.watched_at``), so the periodic sync leaves the cluster alone.

Lists and events never interleave: every sync holds the cluster's advisory lock
(inventory/syncdb.py ``cluster_lock``) and each event is applied holding it shared; an event
that finds a newer sync than its stream started from is dropped and the stream restarts
from that sync's version, because the list already holds everything the stream had
delivered up to it. So a "Sync now", a beat sync or the other thread's relist is safe
while watches run.

It runs as a long-lived process (``manage.py watch_inventory``) because a Celery task
should not hold a worker for minutes. On a DRA cluster a pod's event is read with its
ResourceClaims (inventory/podwatch.py ``DraView``), as the sync reads them.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable
from datetime import datetime, timedelta
from typing import Any

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection, transaction
from django.utils import timezone

from .kube import KubeError, KubeGateway
from .models import Cluster, SyncRun
from .podwatch import DraView, apply_pod_event
from .sync import apply_node_changes, sync_cluster
from .syncdb import SyncBusy, lock_key

log = logging.getLogger(__name__)

# What a watch thread's connection depends on: a change restarts the thread.
CONNECTION_FIELDS = (
    "auth_method", "kubeconfig_path", "kubeconfig_context", "api_url", "bearer_token",
    "bearer_token_file", "ca_cert", "verify_tls",
)  # fmt: skip
# ``Cluster.watched_at`` is written at most this often (and twice per watch request at
# least): far within INVENTORY_STALE_AFTER, while an event can come every millisecond.
MARK_EVERY_S = 10.0
# A thread whose relist finds another sync running looks again after this long.
BUSY_RETRY_S = 1.0


class Progress:
    """When each cluster's watch thread last made progress (a watch started, an event came).

    ``manage.py watch_inventory`` touches its liveness heartbeat only while every thread
    is fresh, so one wedged thread (a hung connection) fails the probe.
    """

    def __init__(self) -> None:
        self._last: dict[str, float] = {}
        self._events: dict[tuple[str, str], int] = {}
        self._lock = threading.Lock()

    def mark(self, slug: str, event: str = "") -> None:
        with self._lock:
            self._last[slug] = time.monotonic()
            if event:
                self._events[(slug, event)] = self._events.get((slug, event), 0) + 1

    def events(self) -> dict[tuple[str, str], int]:
        """Events received so far per (thread key, event type): what the watches cost."""
        with self._lock:
            return dict(self._events)

    def forget(self, slug: str) -> None:
        with self._lock:
            self._last.pop(slug, None)

    def age(self, key: str) -> float | None:
        """Seconds since ``key``'s last progress (None: not tracked)."""
        with self._lock:
            last = self._last.get(key)
        return None if last is None else time.monotonic() - last

    def stalest_age(self) -> float:
        """Seconds since the least recent progress of any thread (0 without threads)."""
        with self._lock:
            oldest = min(self._last.values(), default=None)
        return 0.0 if oldest is None else time.monotonic() - oldest


# Watches other apps run in this process, a thread per cluster each (quotas confirms its
# applies from ResourceQuota events, quotas/quotawatch.py): name -> a function called as
# ``follow(cluster, stop, timeout_s=, backoff_s=, progress=, key=)``, registered from the
# app's AppConfig.ready (the inventory never imports the floors above it).
FOLLOWERS: dict[str, Callable[..., None]] = {}


def register(name: str, follow: Callable[..., None]) -> None:
    FOLLOWERS[name] = follow


def follower_key(slug: str, name: str) -> str:
    return f"{slug}:{name}"


class Resynced(Exception):
    """A sync finished after this stream's list: restart from that sync's version."""


def watch_cluster(
    cluster: Cluster,
    stop: threading.Event,
    *,
    timeout_s: int = 60,
    backoff_s: float = 5.0,
    progress: Progress | None = None,
) -> None:
    """Watch the cluster's nodes until ``stop`` is set, and its pods in a thread of their own
    (:func:`watch_pods`)."""
    progress = progress or Progress()
    began = timezone.now()
    threads = [threading.Thread(
        target=watch_pods, args=(cluster, stop),
        kwargs={"timeout_s": timeout_s, "backoff_s": backoff_s, "progress": progress,
                "began": began, "nodes_key": cluster.slug},
        name=f"watch-pods-{cluster.slug}", daemon=True,
    )]  # fmt: skip
    for name, follow in FOLLOWERS.items():
        threads.append(threading.Thread(
            target=_closing(follow), args=(cluster, stop),
            kwargs={"timeout_s": timeout_s, "backoff_s": backoff_s, "progress": progress,
                    "key": follower_key(cluster.slug, name)},
            name=f"watch-{name}-{cluster.slug}", daemon=True,
        ))  # fmt: skip
    for thread in threads:
        thread.start()
    try:
        _Follower(cluster, "nodes", stop, timeout_s, backoff_s, progress, began).run()
    finally:
        for thread in threads:
            thread.join(timeout_s + 15)


def _closing(follow: Callable[..., None]) -> Callable[..., None]:
    """``follow`` closing its thread's database connection when it ends."""

    def run(*args: Any, **kwargs: Any) -> None:
        try:
            follow(*args, **kwargs)
        finally:
            connection.close()

    return run


def watch_pods(
    cluster: Cluster,
    stop: threading.Event,
    *,
    timeout_s: int = 60,
    backoff_s: float = 5.0,
    progress: Progress | None = None,
    began: datetime | None = None,
    nodes_key: str | None = None,
) -> None:
    """List (a full sync), then watch the cluster's pods until ``stop`` is set. Its progress
    is its own (``<slug>:pods``): a wedged node or pod thread fails the liveness probe. It
    marks the cluster's data current while the node thread (``nodes_key``) is fresh too."""
    follower = _Follower(cluster, "pods", stop, timeout_s, backoff_s, progress or Progress(),
                         began or timezone.now(), nodes_key=nodes_key)  # fmt: skip
    follower.run()


def pods_key(slug: str) -> str:
    return f"{slug}:pods"


class _Follower:
    """List-then-watch of one kind (``nodes`` or ``pods``) of one cluster."""

    def __init__(
        self,
        cluster: Cluster,
        kind: str,
        stop: threading.Event,
        timeout_s: int,
        backoff_s: float,
        progress: Progress,
        began: datetime,
        nodes_key: str | None = None,
    ) -> None:
        self.cluster, self.kind, self.stop = cluster, kind, stop
        self.timeout_s, self.backoff_s, self.progress = timeout_s, backoff_s, progress
        # Lists from before this watcher started are not trusted to be in its window.
        self.began = began
        self.key = pods_key(cluster.slug) if kind == "pods" else cluster.slug
        self.nodes_key = nodes_key
        self.apply: Callable[[str, dict[str, Any]], int] = (
            self._apply_pod if kind == "pods" else self._apply_node
        )
        self.epoch: int | None = None  # the SyncRun this stream's list came from
        self.version = ""
        self.relist_wanted = True
        self.marked = 0.0
        self.dra: DraView | None = None  # a DRA cluster's devices, read with each list
        self.gw: KubeGateway | None = None  # the stream's, while it runs

    def run(self) -> None:
        try:
            while not self.stop.is_set():
                self.progress.mark(self.key)
                try:
                    if not self._start_point():
                        continue
                    self._stream()
                except Resynced:
                    continue
                except KubeError as err:
                    why = "version too old (410 Gone)" if err.expired else str(err)
                    wait = 0.0 if err.expired else self.backoff_s
                    log.warning("%s: %s watch: %s; relisting in %.0fs", self.cluster.slug,
                                self.kind, why, wait)  # fmt: skip
                    self.relist_wanted = True
                    self.stop.wait(wait)
                except DatabaseError as err:  # Postgres away: what was applied is kept
                    log.warning("%s: %s watch: database: %s; relisting in %.0fs",
                                self.cluster.slug, self.kind, err, self.backoff_s)  # fmt: skip
                    connection.close()
                    self.relist_wanted = True
                    self.stop.wait(self.backoff_s)
        finally:
            connection.close()  # this thread's own database connection

    def _start_point(self) -> bool:
        """Pick the version to watch from: a newer list's, or our own stream's; relist
        when there is none. False: nothing to start from yet (waited)."""
        close_old_connections()
        run = _latest_run(self.cluster)
        usable = (
            run is not None
            and run.status == SyncRun.Status.SUCCEEDED
            and run.finished_at is not None
            and run.finished_at >= self.began
            and bool(getattr(run, f"{self.kind}_version"))
        )
        newer = usable and run.pk != self.epoch
        due = (
            self.kind == "pods"
            and usable
            and timezone.now() - run.finished_at
            > timedelta(seconds=settings.INVENTORY_RESYNC_INTERVAL)
        )
        if not usable or due or (self.relist_wanted and not newer):
            try:
                # no wait for the lock: a sync that holds it (the other thread's relist, a
                # Sync now) gives a list to start from as well
                run = sync_cluster(self.cluster, trigger="watch", lock_wait_s=0)
            except SyncBusy:  # another sync runs: its list will serve
                self.stop.wait(BUSY_RETRY_S)
                return False
            if run.error:
                self.stop.wait(self.backoff_s)
                return False
            newer = True
        if newer:
            self.epoch, self.version = run.pk, getattr(run, f"{self.kind}_version")
            self.relist_wanted = False
            self.dra = None  # read again with the stream's connection
            self._mark_current(force=True)
        return True

    def _stream(self) -> None:
        """One watch request from ``self.version``; keeps the version it reaches."""
        with KubeGateway(self.cluster) as gw:
            self.gw = gw
            if self.kind == "pods" and self.cluster.is_dra and self.dra is None:
                self.dra = DraView(self.cluster, gw)
            for kind, obj in gw.watch(self.kind, self.version, timeout_seconds=self.timeout_s):
                self.progress.mark(self.key, kind)
                if self.stop.is_set():
                    break
                if kind != "BOOKMARK":
                    close_old_connections()
                    with transaction.atomic():
                        self._hold_list_lock()
                        written = self.apply(kind, obj)
                    if written:
                        meta = obj.get("metadata") or {}
                        name = "/".join(filter(None, (meta.get("namespace"), meta.get("name"))))
                        log.info("%s: %s %s %s (%d rows)", self.cluster.slug, self.kind[:-1],
                                 name, kind.lower(), written)  # fmt: skip
                self.version = (obj.get("metadata") or {}).get("resourceVersion") or self.version
                self._mark_current()
        self._mark_current()

    def _hold_list_lock(self) -> None:
        """Wait for a running sync, hold it off until this event is applied, and stop this
        stream when a sync finished since its list (inside the event's transaction)."""
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_xact_lock_shared(%s)", [lock_key(self.cluster)])
        latest = _latest_run(self.cluster)
        if latest is not None and latest.pk != self.epoch:
            raise Resynced

    def _apply_pod(self, kind: str, obj: dict[str, Any]) -> int:
        if self.dra is None:
            return apply_pod_event(self.cluster, kind, obj)
        view, gw = self.dra, self.gw
        return apply_pod_event(self.cluster, kind, obj, lambda o, base: view.facts(gw, o, base))

    def _apply_node(self, kind: str, obj: dict[str, Any]) -> int:
        if kind == "DELETED":
            return apply_node_changes(
                self.cluster, [], [(obj.get("metadata") or {}).get("name", "")]
            )
        return apply_node_changes(self.cluster, [obj], [])

    def _mark_current(self, force: bool = False) -> None:
        """The pod thread records that the data is current (``Cluster.watched_at``), at most
        every MARK_EVERY_S, while the node thread is fresh too."""
        every = min(MARK_EVERY_S, self.timeout_s / 2)
        if self.kind != "pods" or (not force and time.monotonic() - self.marked < every):
            return
        if self.nodes_key is not None:
            age = self.progress.age(self.nodes_key)
            if age is None or age > self.timeout_s + 15:
                return
        self.marked = time.monotonic()
        close_old_connections()
        Cluster.objects.filter(pk=self.cluster.pk).update(watched_at=timezone.now())


def _latest_run(cluster: Cluster) -> SyncRun | None:
    """The cluster's most recent sync (finished, unless it is running now)."""
    return (
        SyncRun.objects.filter(cluster=cluster)
        .only("id", "status", "finished_at", "nodes_version", "pods_version")
        .order_by("-started_at")
        .first()
    )


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
        self._stopped: list[threading.Thread] = []  # stopped, maybe still finishing

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
                self._stopped.append(thread)
                del self._running[pk]
                for key in (slug, pods_key(slug), *(follower_key(slug, n) for n in FOLLOWERS)):
                    self.progress.forget(key)
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
        for thread in [t for t, *_ in self._running.values()] + self._stopped:
            thread.join(join_s)

    def __len__(self) -> int:
        return len(self._running)
