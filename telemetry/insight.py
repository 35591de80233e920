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
from django.utils import timezone

from inventory.models import GPU_RESOURCE, GpuPod, Node
from quotas.models import Grant, TeamNamespace

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
    # Set by classes.set_idle_since(): since when its GPUs have been idle.
    idle_since: datetime | None = None

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
    node_ids=None,
    now: datetime | None = None,
    namespaces: set[NsKey] | None = None,
    attribution: Attribution | None = None,
) -> list[Allocation]:
    """Allocations whose GPUs stayed under the idle threshold for the idle window, oldest
    first; limited to ``namespaces`` ({(cluster id, name)}) when given. Four queries (two
    with ``attribution``, that of ``node_ids`` already made). The pages read these from
    telemetry.summary, which calls this."""
    now = now or timezone.now()
    if namespaces is not None:
        if not namespaces:
            return []
        node_ids = nodes_with_pods_of(namespaces)
    if attribution is None:
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


def nodes_with_pods_of(namespaces: set[NsKey]):
    """The nodes pods of ``namespaces`` run on (a subquery), and maybe a few more: a
    namespace of the same name on another of their clusters (callers keep only the
    allocations of ``namespaces``); two IN lists plan faster than hundreds of ORs."""
    return GpuPod.objects.filter(
        cluster_id__in={c for c, _ in namespaces},
        namespace__in={n for _, n in namespaces},
        node__isnull=False,
    ).values("node_id")


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


def held_and_busy(attribution: Attribution, util: dict[int, float], by=None) -> dict:
    """{(cluster id, namespace): (GPUs held, GPUs busy)} now, from the shares of
    ``attribution`` and each GPU's last-hour ``util``; with ``by`` (a function of the
    GpuState), grouped by its result instead (None: left out), e.g. the GPU's product."""
    threshold = idle_threshold_pct()
    out: dict = defaultdict(lambda: [0.0, 0.0])
    for gpu_id, owners in attribution.shares.items():
        busy = util.get(gpu_id, 0.0) >= threshold
        group = None if by is None else by(attribution.gpus[gpu_id])
        if by is not None and group is None:
            continue
        for key, share in owners.items():
            cell = out[key if by is None else group]
            cell[0] += share
            if busy:
                cell[1] += share
    return {k: (a, b) for k, (a, b) in out.items()}


def team_rows(teams, held: dict[NsKey, tuple[float, float]], now: datetime | None = None):
    """One UsageRow per team (whole GPUs): granted from active grants, requested from the
    inventory's NamespaceUsage, held/busy from ``held`` ({(cluster id, namespace): (held,
    busy)}, telemetry.summary's); which of its clusters send no telemetry (held and busy
    there: not measured). Six queries."""
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
        for key, team_id in ns_team.items():
            h, b = held.get(key, (0.0, 0.0))
            rows[team_id].held += h
            rows[team_id].busy += b
    return list(rows.values())
