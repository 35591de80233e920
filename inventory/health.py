"""Node health signals an admin can act on (GPU-FACTS.md section 6).

Pure functions over inventory rows; the node list, node detail and API share them.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from typing import Literal

from django.db.models import QuerySet

from .models import Node

Level = Literal["ok", "info", "warning", "error"]


@dataclass(frozen=True)
class Badge:
    code: str
    level: Level
    label: str
    detail: str


def usual_drivers(nodes: QuerySet[Node]) -> dict[str, str]:
    """The most common driver version per GPU product (one query)."""
    counts: dict[str, Counter[str]] = defaultdict(Counter)
    rows = (
        nodes.present()
        .gpu()
        .exclude(driver_version="")
        .values_list("gpu_product", "driver_version")
    )
    for product, version in rows:
        counts[Node(gpu_product=product).base_product][version] += 1
    return {product: c.most_common(1)[0][0] for product, c in counts.items()}


LOST = "the agent reports it lost (NVML GpuIsLost)"


@dataclass(frozen=True)
class SuspectGpu:
    """A GPU of the node that its agent reports broken: the likely unhealthy device."""

    index: int
    uuid: str
    reason: str

    def __str__(self) -> str:
        return f"GPU {self.index} ({self.uuid or 'UUID unknown'}): {self.reason}"


def suspect_gpus(node: Node) -> list[SuspectGpu] | None:
    """The node's GPUs its agent reports lost; None: no agent reports from it.

    The device plugin only lowers allocatable; which device it marked unhealthy is known
    only from the node agent's telemetry. One query, made only for an unhealthy node (or
    read from ``node.suspects`` when a caller prefetched it).
    """
    if hasattr(node, "suspects"):
        return node.suspects
    if hasattr(node, "agent_reports"):  # annotated by with_suspects
        node.suspects = None if not node.agent_reports else [
            SuspectGpu(g["index"], g["uuid"], LOST) for g in node.lost_gpu_rows or []
        ]  # fmt: skip
        return node.suspects
    from telemetry.models import GpuState  # telemetry depends on inventory

    rows = list(GpuState.objects.filter(node=node).only("index", "uuid", "lost"))
    node.suspects = None if not rows else [
        SuspectGpu(g.index, g.uuid, LOST)
        for g in sorted(rows, key=lambda g: g.index)
        if g.lost
    ]  # fmt: skip
    return node.suspects


def with_suspects(queryset: QuerySet[Node]) -> QuerySet[Node]:
    """``queryset`` annotated with its nodes' lost GPUs, in the same query (node pages).

    ``suspect_gpus`` then reads the annotation instead of querying per unhealthy node.
    """
    from django.contrib.postgres.expressions import ArraySubquery
    from django.db.models import Exists, OuterRef
    from django.db.models.functions import JSONObject

    from telemetry.models import GpuState  # telemetry depends on inventory

    states = GpuState.objects.filter(node=OuterRef("pk"))
    return queryset.annotate(
        lost_gpu_rows=ArraySubquery(
            states.filter(lost=True)
            .order_by("index")
            .values(json=JSONObject(index="index", uuid="uuid"))
        ),
        agent_reports=Exists(states),
    )


def _unhealthy_detail(node: Node, resource: str, capacity: int, allocatable: int) -> str:
    missing = capacity - allocatable
    head = f"{resource}: allocatable {allocatable} < capacity {capacity}"
    suspects = suspect_gpus(node)
    if suspects is None:
        return (
            f"{head}; the device plugin marked {missing} device(s) unhealthy but does not "
            "say which, and no node agent reports from this node to tell."
        )
    if not suspects:
        return (
            f"{head}; the device plugin marked {missing} device(s) unhealthy, but the node "
            "agent reports every GPU readable: check the device plugin's log."
        )
    named = "; ".join(str(s) for s in suspects)
    more = missing - len(suspects)
    rest = f"; {more} more not identified" if more > 0 else ""
    return f"{head}: {named}{rest}."


def node_badges(node: Node, usual: dict[str, str] | None = None) -> list[Badge]:
    """Health badges for a node; ``node.resources`` should be prefetched."""
    badges: list[Badge] = []
    if node.gone_at:
        badges.append(Badge("gone", "error", "Gone", "No longer listed by the cluster."))
    if not node.ready:
        badges.append(
            Badge("not-ready", "error", "Not ready", "The node's Ready condition is not True.")
        )
    if node.unschedulable:
        badges.append(Badge("cordoned", "warning", "Cordoned", "New pods are not scheduled here."))
    for r in node.resources.all():
        if r.allocatable < r.capacity:
            badges.append(
                Badge(
                    "unhealthy-gpu",
                    "error",
                    _unhealthy_label(node),
                    _unhealthy_detail(node, r.resource, r.capacity, r.allocatable),
                )
            )
    if node.paused_operands:
        badges.append(
            Badge(
                "operands-paused",
                "warning",
                "GPU operands paused",
                "Not deployed: "
                + ", ".join(node.paused_operands)
                + " (CUDA workloads may fail to start).",
            )
        )
    if node.mig_config_state in ("pending", "rebooting"):
        badges.append(
            Badge(
                "mig-pending",
                "warning",
                "MIG change in progress",
                f"nvidia.com/mig.config.state={node.mig_config_state}",
            )
        )
    elif node.mig_config_state == "failed":
        badges.append(
            Badge(
                "mig-failed",
                "error",
                "MIG change failed",
                f"mig-manager could not apply {node.mig_config or 'the config'}.",
            )
        )
    expected = (usual or {}).get(node.base_product)
    if expected and node.driver_version and node.driver_version != expected:
        badges.append(
            Badge(
                "driver-skew",
                "warning",
                "Driver skew",
                f"Driver {node.driver_version}; most {node.base_product} nodes run {expected}.",
            )
        )
    return badges


def _unhealthy_label(node: Node) -> str:
    suspects = suspect_gpus(node) or []
    if not suspects:
        return "Unhealthy GPU"
    indexes = ", ".join(str(s.index) for s in suspects)
    return f"Unhealthy GPU {indexes}" if len(suspects) == 1 else f"Unhealthy GPUs {indexes}"
