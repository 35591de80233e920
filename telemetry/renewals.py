"""How a team used the grant it asks to renew: allocated and busy GPU-hours of its namespace
over the last 7 days of the grant, and its GPUs idle now (the idle page's figure,
telemetry.summary), for the approvals queue's renewal cards."""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass
from datetime import datetime, timedelta

from django.utils import timezone

from inventory.models import GPU_RESOURCE
from quotas.models import Grant, QuotaRequest

from . import summary
from .insight import NsKey, attribute, nodes_with_pods_of
from .measured import measured_cluster_ids

RENEWAL_LOOKBACK = timedelta(days=7)


@dataclass
class GrantUtilisation:
    """How a namespace used its GPUs over ``start``-``end`` (for a renewal decision)."""

    start: datetime
    end: datetime
    granted_gpu_hours: float
    allocated_gpu_hours: float
    busy_gpu_hours: float  # utilisation-weighted
    idle_now: int
    measured: bool = True  # False: the namespace's cluster sends no telemetry
    cluster: str = ""
    # Where allocated_gpu_hours comes from: telemetry, the inventory's pod records
    # (inventory/podruns.py) where the cluster sends none, or nowhere (not measured).
    allocated_from: str = "telemetry"

    @property
    def hours(self) -> float:
        return (self.end - self.start).total_seconds() / 3600

    @property
    def avg_granted(self) -> float:
        return self.granted_gpu_hours / self.hours if self.hours else 0.0

    @property
    def avg_allocated(self) -> float:
        return self.allocated_gpu_hours / self.hours if self.hours else 0.0

    @property
    def allocated_pct(self) -> float | None:
        if not self.granted_gpu_hours:
            return None
        return 100 * self.allocated_gpu_hours / self.granted_gpu_hours

    @property
    def busy_pct(self) -> float | None:
        if not self.allocated_gpu_hours:
            return None
        return 100 * self.busy_gpu_hours / self.allocated_gpu_hours


def annotate_renewals(requests, now: datetime | None = None) -> None:
    """Set ``req.utilisation`` (a GrantUtilisation, or None) on every renewal request of
    whole GPUs in ``requests``: how its namespace used its GPUs over the last 7 days of the
    grant being renewed. A fixed number of queries for any number of requests."""
    from .showback import INVENTORY, TELEMETRY, granted_hours, used_hours

    now = now or timezone.now()
    renewals = [
        r
        for r in requests
        if r.kind == QuotaRequest.Kind.RENEWAL and r.resource == GPU_RESOURCE and r.target_grant
    ]
    for r in requests:
        r.utilisation = None
    if not renewals:
        return
    keys = {(r.namespace.cluster_id, r.namespace.name) for r in renewals}
    node_ids = list(nodes_with_pods_of(keys).values_list("node_id", flat=True))
    attribution = attribute(node_ids, now)
    start = now - RENEWAL_LOOKBACK
    used = used_hours(start, now, attribution, now=now)
    grants = Grant.objects.filter(
        namespace_id__in={r.namespace_id for r in renewals}, resource=GPU_RESOURCE
    ).select_related("namespace")
    idle = summary.read({c for c, _ in keys}, now, namespaces=keys).idle
    idle_by_ns: dict[NsKey, int] = defaultdict(int)
    for a in idle:
        idle_by_ns[a.key] += a.gpus
    measured = measured_cluster_ids({r.namespace.cluster_id for r in renewals})
    held = _held_by_inventory(renewals, measured, start, now)
    for r in renewals:
        key = (r.namespace.cluster_id, r.namespace.name)
        begin = max(start, r.target_grant.starts_at)
        alloc, busy = used_since(used, key, begin)
        source = TELEMETRY if r.namespace.cluster_id in measured else ""
        if not source and key in held:  # from the inventory's record, which may begin later
            (begin, alloc), source = held[key], INVENTORY
        if begin >= now:
            continue
        granted = granted_hours(
            [g for g in grants if g.namespace_id == r.namespace_id], begin, now, now=now
        )
        r.utilisation = GrantUtilisation(
            start=begin,
            end=now,
            granted_gpu_hours=sum(granted.values()),
            allocated_gpu_hours=alloc,
            busy_gpu_hours=busy,
            idle_now=idle_by_ns.get(key, 0),
            measured=r.namespace.cluster_id in measured,
            cluster=r.namespace.cluster.name,
            allocated_from=source,
        )


def _held_by_inventory(renewals, measured: set, start: datetime, now: datetime) -> dict:
    """{(cluster id, namespace): (from when, allocated GPU-hours from then)} from the
    inventory's pod records, for renewals on clusters that send no telemetry: from the
    later of the renewed grant's window and the start of the record (pods that ended
    before it are not known; inventory/podruns.py)."""
    from inventory import podruns

    since = podruns.recorded_since({r.namespace.cluster_id for r in renewals} - measured)
    windows = {}
    for r in renewals:
        at = since.get(r.namespace.cluster_id)
        if at is not None:
            begin = max(start, r.target_grant.starts_at, at)
            windows[(r.namespace.cluster_id, r.namespace.name)] = begin
    hours: dict = defaultdict(float)
    for (cluster_id, ns, _), h in podruns.allocated_in(windows, now).items():
        hours[(cluster_id, ns)] += h
    return {key: (begin, hours.get(key, 0.0)) for key, begin in windows.items()}


def used_since(used, key: NsKey, begin: datetime) -> tuple[float, float]:
    """Sum of (allocated, busy) GPU-hours of one namespace from hourly ``used`` rows."""
    alloc = busy = 0.0
    for hour, (a, b) in used.get(key, {}).items():
        if hour >= begin - timedelta(minutes=59, seconds=59):
            alloc += a
            busy += b
    return alloc, busy
