"""Showback: GPU-hours granted and used per team per month.

- **Granted** GPU-hours of a grant in a period: ``amount`` x the hours of the period its
  window covers, the window being ``starts_at`` to the first of ``ends_at`` / ``ended_at``
  (released early) / now. A temporary grant crossing a month boundary is split exactly.
- **Allocated** GPU-hours: for every history point of a GPU attributed to the team's
  namespaces (``telemetry.insight.attribute``), the point's duration (5 minutes or 1 hour,
  when the GPU reported in it) x the team's share of the GPU.
- **Busy** GPU-hours (utilisation-weighted): the same, x the point's mean utilisation.
  ``busy / allocated`` is how hard the GPUs a team held actually worked.

History comes from each cluster's telemetry source (telemetry.sources): for agent clusters
the hourly points for closed hours (rolled up every 10 minutes, last 3 hours re-rolled) and
the 5-minute points for the last two hours; for Prometheus clusters the same 5-minute
points computed by Prometheus from dcgm-exporter's samples. Attribution is the one of
the hour: the figures' computation (telemetry.summary) writes each namespace's GPU-hours
per hour and class (UsageHour) with the attribution of that moment, and showback sums
those rows (:func:`used_cells`); hours before a cluster's rows begin use the *current*
attribution (who holds which GPU now) for the whole span: exact for allocations that
lasted it, approximate for pods that came and went.

Every figure is a sum of :class:`Ledger` cells kept per GPU class (the grant's class; the
class of the node a GPU is on), so the per-team rows here and the per-class rows of
``telemetry.classes`` add up the same numbers.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime

from django.db.models import Q, Sum
from django.utils import timezone

from inventory.models import GPU_RESOURCE
from quotas.models import Grant, Team

from . import sources
from .insight import Attribution, NsKey, attribute, nodes_with_pods_of

MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")
MIN_YEAR, MAX_YEAR = 2000, 2999


# Where allocated GPU-hours come from (ShowbackRow.allocated_from, the API, the CSVs).
TELEMETRY, INVENTORY = "telemetry", "inventory"


class BadMonth(ValueError):
    pass


def parse_month(value: str | None, now: datetime | None = None) -> tuple[str, datetime, datetime]:
    """``"2026-11"`` -> (label, first instant, first instant of next month), UTC; empty:
    the current month. Raises BadMonth."""
    now = now or timezone.now()
    if not value:
        value = now.astimezone(UTC).strftime("%Y-%m")
    m = MONTH.match(value)
    if not m:
        raise BadMonth("Use a month as YYYY-MM, e.g. 2026-11.")
    year, month = int(m.group(1)), int(m.group(2))
    if not MIN_YEAR <= year <= MAX_YEAR:  # 9999-12 would end in year 10000: no datetime
        raise BadMonth(f"Use a month between {MIN_YEAR}-01 and {MAX_YEAR}-12.")
    start = datetime(year, month, 1, tzinfo=UTC)
    end = datetime(year + month // 12, month % 12 + 1, 1, tzinfo=UTC)
    return value, start, end


def month_choices(now: datetime | None = None, count: int = 13) -> list[str]:
    """The current month and the ones before it, newest first."""
    now = (now or timezone.now()).astimezone(UTC)
    year, month = now.year, now.month
    out = []
    for _ in range(count):
        out.append(f"{year:04d}-{month:02d}")
        year, month = (year, month - 1) if month > 1 else (year - 1, 12)
    return out


# -- granted ------------------------------------------------------------------------------


def grant_end(g: Grant) -> datetime | None:
    ends = [t for t in (g.ends_at, g.ended_at) if t is not None]
    return min(ends) if ends else None


def grant_hours_in(g: Grant, start: datetime, stop: datetime) -> float:
    """Amount-hours of one grant within [start, stop)."""
    g_end = grant_end(g)
    a = max(start, g.starts_at)
    b = stop if g_end is None else min(stop, g_end)
    return g.amount * (b - a).total_seconds() / 3600 if b > a else 0.0


def granted_hours(grants, start: datetime, end: datetime, now: datetime | None = None):
    """{(namespace id, resource): amount-hours} of ``grants`` within [start, min(end, now))."""
    now = now or timezone.now()
    stop = min(end, now)
    out: dict[tuple, float] = defaultdict(float)
    for g in grants:
        hours = grant_hours_in(g, start, stop)
        if hours:
            out[(g.namespace_id, g.resource)] += hours
    return dict(out)


def grants_in(start: datetime, end: datetime):
    """Grants whose window touches [start, end), released ones included (up to release)."""
    return Grant.objects.filter(starts_at__lt=end).filter(
        Q(ends_at__isnull=True) | Q(ends_at__gt=start),
        Q(ended_at__isnull=True) | Q(ended_at__gt=start),
    )


# -- used ---------------------------------------------------------------------------------


def used_hours(
    start: datetime, end: datetime, attribution: Attribution, now: datetime | None = None
) -> dict[NsKey, dict[datetime, tuple[float, float]]]:
    """{(cluster id, namespace): {hour: (allocated GPU-hours, busy GPU-hours)}}."""
    now = now or timezone.now()
    out: dict = defaultdict(lambda: defaultdict(lambda: [0.0, 0.0]))
    held = [attribution.gpus[i] for i in attribution.shares]
    for gpu_id, hour, hours, busy in sources.gpu_hours(held, start, end, now, by_hour=True):
        for key, share in attribution.shares[gpu_id].items():
            cell = out[key][hour]
            cell[0] += hours * share
            cell[1] += busy * share
    return {k: {h: (a, b) for h, (a, b) in v.items()} for k, v in out.items()}


def used_cells(
    keys: set[NsKey], start: datetime, end: datetime, now: datetime, *, by_hour: bool = True
) -> dict:
    """{(cluster id, namespace, GPU class id, hour): [allocated, busy GPU-hours]} of the
    namespaces ``keys`` in [start, min(end, now)): the UsageHour rows the figures'
    computation writes (telemetry.summary) from when they cover each cluster, and before
    that the history with the current attribution. ``by_hour`` False: summed over the
    span by PostgreSQL (hour None), as showback needs them (a month of 400 namespaces is
    some 10^6 rows). A fixed number of queries."""
    from . import summary
    from .models import UsageHour

    out: dict = defaultdict(lambda: [0.0, 0.0])
    stop = min(end, now)
    if start >= stop or not keys:
        return out
    since = summary.usage_since({c for c, _ in keys}, now)
    covered = Q(pk__in=[])
    for cluster_id, at in since.items():
        covered |= Q(cluster_id=cluster_id, hour__gte=at)
    fields = ["cluster_id", "namespace", "gpu_class_id", *(["hour"] if by_hour else [])]
    rows = (
        UsageHour.objects.filter(covered, namespace__in={n for _, n in keys},
                                 hour__gte=start, hour__lt=stop)
        .values_list(*fields)
        .annotate(a=Sum("allocated"), b=Sum("busy"))
        .order_by()
    )  # fmt: skip
    for row in rows:
        cluster_id, ns, class_id = row[:3]
        if (cluster_id, ns) in keys:
            cell = out[(cluster_id, ns, class_id, row[3] if by_hour else None)]
            cell[0] += row[-2]
            cell[1] += row[-1]
    early = {c: at for c, at in since.items() if at > start}  # hours before the rows begin
    before = {k for k in keys if k[0] in early}
    if not before:
        return out
    attribution = attribute(nodes_with_pods_of(before), now)
    held: dict = defaultdict(list)
    for gpu_id, owners in attribution.shares.items():
        if any(key in before for key in owners):
            g = attribution.gpus[gpu_id]
            held[g.node.cluster_id].append(g)
    for cluster_id, gpus in held.items():
        upto = min(end, early[cluster_id])
        for gpu_id, hour, hours, busy in sources.gpu_hours(gpus, start, upto, now, by_hour=by_hour):
            class_id = attribution.gpus[gpu_id].node.gpu_class_id
            for key, share in attribution.shares[gpu_id].items():
                if key in before:
                    cell = out[(*key, class_id, hour)]
                    cell[0] += hours * share
                    cell[1] += busy * share
    return out


# -- the report ---------------------------------------------------------------------------


@dataclass
class ShowbackRow:
    team: Team
    resource: str
    granted_hours: float
    allocated_hours: float | None  # None: not measured (MIG slices; no telemetry)
    busy_hours: float | None
    # Where allocated_hours comes from: ("telemetry",), ("inventory",) or both.
    allocated_from: tuple = ()
    # The part of allocated_hours that telemetry measured: busy_hours is a share of it.
    measured_hours: float = 0.0
    # When the inventory's record of ended pods begins, where that is inside the period.
    recorded_since: datetime | None = None

    @property
    def allocated_pct(self) -> float | None:
        if self.allocated_hours is None or not self.granted_hours:
            return None
        return 100 * self.allocated_hours / self.granted_hours

    @property
    def busy_pct(self) -> float | None:
        if self.busy_hours is None or not self.measured_hours:
            return None
        return 100 * self.busy_hours / self.measured_hours

    @property
    def from_inventory(self) -> bool:
        return INVENTORY in self.allocated_from

    def as_dict(self) -> dict:
        return {
            "team": self.team.slug,
            "resource": self.resource,
            "granted_gpu_hours": round(self.granted_hours, 3),
            "allocated_gpu_hours": _r(self.allocated_hours),
            "busy_gpu_hours": _r(self.busy_hours),
            "allocated_from": list(self.allocated_from),
            "recorded_since": self.recorded_since,
        }


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


@dataclass
class Ledger:
    """The cells every showback figure is a sum of, per GPU class (``None``: an any-class
    grant, or a GPU on a node no class holds). Per-team rows (:func:`rows`) and per-class
    rows (``telemetry.classes``) add up the same cells: one number, one definition.

    Allocated GPU-hours come from telemetry on the clusters that send it
    (telemetry/measured.py) and from the inventory's pod records on the others
    (inventory/podruns.py); busy GPU-hours only from telemetry. A team or class that
    neither covers has its allocated figures *not measured*, never 0."""

    teams: list[Team]
    # (team id, resource, class id or None) -> granted amount-hours
    granted: dict[tuple, float]
    # (team id, class id or None) -> [allocated GPU-hours, busy GPU-hours] (whole GPUs),
    # measured by telemetry
    used: dict[tuple, list[float]]
    # teams none of whose clusters sends telemetry, and the classes of such clusters
    unmeasured_teams: frozenset = frozenset()
    unmeasured_classes: frozenset = frozenset()
    # (team id, class id or None) -> allocated GPU-hours from the inventory's pod records,
    # on the clusters that send no telemetry
    held: dict[tuple, float] = field(default_factory=dict)
    # teams with such a cluster whose pods are recorded, and the classes of those clusters
    inventory_teams: frozenset = frozenset()
    inventory_classes: frozenset = frozenset()
    # team id -> when the record of its clusters' ended pods begins, inside the period
    recorded_since: dict = field(default_factory=dict)

    def sources(self, team_id, class_id=...) -> tuple:
        """Where a team's allocated GPU-hours come from (``class_id`` given: in that
        class): ("telemetry",), ("inventory",), both, or () for not measured."""
        if class_id is ... or class_id is None:
            tel, inv = team_id not in self.unmeasured_teams, team_id in self.inventory_teams
        elif class_id in self.unmeasured_classes:
            tel, inv = False, class_id in self.inventory_classes
        else:
            tel, inv = team_id not in self.unmeasured_teams, False
        return tuple(name for name, on in ((TELEMETRY, tel), (INVENTORY, inv)) if on)

    @staticmethod
    def allocated(telemetry: tuple, held: float, sources: tuple):
        """(allocated, busy, measured allocated) of cells whose telemetry sums are
        ``telemetry`` = (allocated, busy) and inventory sum ``held``, by ``sources``."""
        if not sources:
            return None, None, 0.0
        a, b = telemetry if TELEMETRY in sources else (0.0, None)
        return a + (held if INVENTORY in sources else 0.0), b, a


def ledger(teams, start: datetime, end: datetime, now: datetime | None = None) -> Ledger:
    """Granted and used cells for [start, end): granted from grants (by the grant's class),
    used (whole GPUs only) from history and attribution (by the class of the GPU's node)
    and from the inventory's pod records where no telemetry is sent. A fixed number of
    queries."""
    from quotas.models import TeamNamespace

    now = now or timezone.now()
    teams = list(teams)
    grants = list(
        grants_in(start, end).filter(namespace__team__in=teams).select_related("namespace")
    )
    ns_team = {
        (ns.cluster_id, ns.name): ns.team_id for ns in TeamNamespace.objects.filter(team__in=teams)
    }
    stop = min(end, now)
    granted: dict[tuple, float] = defaultdict(float)
    for g in grants:
        hours = grant_hours_in(g, start, stop)
        if hours:
            granted[(g.namespace.team_id, g.resource, g.gpu_class_id)] += hours
    used: dict = defaultdict(lambda: [0.0, 0.0])
    cells = used_cells(set(ns_team), start, end, now, by_hour=False)
    for (cluster_id, ns, class_id, _), (a, b) in cells.items():
        cell = used[(ns_team[(cluster_id, ns)], class_id)]
        cell[0] += a
        cell[1] += b
    return Ledger(teams=teams, granted=dict(granted), used=dict(used),
                  **_coverage(ns_team, granted, start, stop))  # fmt: skip


def _coverage(ns_team: dict, granted: dict, start: datetime, stop: datetime) -> dict:
    """Which teams and GPU classes telemetry covers (telemetry/measured.py), and what the
    inventory's pod records give on the clusters it does not (inventory/podruns.py)."""
    from inventory import podruns
    from inventory.models import GpuClass

    from .measured import measured_cluster_ids

    clusters: dict = defaultdict(set)
    for cluster_id, team_id in {(c, t) for (c, _), t in ns_team.items()}:
        clusters[team_id].add(cluster_id)
    every = {c for cs in clusters.values() for c in cs}
    measured = measured_cluster_ids(every)
    since = podruns.recorded_since(every - measured)
    recorded = {c for c, at in since.items() if at is not None and at < stop}
    held: dict = defaultdict(float)
    for (cluster_id, ns, class_id), hours in podruns.allocated_hours(recorded, start, stop).items():
        team_id = ns_team.get((cluster_id, ns))
        if team_id is not None and hours:
            held[(team_id, class_id)] += hours
    class_ids = {c for (_, _, c) in granted if c is not None} | {c for (_, c) in held if c}
    unmeasured_classes = {
        pk: cluster_id
        for pk, cluster_id in GpuClass.objects.filter(pk__in=class_ids)
        .exclude(cluster_id__in=measured)
        .values_list("pk", "cluster_id")
    }
    late = {c: since[c] for c in recorded if since[c] > start}
    return {
        "unmeasured_teams": frozenset(t for t, cs in clusters.items() if not cs & measured),
        "unmeasured_classes": frozenset(unmeasured_classes),
        "held": dict(held),
        "inventory_teams": frozenset(t for t, cs in clusters.items() if cs & recorded),
        "inventory_classes": frozenset(k for k, c in unmeasured_classes.items() if c in recorded),
        "recorded_since": {
            t: max(late[c] for c in cs & late.keys())
            for t, cs in clusters.items()
            if cs & late.keys()
        },
    }


def resource_order(resource: str) -> tuple:
    return (resource != GPU_RESOURCE, resource)


def rows(led: Ledger) -> list[ShowbackRow]:
    """One row per team and resource: the ledger's cells summed over GPU classes."""
    granted: dict[tuple, float] = defaultdict(float)
    for (team_id, resource, _), hours in led.granted.items():
        granted[(team_id, resource)] += hours
    used: dict = defaultdict(lambda: [0.0, 0.0])
    for (team_id, _), (a, b) in led.used.items():
        used[team_id][0] += a
        used[team_id][1] += b
    held: dict = defaultdict(float)
    for (team_id, _), hours in led.held.items():
        held[team_id] += hours
    out = []
    for team in led.teams:
        resources = {r for (t, r) in granted if t == team.pk}
        if team.pk in used or team.pk in held:
            resources.add(GPU_RESOURCE)
        for resource in sorted(resources, key=resource_order):
            whole = resource == GPU_RESOURCE
            from_ = led.sources(team.pk) if whole else ()
            a, b, m = led.allocated(
                tuple(used.get(team.pk, (0.0, 0.0))), held.get(team.pk, 0.0), from_
            )
            out.append(
                ShowbackRow(
                    team=team,
                    resource=resource,
                    granted_hours=granted.get((team.pk, resource), 0.0),
                    allocated_hours=a,
                    busy_hours=b,
                    allocated_from=from_,
                    measured_hours=m,
                    recorded_since=led.recorded_since.get(team.pk) if INVENTORY in from_ else None,
                )
            )
    return out


def showback(teams, start: datetime, end: datetime, now: datetime | None = None):
    """Rows per team and resource for [start, end) (:func:`ledger`, :func:`rows`)."""
    return rows(ledger(teams, start, end, now))
