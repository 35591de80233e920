"""Showback and the idle insight per GPU class, weighted by the class's weight or price.

- **Per-class showback rows** split each team's showback row (``telemetry.showback``) by
  GPU class: granted hours by the grant's class (an any-class grant is its own "any
  class" row), allocated and busy GPU-hours by the class of the node the GPU is on
  (``Node.gpu_class``; GPUs on a node no class holds count in the "any class" row, which
  after a sync holds none). Both are sums of the same ``showback.Ledger`` cells as the
  per-team rows, so a team's class rows add up to its row exactly.
- **Weighted** figures are GPU-hours x the class's ``weight``, the weight or price per
  GPU-hour an admin sets on the class (``inventory.GpuClass.weight``); ``None`` when the
  class has none, always for "any class" (the hours could be on any class) and for MIG
  resources (a slice-hour is no GPU-hour).
- **Idle per class**: each idle allocation (``insight.idle_allocations``) gets its class
  (its node's), how long it has been idle and its idle GPU-hours (GPUs x hours since the
  last 5-minute point at or above the idle threshold of any of its GPUs, or since the pod
  started, within the 5-minute history's 30 days) and their weighted figure; the summary
  adds them up per class, costliest first.
"""

from __future__ import annotations

from collections import defaultdict
from dataclasses import dataclass, field
from datetime import datetime, timedelta
from decimal import Decimal

from django.utils import timezone

from inventory.models import GPU_RESOURCE, GpuClass
from quotas.models import Team, class_label

from . import sources
from .insight import Allocation, idle_threshold_pct
from .retention import FIVE_MINUTE_RETENTION
from .showback import Ledger, resource_order


def _weighted(hours: float | None, weight: Decimal | None) -> float | None:
    if hours is None or weight is None:
        return None
    return hours * float(weight)


def _plus(total: float | None, value: float | None) -> float | None:
    return total if value is None else (total or 0.0) + value


def _r(v: float | None) -> float | None:
    return None if v is None else round(v, 3)


def _class_fields(gpu_class: GpuClass | None) -> dict:
    return {
        "gpu_class": None if gpu_class is None else str(gpu_class.pk),
        "gpu_class_slug": None if gpu_class is None else gpu_class.slug,
        "gpu_class_name": class_label(gpu_class),
        "cluster": None if gpu_class is None else gpu_class.cluster.slug,
        "weight": None if gpu_class is None or gpu_class.weight is None else str(gpu_class.weight),
    }


def _class_order(gpu_class: GpuClass | None) -> tuple:
    if gpu_class is None:
        return (1, "", "")
    return (0, gpu_class.cluster.name, gpu_class.name)


def load_classes(ids) -> dict:
    """{class id: GpuClass with its cluster} (one query; none for no ids)."""
    ids = {i for i in ids if i is not None}
    if not ids:
        return {}
    return {c.pk: c for c in GpuClass.objects.filter(pk__in=ids).select_related("cluster")}


# -- showback per class -------------------------------------------------------------------


@dataclass
class ClassRow:
    """One team's GPU-hours of one resource in one GPU class (None: any class)."""

    team: Team
    resource: str
    gpu_class: GpuClass | None
    granted_hours: float
    allocated_hours: float | None  # None: not measured (MIG slices; no telemetry)
    busy_hours: float | None
    allocated_from: tuple = ()  # as ShowbackRow.allocated_from

    @property
    def label(self) -> str:
        return class_label(self.gpu_class)

    @property
    def weight(self) -> Decimal | None:
        return None if self.gpu_class is None else self.gpu_class.weight

    @property
    def priced(self) -> bool:
        """Whole GPUs of a class with a weight (a MIG slice-hour is no GPU-hour)."""
        return self.resource == GPU_RESOURCE and self.weight is not None

    @property
    def weighted_granted(self) -> float | None:
        return _weighted(self.granted_hours, self.weight) if self.priced else None

    @property
    def weighted_allocated(self) -> float | None:
        return _weighted(self.allocated_hours, self.weight) if self.priced else None

    @property
    def weighted_busy(self) -> float | None:
        return _weighted(self.busy_hours, self.weight) if self.priced else None

    def as_dict(self) -> dict:
        return {
            "team": self.team.slug,
            "resource": self.resource,
            **_class_fields(self.gpu_class),
            "granted_gpu_hours": round(self.granted_hours, 3),
            "allocated_gpu_hours": _r(self.allocated_hours),
            "busy_gpu_hours": _r(self.busy_hours),
            "allocated_from": list(self.allocated_from),
            "weighted_granted": _r(self.weighted_granted),
            "weighted_allocated": _r(self.weighted_allocated),
            "weighted_busy": _r(self.weighted_busy),
        }


@dataclass
class TeamCost:
    """A team's weighted totals over its ``nvidia.com/gpu`` class rows (None: no row of it
    has a weight), and the GPU-hours of rows without one (not in the totals)."""

    team: Team
    weighted_granted: float | None = None
    weighted_allocated: float | None = None
    weighted_busy: float | None = None
    unweighted_granted_hours: float = 0.0
    unweighted_allocated_hours: float = 0.0

    def add(self, row: ClassRow) -> None:
        if row.resource != GPU_RESOURCE:
            return
        if not row.priced:
            self.unweighted_granted_hours += row.granted_hours
            self.unweighted_allocated_hours += row.allocated_hours or 0.0
            return
        # A figure not measured in a row (busy GPU-hours where only the inventory knows
        # what was allocated) is left out of its total, not counted as 0.
        self.weighted_granted = _plus(self.weighted_granted, row.weighted_granted)
        self.weighted_allocated = _plus(self.weighted_allocated, row.weighted_allocated)
        self.weighted_busy = _plus(self.weighted_busy, row.weighted_busy)

    def as_dict(self) -> dict:
        return {
            "team": self.team.slug,
            "weighted_granted": _r(self.weighted_granted),
            "weighted_allocated": _r(self.weighted_allocated),
            "weighted_busy": _r(self.weighted_busy),
            "unweighted_granted_gpu_hours": round(self.unweighted_granted_hours, 3),
            "unweighted_allocated_gpu_hours": round(self.unweighted_allocated_hours, 3),
        }


@dataclass
class ClassReport:
    rows: list[ClassRow]
    teams: list[TeamCost]

    @property
    def weighted(self) -> bool:
        """Some row has a weighted figure."""
        return any(r.priced for r in self.rows)


def class_rows(led: Ledger) -> ClassReport:
    """Per team, resource and GPU class, from the ledger the per-team rows sum (one query
    for the classes)."""
    classes = load_classes(
        [c for (_, _, c) in led.granted] + [c for (_, c) in [*led.used, *led.held]]
    )  # fmt: skip
    rows: list[ClassRow] = []
    costs: list[TeamCost] = []
    for team in led.teams:
        cells: dict[str, set] = defaultdict(set)
        for t, resource, class_id in led.granted:
            if t == team.pk:
                cells[resource].add(class_id)
        for t, class_id in [*led.used, *led.held]:
            if t == team.pk:
                cells[GPU_RESOURCE].add(class_id)
        cost = TeamCost(team)
        for resource in sorted(cells, key=resource_order):
            for class_id in sorted(cells[resource], key=lambda c: _class_order(classes.get(c))):
                from_ = led.sources(team.pk, class_id) if resource == GPU_RESOURCE else ()
                a, b, _ = led.allocated(
                    tuple(led.used.get((team.pk, class_id), (0.0, 0.0))),
                    led.held.get((team.pk, class_id), 0.0),
                    from_,
                )
                row = ClassRow(
                    team=team,
                    resource=resource,
                    gpu_class=classes.get(class_id),
                    granted_hours=led.granted.get((team.pk, resource, class_id), 0.0),
                    allocated_hours=a,
                    busy_hours=b,
                    allocated_from=from_,
                )
                rows.append(row)
                cost.add(row)
        if cells:
            costs.append(cost)
    return ClassReport(rows=rows, teams=costs)


# -- idle per class -----------------------------------------------------------------------


@dataclass
class IdleClass:
    """Idle allocations of one GPU class (None: a node no class holds) now."""

    gpu_class: GpuClass | None
    allocations: int = 0
    gpus: int = 0
    idle_gpu_hours: float = 0.0
    members: list[Allocation] = field(default_factory=list, repr=False)

    @property
    def label(self) -> str:
        return "no class" if self.gpu_class is None else self.gpu_class.name

    @property
    def weight(self) -> Decimal | None:
        return None if self.gpu_class is None else self.gpu_class.weight

    @property
    def weighted(self) -> float | None:
        return _weighted(self.idle_gpu_hours, self.weight)

    def as_dict(self) -> dict:
        d = _class_fields(self.gpu_class)
        d["gpu_class_name"] = self.label
        return {
            **d,
            "allocations": self.allocations,
            "gpus": self.gpus,
            "idle_gpu_hours": round(self.idle_gpu_hours, 3),
            "weighted_idle": _r(self.weighted),
        }


def set_idle_since(allocations: list[Allocation], now: datetime) -> None:
    """Set ``idle_since`` on each idle allocation: from the start of what its source looked
    at, or its GPUs' last busy 5-minute point after it, or its pod's start, whichever is
    latest (one query per source)."""
    gpus = {g.pk: g for a in allocations for g in a.gpu_states}
    if not gpus:
        return
    busy, floors = sources.last_busy(
        list(gpus.values()), now, idle_threshold_pct(), FIVE_MINUTE_RETENTION
    )
    floor = now - FIVE_MINUTE_RETENTION
    for a in allocations:
        starts = [floors.get(g, floor) for g in a.gpu_ids] + [floor]
        starts += [busy[k] for k in a.judged_keys() if k in busy]
        if a.since is not None:
            starts.append(a.since)
        a.idle_since = min(max(starts), now)


def idle_by_class(allocations: list[Allocation], now: datetime | None = None) -> list[IdleClass]:
    """Set ``gpu_class``, ``idle_gpu_hours`` and ``weighted_idle`` on each idle allocation
    (and ``idle_since`` where :func:`set_idle_since` has not); return the per-class summary,
    costliest first (weighted idle GPU-hours; classes without a weight after, by idle
    GPU-hours). One query, and :func:`set_idle_since`'s where needed."""
    now = now or timezone.now()
    if not allocations:
        return []
    set_idle_since([a for a in allocations if getattr(a, "idle_since", None) is None], now)
    classes = load_classes(a.node.gpu_class_id for a in allocations)
    groups: dict = {}
    for a in allocations:
        a.gpu_class = classes.get(a.node.gpu_class_id)
        hours = max(now - a.idle_since, timedelta(0)) / timedelta(hours=1)
        a.idle_gpu_hours = a.gpus * hours
        weight = None if a.gpu_class is None else a.gpu_class.weight
        a.weighted_idle = _weighted(a.idle_gpu_hours, weight)
        group = groups.setdefault(a.node.gpu_class_id, IdleClass(a.gpu_class))
        group.allocations += 1
        group.gpus += a.gpus
        group.idle_gpu_hours += a.idle_gpu_hours
        group.members.append(a)
    return sorted(
        groups.values(),
        key=lambda g: (g.weighted is None, -(g.weighted or 0.0), -g.idle_gpu_hours, g.label),
    )


def idle_allocation_dict(a: Allocation) -> dict:
    """An idle allocation as the API returns it (after :func:`idle_by_class`)."""
    return {
        "team": a.team.slug if a.team else None,
        "namespace": a.namespace,
        "pod": a.pod,
        "node": a.node.name,
        **_class_fields(a.gpu_class),
        "gpus": a.gpus,
        "gpu_indexes": list(a.gpu_indexes),
        "method": a.method,
        "max_util_pct": _r(a.max_util_pct),
        "metric": a.metric,
        "mig_instances": {str(g): sorted(ids) for g, ids in a.instances.items()},
        "since": a.since,
        "idle_since": a.idle_since,
        "idle_gpu_hours": round(a.idle_gpu_hours, 3),
        "weighted_idle": _r(a.weighted_idle),
    }
