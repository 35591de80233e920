"""The three GPU figures: their names, one-line definitions, and the first of them.

The portal tells people three different things about GPUs, and shows each under its own
name (docs/user-guide.md, "Three figures"):

- **idle now**: what the scheduler could place right now. Per node, allocatable minus what
  bound, unfinished pods request there, never below 0 (a node whose allocatable dropped
  under its pods' requests has none idle, as ``kubectl describe node`` shows it); pending
  pods that no node holds yet count nowhere. Computed here, from the inventory alone
  (:func:`idle_now`, :data:`IDLE`).
- **free to grant**: what an admin may still promise: allocatable x overcommit, minus
  what grants reserve over the window, minus what pods hold beyond their grants
  (``quotas.capacity.Capacity.free``).
- **usable by a team**: what a researcher can start now in one namespace: its effective
  limit (every quota that binds, or its Kueue queue's nominal quota plus what it may
  borrow) minus what it uses (``quotas.figures``).

Time-sliced replicas are a resource of their own (``nvidia.com/gpu.shared``, or
``nvidia.com/gpu`` on a time-sliced node counting replicas): every figure is per cluster,
class and resource, and a page that adds clusters together says so.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass

from django.db.models import F, Sum, Value
from django.db.models.functions import Greatest

from .models import NodeResource, is_gpu_resource

# The names and one-line definitions every page, the API schema and /metrics use.
IDLE_NOW = "Idle now"
FREE_TO_GRANT = "Free to grant"
USABLE = "Usable by the team"
DEFINITIONS = {
    "idle": (
        "allocatable on the nodes minus what bound, unfinished pods request there "
        "(pending pods hold no node's GPUs): what the scheduler could place now."
    ),
    "free_to_grant": (
        "allocatable × overcommit ratio minus what grants reserve from now on minus what "  # noqa: RUF001
        "pods hold beyond their grants: what an admin may still promise."
    ),
    "usable": (
        "the namespace's effective limit (every quota that binds, or its Kueue queue's "
        "nominal quota plus what it may borrow) minus what it uses: what the team can start now."
    ),
}

# Per NodeResource row: a node's idle units. Summed per class, product or cluster.
IDLE = Greatest(F("allocatable") - F("requested"), Value(0))
POOL = None  # the class key of a whole cluster's figure


@dataclass(frozen=True)
class NodeFigures:
    """One resource on a set of nodes: allocatable, what bound pods request, idle now."""

    resource: str
    allocatable: int = 0
    requested: int = 0
    idle: int = 0


def idle_now(cluster_ids, resources=None) -> dict[tuple, NodeFigures]:
    """Idle now per (cluster id, GPU class id, resource), and per (cluster id,
    :data:`POOL`, resource) for the whole cluster: THE definition (module doc). One query."""
    rows = NodeResource.objects.filter(
        node__cluster_id__in=list(cluster_ids), node__gone_at__isnull=True
    )
    if resources is not None:
        rows = rows.filter(resource__in=sorted(set(resources)))
    sums: dict[tuple, list[int]] = defaultdict(lambda: [0, 0, 0])
    for cluster_id, class_id, resource, alloc, req, idle in (
        rows.values_list("node__cluster_id", "node__gpu_class_id", "resource")
        .annotate(alloc=Sum("allocatable"), req=Sum("requested"), idle=Sum(IDLE))
        .order_by()
    ):
        if not is_gpu_resource(resource):
            continue
        keys = [(cluster_id, POOL, resource)]
        if class_id is not None:
            keys.append((cluster_id, class_id, resource))
        for key in keys:
            total = sums[key]
            total[0] += int(alloc or 0)
            total[1] += int(req or 0)
            total[2] += int(idle or 0)
    return {key: NodeFigures(key[2], *values) for key, values in sums.items()}


def idle_per_node(cluster_id, resource: str, gpu_class_id=None) -> dict:
    """{node id: idle now} of ``resource`` (the same :data:`IDLE`), on the nodes of a
    cluster (of one GPU class where given) that can take a pod now: present, ready and
    schedulable (a wait estimate asks where a pod could run)."""
    rows = NodeResource.objects.filter(
        node__cluster_id=cluster_id, node__gone_at__isnull=True, node__ready=True,
        node__unschedulable=False, resource=resource,
    )  # fmt: skip
    if gpu_class_id is not None:
        rows = rows.filter(node__gpu_class_id=gpu_class_id)
    return dict(rows.annotate(idle=IDLE).values_list("node_id", "idle"))


def figures_by_class(classes) -> dict:
    """{class pk: [its ClassFigure per resource]} (``quotas.figures.class_figures``): what
    ``/api/v1/gpu-classes/`` and the GPU classes page show for these classes."""
    from quotas.figures import class_figures  # quotas builds on inventory

    by_class: dict = defaultdict(list)
    for f in class_figures(classes=list(classes)):
        by_class[f.gpu_class.pk].append(f)
    return dict(by_class)
