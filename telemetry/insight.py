"""What telemetry says about allocations: who holds which GPU, which allocations sit idle,
how a renewal's grant was really used, and the Prometheus ``idle GPUs`` gauge.

Attribution (which pod holds which GPU), in order of trust:

1. **agent**: the agent maps GPU UUIDs to pods through the kubelet pod-resources API and
   reports ``processes[].pod`` as ``"namespace/name"``; a GPU running a process of a pod
   belongs to that pod (shared equally when several pods run on it). For Prometheus
   clusters dcgm-exporter's pod labels do the same (telemetry.promstate), per MIG
   instance where the series name one (``Allocation.instances``).
2. **requests**: for running pods on the node the agent did not attribute, the portal
   knows only how many ``nvidia.com/gpu`` they request (``GpuPod.requests``), not which
   ones. Their candidate GPUs are the node's GPUs no agent-attributed pod holds; each pod
   gets ``request / max(candidates, total requests)`` of every candidate GPU, so the shares
   add up to its request (or less on an overcommitted node). Such a pod counts as idle
   only when *every* candidate GPU stayed idle: with two pods on a node and one busy GPU
   the portal cannot tell whose it is, so neither is listed (no false alarms).

MIG slices are attributed only by the agent (a slice request says nothing of which GPU).
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta

from django.conf import settings
from django.db.models import Q
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from inventory.models import GPU_RESOURCE, GpuPod, Node
from quotas.models import Grant, QuotaRequest, TeamNamespace

from . import sources
from .measured import measured_cluster_ids
from .models import GpuState

BUCKET = timedelta(minutes=5)
# A GPU's window counts only when at least this share of its 5-minute points has data.
MIN_COVERAGE = 0.8

NsKey = tuple  # (cluster id, namespace name)


def idle_threshold_pct() -> float:
    return float(getattr(settings, "TELEMETRY_IDLE_THRESHOLD_PCT", 5))


def idle_window() -> timedelta:
    return timedelta(hours=float(getattr(settings, "TELEMETRY_IDLE_WINDOW_HOURS", 2)))


# -- attribution --------------------------------------------------------------------------


@dataclass
class Allocation:
    """One pod's hold on GPUs of one node."""

    node: Node
    namespace: str
    pod: str
    method: str  # "agent" or "requests"
    # agent: its GPUs; requests: the candidates (gpu_ids and gpu_indexes derive from these)
    gpu_states: list[GpuState] = field(default_factory=list)
    # {gpu id: MIG instance ids} where the telemetry names the instances the pod uses (a
    # Prometheus source's GPU_I_ID): those instances are judged, not the whole GPU.
    instances: dict[int, set[str]] = field(default_factory=dict)
    requested: int = 0
    since: datetime | None = None
    team: object | None = None
    # Filled by idle_allocations(): the highest 5-minute mean, and the metric it comes from.
    max_util_pct: float | None = None
    metric: str = ""

    @property
    def gpu_ids(self) -> list[int]:
        return [g.pk for g in self.gpu_states]

    @property
    def gpu_indexes(self) -> list[int]:
        return [g.index for g in self.gpu_states]

    @property
    def key(self) -> NsKey:
        return (self.node.cluster_id, self.namespace)

    def judged_keys(self) -> list:
        """What its idleness is judged on: each GPU id, or (GPU id, MIG instance id) for
        the instances the telemetry says it holds."""
        return [
            key
            for g in self.gpu_ids
            for key in ([(g, i) for i in sorted(self.instances[g])] if g in self.instances else [g])
        ]

    @property
    def gpus(self) -> int:
        """GPUs this allocation holds (requests: what it asked for, up to the candidates)."""
        if self.method == "agent":
            return len(self.gpu_ids)
        return min(self.requested, len(self.gpu_ids))


@dataclass
class Attribution:
    allocations: list[Allocation]
    # gpu id -> {(cluster id, namespace): share of the GPU}
    shares: dict[int, dict[NsKey, float]]
    gpus: dict[int, GpuState]


def _gpu_request(pod: GpuPod) -> int:
    try:
        return int((pod.requests or {}).get(GPU_RESOURCE, 0))
    except (TypeError, ValueError):
        return 0


def _since(pod) -> datetime:
    """When a pod began holding its GPUs: its start, else its creation, else first seen."""
    return pod.started_at or pod.k8s_created_at or pod.first_seen_at


def attribute(node_ids=None, now: datetime | None = None) -> Attribution:
    """Who holds which GPU now, on ``node_ids`` (None: every node). Two queries."""
    gpus_qs = GpuState.objects.select_related("node").only(
        "id", "node_id", "index", "lost", "processes", "node__cluster_id", "node__name",
        "node__gpu_product", "node__gpu_class",
    )  # fmt: skip
    pods_qs = GpuPod.objects.filter(node__isnull=False, phase="Running").only(
        "id",
        "node_id",
        "namespace",
        "name",
        "requests",
        "started_at",
        "k8s_created_at",
        "first_seen_at",
    )
    if node_ids is not None:
        gpus_qs = gpus_qs.filter(node_id__in=node_ids)
        pods_qs = pods_qs.filter(node_id__in=node_ids)
    by_node: dict = defaultdict(list)
    gpus = {}
    for g in gpus_qs:
        by_node[g.node_id].append(g)
        gpus[g.pk] = g
    pods_by_node: dict = defaultdict(list)
    for p in pods_qs:
        pods_by_node[p.node_id].append(p)

    allocations: list[Allocation] = []
    shares: dict[int, dict[NsKey, float]] = defaultdict(dict)
    for node_id, node_gpus in by_node.items():
        node = node_gpus[0].node
        pods = {(p.namespace, p.name): p for p in pods_by_node.get(node_id, [])}
        agent: dict[tuple, Allocation] = {}
        held = set()
        for g in sorted(node_gpus, key=lambda g: g.index):
            names = sorted({p["pod"] for p in g.processes or [] if p.get("pod")})
            for full in names:
                ns, _, name = full.partition("/")
                alloc = agent.get((ns, name))
                if alloc is None:
                    pod = pods.get((ns, name))
                    alloc = agent[(ns, name)] = Allocation(
                        node, ns, name, "agent",
                        requested=_gpu_request(pod) if pod else 0,
                        since=_since(pod) if pod else None,
                    )  # fmt: skip
                alloc.gpu_states.append(g)
                instances = {
                    str(p["gpu_instance"])
                    for p in g.processes or []
                    if p.get("pod") == full and p.get("gpu_instance") is not None
                }
                if instances:
                    alloc.instances[g.pk] = instances
                share = 1.0 / len(names)
                shares[g.pk][(node.cluster_id, ns)] = shares[g.pk].get((node.cluster_id, ns), 0)
                shares[g.pk][(node.cluster_id, ns)] += share
                held.add(g.pk)
        allocations.extend(agent.values())
        rest = [p for key, p in sorted(pods.items()) if key not in agent and _gpu_request(p) > 0]
        candidates = [g for g in sorted(node_gpus, key=lambda g: g.index) if g.pk not in held]
        if not rest or not candidates:
            continue
        total = sum(_gpu_request(p) for p in rest)
        divisor = max(len(candidates), total)
        for p in rest:
            req = _gpu_request(p)
            allocations.append(
                Allocation(
                    node,
                    p.namespace,
                    p.name,
                    "requests",
                    gpu_states=list(candidates),
                    requested=req,
                    since=_since(p),
                )
            )
            for g in candidates:
                key = (node.cluster_id, p.namespace)
                shares[g.pk][key] = shares[g.pk].get(key, 0) + req / divisor
    return Attribution(allocations, dict(shares), gpus)


def namespace_teams(keys) -> dict[NsKey, object]:
    """{(cluster id, namespace): Team} for the namespaces a team owns (one query)."""
    keys = set(keys)
    if not keys:
        return {}
    rows = TeamNamespace.objects.filter(
        cluster_id__in={c for c, _ in keys}, name__in={n for _, n in keys}
    ).select_related("team")
    return {(ns.cluster_id, ns.name): ns.team for ns in rows}


# -- idle ---------------------------------------------------------------------------------


def _idle_from(stats: dict) -> set:
    """The keys (GPU ids, or (GPU id, MIG instance)) whose every 5-minute mean stayed under
    the threshold for the whole window, with data for at least 80 % of it: a GPU that did
    not report is not called idle."""
    needed = MIN_COVERAGE * (idle_window() / BUCKET)
    threshold = idle_threshold_pct()
    return {
        gpu_id
        for gpu_id, (peak, points) in stats.items()
        if peak is not None and peak < threshold and points >= needed
    }


def idle_allocations(
    node_ids=None, now: datetime | None = None, namespaces: set[NsKey] | None = None
) -> list[Allocation]:
    """Allocations whose GPUs stayed under the idle threshold for the idle window, oldest
    first; limited to ``namespaces`` ({(cluster id, name)}) when given. Four queries."""
    now = now or timezone.now()
    if namespaces is not None:
        if not namespaces:
            return []
        node_ids = _nodes_with_pods_of(namespaces)
    attribution = attribute(node_ids, now)
    allocations = [
        a
        for a in attribution.allocations
        if (namespaces is None or a.key in namespaces)
        and a.since is not None
        and a.since <= now - idle_window()
    ]
    gpus = {g.pk: g for a in allocations for g in a.gpu_states}
    stats, metrics = sources.window_stats(list(gpus.values()), now, idle_window())
    idle = _idle_from(stats)
    teams = namespace_teams(a.key for a in allocations)
    out = []
    for a in allocations:
        judged = a.judged_keys()
        if not judged or not all(k in idle for k in judged) or a.gpus == 0:
            continue
        a.team = teams.get(a.key)
        peaks = [stats[k][0] for k in judged if k in stats and stats[k][0] is not None]
        a.max_util_pct = max(peaks) if peaks else None
        a.metric = metrics.get(a.node.cluster_id, "")
        out.append(a)
    return sorted(out, key=lambda a: (a.since, a.namespace, a.pod))


def _nodes_with_pods_of(namespaces: set[NsKey]):
    q = Q()
    for cluster_id, name in namespaces:
        q |= Q(cluster_id=cluster_id, namespace=name)
    return GpuPod.objects.filter(q, node__isnull=False).values("node_id")


# -- renewals -----------------------------------------------------------------------------

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
    node_ids = list(_nodes_with_pods_of(keys).values_list("node_id", flat=True))
    attribution = attribute(node_ids, now)
    start = now - RENEWAL_LOOKBACK
    used = used_hours(start, now, attribution, now=now)
    grants = Grant.objects.filter(
        namespace_id__in={r.namespace_id for r in renewals}, resource=GPU_RESOURCE
    ).select_related("namespace")
    idle = idle_allocations(node_ids=node_ids, now=now)
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


# -- Prometheus ---------------------------------------------------------------------------


class IdleGpuCollector:
    """``portal_idle_gpus{cluster, team, namespace}``: GPUs held by pods that stayed under
    the idle threshold for the idle window (register in ``portal.health.REGISTRY``)."""

    def collect(self):
        family = GaugeMetricFamily(
            "portal_idle_gpus",
            "GPUs of allocations under the idle threshold for the whole idle window",
            labels=["cluster", "team", "namespace"],
        )
        counts: dict[tuple, int] = defaultdict(int)
        for a in idle_allocations():
            counts[(a.node.cluster_id, a.team.slug if a.team else "", a.namespace)] += a.gpus
        slugs = _cluster_slugs({k[0] for k in counts})
        for (cluster_id, team, namespace), n in sorted(counts.items(), key=str):
            family.add_metric([slugs.get(cluster_id, str(cluster_id)), team, namespace], n)
        yield family


def _cluster_slugs(ids) -> dict:
    from inventory.models import Cluster

    if not ids:
        return {}
    return dict(Cluster.objects.filter(pk__in=ids).values_list("pk", "slug"))


# -- dashboards ---------------------------------------------------------------------------


@dataclass
class UsageRow:
    """Granted / requested / held / busy GPUs of one team, namespace or product, now."""

    label: str
    granted: int = 0
    requested: int = 0
    held: float = 0.0  # GPUs attributed to its pods (shares)
    busy: float = 0.0  # of those, GPUs at or above the idle threshold over the last hour
    capacity: int = 0
    util_pct: float | None = None  # mean utilisation of its GPUs over the period shown
    unmeasured: list = field(default_factory=list)  # names of its clusters without telemetry
    measured_any: bool = True  # False: none of its clusters sends telemetry (held: not measured)

    @property
    def busy_pct(self) -> float | None:
        return 100 * self.busy / self.held if self.held else None


@dataclass
class Now:
    """Who holds which GPU and how busy each was over the last hour: what the held/busy
    columns of several tables on one page read (computed once per page, :func:`now_of`)."""

    attribution: Attribution
    util: dict[int, float]


def now_of(node_ids=None, now: datetime | None = None) -> Now:
    now = now or timezone.now()
    attribution = attribute(node_ids, now)
    return Now(attribution, sources.last_hour_util(list(attribution.gpus.values()), now))


def held_and_busy(
    attribution: Attribution, now: datetime, util: dict[int, float] | None = None
) -> dict[NsKey, tuple[float, float]]:
    """{(cluster id, namespace): (GPUs held, GPUs busy)} now (one query, none with ``util``)."""
    if util is None:
        util = sources.last_hour_util([attribution.gpus[i] for i in attribution.shares], now)
    threshold = idle_threshold_pct()
    out: dict = defaultdict(lambda: [0.0, 0.0])
    for gpu_id, owners in attribution.shares.items():
        busy = util.get(gpu_id, 0.0) >= threshold
        for key, share in owners.items():
            out[key][0] += share
            if busy:
                out[key][1] += share
    return {k: (a, b) for k, (a, b) in out.items()}


def team_rows(teams, now: datetime | None = None, current: Now | None = None) -> list[UsageRow]:
    """One UsageRow per team (whole GPUs): granted from active grants, requested from the
    inventory's NamespaceUsage, held/busy from attribution; which of its clusters send no
    telemetry (held and busy there: not measured). Nine queries."""
    from inventory.models import NamespaceUsage

    now = now or timezone.now()
    teams = list(teams)
    namespaces = list(TeamNamespace.objects.filter(team__in=teams).select_related("cluster"))
    ns_team = {(ns.cluster_id, ns.name): ns.team_id for ns in namespaces}
    rows = {t.pk: UsageRow(label=t.name) for t in teams}
    for row, t in zip(rows.values(), teams, strict=True):
        row.team = t
    measured = measured_cluster_ids({ns.cluster_id for ns in namespaces})
    clusters: dict = defaultdict(dict)
    for ns in namespaces:
        clusters[ns.team_id][ns.cluster_id] = ns.cluster.name
    for team_id, names in clusters.items():
        rows[team_id].unmeasured = sorted(n for c, n in names.items() if c not in measured)
        rows[team_id].measured_any = any(c in measured for c in names)
    for g in (
        Grant.objects.active_at(now)
        .filter(namespace__in=namespaces, resource=GPU_RESOURCE)
        .select_related("namespace")
    ):
        rows[g.namespace.team_id].granted += g.amount
    if namespaces:
        usage = NamespaceUsage.objects.filter(
            resource=GPU_RESOURCE,
            cluster_id__in={c for c, _ in ns_team},
            namespace__in={n for _, n in ns_team},
        ).values_list("cluster_id", "namespace", "requested")
        for cluster_id, name, requested in usage:
            team_id = ns_team.get((cluster_id, name))
            if team_id is not None:
                rows[team_id].requested += requested
        if current is None:  # only the nodes where the teams' pods run
            node_ids = list(_nodes_with_pods_of(set(ns_team)).values_list("node_id", flat=True))
            current = now_of(node_ids, now)
        for key, (held, busy) in held_and_busy(current.attribution, now, current.util).items():
            team_id = ns_team.get(key)
            if team_id is not None:
                rows[team_id].held += held
                rows[team_id].busy += busy
    return list(rows.values())


def product_rows(
    now: datetime | None = None, hours: int = 24, current: Now | None = None
) -> list[UsageRow]:
    """One UsageRow per base GPU product: capacity / requested from the inventory, GPUs
    reporting, held and busy now, and mean utilisation over ``hours``."""
    from django.db.models import Sum

    from inventory.models import NodeResource, base_product

    now = now or timezone.now()
    rows: dict[str, UsageRow] = {}

    def row(product: str) -> UsageRow:
        p = base_product(product)
        return rows.setdefault(p, UsageRow(label=p))

    for product, cap, req in (
        NodeResource.objects.filter(node__gone_at__isnull=True, resource=GPU_RESOURCE)
        .exclude(node__gpu_product="")
        .values("node__gpu_product")
        .annotate(c=Sum("capacity"), r=Sum("requested"))
        .values_list("node__gpu_product", "c", "r")
    ):
        row(product).capacity += cap or 0
        row(product).requested += req or 0
    current = current or now_of(None, now)
    attribution, util = current.attribution, current.util
    threshold = idle_threshold_pct()
    for gpu_id, g in attribution.gpus.items():
        if not g.node.gpu_product:
            continue
        share = sum(attribution.shares.get(gpu_id, {}).values())
        r = row(g.node.gpu_product)
        r.held += share
        if util.get(gpu_id, 0.0) >= threshold:
            r.busy += share
    series = product_series(now, hours)
    for product, points in series.items():
        total = sum(s for s, n in points.values())
        count = sum(n for s, n in points.values())
        if product in rows and count:
            rows[product].util_pct = total / count
    return sorted(rows.values(), key=lambda r: r.label)


def product_series(now: datetime, hours: int = 24) -> dict[str, dict[datetime, tuple]]:
    """{base product: {hour: (utilisation sum, samples)}} over the last ``hours``, each
    cluster's GPUs from its telemetry source (telemetry.sources)."""
    start = now.replace(minute=0, second=0, microsecond=0) - timedelta(hours=hours - 1)
    return sources.product_series(start, now)
