"""Fleet aggregates shared by the fleet page and ``GET /api/v1/inventory/summary/``.

On a time-sliced node (``nvidia.com/gpu.replicas`` above 1) each resource counts replicas,
not GPUs or slices: those totals are kept apart (``replicas=True``) and never added to
physical ones (issue #21: "time-sliced replicas are labelled as replicas").
"""

from __future__ import annotations

from dataclasses import dataclass, field

from django.db.models import BooleanField, Count, ExpressionWrapper, Q, QuerySet, Sum

from .figures import IDLE
from .models import GPU_RESOURCE, Node, NodeResource, base_product


@dataclass
class ResourceTotals:
    resource: str
    capacity: int = 0
    allocatable: int = 0
    requested: int = 0
    idle: int = 0  # idle now, summed per node (inventory/figures.py)
    replicas: bool = False  # counted on time-sliced nodes: replicas, not devices

    @property
    def unhealthy(self) -> int:
        return self.capacity - self.allocatable

    @property
    def requested_pct(self) -> int:
        return round(100 * self.requested / self.allocatable) if self.allocatable else 0


@dataclass
class ProductSummary:
    product: str
    nodes: int = 0
    gpus: int = 0
    mig_enabled_nodes: int = 0
    time_sliced_nodes: int = 0
    unschedulable_nodes: int = 0
    resources: dict[str, ResourceTotals] = field(default_factory=dict)

    @property
    def gpu(self) -> ResourceTotals:
        """Physical ``nvidia.com/gpu`` (nodes that are not time-sliced)."""
        return self.resources.get(GPU_RESOURCE) or ResourceTotals(GPU_RESOURCE)

    @property
    def gpu_replicas(self) -> ResourceTotals | None:
        """``nvidia.com/gpu`` replicas on time-sliced nodes (None: no such node)."""
        return self.resources.get(key(GPU_RESOURCE, True))

    @property
    def mig_resources(self) -> list[ResourceTotals]:
        return [r for r in self.rows() if r.resource != GPU_RESOURCE]

    def rows(self) -> list[ResourceTotals]:
        return sorted(self.resources.values(), key=lambda r: (r.resource, r.replicas))


def key(resource: str, replicas: bool) -> str:
    """Where a resource's totals live in ``ProductSummary.resources``."""
    return f"{resource} (replicas)" if replicas else resource


def fleet_summary(nodes: QuerySet[Node] | None = None) -> list[ProductSummary]:
    """Per GPU product (time-slicing suffix folded in): node counts and resource totals.

    Two queries whatever the fleet size.
    """
    nodes = (nodes if nodes is not None else Node.objects.all()).present().gpu()
    products: dict[str, ProductSummary] = {}
    node_rows = nodes.values("gpu_product").annotate(
        n=Count("id"),
        gpus=Sum("gpu_count"),
        mig=Count(
            "id",
            filter=Q(mig_capable=True)
            & ~Q(mig_config="all-disabled")
            & ~Q(mig_config="")
            & ~Q(mig_strategy="none"),
        ),
        shared=Count("id", filter=Q(sharing_strategy__in=["time-slicing", "mps"])),
        cordoned=Count("id", filter=Q(unschedulable=True)),
    )
    for row in node_rows:
        summary = products.setdefault(
            base_product(row["gpu_product"]), ProductSummary(base_product(row["gpu_product"]))
        )
        summary.nodes += row["n"]
        summary.gpus += row["gpus"] or 0
        summary.mig_enabled_nodes += row["mig"]
        summary.time_sliced_nodes += row["shared"]
        summary.unschedulable_nodes += row["cordoned"]
    resource_rows = (
        NodeResource.objects.filter(node__in=nodes)
        .annotate(
            shared=ExpressionWrapper(Q(node__gpu_replicas__gt=1), output_field=BooleanField())
        )
        .values("node__gpu_product", "shared", "resource")
        .annotate(
            cap=Sum("capacity"), alloc=Sum("allocatable"), req=Sum("requested"), idle=Sum(IDLE)
        )
    )
    for row in resource_rows:
        summary = products[base_product(row["node__gpu_product"])]
        name, shared = row["resource"], bool(row["shared"])
        totals = summary.resources.setdefault(
            key(name, shared), ResourceTotals(name, replicas=shared)
        )
        totals.capacity += row["cap"] or 0
        totals.allocatable += row["alloc"] or 0
        totals.requested += row["req"] or 0
        totals.idle += row["idle"] or 0
    return sorted(products.values(), key=lambda p: p.product)


def fleet_totals(summaries: list[ProductSummary]) -> ProductSummary:
    total = ProductSummary("All products")
    for s in summaries:
        total.nodes += s.nodes
        total.gpus += s.gpus
        total.mig_enabled_nodes += s.mig_enabled_nodes
        total.time_sliced_nodes += s.time_sliced_nodes
        total.unschedulable_nodes += s.unschedulable_nodes
        for name, r in s.resources.items():
            t = total.resources.setdefault(name, ResourceTotals(r.resource, replicas=r.replicas))
            t.capacity += r.capacity
            t.allocatable += r.allocatable
            t.requested += r.requested
            t.idle += r.idle
    return total
