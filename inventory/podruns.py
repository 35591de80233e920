"""Allocated GPU-hours from the inventory's own pod records.

A cluster that sends no GPU telemetry (no node agent, no Prometheus) still tells the
portal which pods held which GPUs: the sync mirrors every non-terminal GPU pod with its
``status.startTime`` (``GpuPod.started_at``) and its node. This module keeps that as
history, so that showback can give such a cluster *allocated* GPU-hours and say where they
come from (issue #21 section 2; telemetry/showback.py). What it cannot give is how busy the
GPUs were: that stays "not measured".

**Definition.** A pod allocates ``gpus`` physical GPUs, its ``nvidia.com/gpu`` request
divided by its node's time-slicing replicas (a replica is no GPU; MIG slices are not
GPU-hours), from ``status.startTime`` until it ends. Its allocated GPU-hours in a period
are ``gpus`` x the hours of the period it ran. A running pod's span is open (its
``GpuPod`` row); when the sync finds the pod gone (finished, deleted, or its name now held
by a pod of another uid) it writes a :class:`~inventory.models.PodRun` with the span
before the row goes. The end is the last complete sync that still saw it (at most one
sync interval early): a portal that stopped syncing for a day does not count that day.

Pods that ended before the portal first synced a cluster
(``Cluster.pods_recorded_since``) are not known; a figure that covers such a period says
so.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterable
from datetime import datetime

from django.db import connection

from .models import GPU_RESOURCE, Cluster, GpuPod, Node, PodRun

CHUNK = 5000

# (cluster id, namespace, GPU class id or None) -> GPU-hours
Cells = dict[tuple, float]


# A run per started pod of {source} that asks for whole GPUs, with its node's class and
# time-slicing replicas; one statement, no row through Python.
_RECORD = """
{head}
INSERT INTO {runs} (cluster_id, namespace, name, uid, node_name, gpu_class_id, gpus,
                    started_at, ended_at)
SELECT p.cluster_id, p.namespace, p.name, p.uid, p.node_name, n.gpu_class_id,
       (p.requests ->> %(resource)s)::float / GREATEST(n.gpu_replicas, 1),
       p.started_at, GREATEST(%(now)s, p.started_at)
FROM {source} p LEFT JOIN {nodes} n ON n.id = p.node_id
WHERE p.started_at IS NOT NULL AND jsonb_typeof(p.requests -> %(resource)s) = 'number'
  AND (p.requests ->> %(resource)s)::float > 0
"""
_GONE = "WITH gone AS (DELETE FROM {pods} WHERE id = ANY(%(ids)s) RETURNING *)"


def _tables() -> dict:
    return {"runs": PodRun._meta.db_table, "pods": GpuPod._meta.db_table,
            "nodes": Node._meta.db_table}  # fmt: skip


def _record(pod_ids: list, now: datetime, *, delete: bool) -> int:
    tables = _tables()
    if delete:
        sql = _RECORD.format(head=_GONE.format(**tables), source="gone", **tables)
    else:
        sql = _RECORD.format(head="", source=tables["pods"], **tables)
        sql += " AND p.id = ANY(%(ids)s)"
    written = 0
    with connection.cursor() as cur:
        for i in range(0, len(pod_ids), CHUNK):
            params = {"ids": pod_ids[i : i + CHUNK], "resource": GPU_RESOURCE, "now": now}
            cur.execute(sql, params)
            written += cur.rowcount
    return written


def record_ended(pod_ids: list, last_seen: datetime) -> int:
    """Write a run, ending at ``last_seen``, for every started pod among ``pod_ids`` that
    asks for whole GPUs; call it before their rows are replaced. Returns how many runs were
    written."""
    return _record(pod_ids, last_seen, delete=False)


def delete_ended(pod_ids: list, last_seen: datetime) -> int:
    """Delete the rows of ``pod_ids`` and write their runs (:func:`record_ended`), each chunk
    in one statement, so a failure neither loses a run nor writes one twice. Returns how
    many rows were deleted."""
    _record(pod_ids, last_seen, delete=True)
    return len(pod_ids)


def mark_recorded(cluster: Cluster, now: datetime) -> None:
    """After a complete pod list: from now on, ended pods of ``cluster`` are recorded."""
    if cluster.pods_recorded_since is None:
        cluster.pods_recorded_since = now
        Cluster.objects.filter(pk=cluster.pk, pods_recorded_since__isnull=True).update(
            pods_recorded_since=now
        )


def recorded_since(cluster_ids: Iterable) -> dict:
    """{cluster id: from when its ended pods are recorded, or None (never synced)}."""
    return dict(
        Cluster.objects.filter(pk__in=list(cluster_ids)).values_list("pk", "pods_recorded_since")
    )


# Windows: (cluster, namespace or NULL for all of the cluster's, from when), up to %(stop)s.
_WINDOWS = """
WITH w(cluster_id, namespace, begin_at) AS (
  SELECT * FROM unnest(%(clusters)s::uuid[], %(namespaces)s::text[], %(begins)s::timestamptz[])
)
"""

_ENDED = (
    _WINDOWS
    + """
SELECT r.cluster_id, r.namespace, r.gpu_class_id,
       SUM(r.gpus * EXTRACT(EPOCH FROM (
           LEAST(r.ended_at, %(stop)s) - GREATEST(r.started_at, w.begin_at))))
FROM {runs} r JOIN w ON r.cluster_id = w.cluster_id
  AND (w.namespace IS NULL OR r.namespace = w.namespace)
WHERE r.ended_at > w.begin_at AND r.started_at < %(stop)s
GROUP BY 1, 2, 3
"""
)

_RUNNING = (
    _WINDOWS
    + """
SELECT p.cluster_id, p.namespace, n.gpu_class_id,
       SUM((p.requests ->> %(resource)s)::float / GREATEST(n.gpu_replicas, 1)
           * EXTRACT(EPOCH FROM (%(stop)s - GREATEST(p.started_at, w.begin_at))))
FROM {pods} p JOIN w ON p.cluster_id = w.cluster_id
  AND (w.namespace IS NULL OR p.namespace = w.namespace)
  LEFT JOIN {nodes} n ON n.id = p.node_id
WHERE p.started_at < %(stop)s AND jsonb_exists(p.requests, %(resource)s)
GROUP BY 1, 2, 3
"""
)


def allocated_hours(cluster_ids: Iterable, start: datetime, stop: datetime) -> Cells:
    """Allocated GPU-hours within [start, stop) per (cluster id, namespace, GPU class id of
    the node, None where the node has none), for every namespace of ``cluster_ids``:
    ended runs plus pods running now. ``stop`` must not be after now."""
    return allocated_in({(c, None): start for c in cluster_ids}, stop)


def allocated_in(windows: dict, stop: datetime) -> Cells:
    """As :func:`allocated_hours`, for windows {(cluster id, namespace or None for all its
    namespaces): from when} up to ``stop`` (one cluster's windows must not overlap). Two
    queries, aggregated by the database."""
    windows = {k: begin for k, begin in windows.items() if begin < stop}
    out: Cells = {}
    if not windows:
        return out
    params = {
        "clusters": [str(c) for c, _ in windows],
        "namespaces": [ns for _, ns in windows],
        "begins": list(windows.values()),
        "stop": stop,
        "resource": GPU_RESOURCE,
    }
    with connection.cursor() as cur:
        for sql in (_ENDED, _RUNNING):
            cur.execute(sql.format(**_tables()), params)
            for cluster_id, ns, class_id, seconds in cur.fetchall():
                key = (_uuid(cluster_id), ns, _uuid(class_id))
                out[key] = out.get(key, 0.0) + float(seconds or 0) / 3600
    return out


# -- history for estimates ------------------------------------------------------------------


def run_durations(
    cluster_id, since: datetime, *, gpu_class_id=None, namespace: str | None = None
) -> list[float]:
    """How long (seconds) the GPU pods of a cluster that ended after ``since`` ran, of one
    GPU class and/or namespace where given: the history a wait estimate stands on."""
    qs = PodRun.objects.filter(cluster_id=cluster_id, ended_at__gt=since)
    if gpu_class_id is not None:
        qs = qs.filter(gpu_class_id=gpu_class_id)
    if namespace is not None:
        qs = qs.filter(namespace=namespace)
    return [
        (end - start).total_seconds() for start, end in qs.values_list("started_at", "ended_at")
    ]


def running(cluster_id, resource: str, *, gpu_class_id=None, namespace: str | None = None):
    """[(amount of ``resource`` requested, started at, node id)] of the started pods of a
    cluster that hold ``resource``, on nodes of one GPU class and/or in one namespace where
    given."""
    qs = GpuPod.objects.filter(
        cluster_id=cluster_id, started_at__isnull=False, node__isnull=False,
        requests__has_key=resource,
    )  # fmt: skip
    if gpu_class_id is not None:
        qs = qs.filter(node__gpu_class_id=gpu_class_id)
    if namespace is not None:
        qs = qs.filter(namespace=namespace)
    rows = qs.values_list("requests", "started_at", "node_id")
    return [(int(req[resource]), started, node) for req, started, node in rows if req[resource]]


def _uuid(value):
    return value if value is None or isinstance(value, uuid.UUID) else uuid.UUID(str(value))


def prune(before: datetime) -> int:
    """Delete runs that ended before ``before`` (older than any showback month kept)."""
    deleted, _ = PodRun.objects.filter(ended_at__lt=before).delete()
    return deleted
