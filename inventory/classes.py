"""GPU classes derived from the inventory: one per ``nvidia.com/gpu.product`` by default.

:func:`refresh` runs after each successful sync. It assigns every present GPU node to
the first class whose selector its labels match (admin-defined classes first, then the
oldest), creates a class for each product no class matches yet, and updates what each
class holds (nodes, physical GPUs, the time-slicing replica factor, the resources its
nodes advertise). It never changes a class's display name, weight or selector (admins
own those) and never deletes a class: one whose nodes are all gone stays, marked empty,
so its grants keep a target.
"""

from __future__ import annotations

from collections import defaultdict
from datetime import datetime

from django.db import transaction
from django.utils import timezone
from django.utils.text import slugify

from .models import PRODUCT_LABEL, Cluster, GpuClass, Node, NodeResource, is_gpu_resource

SHARED_SUFFIX = "-SHARED"


def display_name(product: str, replicas: int) -> str:
    """``NVIDIA-H100-80GB-HBM3`` -> ``NVIDIA H100 80GB HBM3``; time-sliced products say so."""
    base = product.removesuffix(SHARED_SUFFIX).replace("-", " ")
    return f"{base} (time-sliced x{replicas})" if product.endswith(SHARED_SUFFIX) else base


def _free_slug(product: str, taken: set[str]) -> str:
    base = (slugify(product.replace(".", "-")) or "gpu")[:55].strip("-")
    slug, n = base, 2
    while slug in taken:
        slug, n = f"{base}-{n}", n + 1
    taken.add(slug)
    return slug


@transaction.atomic
def refresh(cluster: Cluster, now: datetime | None = None) -> list[GpuClass]:
    """Derive and update the cluster's classes from its present GPU nodes (see module)."""
    from quotas import audit  # quotas builds on inventory: imported when used

    now = now or timezone.now()
    # Admin-defined classes first: a node an admin's selector matches leaves its derived
    # per-product class (which stays, marked empty, if no node is left in it).
    classes = list(
        GpuClass.objects.select_for_update()
        .filter(cluster=cluster)
        .order_by("derived", "created_at", "pk")
    )
    nodes = list(
        Node.objects.filter(cluster=cluster)
        .present()
        .gpu()
        .only("id", "labels", "gpu_product", "gpu_count", "gpu_replicas", "gpu_class_id")
    )
    taken = {c.slug for c in classes}
    member: dict[object, list[Node]] = defaultdict(list)
    for node in nodes:
        cls = next((c for c in classes if c.matches(node.labels)), None)
        if cls is None:  # a product no class covers yet: its own class
            replicas = max(node.gpu_replicas, 1)
            cls = GpuClass.objects.create(
                cluster=cluster, slug=_free_slug(node.gpu_product, taken),
                name=display_name(node.gpu_product, replicas),
                selector={PRODUCT_LABEL: node.gpu_product}, derived=True,
                created_at=now, updated_at=now,
            )  # fmt: skip
            classes.append(cls)
            audit.record(None, "gpu_class.derived", cls, after=snapshot(cls))
        member[cls.pk].append(node)
    moved = defaultdict(list)
    for cls in classes:
        for node in member[cls.pk]:
            if node.gpu_class_id != cls.pk:
                moved[cls.pk].append(node.pk)
    for cls_id, ids in moved.items():
        Node.objects.filter(pk__in=ids).update(gpu_class_id=cls_id)
    # Every present GPU node has a class now; a node that lost its GPU labels loses it.
    # (Read first: an UPDATE that matches nothing is still a write a quiet sync avoids.)
    stale = list(
        Node.objects.filter(cluster=cluster, gone_at__isnull=True, gpu_product="")
        .exclude(gpu_class=None)
        .values_list("pk", flat=True)
    )
    if stale:
        Node.objects.filter(pk__in=stale).update(gpu_class=None)
    advertised = defaultdict(set)
    for cls_id, resource in (
        NodeResource.objects.filter(
            node__cluster=cluster, node__gone_at__isnull=True, capacity__gt=0
        )
        .values_list("node__gpu_class_id", "resource")
        .distinct()
    ):
        if is_gpu_resource(resource):
            advertised[cls_id].add(resource)
    for cls in classes:
        _update_stats(cls, member[cls.pk], advertised[cls.pk], now)
    return classes


def _update_stats(cls: GpuClass, nodes: list[Node], resources: set[str], now: datetime) -> None:
    before = (cls.node_count, cls.gpus, cls.replicas, list(cls.resources), cls.empty_since)
    cls.node_count = len(nodes)
    if nodes:
        cls.gpus = sum(n.gpu_count for n in nodes)
        cls.replicas = max(max(n.gpu_replicas, 1) for n in nodes)
        cls.resources = sorted(resources)
        cls.empty_since = None
    elif cls.empty_since is None:
        cls.empty_since = now  # kept, with its last resources, for the grants naming it
    after = (cls.node_count, cls.gpus, cls.replicas, list(cls.resources), cls.empty_since)
    if after != before:
        cls.updated_at = now
        cls.save(
            update_fields=["node_count", "gpus", "replicas", "resources", "empty_since",
                           "updated_at"]
        )  # fmt: skip


# -- admin edits (the API and the Django admin) ------------------------------------------

EDITABLE = ("name", "selector", "weight")


def snapshot(cls: GpuClass) -> dict:
    return {
        "cluster": cls.cluster.slug,
        "slug": cls.slug,
        "name": cls.name,
        "selector": cls.selector,
        "weight": None if cls.weight is None else str(cls.weight),
    }


@transaction.atomic
def create_class(by, cluster: Cluster, **fields) -> GpuClass:
    """An admin-defined class (``derived`` False); its nodes are assigned at once."""
    from quotas import audit

    cls = GpuClass(cluster=cluster, derived=False, **fields)
    cls.full_clean()
    cls.save()
    audit.record(by, "gpu_class.created", cls, after=snapshot(cls))
    refresh(cluster)
    cls.refresh_from_db()
    return cls


@transaction.atomic
def update_class(by, cls: GpuClass, **fields) -> GpuClass:
    """Change display name, selector or weight (validated: 400, never 500); audited."""
    from quotas import audit

    cls = GpuClass.objects.select_for_update().select_related("cluster").get(pk=cls.pk)
    before = snapshot(cls)
    for name, value in fields.items():
        if name not in EDITABLE:
            raise ValueError(f"{name} is not editable")
        setattr(cls, name, value)
    cls.full_clean()
    cls.updated_at = timezone.now()
    cls.save()
    audit.record(by, "gpu_class.changed", cls, before=before, after=snapshot(cls))
    if "selector" in fields:
        refresh(cls.cluster)
        cls.refresh_from_db()
    return cls


class ClassInUse(Exception):
    """A class that grants or requests name cannot be deleted."""


@transaction.atomic
def delete_class(by, cls: GpuClass) -> None:
    from quotas import audit
    from quotas.models import Grant, QuotaRequest

    cls = GpuClass.objects.select_for_update().select_related("cluster").get(pk=cls.pk)
    grants = Grant.objects.filter(gpu_class=cls).count()
    reqs = QuotaRequest.objects.filter(gpu_class=cls).count()
    if grants or reqs:
        raise ClassInUse(
            f"{grants} grant(s) and {reqs} request(s) name class {cls.slug}: it stays "
            "(an empty class is kept, marked empty)."
        )
    audit.record(by, "gpu_class.deleted", cls, before=snapshot(cls))
    cluster = cls.cluster
    cls.delete()
    refresh(cluster)  # its nodes fall back to a derived per-product class
