"""Applies confirmed the moment the quota controller writes ``status.hard`` (issue #23
section 3), from a watch of the portal's ResourceQuotas in the watcher process.

An apply is done only when the quota controller has copied ``spec.hard`` to
``status.hard`` (what admission enforces). The controller does so within milliseconds
(kubernetes ``pkg/controller/resourcequota``: a quota whose hard limits changed goes to its
priority queue), so on a cluster the watcher keeps current the applying task does not wait
for it: it records what it applied (``Operation.applied_hard``) and returns, and this
watch (one stream per cluster, the portal's label) finishes the operations waiting for
exactly the ``status.hard`` an event carries. A confirm task a second later catches what a
broken watch missed (quotas/apply.py). The watch keeps no state: a 410 or a broken stream
starts it again from now.
"""

from __future__ import annotations

import logging
import threading

from django.conf import settings
from django.db import DatabaseError, close_old_connections, connection

from inventory.kube import KubeError, KubeGateway
from inventory.models import Cluster

from .apply import MANAGED_BY, _differences, _status_hard, _succeeded, record_status
from .models import Operation, OperationAttempt

log = logging.getLogger(__name__)
LABELS = ",".join(f"{key}={value}" for key, value in MANAGED_BY.items())


def follow_quotas(
    cluster: Cluster,
    stop: threading.Event,
    *,
    timeout_s: int = 60,
    backoff_s: float = 5.0,
    progress=None,
    key: str = "",
) -> None:
    """Watch the cluster's portal-managed ResourceQuotas until ``stop`` is set (Kueue
    clusters have none: their applies are done when the ClusterQueue is applied)."""
    if cluster.is_kueue:
        return
    version = ""
    while not stop.is_set():
        if progress is not None:
            progress.mark(key)
        try:
            with KubeGateway(cluster) as gw:
                if not version:
                    version = gw.list_resource_version("resourcequotas", label_selector=LABELS)
                for kind, obj in gw.watch("resourcequotas", version, timeout_seconds=timeout_s,
                                          label_selector=LABELS):  # fmt: skip
                    if progress is not None:
                        progress.mark(key, kind)
                    if stop.is_set():
                        break
                    version = (obj.get("metadata") or {}).get("resourceVersion") or version
                    if kind in ("ADDED", "MODIFIED"):
                        close_old_connections()
                        confirm_from_event(cluster, obj)
        except KubeError as err:
            log.warning("%s: quota watch: %s", cluster.slug, err)
            version = ""  # from now: the confirm tasks cover what happened in between
            stop.wait(0 if err.expired else backoff_s)
        except DatabaseError as err:
            log.warning("%s: quota watch: database: %s", cluster.slug, err)
            connection.close()
            stop.wait(backoff_s)


def confirm_from_event(cluster: Cluster, quota: dict) -> int:
    """The watcher saw the portal's ResourceQuota of a namespace change: the operations
    waiting for exactly this ``status.hard`` are done (quotas/quotawatch.py). Another
    attempt, a confirm task or the applying task itself may have got there first: each
    finishes an attempt only once (:func:`_succeeded`). Returns how many it finished."""
    meta = quota.get("metadata") or {}
    status = _status_hard(quota)
    if meta.get("name") != settings.QUOTA_NAME or not status:
        return 0
    waiting = (
        Operation.objects.select_related("namespace__cluster", "namespace__team")
        .filter(namespace__cluster=cluster, namespace__name=meta.get("namespace", ""),
                status=Operation.Status.RUNNING)
        .exclude(applied_hard={})
    )  # fmt: skip
    done = 0
    for op in waiting:
        attempt = OperationAttempt.objects.filter(operation=op, number=op.attempts).first()
        if attempt is None or _differences(status, op.applied_hard):
            continue
        record_status(op.namespace, quota)
        if _succeeded(op, attempt, op.applied_hard) == Operation.Status.SUCCEEDED:
            done += 1
    return done
