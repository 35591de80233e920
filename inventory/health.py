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
                    "Unhealthy GPU",
                    f"{r.resource}: allocatable {r.allocatable} < capacity {r.capacity}; "
                    "the device plugin marked devices unhealthy.",
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
