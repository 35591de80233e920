"""Telemetry pages: fleet and team dashboards, idle allocations, health signals, showback.

Thin views over ``insight`` (attribution, idle, usage now), ``showback`` (GPU-hours per
month) and ``health`` (signals); every page runs a fixed number of queries whatever the
number of GPUs. The node page's GPU section and the My teams usage table are partials
rendered through ``telemetry.templatetags.telemetry``.
"""

from __future__ import annotations

import csv
from collections import defaultdict
from datetime import datetime, timedelta

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.core.paginator import Paginator
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.utils import timezone

from inventory.models import GPU_RESOURCE, NamespaceUsage, Node
from portal.auth import session_or_token
from quotas import reclaim as reclaim_rules
from quotas.models import Grant, Team, TeamNamespace
from quotas.scoping import visible_to

from . import classes, health, insight, showback, sources, summary
from .models import GpuState, NodeTelemetry
from .sparkline import sparkline
from .visibility import PodNames

SPARK_STEP = timedelta(minutes=5)
SPARK_SLOTS = 288  # 24 h
IDLE_PER_PAGE = 50
TOPOLOGY_LEGEND = [
    ("X", "self"),
    ("NV#", "NVLink, # links"),
    ("PIX", "at most one PCIe bridge"),
    ("PXB", "several PCIe bridges, no host bridge"),
    ("PHB", "a PCIe host bridge (CPU)"),
    ("NODE", "PCIe + the interconnect between host bridges of one NUMA node"),
    ("SYS", "PCIe + the SMP interconnect between NUMA nodes (slowest)"),
]


def _staff_only(user) -> None:
    if not user.is_staff:
        raise PermissionDenied("Only portal admins can see this page.")


def _chart(series: dict[str, dict[datetime, float | None]], hours: list[datetime]) -> dict:
    """Chart data for ``telemetry-charts.js`` (uPlot) and the table beside it."""
    names = sorted(series)
    return {
        "x": [int(h.timestamp()) for h in hours],
        "labels": [h.strftime("%H:%M") for h in hours],
        "series": [
            {
                "label": name,
                "values": [
                    None if series[name].get(h) is None else round(series[name][h], 1)
                    for h in hours
                ],
            }
            for name in names
        ],
    }


def _hours(now: datetime, count: int = 24) -> list[datetime]:
    top = now.replace(minute=0, second=0, microsecond=0)
    return [top - timedelta(hours=count - 1 - i) for i in range(count)]


# -- node page section ------------------------------------------------------------------


def node_gpu_context(node: Node, pod_names: PodNames) -> dict:
    """Everything ``telemetry/_node_gpus.html`` shows for one node; a fixed number of
    queries whatever its GPU count. Pod names as ``pod_names`` allows."""
    now = timezone.now()
    # One query when the node has no agent: the node's telemetry row rides along.
    gpus = list(
        GpuState.objects.filter(node=node).select_related("node__telemetry").order_by("index")
    )
    tele = _telemetry_of(gpus[0].node) if gpus else None
    if not gpus:
        return {"tele": None, "cards": [], "signals": [], "pods_hidden": False}
    start = (now - timedelta(hours=24)).replace(second=0, microsecond=0)
    start = start - timedelta(minutes=start.minute % 5) + SPARK_STEP
    util, mem, temp = sources.node_history(node, gpus, start)
    cards = []
    pods_hidden = False
    for g in gpus:
        processes = [
            {
                "pid": p.get("pid"),
                "memory": p.get("used_memory_mib"),
                "pod": pod_names.qualified(node.cluster_id, p.get("pod")),
                "namespace": (p.get("pod") or "").partition("/")[0] or None,
                "mig_uuid": p.get("mig_uuid"),
            }
            for p in g.processes or []
        ]
        pods_hidden = pods_hidden or any(p["namespace"] and not p["pod"] for p in processes)
        cards.append(
            {
                "gpu": g,
                "stale": g.is_stale,
                "processes": processes,
                "util": sparkline(util.get(g.pk, {}), start, SPARK_STEP, SPARK_SLOTS),
                "mem": sparkline(mem.get(g.pk, {}), start, SPARK_STEP, SPARK_SLOTS),
                "temp": sparkline(temp.get(g.pk, {}), start, SPARK_STEP, SPARK_SLOTS, top=100),
            }
        )
    topology = None
    if tele and tele.topology:
        n = len(tele.topology)
        topology = {
            "headers": [f"GPU{i}" for i in range(n)],
            "rows": [(f"GPU{i}", row) for i, row in enumerate(tele.topology)],
        }
    return {
        "tele": tele,
        "cards": cards,
        "topology": topology,
        "legend": TOPOLOGY_LEGEND,
        "signals": health.node_signals(node, gpus, tele, pod_names),
        "pods_hidden": pods_hidden,
        "now": now,
        "source": sources.source_name(node.cluster_id),
        # Computed while the page renders (a template tag): its own banner.
        "outages": sources.outages(),
    }


def _telemetry_of(node: Node) -> NodeTelemetry | None:
    try:
        return node.telemetry
    except NodeTelemetry.DoesNotExist:
        return None


# -- My teams partial --------------------------------------------------------------------


def team_usage_context(rows) -> dict:
    teams = [r["team"] if isinstance(r, dict) else r for r in rows]
    figures = summary.read(_clusters_of(teams), idle=False) if teams else None
    return {
        "rows": insight.team_rows(teams, figures.held) if teams else [],
        "as_of": figures.as_of if figures else None,
        "threshold": insight.idle_threshold_pct(),
        "outages": sources.outages(),  # computed while the page renders: its own banner
    }


# -- fleet ------------------------------------------------------------------------------


def _clusters_of(teams) -> set:
    return set(TeamNamespace.objects.filter(team__in=teams).values_list("cluster_id", flat=True))


@login_required
def fleet(request: HttpRequest) -> HttpResponse:
    now = timezone.now()
    hours = _hours(now)
    figures = summary.read(now=now, idle=False)
    chart = _chart(
        {
            p: {h: (s / n if n else None) for h, (s, n) in pts.items()}
            for p, pts in figures.series.items()
        },
        hours,
    )
    teams = list(visible_to(Team.objects.all(), request.user, "pk"))
    reporting = NodeTelemetry.objects.filter(node__gone_at__isnull=True)
    return render(
        request,
        "telemetry/fleet.html",
        {
            "chart": chart,
            "products": summary.product_rows(figures),
            "team_rows": insight.team_rows(teams, figures.held, now),
            "as_of": figures.as_of,
            "threshold": insight.idle_threshold_pct(),
            "window_h": insight.idle_window().total_seconds() / 3600,
            "nodes_reporting": reporting.filter(stale_after__gte=now).count(),
            "nodes_stale": reporting.filter(stale_after__lt=now).count(),
            "gpus_total": GpuState.objects.count(),
            "gpus_lost": GpuState.objects.filter(lost=True).count(),
            "prometheus_clusters": sorted(
                s.client.source.cluster.name for s in sources.prometheus_sources().values()
            ),
        },
    )


# -- team -------------------------------------------------------------------------------


@login_required
def team(request: HttpRequest, slug: str) -> HttpResponse:
    team = get_object_or_404(visible_to(Team.objects.all(), request.user, "pk"), slug=slug)
    now = timezone.now()
    namespaces = list(TeamNamespace.objects.filter(team=team).select_related("cluster"))
    keys = {(ns.cluster_id, ns.name) for ns in namespaces}
    figures = summary.read({c for c, _ in keys}, now, namespaces=keys)
    held = figures.held
    granted: dict = defaultdict(int)
    for g in Grant.objects.active_at(now).filter(namespace__team=team, resource=GPU_RESOURCE):
        granted[g.namespace_id] += g.amount
    requested = {
        (c, n): r
        for c, n, r in NamespaceUsage.objects.filter(
            resource=GPU_RESOURCE,
            cluster_id__in={c for c, _ in keys},
            namespace__in={n for _, n in keys},
        ).values_list("cluster_id", "namespace", "requested")
    }
    ns_rows = []
    measured = set(figures.computed_at)  # the measured clusters among the team's
    for ns in namespaces:
        key = (ns.cluster_id, ns.name)
        h, b = held.get(key, (0.0, 0.0))
        ns_rows.append(
            {
                "ns": ns,
                "row": insight.UsageRow(
                    label=ns.name,
                    granted=granted.get(ns.pk, 0),
                    requested=requested.get(key, 0),
                    held=h,
                    busy=b,
                    measured_any=ns.cluster_id in measured,  # else "not measured", never 0
                ),
            }
        )
    hours = _hours(now)
    by_hour_alloc: dict = defaultdict(float)
    by_hour_busy: dict = defaultdict(float)
    for (_, _, _, hour), (a, b) in showback.used_cells(keys, hours[0], now, now).items():
        by_hour_alloc[hour] += a
        by_hour_busy[hour] += b
    chart = _chart(
        {
            "Utilisation of held GPUs (%)": {
                h: 100 * by_hour_busy[h] / by_hour_alloc[h]
                for h in by_hour_alloc
                if by_hour_alloc[h]
            },
        },
        hours,
    )
    month, start, end = showback.parse_month(None, now)
    led = showback.ledger([team], start, end, now)
    idle = figures.idle
    return render(
        request,
        "telemetry/team.html",
        {
            "team": team,
            "as_of": figures.as_of,
            "ns_rows": ns_rows,
            "chart": chart,
            "idle": idle,
            "show_pods": True,  # the team's own pods
            "month": month,
            "month_rows": showback.rows(led),
            "class_report": classes.class_rows(led),
            "idle_classes": classes.idle_by_class(idle, now),
            "threshold": insight.idle_threshold_pct(),
            "window_h": insight.idle_window().total_seconds() / 3600,
            "reclaims": reclaim_rules.annotated(
                reclaim_rules.shown_for([ns.pk for ns in namespaces], now), request.user
            ),
        },
    )


# -- admin lists ----------------------------------------------------------------------------


@login_required
def idle(request: HttpRequest) -> HttpResponse:
    _staff_only(request.user)
    now = timezone.now()
    figures = summary.read(now=now)
    allocations = figures.idle
    idle_classes = classes.idle_by_class(allocations, now)
    page = Paginator(allocations, IDLE_PER_PAGE).get_page(request.GET.get("page"))
    return render(
        request,
        "telemetry/idle.html",
        {
            "allocations": allocations,
            "page": page,
            "as_of": figures.as_of,
            "gpus": sum(a.gpus for a in allocations),
            "idle_classes": idle_classes,
            "idle_gpu_hours": sum(c.idle_gpu_hours for c in idle_classes),
            "threshold": insight.idle_threshold_pct(),
            "window_h": insight.idle_window().total_seconds() / 3600,
            "reclaims": reclaim_rules.annotated(reclaim_rules.shown_for(None, now), request.user),
        },
    )


@login_required
def health_list(request: HttpRequest) -> HttpResponse:
    _staff_only(request.user)
    signals = health.fleet_signals()
    groups: dict = defaultdict(list)
    for s in signals:
        groups[s.code].append(s)
    ordered = [
        {"code": code, "title": title, "signals": groups[code]}
        for code, title in health.CODES.items()
    ]
    return render(
        request,
        "telemetry/health.html",
        {"groups": ordered, "total": len(signals)},
    )


# -- showback -----------------------------------------------------------------------------


def _showback_ledger(request: HttpRequest):
    try:
        month, start, end = showback.parse_month(request.GET.get("month"))
    except showback.BadMonth as err:
        raise Http404(str(err)) from err
    teams = visible_to(Team.objects.all(), request.user, "pk")
    return month, start, end, showback.ledger(teams, start, end)


@login_required
def showback_page(request: HttpRequest) -> HttpResponse:
    month, start, end, led = _showback_ledger(request)
    rows = showback.rows(led)
    report = classes.class_rows(led)
    now = timezone.now()
    return render(
        request,
        "telemetry/showback.html",
        {
            "month": month,
            "months": showback.month_choices(now),
            "start": start,
            "end": end,
            "partial": start <= now < end,
            "rows": rows,
            "total_granted": sum(r.granted_hours for r in rows if r.resource == GPU_RESOURCE),
            "total_allocated": sum(r.allocated_hours or 0 for r in rows),
            "total_busy": sum(r.busy_hours or 0 for r in rows),
            # some allocated hours come from pod records: no busy figure stands for them
            "busy_unmeasured": any(r.from_inventory for r in rows),
            "class_report": report,
            "total_weighted": _total(t.weighted_allocated for t in report.teams),
        },
    )


def _total(values) -> float | None:
    values = [v for v in values if v is not None]
    return sum(values) if values else None


@session_or_token  # automation fetches it with an API token too
def showback_csv(request: HttpRequest) -> HttpResponse:
    month, _, _, led = _showback_ledger(request)
    rows = showback.rows(led)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="showback-{month}.csv"'
    writer = csv.writer(response)
    writer.writerow(
        ["month", "team", "resource", "granted_gpu_hours", "allocated_gpu_hours", "busy_gpu_hours",
         "allocated_from"]
    )  # fmt: skip
    for r in rows:
        d = r.as_dict()
        writer.writerow(
            [
                month,
                d["team"],
                d["resource"],
                f"{d['granted_gpu_hours']:.3f}",
                "" if d["allocated_gpu_hours"] is None else f"{d['allocated_gpu_hours']:.3f}",
                "" if d["busy_gpu_hours"] is None else f"{d['busy_gpu_hours']:.3f}",
                " ".join(d["allocated_from"]),
            ]
        )
    return response


def _csv_cell(value) -> str:
    if value is None:
        return ""
    if isinstance(value, float):
        return f"{value:.3f}"
    if isinstance(value, list):
        return " ".join(value)
    return str(value)


@session_or_token  # automation fetches it with an API token too
def showback_classes_csv(request: HttpRequest) -> HttpResponse:
    """Per team, resource and GPU class (telemetry.classes), with the weighted figures."""
    month, _, _, led = _showback_ledger(request)
    response = HttpResponse(content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = f'attachment; filename="showback-classes-{month}.csv"'
    writer = csv.writer(response)
    columns = [
        "team", "resource", "cluster", "gpu_class_slug", "gpu_class_name", "weight",
        "granted_gpu_hours", "allocated_gpu_hours", "busy_gpu_hours",
        "weighted_granted", "weighted_allocated", "weighted_busy", "allocated_from",
    ]  # fmt: skip
    writer.writerow(["month", *columns])
    for r in classes.class_rows(led).rows:
        d = r.as_dict()
        writer.writerow([month] + [_csv_cell(d[c]) for c in columns])
    return response
