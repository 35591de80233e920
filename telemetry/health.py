"""Telemetry health signals (GPU-FACTS.md section 6), beside ``inventory.health``'s labels.

Each signal is a ``Badge`` (the inventory's type, so the same partial renders both) tied
to a node and, where it is about one GPU, a GPU index. ``fleet_signals`` computes all of
them for the admin list in a fixed number of queries; ``node_signals`` those of one node.
"""

from __future__ import annotations

from collections import Counter, defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.conf import settings
from django.utils import timezone

from inventory.health import Badge
from inventory.models import Node, NodeResource

from . import summary
from .insight import idle_threshold_pct, idle_window
from .models import GpuState, NodeTelemetry
from .promstate import EXPORTER
from .visibility import PodNames

# GPU memory in use with no process above this (MiB) smells of a leaked context.
ORPHAN_MEMORY_MIB = 1024


def mig_stuck_after() -> timedelta:
    return timedelta(minutes=float(getattr(settings, "TELEMETRY_MIG_STUCK_MINUTES", 30)))


@dataclass(frozen=True)
class Signal:
    node: Node
    badge: Badge
    gpu_index: int | None = None

    @property
    def code(self) -> str:
        return self.badge.code


CODES = {
    "not-reporting": "Node not reporting",
    "gpu-lost": "GPU lost",
    "gpu-xid": "XID error",
    "unhealthy-gpu": "Allocatable < capacity",
    "agent-driver-skew": "Driver skew",
    "orphan-memory": "Memory used, no process",
    "mig-stuck": "MIG change stuck",
    "mig-mode-pending": "MIG mode change pending",
    "idle-allocation": "Allocated GPUs idle",
}


def usual_agent_drivers(rows) -> dict[str, str]:
    """Most common agent-reported driver per base product from (product, version) pairs."""
    counts: dict[str, Counter] = defaultdict(Counter)
    for product, version in rows:
        if version:
            counts[Node(gpu_product=product).base_product][version] += 1
    return {p: c.most_common(1)[0][0] for p, c in counts.items()}


def _gpu_signals(node: Node, g: GpuState, now: datetime) -> list[Signal]:
    out = []
    if g.lost:
        out.append(
            Signal(
                node,
                Badge(
                    "gpu-lost",
                    "error",
                    f"GPU {g.index} lost",
                    f"GPU {g.index} ({g.uuid or 'unknown UUID'}) fell off the bus "
                    "(NVML GpuIsLost): drain the node and reset or replace the GPU.",
                ),
                g.index,
            )
        )
        return out
    if g.stale_after < now:
        return out
    if g.xid_last:
        out.append(
            Signal(
                node,
                Badge(
                    "gpu-xid",
                    "error",
                    f"GPU {g.index}: XID {g.xid_last}",
                    f"The GPU's latest XID error is {g.xid_last} (DCGM_FI_DEV_XID_ERRORS): look "
                    "it up in NVIDIA's XID catalogue; 48, 63, 64, 74, 79 and 94/95 need a reset "
                    "or a drain.",
                ),
                g.index,
            )
        )
    # dcgm-exporter lists no processes ("processes" unsupported): no orphan to tell.
    if (
        (g.memory_used_mib or 0) >= ORPHAN_MEMORY_MIB
        and not g.processes
        and "processes" not in (g.unsupported or [])
    ):
        out.append(
            Signal(
                node,
                Badge(
                    "orphan-memory",
                    "warning",
                    f"GPU {g.index}: memory used, no process",
                    f"{g.memory_used_mib} MiB in use on GPU {g.index} with no running process: "
                    "a leaked context or a process in another PID namespace.",
                ),
                g.index,
            )
        )
    if g.mig_pending is not None and g.mig_current is not None and g.mig_pending != g.mig_current:
        out.append(
            Signal(
                node,
                Badge(
                    "mig-mode-pending",
                    "warning",
                    f"GPU {g.index}: MIG mode change pending",
                    f"MIG mode is {'on' if g.mig_current else 'off'} and pending "
                    f"{'on' if g.mig_pending else 'off'}: it applies after a GPU reset.",
                ),
                g.index,
            )
        )
    return out


def _not_reporting(tele: NodeTelemetry) -> str:
    if tele.agent_version == EXPORTER:
        return (
            f"No sample in Prometheus since {tele.last_report_timestamp:%Y-%m-%d %H:%M} UTC: "
            "is dcgm-exporter running on the node, and does Prometheus scrape it?"
        )
    return (
        f"No agent report since {tele.last_report_at:%Y-%m-%d %H:%M} UTC "
        f"(every {tele.interval_s} s expected): is the agent pod running?"
    )


def _node_signals(
    node: Node,
    tele: NodeTelemetry | None,
    gpus: list[GpuState],
    resources: list[NodeResource],
    usual: dict[str, str],
    now: datetime,
) -> list[Signal]:
    out: list[Signal] = []
    if tele is not None and tele.stale_after < now and not node.gone_at:
        out.append(
            Signal(
                node,
                Badge(
                    "not-reporting",
                    "error",
                    "Not reporting",
                    _not_reporting(tele),
                ),
            )
        )
    for r in resources:
        if r.allocatable < r.capacity:
            out.append(
                Signal(
                    node,
                    Badge(
                        "unhealthy-gpu",
                        "error",
                        "Allocatable < capacity",
                        f"{r.resource}: {r.allocatable} allocatable of {r.capacity}; "
                        "the device plugin marked devices unhealthy.",
                    ),
                )
            )
    expected = usual.get(node.base_product)
    if tele is not None and tele.driver_version and expected and tele.driver_version != expected:
        out.append(
            Signal(
                node,
                Badge(
                    "agent-driver-skew",
                    "warning",
                    "Driver skew",
                    f"The agent reports driver {tele.driver_version}; most "
                    f"{node.base_product} nodes run {expected} (pods may fail to start).",
                ),
            )
        )
    if (
        node.mig_config_state in ("pending", "rebooting")
        and node.last_changed_at < now - mig_stuck_after()
    ):
        minutes = int((now - node.last_changed_at).total_seconds() // 60)
        out.append(
            Signal(
                node,
                Badge(
                    "mig-stuck",
                    "error",
                    "MIG change stuck",
                    f"mig.config.state={node.mig_config_state} for at least {minutes} min: "
                    "check the mig-manager pod's log.",
                ),
            )
        )
    for g in gpus:
        out.extend(_gpu_signals(node, g, now))
    return out


def _idle_signals(allocations, pod_names: PodNames | None) -> list[Signal]:
    """``pod_names`` None: an admin list (every name shown)."""
    hours = idle_window().total_seconds() / 3600
    out = []
    for a in allocations:
        shown = pod_names is None or pod_names.visible(a.node.cluster_id, a.namespace)
        who = f"{a.namespace}/{a.pod}" if shown else a.namespace
        out.append(
            Signal(
                a.node,
                Badge(
                    "idle-allocation",
                    "warning",
                    f"{a.gpus} allocated GPU{'s' if a.gpus != 1 else ''} idle",
                    f"{who}: under {idle_threshold_pct():g} % utilisation for {hours:g} h "
                    f"(GPUs {', '.join(map(str, a.gpu_indexes))}, by {a.method}).",
                ),
            )
        )
    return out


def fleet_signals(now: datetime | None = None) -> list[Signal]:
    """Every telemetry signal of present GPU nodes (admin list). Nine queries."""
    now = now or timezone.now()
    nodes = list(
        Node.objects.present().gpu().select_related("cluster", "telemetry").order_by("name")
    )
    ids = [n.pk for n in nodes]
    gpus: dict = defaultdict(list)
    for g in GpuState.objects.filter(node_id__in=ids).order_by("node_id", "index"):
        gpus[g.node_id].append(g)
    resources: dict = defaultdict(list)
    for r in NodeResource.objects.filter(node_id__in=ids):
        resources[r.node_id].append(r)
    usual = usual_agent_drivers(
        (n.gpu_product, _tele(n).driver_version) for n in nodes if _tele(n) is not None
    )
    out = []
    for n in nodes:
        out.extend(_node_signals(n, _tele(n), gpus[n.pk], resources[n.pk], usual, now))
    by_id = {n.pk: n for n in nodes}
    idle = [a for a in summary.read(now=now).idle if a.node.pk in by_id]
    for a in idle:
        a.node = by_id[a.node.pk]
    out.extend(_idle_signals(idle, pod_names=None))
    return out


def node_signals(node: Node, gpus: list[GpuState], tele, pod_names: PodNames) -> list[Badge]:
    """Badges for one node's page (``node.resources`` prefetched or queried once)."""
    now = timezone.now()
    rows = (
        NodeTelemetry.objects.filter(node__gone_at__isnull=True)
        .exclude(driver_version="")
        .values_list("node__gpu_product", "driver_version")
    )
    usual = usual_agent_drivers(rows)
    signals = _node_signals(node, tele, gpus, [], usual, now)
    idle = summary.read([node.cluster_id], now, node_ids={node.pk}).idle
    signals += _idle_signals(idle, pod_names)
    return [s.badge for s in signals]


def _tele(node: Node) -> NodeTelemetry | None:
    try:
        return node.telemetry
    except NodeTelemetry.DoesNotExist:
        return None
