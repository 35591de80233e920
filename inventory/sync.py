"""Inventory sync: mirror one cluster's nodes and GPU pods into Postgres as a set diff.

One sync lists nodes, then non-terminal pods, page by page with the raw JSON client,
and writes only what differs from the database (``bulk_create`` / ``bulk_update``),
one transaction per page. Only a sync that read every page may conclude that something
vanished: a failed or partial sync leaves the last good data in place and marks the
cluster failed (stale). An expired continue token restarts that list from scratch.
On a DRA cluster the driver's ResourceSlices and the ResourceClaims are read first and
stand for the nodes' GPU resources and the pods' GPU requests (inventory/dra.py). The
database plumbing (writer thread, lock) is inventory/syncdb.py.
"""

from __future__ import annotations

import logging
import threading
import time
import uuid
from collections import defaultdict
from collections.abc import Callable
from dataclasses import dataclass, field

from django.conf import settings
from django.db import transaction
from django.utils import timezone

from . import classes, dra, podruns
from .bulk import bulk_insert_fast, bulk_update_fast
from .kube import KubeError, KubeGateway, ListPage
from .models import Cluster, GpuClass, GpuPod, NamespaceUsage, Node, NodeResource, SyncRun
from .parsing import NodeFacts, PodFacts, node_fingerprint, parse_gpu_pod, parse_node
from .syncdb import Writer, async_commit, cluster_lock, gc_paused

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
    "taints", "ready", "paused_operands", "k8s_created_at", "gpu_product_name",
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
    lock_wait_s: float = 2.0,
) -> SyncRun:
    """Sync one cluster and return its SyncRun (succeeded or failed, never raises KubeError).

    Raises SyncBusy when another process is syncing the same cluster (after waiting up to
    ``lock_wait_s`` for the watcher's events, which hold the lock shared for milliseconds).
    """
    page_size = page_size or settings.INVENTORY_PAGE_SIZE
    with cluster_lock(cluster, lock_wait_s):
        run = SyncRun.objects.create(cluster=cluster, trigger=trigger)
        started = time.monotonic()
        stats = SyncStats()
        error = ""
        try:
            gw = gateway or KubeGateway(cluster)
            try:
                version = gw.version()
                syncer = _Syncer(cluster, gw, stats, page_size, progress)
                syncer.run()
                # where the watches take over from these lists (inventory/watch.py)
                run.nodes_version = syncer.nodes_resource_version
                run.pods_version = syncer.pods_resource_version
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


def apply_node_changes(cluster: Cluster, changed: list[dict], deleted: list[str]) -> int:
    """Write nodes seen on a watch between full syncs; returns the rows written.

    The same diff as a full sync (an unchanged node costs nothing); a deleted node is
    marked gone. What pods request on nodes is left to the next full sync.
    """
    stats = SyncStats()
    syncer = _Syncer(cluster, gw=None, stats=stats, page_size=0, progress=None)  # type: ignore[arg-type]
    syncer.writer = Writer(inline=True)
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
        # of each list's pages: the snapshot it was read at
        self.nodes_resource_version = self.pods_resource_version = ""
        # On a DRA cluster the GPUs are the driver's devices (inventory/dra.py), read first.
        self.dra: dra.DraInventory | None = None
        self.class_selectors: dict[str, dict] = {}
        # A pod gone now was last seen running when the data was last known complete (the
        # last good sync or watch): its run ends there (podruns.py), so a sync that stopped
        # for a day does not count that day.
        self.last_seen = cluster.data_as_of or self.now

    def run(self) -> None:
        with gc_paused(), async_commit():
            self.writer = Writer()
            try:
                if self.cluster.is_dra:
                    self._read_dra()
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

    def _read_dra(self) -> None:
        slices = self.gw.list_resource_slices()
        if slices is None:
            raise KubeError(
                f"Cluster {self.cluster.slug} enforces quota through DRA but does not serve "
                "resource.k8s.io/v1 (Kubernetes v1.34 or later)",
                permanent=True,
            )
        classes = self.gw.list_device_classes()
        self.dra = dra.read(slices, self.gw.list_resource_claims(), classes)
        others = dra.other_gpu_classes(classes)
        if others != self.cluster.dra_other_classes:
            Cluster.objects.filter(pk=self.cluster.pk).update(dra_other_classes=others)
            self.cluster.dra_other_classes = others
        self.class_selectors = dict(
            GpuClass.objects.filter(cluster=self.cluster).values_list("slug", "selector")
        )

    # -- nodes ------------------------------------------------------------------------

    def _sync_nodes(self) -> None:
        def handle(page: ListPage) -> None:
            self.nodes_resource_version = page.resource_version
            self._node_page(page)

        self._pages("nodes", handle)

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
            devices = None
            if self.dra is not None:  # the devices are part of what the row holds
                devices = self.dra.nodes.get(name)
                fingerprint = fingerprint[:16] + (devices.digest if devices else "0" * 16)
            elif self.cluster.is_dra and known is not None:
                continue  # a watch event without the devices: the next full sync has them
            if known is not None and known[1] == fingerprint and not known[2]:
                continue
            facts = parse_node(obj)
            if self.dra is not None:
                facts = dra.node_facts(facts, devices)
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
            # every page of one list carries its snapshot's version (a restart: a newer one)
            self.pods_resource_version = page.resource_version
            self.stats.pods_seen += len(page.items)
            for obj in page.items:
                facts = parse_gpu_pod(obj)
                if self.dra is not None:
                    facts = dra.pod_facts(obj, self.dra, facts, self.class_selectors)
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
