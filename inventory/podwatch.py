"""Pods kept current between full syncs by a watch (issue #23 section 2, first part).

The full sync (inventory/sync.py) lists every pod and writes the difference; this module
applies what a watch of pods from that list's resourceVersion delivers, one event at a
time, with the same rules: a GPU pod's row is created or updated (:func:`parse_gpu_pod`), a
pod that finished, was deleted or whose name now belongs to another uid leaves a run
(inventory/podruns.py, ended now), and the aggregates the pages read (``NodeResource``
``requested`` of the nodes it left and joined, ``NamespaceUsage`` of its namespace) are
recomputed from the rows of that node and namespace only. A change is in the portal as
soon as the API server sends it, instead of at the next sync.

On a DRA cluster what a pod holds is in its ResourceClaims (inventory/dra.py), which a pod
event does not carry: :class:`DraView` reads the claims the pod names when its event comes
(the scheduler allocates a claim before it binds the pod, so the event that brings the node
finds the devices), with the driver's slices and the DeviceClasses read once per list.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable
from typing import Any

from django.db import transaction
from django.utils import timezone

from . import dra, podruns
from .models import (
    Cluster,
    GpuClass,
    GpuPod,
    NamespaceUsage,
    Node,
    NodeResource,
    is_gpu_resource,
)
from .parsing import TERMINAL_PHASES, PodFacts, parse_gpu_pod


class DraView:
    """The pod watch's view of a DRA cluster: the driver's devices and the DeviceClasses as
    read when its list began (read again when a claim holds a device they lack), the
    claims of each pod read when its event comes, the portal classes' selectors."""

    def __init__(self, cluster: Cluster, gw) -> None:
        self.cluster = cluster
        self._read(gw)

    def _read(self, gw) -> None:
        slices = gw.list_resource_slices() or []
        self.inv = dra.read(slices, [], gw.list_device_classes())
        self.selectors = dict(
            GpuClass.objects.filter(cluster=self.cluster).values_list("slug", "selector")
        )

    def facts(self, gw, obj: dict[str, Any], base: PodFacts | None) -> PodFacts | None:
        """The pod's facts with what its claims hold or ask for (dra.pod_facts)."""
        ended = ((obj.get("status") or {}).get("phase") or "Pending") in TERMINAL_PHASES
        if ended or not (obj.get("spec") or {}).get("resourceClaims"):
            return None if ended else base  # an ended pod's claims are not read
        namespace = (obj.get("metadata") or {}).get("namespace", "")
        for name in dra.claim_names(obj):
            claim = gw.read_resource_claim(namespace, name)
            if claim is None:
                self.inv.claims.pop((namespace, name), None)
                continue
            if not self.inv.knows(claim):
                self._read(gw)
            self.inv.add_claim(claim)
        return dra.pod_facts(obj, self.inv, base, self.selectors)


@transaction.atomic
def apply_pod_event(
    cluster: Cluster,
    kind: str,
    obj: dict[str, Any],
    facts_of: Callable[[dict[str, Any], PodFacts | None], PodFacts | None] | None = None,
) -> int:
    """Apply one watch event (``ADDED``, ``MODIFIED``, ``DELETED``) of a pod; returns the
    rows written (0 for a pod that is not, and was not, a GPU pod). ``facts_of``: what
    else the pod holds (a DRA cluster's claims, :meth:`DraView.facts`)."""
    meta = obj.get("metadata") or {}
    namespace, name = meta.get("namespace", ""), meta.get("name", "")
    facts = None if kind == "DELETED" else parse_gpu_pod(obj)
    if kind != "DELETED" and facts_of is not None:
        facts = facts_of(obj, facts)
    row = (
        GpuPod.objects.select_for_update()
        .filter(cluster=cluster, namespace=namespace, name=name)
        .first()
    )
    if row is None and facts is None:
        return 0
    now = timezone.now()
    touched_nodes = {row.node_name} if row is not None and row.node_name else set()
    if facts is None:  # finished or deleted: its run is recorded with the row's removal
        podruns.delete_ended([row.pk], now)
    else:
        node_id = (
            Node.objects.filter(cluster=cluster, name=facts.node_name)
            .values_list("pk", flat=True)
            .first()
            if facts.node_name
            else None
        )
        values = {
            "uid": facts.uid, "node_id": node_id, "node_name": facts.node_name,
            "phase": facts.phase, "priority_class": facts.priority_class,
            "requests": facts.requests, "gpu_selector": facts.gpu_selector,
            "started_at": facts.started_at,
        }  # fmt: skip
        if row is None:
            GpuPod.objects.create(
                cluster=cluster, namespace=namespace, name=name,
                k8s_created_at=facts.k8s_created_at, first_seen_at=now, **values,
            )  # fmt: skip
        else:
            if row.uid and row.uid != facts.uid:
                podruns.record_ended([row.pk], now)  # another pod of the same name
            if all(getattr(row, f) == v for f, v in values.items()):
                return 0
            GpuPod.objects.filter(pk=row.pk).update(**values)
        if facts.node_name:
            touched_nodes.add(facts.node_name)
    return 1 + _node_requested(cluster, touched_nodes) + _namespace_usage(cluster, namespace)


def _node_requested(cluster: Cluster, names: set[str]) -> int:
    """``NodeResource.requested`` of these nodes from the GPU pod rows bound to them."""
    if not names:
        return 0
    want: dict[tuple[str, str], int] = defaultdict(int)
    for node_name, requests in GpuPod.objects.filter(
        cluster=cluster, node_name__in=names
    ).values_list("node_name", "requests"):
        for res, amount in (requests or {}).items():
            want[(node_name, res)] += int(amount)
    changed = 0
    for row in (
        NodeResource.objects.filter(node__cluster=cluster, node__name__in=names)
        .only("id", "node__name", "resource", "requested")
        .select_related("node")
    ):
        value = want.get((row.node.name, row.resource), 0)
        if value != row.requested:
            NodeResource.objects.filter(pk=row.pk).update(requested=value)
            changed += 1
    return changed


def _namespace_usage(cluster: Cluster, namespace: str) -> int:
    """``NamespaceUsage`` rows of one namespace from its GPU pod rows."""
    want: dict[str, list[int]] = defaultdict(lambda: [0, 0])
    for requests in GpuPod.objects.filter(cluster=cluster, namespace=namespace).values_list(
        "requests", flat=True
    ):
        for res, amount in (requests or {}).items():
            if is_gpu_resource(res):
                want[res][0] += int(amount)
                want[res][1] += 1
    now, changed = timezone.now(), 0
    existing = {u.resource: u for u in NamespaceUsage.objects.filter(
        cluster=cluster, namespace=namespace)}  # fmt: skip
    for res, (requested, pods) in want.items():
        row = existing.pop(res, None)
        if row is None:
            NamespaceUsage.objects.create(
                cluster=cluster, namespace=namespace, resource=res, requested=requested,
                pods=pods, updated_at=now,
            )  # fmt: skip
            changed += 1
        elif (row.requested, row.pods) != (requested, pods):
            NamespaceUsage.objects.filter(pk=row.pk).update(
                requested=requested, pods=pods, updated_at=now
            )
            changed += 1
    if existing:
        NamespaceUsage.objects.filter(pk__in=[u.pk for u in existing.values()]).delete()
        changed += len(existing)
    return changed
