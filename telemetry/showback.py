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
points computed by Prometheus from dcgm-exporter's samples. Attribution is the
*current* one (who holds which GPU now), applied to the whole period: exact for
allocations that lasted the period, approximate for pods that came and went.

Every figure is a sum of :class:`Ledger` cells kept per GPU class (the grant's class; the
class of the node a GPU is on), so the per-team rows here and the per-class rows of
``telemetry.classes`` add up the same numbers.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime

from django.db.models import Q
from django.utils import timezone

from inventory.models import GPU_RESOURCE
from quotas.models import Grant, Team

from . import sources
from .insight import Attribution, NsKey, attribute

MONTH = re.compile(r"^(\d{4})-(0[1-9]|1[0-2])$")
MIN_YEAR, MAX_YEAR = 2000, 2999


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


# -- the report ---------------------------------------------------------------------------


@dataclass
class ShowbackRow:
    team: Team
    resource: str
    granted_hours: float
    allocated_hours: float | None  # None: not measured (MIG slices; no telemetry)
    busy_hours: float | None

    @property
    def allocated_pct(self) -> float | None:
        if self.allocated_hours is None or not self.granted_hours:
            return None
        return 100 * self.allocated_hours / self.granted_hours

    @property
    def busy_pct(self) -> float | None:
        if not self.allocated_hours:
            return None
        return 100 * (self.busy_hours or 0) / self.allocated_hours

    def as_dict(self) -> dict:
        return {
            "team": self.team.slug,
            "resource": self.resource,
            "granted_gpu_hours": round(self.granted_hours, 3),
            "allocated_gpu_hours": _r(self.allocated_hours),
            "busy_gpu_hours": _r(self.busy_hours),
        }


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


@dataclass
class Ledger:
    """The cells every showback figure is a sum of, per GPU class (``None``: an any-class
    grant, or a GPU on a node no class holds). Per-team rows (:func:`rows`) and per-class
    rows (``telemetry.classes``) add up the same cells: one number, one definition."""

    teams: list[Team]
    # (team id, resource, class id or None) -> granted amount-hours
    granted: dict[tuple, float]
    # (team id, class id or None) -> [allocated GPU-hours, busy GPU-hours] (whole GPUs)
    used: dict[tuple, list[float]]
    # teams none of whose clusters sends telemetry: their allocated figures are not
    # measured (telemetry/measured.py), never 0; and the classes of such clusters
    unmeasured_teams: frozenset = frozenset()
    unmeasured_classes: frozenset = frozenset()


def ledger(teams, start: datetime, end: datetime, now: datetime | None = None) -> Ledger:
    """Granted and used cells for [start, end): granted from grants (by the grant's class),
    used (whole GPUs only) from history and attribution (by the class of the GPU's node).
    A fixed number of queries."""
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
    if start < now and ns_team:
        attribution = attribute(None, now)
        held = [attribution.gpus[i] for i in attribution.shares]
        for gpu_id, _, hours, busy in sources.gpu_hours(held, start, end, now):
            class_id = attribution.gpus[gpu_id].node.gpu_class_id
            for key, share in attribution.shares[gpu_id].items():
                team_id = ns_team.get(key)
                if team_id is not None:
                    cell = used[(team_id, class_id)]
                    cell[0] += hours * share
                    cell[1] += busy * share
    return Ledger(teams=teams, granted=dict(granted), used=dict(used),
                  **_unmeasured(teams, granted))  # fmt: skip


def _unmeasured(teams, granted) -> dict:
    """Which teams and GPU classes no telemetry covers (telemetry/measured.py)."""
    from inventory.models import GpuClass
    from quotas.models import TeamNamespace

    from .measured import measured_cluster_ids

    clusters: dict = defaultdict(set)
    for team_id, cluster_id in TeamNamespace.objects.filter(team__in=teams).values_list(
        "team_id", "cluster_id"
    ):
        clusters[team_id].add(cluster_id)
    measured = measured_cluster_ids({c for cs in clusters.values() for c in cs})
    class_ids = {c for (_, _, c) in granted if c is not None}
    return {
        "unmeasured_teams": frozenset(t for t, cs in clusters.items() if not cs & measured),
        "unmeasured_classes": frozenset(
            GpuClass.objects.filter(pk__in=class_ids)
            .exclude(cluster_id__in=measured)
            .values_list("pk", flat=True)
        ),
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
    out = []
    for team in led.teams:
        resources = {r for (t, r) in granted if t == team.pk}
        if team.pk in used:
            resources.add(GPU_RESOURCE)
        for resource in sorted(resources, key=resource_order):
            measured = resource == GPU_RESOURCE and team.pk not in led.unmeasured_teams
            a, b = used.get(team.pk, (0.0, 0.0))
            out.append(
                ShowbackRow(
                    team=team,
                    resource=resource,
                    granted_hours=granted.get((team.pk, resource), 0.0),
                    allocated_hours=a if measured else None,
                    busy_hours=b if measured else None,
                )
            )
    return out


def showback(teams, start: datetime, end: datetime, now: datetime | None = None):
    """Rows per team and resource for [start, end) (:func:`ledger`, :func:`rows`)."""
    return rows(ledger(teams, start, end, now))
