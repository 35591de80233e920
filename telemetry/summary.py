"""Telemetry figures computed before anyone asks (issue #23 section 1).

Who holds which GPU (telemetry.insight.attribute), how busy each was over the last hour,
which allocations sit idle and since when, and each GPU product's hourly utilisation
over the last day take seconds to compute at 40,000 GPUs (tens of thousands of history
rows, or Prometheus range queries over every GPU of a cluster). Grafana draws such a
dashboard in a second because its aggregates exist before anyone asks; so does the
portal: a beat task (``telemetry.tasks.refresh_summaries``, every
``TELEMETRY_SUMMARY_INTERVAL_SECONDS``) computes, per measured cluster (telemetry.measured),
one :class:`~telemetry.models.ClusterSummary` row:

- ``held``: {namespace: [GPUs held, GPUs busy]} now (insight.held_and_busy);
- ``products``: {base product: [held, busy]} (the same shares, by the GPU's product);
- ``hours``: {base product: [[hour, utilisation sum, samples], ...]} over 24 hours, hours
  that can no longer change kept from the previous row (the agent source re-rolls the
  last 3 hours; telemetry.retention), so a refresh reads 4 hours, not 24;
- ``idle``: the idle allocations (insight.idle_allocations) with their ``idle_since``
  (classes.set_idle_since);
- ``outages``: the source's failure message, where it did not answer;
- ``usage_since``: since when the cluster's :class:`~telemetry.models.UsageHour` rows
  cover it: the same computation writes each namespace's allocated and busy GPU-hours per
  hour and GPU class with the attribution of the moment (the last 3 closed hours and the
  current one rewritten every ``TELEMETRY_USAGE_INTERVAL_SECONDS``, 300; a first
  computation fills the last day, and each of the beat's computations then one more span
  before, back to the hourly points' retention: ``usage_complete``, :func:`_backfill`),
  which showback and the team page sum (telemetry.showback.used_cells);
- ``usage_cover``: per hour of the last 31 days, the GPUs held and the GPU-hours of them
  the source reported (the idle-grant reclaim policy judges only hours whose held GPUs
  reported at least 80 %, telemetry/reclaim.py);
- ``definition``: the idle threshold and window and the source it was computed with.

Every page, the API, the node page's badges and ``/metrics`` read these rows through
:func:`read` (one query for any fleet size, plus one for the idle allocations' nodes and
one for their teams), so they show one figure, computed once, with its time
(``as_of``). A cluster without a row, with one older than
``TELEMETRY_SUMMARY_MAX_AGE_SECONDS`` (the beat stopped) or computed with another idle
threshold or window, is computed by the reader and stored: slower, never wrong (a row
that is only old is shown with its time while another process computes the next one).
"""

from __future__ import annotations

import logging
import time
import uuid
from collections import defaultdict
from dataclasses import dataclass, field
from datetime import UTC, datetime, timedelta

from django.conf import settings
from django.db import connection, transaction
from django.utils import timezone
from prometheus_client.core import GaugeMetricFamily

from inventory.models import Cluster, Node, base_product

from . import classes, insight, sources
from .insight import Allocation, NsKey
from .measured import measured_cluster_ids
from .models import ClusterSummary, UsageHour
from .sources.agent import history_horizon

log = logging.getLogger(__name__)

HOUR = timedelta(hours=1)
HOURS = 24  # the fleet page's chart
SETTLED = timedelta(hours=3)  # the agent source re-rolls the last 3 closed hours
LOCK_SPACE = 0x7E1E  # pg advisory lock (space, cluster id): one computation per cluster
# The longest span a computation fills before the rows begin: within what the Prometheus
# source asks in one query (telemetry/promsource.py MAX_RANGE, 31 days, with its lookback).
MAX_BACKFILL = timedelta(days=28)
COVER_KEPT = timedelta(days=31)  # per-hour coverage kept: longer than any reclaim window


def usage_interval() -> timedelta:
    """How often the GPU-hours per namespace and hour are rewritten (each rewrite reads the
    last 4 hours of every held GPU: the costliest part of a computation)."""
    return timedelta(seconds=float(getattr(settings, "TELEMETRY_USAGE_INTERVAL_SECONDS", 300)))


def max_age() -> timedelta:
    return timedelta(seconds=float(getattr(settings, "TELEMETRY_SUMMARY_MAX_AGE_SECONDS", 300)))


def _definition(cluster_id) -> list:
    """What the figures depend on besides the data: a row computed under other settings,
    or from the other telemetry source, is computed again (and keeps no hour)."""
    return [
        insight.idle_threshold_pct(),
        insight.idle_window().total_seconds(),
        sources.source_name(cluster_id),
    ]


def _unsettled_from(t: datetime) -> datetime:
    """The first hour whose history may still change at ``t`` (the agent source re-rolls
    the last 3 closed hours; telemetry.retention): earlier ones are kept once computed."""
    return history_horizon(t) - SETTLED + HOUR


def _ts(t: datetime | None) -> float | None:
    return None if t is None else t.timestamp()


def _dt(t: float | None) -> datetime | None:
    return None if t is None else datetime.fromtimestamp(t, UTC)


# -- computing ------------------------------------------------------------------------------


def compute(
    cluster_id: int, now: datetime, previous: dict | None = None, *, backfill: bool = False
) -> dict:
    """One cluster's figures at ``now`` (``previous``: the row's data before, whose settled
    hours are kept); ``backfill`` (the beat's computations, not a reader's): one more day
    of GPU-hours before the rows begin (:func:`_backfill`)."""
    nodes = Node.objects.filter(cluster_id=cluster_id).values("pk")
    with sources.recording() as state:
        current = insight.now_of(nodes, now)
        attribution, util = current.attribution, current.util
        held = insight.held_and_busy(attribution, util)
        products = insight.held_and_busy(
            attribution, util, by=lambda g: base_product(g.node.gpu_product) or None
        )
        idle = insight.idle_allocations(now=now, attribution=attribution)
        classes.set_idle_since(idle, now)
        hours = _hours(cluster_id, now, previous)
        usage_at = _dt((previous or {}).get("usage_at"))
        cover = _kept_cover(previous, now)
        if usage_at is None or not usage_at <= now < usage_at + usage_interval():
            usage_since = _write_usage(cluster_id, now, attribution, previous, cover)
            usage_at = now
        else:  # written less than the usage interval ago
            usage_since = _dt(previous["usage_since"])
        complete = bool((previous or {}).get("usage_complete"))
        span = timedelta(hours=(previous or {}).get("usage_span") or 0) or backfill_span()
        if backfill and not complete:
            usage_since, complete, span = _backfill(
                cluster_id, now, attribution, usage_since, span, cover
            )
        outages = [o.message for o in state["outages"].values()]
    return {
        "definition": _definition(cluster_id),
        "held": [[ns, h, b] for (_, ns), (h, b) in sorted(held.items())],
        "products": {p: list(v) for p, v in sorted(products.items())},
        "hours": hours,
        "hours_at": now.timestamp(),
        "usage_since": usage_since.timestamp(),
        "usage_at": usage_at.timestamp(),
        "usage_complete": complete,
        "usage_span": span / HOUR,
        "usage_cover": cover,
        "idle": [_stored(a) for a in idle],
        "outages": outages,
    }


def _kept_cover(previous: dict | None, now: datetime) -> dict:
    """The previous row's per-hour coverage of the last :data:`COVER_KEPT` (a reclaim
    policy's longest idle window)."""
    oldest = (now - COVER_KEPT).timestamp()
    return {h: v for h, v in (previous or {}).get("usage_cover", {}).items() if int(h) >= oldest}


def _hours(cluster_id: int, now: datetime, previous: dict | None) -> dict:
    """{product: [[hour (epoch s), utilisation sum, samples], ...]} over the last 24 hours:
    hours that were settled when ``previous`` was computed (more than 3 closed hours old)
    from it, the rest from the source."""
    first = now.replace(minute=0, second=0, microsecond=0) - (HOURS - 1) * HOUR
    start = first
    kept: dict = defaultdict(list)
    if previous and previous.get("hours_at") is not None:
        settled = _unsettled_from(_dt(previous["hours_at"]))
        start = min(max(first, settled), _unsettled_from(now))
        for product, points in previous.get("hours", {}).items():
            kept[product] += [p for p in points if first.timestamp() <= p[0] < start.timestamp()]
    for product, points in sources.product_series(cluster_id, start, now).items():
        for hour, (s, n) in sorted(points.items()):
            if hour >= start:
                kept[product].append([hour.timestamp(), s, n])
    return dict(kept)


def _write_usage(
    cluster_id, now: datetime, attribution, previous: dict | None, cover: dict
) -> datetime:
    """Write the cluster's UsageHour rows from the hour that may still change (3 closed
    hours before the previous computation's hour; on a first computation, a backfill span
    before the current hour, with the current attribution: the days before are filled one
    span per computation, :func:`_backfill`, as reading a month of 40,000 GPUs' hours at
    once would take minutes and more memory than a worker has) to now; return since when
    the rows cover the cluster."""
    first = now.replace(minute=0, second=0, microsecond=0) - backfill_span()
    since = _dt((previous or {}).get("usage_since")) or first
    start = since
    if previous and previous.get("usage_at") is not None:
        start = max(since, _unsettled_from(_dt(previous["usage_at"])))
    start = min(start, _unsettled_from(now))
    _rewrite(cluster_id, attribution, start, now, now, cover)
    return min(since, start)


def _rewrite(cluster_id, attribution, start: datetime, end: datetime, now: datetime,
             cover: dict | None = None) -> int:  # fmt: skip
    """The cluster's UsageHour rows of [start, end) from its history, with ``attribution``;
    returns how many were written. ``cover`` gets, per hour (epoch s, as text), the GPUs
    held and the GPU-hours of them the source reported (the reclaim policy judges only
    hours whose held GPUs reported, telemetry/reclaim.py)."""
    held = [attribution.gpus[i] for i in attribution.shares]
    cells: dict = defaultdict(lambda: [0.0, 0.0])
    reported: dict = defaultdict(float)
    for gpu_id, hour, hours, busy in sources.gpu_hours(held, start, end, now, by_hour=True):
        class_id = attribution.gpus[gpu_id].node.gpu_class_id
        reported[hour] += hours
        for (_, ns), share in attribution.shares[gpu_id].items():
            cell = cells[(ns, class_id, hour)]
            cell[0] += hours * share
            cell[1] += busy * share
    if cover is not None:
        hour = start.replace(minute=0, second=0, microsecond=0)
        while hour < end:
            cover[str(int(hour.timestamp()))] = [len(held), round(reported.get(hour, 0.0), 3)]
            hour += HOUR
    UsageHour.objects.filter(cluster_id=cluster_id, hour__gte=start, hour__lt=end).delete()
    made = UsageHour.objects.bulk_create(
        (UsageHour(cluster_id=cluster_id, namespace=ns, gpu_class_id=class_id, hour=hour,
                   allocated=a, busy=b)
         for (ns, class_id, hour), (a, b) in cells.items() if start <= hour < end),
        batch_size=2000,
    )  # fmt: skip
    return len(made)


def backfill_span() -> timedelta:
    return timedelta(hours=float(getattr(settings, "TELEMETRY_USAGE_BACKFILL_HOURS", 24)))


def _backfill(
    cluster_id, now: datetime, attribution, since: datetime, span: timedelta, cover: dict
):
    """One more span of GPU-hours before the rows begin, with the current attribution, as
    showback read history before them: so a computation reads at most a span of history,
    and in time no page reads raw history (showback of a month before the rows began read
    every held GPU's hours of the month per view). The span is
    ``TELEMETRY_USAGE_BACKFILL_HOURS`` (a day) after a span with history and doubles after
    one without (up to :data:`MAX_BACKFILL`), so a gap or the time before telemetry began
    is crossed in a few computations. Returns (the rows' new beginning, done: the hourly points'
    retention reached, the next span)."""
    from .retention import HOURLY_RETENTION

    horizon = history_horizon(now) - HOURLY_RETENTION
    start = max(since - span, horizon)
    if start >= since:
        return since, True, span
    written = _rewrite(cluster_id, attribution, start, since, now, cover)
    span = backfill_span() if written else min(span * 2, MAX_BACKFILL)
    return start, start <= horizon, span


def _stored(a: Allocation) -> dict:
    return {
        "node": str(a.node.pk),
        "ns": a.namespace,
        "pod": a.pod,
        "method": a.method,
        "gpus": [[g.pk, g.index] for g in a.gpu_states],
        "instances": {str(g): sorted(ids) for g, ids in a.instances.items()},
        "requested": a.requested,
        "since": _ts(a.since),
        "peak": a.max_util_pct,
        "metric": a.metric,
        "idle_since": _ts(a.idle_since),
    }


def lock_key(cluster_id) -> list[int]:
    """The cluster's advisory lock (two int4 keys): one computation at a time."""
    return [LOCK_SPACE, uuid.UUID(str(cluster_id)).int % 2**31]


def refresh(
    cluster_id: int, now: datetime | None = None, *, wait: bool = True, force: bool = True
) -> ClusterSummary | None:
    """Compute one cluster's row and store it. With ``wait`` False, return None instead of
    waiting when another process is computing it; with ``force`` False (a reader), keep a
    row that is usable by the time the lock is held (another reader computed it)."""
    key = lock_key(cluster_id)
    with connection.cursor() as cur:
        fn = "pg_advisory_lock" if wait else "pg_try_advisory_lock"
        cur.execute(f"SELECT {fn}(%s, %s)", key)
        got = cur.fetchone()[0] if not wait else True
    if not got:
        return None
    try:
        with transaction.atomic():  # a failure leaves the connection usable for the unlock
            return _refresh_locked(cluster_id, now or timezone.now(), force)
    finally:
        with connection.cursor() as cur:
            cur.execute("SELECT pg_advisory_unlock(%s, %s)", key)


def _refresh_locked(cluster_id: int, now: datetime, force: bool) -> ClusterSummary:
    row = ClusterSummary.objects.filter(cluster_id=cluster_id).first()
    if not force and row is not None and _usable(row, now):
        return row
    same = row is not None and row.data.get("definition") == _definition(cluster_id)
    started = time.perf_counter()
    data = compute(cluster_id, now, row.data if same else None, backfill=force)
    row = ClusterSummary(
        cluster_id=cluster_id, computed_at=now, seconds=time.perf_counter() - started, data=data
    )
    ClusterSummary.objects.bulk_create(
        [row], update_conflicts=True, unique_fields=["cluster"],
        update_fields=["computed_at", "seconds", "data"],
    )  # fmt: skip
    return row


def refresh_all() -> dict[str, float | str]:
    """Every measured cluster's row (the beat task): {cluster slug: seconds, or "busy"
    where another process is computing it}."""
    out: dict = {}
    slugs = dict(Cluster.objects.values_list("pk", "slug"))
    for cluster_id in sorted(measured_cluster_ids()):
        try:
            row = refresh(cluster_id, wait=False)
        except Exception:  # one cluster's failure must not stop the others'
            log.exception("telemetry summary of cluster %s failed", slugs.get(cluster_id))
            out[slugs.get(cluster_id, str(cluster_id))] = "failed"
            continue
        out[slugs.get(cluster_id, str(cluster_id))] = "busy" if row is None else row.seconds
    return out


def _usable(row: ClusterSummary, now: datetime) -> bool:
    fresh = now - max_age() <= row.computed_at <= now + timedelta(seconds=5)
    return fresh and row.data.get("definition") == _definition(row.cluster_id)


# -- reading --------------------------------------------------------------------------------


@dataclass
class Figures:
    """The summaries of a set of clusters, merged (:func:`read`)."""

    held: dict[NsKey, tuple[float, float]] = field(default_factory=dict)
    products: dict[str, list[float]] = field(default_factory=dict)  # product -> [held, busy]
    # product -> {hour: [utilisation sum, samples]}
    series: dict[str, dict[datetime, list]] = field(default_factory=dict)
    idle: list[Allocation] = field(default_factory=list)
    computed_at: dict[int, datetime] = field(default_factory=dict)  # cluster id -> when

    @property
    def as_of(self) -> datetime | None:
        """When the oldest of these figures was computed (None: no measured cluster)."""
        return min(self.computed_at.values()) if self.computed_at else None


def rows(cluster_ids=None, now: datetime | None = None) -> list[ClusterSummary]:
    """The rows of the measured clusters (among ``cluster_ids``), each computed here where
    it is missing, too old or of other settings. Outages recorded when they were computed
    are added to the request's (telemetry.sources.outages): the page shows the banner."""
    now = now or timezone.now()
    measured = measured_cluster_ids(cluster_ids)
    found = {r.cluster_id: r for r in ClusterSummary.objects.filter(cluster_id__in=measured)}
    out = []
    names: dict = {}
    for cluster_id in sorted(measured):
        row = found.get(cluster_id)
        if row is None or not _usable(row, now):
            # Another process computing it: the older row meanwhile, with its time (a
            # first computation, or one of other settings, is waited for).
            same = row is not None and row.data.get("definition") == _definition(cluster_id)
            row = refresh(cluster_id, now, wait=not same, force=False) or row
        for message in row.data.get("outages", []):
            names = names or dict(Cluster.objects.values_list("pk", "name"))
            name = names.get(cluster_id, str(cluster_id))
            sources.record_outage(cluster_id, sources.Outage(name, message))
        out.append(row)
    return out


def usage_since(cluster_ids, now: datetime | None = None) -> dict:
    """{cluster id: since when its UsageHour rows cover it} for the measured clusters
    among ``cluster_ids`` (their rows computed where needed)."""
    return {r.cluster_id: usage_since_of(r) for r in rows(cluster_ids, now)}


def usage_since_of(row: ClusterSummary) -> datetime | None:
    """Since when one cluster's UsageHour rows cover it, from its summary row."""
    return _dt(row.data.get("usage_since"))


def read(
    cluster_ids=None,
    now: datetime | None = None,
    namespaces: set[NsKey] | None = None,
    node_ids=None,
    idle: bool = True,
) -> Figures:
    """The figures of the measured clusters (among ``cluster_ids``); idle allocations only
    of ``namespaces`` / on ``node_ids`` where given, with their nodes, teams and idle-since
    (classes.idle_by_class sets their class and idle GPU-hours; ``idle`` False: none, for
    pages that show none)."""
    now = now or timezone.now()
    out = Figures()
    stored = []
    node_ids = None if node_ids is None else {str(n) for n in node_ids}
    for row in rows(cluster_ids, now):
        cid, data = row.cluster_id, row.data
        out.computed_at[cid] = row.computed_at
        for ns, h, b in data["held"]:
            out.held[(cid, ns)] = (h, b)
        for product, (h, b) in data["products"].items():
            cell = out.products.setdefault(product, [0.0, 0.0])
            cell[0] += h
            cell[1] += b
        for product, points in data["hours"].items():
            series = out.series.setdefault(product, {})
            for t, s, n in points:
                cell = series.setdefault(_dt(t), [0, 0])
                cell[0] += s
                cell[1] += n
        stored += [
            (cid, a)
            for a in (data["idle"] if idle else [])
            if (namespaces is None or (cid, a["ns"]) in namespaces)
            and (node_ids is None or a["node"] in node_ids)
        ]
    out.idle = _allocations(stored)
    return out


@dataclass(slots=True)
class StoredGpu:
    """What a stored idle allocation keeps of each GpuState (a model instance costs 80 us
    to build, 0.3 s for the 3,600 GPUs of a fleet's idle allocations)."""

    pk: int
    index: int
    node: Node


def _allocations(stored: list[tuple[int, dict]]) -> list[Allocation]:
    """Stored idle allocations as insight.Allocation objects, with their nodes (and
    clusters) and teams: two queries."""
    if not stored:
        return []
    nodes = (
        Node.objects.select_related("cluster")
        .defer("labels")
        .in_bulk({uuid.UUID(a["node"]) for _, a in stored})
    )
    teams = insight.namespace_teams((cid, a["ns"]) for cid, a in stored)
    out = []
    for cid, a in stored:
        node = nodes.get(uuid.UUID(a["node"]))
        if node is None:  # deleted since: not shown
            continue
        alloc = Allocation(
            node, a["ns"], a["pod"], a["method"],
            gpu_states=[StoredGpu(pk, index, node) for pk, index in a["gpus"]],
            instances={int(g): set(ids) for g, ids in a["instances"].items()},
            requested=a["requested"], since=_dt(a["since"]), team=teams.get((cid, a["ns"])),
            max_util_pct=a["peak"], metric=a["metric"], idle_since=_dt(a["idle_since"]),
        )  # fmt: skip
        out.append(alloc)
    return sorted(out, key=lambda a: (a.since or a.idle_since, a.namespace, a.pod))


def product_rows(figures: Figures) -> list[insight.UsageRow]:
    """One UsageRow per base GPU product: capacity / requested from the inventory (one
    query), held and busy now and mean utilisation over the last day from ``figures``."""
    from django.db.models import Sum

    from inventory.models import GPU_RESOURCE, NodeResource

    rows: dict[str, insight.UsageRow] = {}

    def row(product: str) -> insight.UsageRow:
        p = base_product(product)
        return rows.setdefault(p, insight.UsageRow(label=p))

    for product, cap, req in (
        NodeResource.objects.filter(node__gone_at__isnull=True, resource=GPU_RESOURCE)
        .exclude(node__gpu_product="")
        .values("node__gpu_product")
        .annotate(c=Sum("capacity"), r=Sum("requested"))
        .values_list("node__gpu_product", "c", "r")
    ):
        row(product).capacity += cap or 0
        row(product).requested += req or 0
    for product, (h, b) in figures.products.items():
        row(product).held += h
        row(product).busy += b
    for product, points in figures.series.items():
        total = sum(s for s, n in points.values())
        count = sum(n for s, n in points.values())
        if product in rows and count:
            rows[product].util_pct = total / count
    return sorted(rows.values(), key=lambda r: r.label)


class IdleGpuCollector:
    """``portal_idle_gpus{cluster, team, namespace}``: GPUs held by pods that stayed under
    the idle threshold for the idle window, as the idle page lists them (register in
    ``portal.health.REGISTRY``)."""

    def collect(self):
        family = GaugeMetricFamily(
            "portal_idle_gpus",
            "GPUs of allocations under the idle threshold for the whole idle window",
            labels=["cluster", "team", "namespace"],
        )
        counts: dict[tuple, int] = defaultdict(int)
        for a in read().idle:
            counts[(a.node.cluster.slug, a.team.slug if a.team else "", a.namespace)] += a.gpus
        for (cluster, team, namespace), n in sorted(counts.items()):
            family.add_metric([cluster, team, namespace], n)
        yield family
