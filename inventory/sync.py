"""Inventory sync: mirror one cluster's nodes and GPU pods into Postgres as a set diff.

One sync lists nodes, then non-terminal pods, page by page with the raw JSON client,
and writes only what differs from the database (``bulk_create`` / ``bulk_update``),
one transaction per page. Only a sync that read every page may conclude that something
vanished: a failed or partial sync leaves the last good data in place and marks the
cluster failed (stale). An expired continue token restarts that list from scratch.
"""

from __future__ import annotations

import gc
import logging
import queue
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import dataclass, field

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone

from . import classes, podruns
from .bulk import bulk_insert_fast, bulk_update_fast
from .kube import KubeError, KubeGateway, ListPage
from .models import Cluster, GpuPod, NamespaceUsage, Node, NodeResource, SyncRun
from .parsing import NodeFacts, PodFacts, node_fingerprint, parse_gpu_pod, parse_node

log = logging.getLogger(__name__)

NON_TERMINAL_PODS = "status.phase!=Succeeded,status.phase!=Failed"
MAX_LIST_RESTARTS = 2
# Rows buffered before one write transaction: fewer commits (each an fsync) on a first
# sync, while a sync that fails midway keeps everything written before.
WRITE_BATCH = 5000
NODE_FIELDS = [
    "uid", "labels", "gpu_product", "gpu_count", "gpu_memory_mib", "gpu_family",
    "compute_capability", "driver_version", "mig_capable", "mig_strategy", "mig_config",
    "mig_config_state", "sharing_strategy", "gpu_replicas", "instance_type", "unschedulable",
    "taints", "ready", "paused_operands", "k8s_created_at",
]  # fmt: skip
# What tells a GPU pod row is stale. Requests are left out on purpose: a pod's GPU
# requests are immutable (in-place resize covers cpu and memory only), so a new uid
# is the only way they change, and reading 30,000 JSON values back costs more than the
# rest of the comparison. The same holds for gpu_selector: a nodeSelector changes only
# while a pod is gated (Kueue adds its flavor's labels), and its binding then changes
# node_name.
POD_COMPARED = ["uid", "node_id", "node_name", "phase", "priority_class"]
# started_at is written with the others, so with a phase change (Pending -> Running).
POD_FIELDS = [*POD_COMPARED, "requests", "gpu_selector", "started_at"]

Progress = Callable[[str, int, int | None], None]


class SyncBusy(Exception):
    """Another sync of the same cluster holds the lock."""


@dataclass
class SyncStats:
    nodes_seen: int = 0
    pods_seen: int = 0
    gpu_pods_seen: int = 0
    pages: int = 0
    list_restarts: int = 0
    created: int = 0
    updated: int = 0
    deleted: int = 0
    nodes_gone: int = 0
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def written(self, created: int = 0, updated: int = 0, deleted: int = 0) -> None:
        """Count rows written; called from the sync thread and the writer thread."""
        with self._lock:
            self.created += created
            self.updated += updated
            self.deleted += deleted


def sync_cluster(
    cluster: Cluster,
    *,
    page_size: int | None = None,
    trigger: str = "beat",
    progress: Progress | None = None,
    gateway: KubeGateway | None = None,
) -> SyncRun:
    """Sync one cluster and return its SyncRun (succeeded or failed, never raises KubeError).

    Raises SyncBusy when another process is syncing the same cluster.
    """
    page_size = page_size or settings.INVENTORY_PAGE_SIZE
    with _cluster_lock(cluster):
        run = SyncRun.objects.create(cluster=cluster, trigger=trigger)
        started = time.monotonic()
        stats = SyncStats()
        error = ""
        try:
            gw = gateway or KubeGateway(cluster)
            try:
                version = gw.version()
                _Syncer(cluster, gw, stats, page_size, progress).run()
            finally:
                if gateway is None:
                    gw.close()
        except KubeError as err:
            error = str(err)
            version = None
            log.warning("sync of %s failed: %s", cluster.slug, err)
        now = timezone.now()
        run.finished_at = now
        run.duration_ms = int((time.monotonic() - started) * 1000)
        run.status = SyncRun.Status.FAILED if error else SyncRun.Status.SUCCEEDED
        run.error = error
        run.nodes_seen, run.pods_seen = stats.nodes_seen, stats.pods_seen
        run.gpu_pods_seen, run.pages = stats.gpu_pods_seen, stats.pages
        run.list_restarts, run.nodes_gone = stats.list_restarts, stats.nodes_gone
        run.rows_created, run.rows_updated = stats.created, stats.updated
        run.rows_deleted = stats.deleted
        run.save()
        cluster.last_sync_at = now
        cluster.last_error = error
        if error:
            cluster.sync_status = Cluster.SyncStatus.FAILED
            Cluster.objects.filter(pk=cluster.pk).update(
                last_sync_at=now, last_error=error, sync_status=cluster.sync_status
            )
        else:
            cluster.sync_status = Cluster.SyncStatus.OK
            cluster.last_success_at = now
            cluster.server_version = version or cluster.server_version
            Cluster.objects.filter(pk=cluster.pk).update(
                last_sync_at=now,
                last_success_at=now,
                last_error="",
                sync_status=cluster.sync_status,
                server_version=cluster.server_version,
            )
            classes.refresh(cluster, now)  # GPU classes follow the nodes (inventory/classes.py)
        return run


@contextmanager
def gc_paused() -> Iterator[None]:
    """Pause Python's cyclic garbage collector for the duration of a bulk read.

    Parsing 150,000 pods creates millions of short-lived dicts; each allocation burst
    triggers a collection that walks every live container object, including the
    sync's own state (tens of thousands of rows), which doubled the time to read a large
    cluster. JSON values hold no reference cycles, so reference counting frees them.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.enable()


class _Writer:
    """Runs write batches in order, on a thread with its own database connection.

    PostgreSQL then works on one batch while the sync parses the next page (the
    process is otherwise single-threaded and waits on every write). Inside an outer
    transaction (a test case) another connection could not see its rows, so there the
    batches run inline, in that transaction. The first error stops the writer and is
    raised to the sync at the next submit, ``drain`` or ``close``.
    """

    def __init__(self, *, inline: bool = False) -> None:
        self.threaded = not inline and not connection.in_atomic_block
        self.error: BaseException | None = None
        if self.threaded:
            self.queue: queue.Queue[Callable[[], None] | None] = queue.Queue(maxsize=4)
            self.thread = threading.Thread(target=self._loop, name="sync-writer", daemon=True)
            self.thread.start()

    def submit(self, batch: Callable[[], None]) -> None:
        if not self.threaded:
            with transaction.atomic():
                batch()
            return
        self._raise()
        self.queue.put(batch)

    def drain(self) -> None:
        """Wait until every submitted batch is committed."""
        if self.threaded:
            self.queue.join()
            self._raise()

    def close(self) -> None:
        if self.threaded and self.thread.is_alive():
            self.queue.put(None)
            self.thread.join()

    def _raise(self) -> None:
        if self.error is not None:
            raise self.error

    def _loop(self) -> None:
        try:
            with connection.cursor() as cur:
                cur.execute("SET synchronous_commit TO OFF")
            while (batch := self.queue.get()) is not None:
                try:
                    if self.error is None:
                        with transaction.atomic():
                            batch()
                except BaseException as err:
                    self.error = err
                finally:
                    self.queue.task_done()
            self.queue.task_done()
        finally:
            connection.close()


@contextmanager
def _async_commit() -> Iterator[None]:
    """Commit without waiting for the WAL flush while the sync writes.

    The inventory is a mirror the next sync rebuilds: a database crash can lose the last
    few hundred milliseconds of it, never the portal's own records. Each of a first
    sync's commits otherwise waits for an fsync.
    """
    with connection.cursor() as cur:
        cur.execute("SET synchronous_commit TO OFF")
    try:
        yield
    finally:
        with connection.cursor() as cur:
            cur.execute("RESET synchronous_commit")


class _cluster_lock:
    """A Postgres session advisory lock per cluster: two syncs never interleave."""

    def __init__(self, cluster: Cluster) -> None:
        self.key = int(cluster.pk.int % (2**63 - 1))

    def __enter__(self) -> None:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_try_advisory_lock(%s)", [self.key])
            if not cur.fetchone()[0]:
                raise SyncBusy("another sync of this cluster is running")

    def __exit__(self, *exc: object) -> None:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s)", [self.key])


def apply_node_changes(cluster: Cluster, changed: list[dict], deleted: list[str]) -> int:
    """Write nodes seen on a watch between full syncs; returns the rows written.

    The same diff as a full sync (an unchanged node costs nothing); a deleted node is
    marked gone. What pods request on nodes is left to the next full sync.
    """
    stats = SyncStats()
    syncer = _Syncer(cluster, gw=None, stats=stats, page_size=0, progress=None)  # type: ignore[arg-type]
    syncer.writer = _Writer(inline=True)
    if changed:
        syncer._node_page(ListPage(items=changed, resource_version="", continue_token=None,
                                   remaining=None))  # fmt: skip
    if deleted:
        now = timezone.now()
        gone = Node.objects.filter(cluster=cluster, name__in=deleted, gone_at__isnull=True).update(
            gone_at=now, last_changed_at=now
        )
        stats.written(updated=gone)
    return stats.created + stats.updated + stats.deleted


class _Syncer:
    def __init__(
        self,
        cluster: Cluster,
        gw: KubeGateway,
        stats: SyncStats,
        page_size: int,
        progress: Progress | None,
    ) -> None:
        self.cluster = cluster
        self.gw = gw
        self.stats = stats
        self.page_size = page_size
        self.progress = progress or (lambda stage, done, total: None)
        self.now = timezone.now()
        # name -> (id, fingerprint, gone?) for every node row of this cluster.
        self.nodes = {
            name: (pk, fp, gone is not None)
            for pk, name, fp, gone in Node.objects.filter(cluster=cluster).values_list(
                "id", "name", "fingerprint", "gone_at"
            )
        }
        self.seen_nodes: set[str] = set()
        # A pod gone now was last seen running by the last complete sync: its run ends
        # there (podruns.py), so a sync that stopped for a day does not count that day.
        self.last_seen = cluster.last_success_at or self.now

    def run(self) -> None:
        with gc_paused(), _async_commit():
            self.writer = _Writer()
            try:
                self._sync_nodes()
                pods = self._sync_pods()
                self.writer.drain()
            finally:
                self.writer.close()
            self._sync_requested(pods)
            self._mark_gone_nodes()

    # -- lists ------------------------------------------------------------------------

    def _pages(self, kind: str, handle: Callable[[ListPage], None], **selectors: str) -> None:
        """Feed every page of a list to ``handle``; restart the list on an expired token."""
        while True:
            done = 0
            try:
                for page in self.gw.list_pages(kind, limit=self.page_size, **selectors):
                    self.stats.pages += 1
                    handle(page)
                    done += len(page.items)
                    total = done + page.remaining if page.remaining is not None else None
                    self.progress(kind, done, total)
                return
            except KubeError as err:
                if not err.expired or self.stats.list_restarts >= MAX_LIST_RESTARTS:
                    raise
                self.stats.list_restarts += 1
                log.info("%s: %s list expired (%s); restarting", self.cluster.slug, kind, err)

    # -- nodes ------------------------------------------------------------------------

    def _sync_nodes(self) -> None:
        self._pages("nodes", self._node_page)

    def _node_page(self, page: ListPage) -> None:
        new: list[tuple[dict, NodeFacts]] = []
        changed: list[tuple[Node, NodeFacts]] = []
        for obj in page.items:
            name = (obj.get("metadata") or {}).get("name", "")
            if name in self.seen_nodes:
                continue  # seen on an earlier attempt of a restarted list
            self.seen_nodes.add(name)
            self.stats.nodes_seen += 1
            fingerprint = node_fingerprint(obj)
            known = self.nodes.get(name)
            if known is not None and known[1] == fingerprint and not known[2]:
                continue
            facts = parse_node(obj)
            if known is None:
                row = {
                    "id": uuid.uuid4(),
                    "cluster_id": self.cluster.pk,
                    "name": facts.name,
                    **{name: getattr(facts, name) for name in NODE_FIELDS},
                    "fingerprint": fingerprint,
                    "first_seen_at": self.now,
                    "last_changed_at": self.now,
                }
                new.append((row, facts))
            else:
                node = Node(id=known[0], cluster=self.cluster, name=facts.name)
                for name in NODE_FIELDS:
                    setattr(node, name, getattr(facts, name))
                node.fingerprint = fingerprint
                node.last_changed_at = self.now
                node.gone_at = None
                changed.append((node, facts))
        if not new and not changed:
            return

        def write() -> None:
            bulk_insert_fast(Node, [row for row, _ in new])
            bulk_update_fast(
                [node for node, _ in changed],
                [*NODE_FIELDS, "fingerprint", "last_changed_at", "gone_at"],
            )
            self._sync_node_resources(
                [(row["id"], facts) for row, facts in new],
                [(node.id, facts) for node, facts in changed],
            )

        self.writer.submit(write)
        self.stats.written(created=len(new), updated=len(changed))
        for row, _ in new:
            self.nodes[row["name"]] = (row["id"], row["fingerprint"], False)
        for node, _ in changed:
            self.nodes[node.name] = (node.id, node.fingerprint, False)

    def _sync_node_resources(
        self, new: list[tuple[uuid.UUID, NodeFacts]], changed: list[tuple[uuid.UUID, NodeFacts]]
    ) -> None:
        """Capacity/allocatable rows of new and changed nodes (requested comes later)."""
        create = [
            {"node_id": node_id, "resource": res, "capacity": cap, "allocatable": alloc}
            for node_id, facts in new
            for res, (cap, alloc) in facts.resources.items()
        ]
        update: list[NodeResource] = []
        stale: list[int] = []
        if changed:
            by_node = dict(changed)
            existing: dict[tuple, NodeResource] = {
                (r.node_id, r.resource): r
                for r in NodeResource.objects.filter(node_id__in=by_node).only(
                    "id", "node_id", "resource", "capacity", "allocatable"
                )
            }
            for node_id, facts in by_node.items():
                for res, (cap, alloc) in facts.resources.items():
                    row = existing.pop((node_id, res), None)
                    if row is None:
                        create.append(
                            {
                                "node_id": node_id,
                                "resource": res,
                                "capacity": cap,
                                "allocatable": alloc,
                            }
                        )
                    elif (row.capacity, row.allocatable) != (cap, alloc):
                        row.capacity, row.allocatable = cap, alloc
                        update.append(row)
            stale = [row.id for row in existing.values()]
        bulk_insert_fast(NodeResource, create)
        if update:
            bulk_update_fast(update, ["capacity", "allocatable"])
        if stale:
            NodeResource.objects.filter(id__in=stale).delete()
        self.stats.written(len(create), len(update), len(stale))

    def _mark_gone_nodes(self) -> None:
        gone = [
            pk
            for name, (pk, _, is_gone) in self.nodes.items()
            if not is_gone and name not in self.seen_nodes
        ]
        if gone:
            Node.objects.filter(id__in=gone).update(gone_at=self.now, last_changed_at=self.now)
            self.stats.nodes_gone = len(gone)
            self.stats.written(updated=len(gone))

    # -- pods -------------------------------------------------------------------------

    def _sync_pods(self) -> dict[tuple[str, str], PodFacts]:
        existing = {
            (ns, name): (pk, compared)
            for pk, ns, name, *compared in (
                GpuPod.objects.filter(cluster=self.cluster).values_list(
                    "id", "namespace", "name", *POD_COMPARED
                )
            )
        }
        seen: dict[tuple[str, str], PodFacts] = {}
        create: list[dict] = []
        update: list[GpuPod] = []
        replaced: list = []

        def flush() -> None:
            """Write buffered pod rows in one transaction (a batch of pages, not each)."""
            if create or update:
                batch_create, batch_update = list(create), list(update)

                def write() -> None:
                    bulk_insert_fast(GpuPod, batch_create)
                    bulk_update_fast(batch_update, POD_FIELDS)

                self.writer.submit(write)
                self.stats.written(created=len(create), updated=len(update))
                create.clear()
                update.clear()

        def handle(page: ListPage) -> None:
            self.stats.pods_seen += len(page.items)
            for obj in page.items:
                facts = parse_gpu_pod(obj)
                if facts is None:
                    continue
                key = (facts.namespace, facts.name)
                if key in seen:
                    continue
                seen[key] = facts
                node = self.nodes.get(facts.node_name) if facts.node_name else None
                node_id = node[0] if node else None
                compared = [facts.uid, node_id, facts.node_name, facts.phase, facts.priority_class]
                values = [*compared, facts.requests, facts.gpu_selector, facts.started_at]
                known = existing.get(key)
                if known is None:
                    create.append(
                        {
                            "cluster_id": self.cluster.pk,
                            "namespace": facts.namespace,
                            "name": facts.name,
                            "k8s_created_at": facts.k8s_created_at,
                            "first_seen_at": self.now,
                            **dict(zip(POD_FIELDS, values, strict=True)),
                        }
                    )
                elif known[1] != compared:
                    if known[1][0] and known[1][0] != facts.uid:
                        replaced.append(known[0])  # another pod of the same name: one ended
                    update.append(GpuPod(id=known[0], **dict(zip(POD_FIELDS, values, strict=True))))
            if replaced:  # before their rows are overwritten (podruns.py)
                podruns.record_ended(replaced, self.last_seen)
                replaced.clear()
            if len(create) + len(update) >= WRITE_BATCH:
                flush()

        self._pages("pods", handle, field_selector=NON_TERMINAL_PODS)
        flush()
        self.stats.gpu_pods_seen = len(seen)
        finished = [pk for key, (pk, _) in existing.items() if key not in seen]
        if finished:  # their runs are recorded first: allocated GPU-hours (podruns.py)
            self.stats.written(deleted=podruns.delete_ended(finished, self.last_seen))
        podruns.mark_recorded(self.cluster, self.now)
        return seen

    # -- aggregates ---------------------------------------------------------------------

    def _sync_requested(self, pods: dict[tuple[str, str], PodFacts]) -> None:
        """Per node and per namespace: what non-terminal pods request, written as a diff."""
        per_node: dict[tuple[str, str], int] = defaultdict(int)
        per_ns: dict[tuple[str, str], list[int]] = defaultdict(lambda: [0, 0])
        for facts in pods.values():
            for res, amount in facts.requests.items():
                if facts.node_name:
                    per_node[(facts.node_name, res)] += amount
                usage = per_ns[(facts.namespace, res)]
                usage[0] += amount
                usage[1] += 1
        with transaction.atomic():
            self._write_node_requested(per_node)
            self._write_namespace_usage(per_ns)

    def _write_node_requested(self, per_node: dict[tuple[str, str], int]) -> None:
        update: list[NodeResource] = []
        rows = NodeResource.objects.filter(node__cluster=self.cluster).values_list(
            "id", "node__name", "resource", "requested"
        )
        for pk, node_name, res, requested in rows:
            want = per_node.get((node_name, res), 0)
            if want != requested:
                update.append(NodeResource(id=pk, requested=want))
        if update:
            bulk_update_fast(update, ["requested"])
            self.stats.written(updated=len(update))

    def _write_namespace_usage(self, per_ns: dict[tuple[str, str], list[int]]) -> None:
        existing = {
            (ns, res): (pk, requested, pods)
            for pk, ns, res, requested, pods in NamespaceUsage.objects.filter(
                cluster=self.cluster
            ).values_list("id", "namespace", "resource", "requested", "pods")
        }
        create, update = [], []
        for (ns, res), (requested, pods) in per_ns.items():
            known = existing.pop((ns, res), None)
            if known is None:
                create.append(
                    {
                        "cluster_id": self.cluster.pk,
                        "namespace": ns,
                        "resource": res,
                        "requested": requested,
                        "pods": pods,
                        "updated_at": self.now,
                    }
                )
            elif known[1:] != (requested, pods):
                update.append(
                    NamespaceUsage(id=known[0], requested=requested, pods=pods, updated_at=self.now)
                )
        bulk_insert_fast(NamespaceUsage, create)
        if update:
            bulk_update_fast(update, ["requested", "pods", "updated_at"])
        if existing:
            NamespaceUsage.objects.filter(id__in=[v[0] for v in existing.values()]).delete()
        self.stats.written(len(create), len(update), len(existing))
