"""Where GPU telemetry history comes from, per cluster: one read interface for every page.

A cluster's telemetry comes from its node agents (``agent``: 5-minute and hourly points
in PostgreSQL, telemetry.sources.agent) unless it has an enabled
:class:`~telemetry.models.PrometheusSource` (``prometheus``: dcgm-exporter's series read
with range queries, telemetry.sources.prom). The insight (idle allocations, held/busy,
renewals), showback and the pages call only the functions here; each splits the GPUs it
is given by their cluster's source, asks each source once and merges the answers, so a
fleet of agent and Prometheus clusters is one picture with one definition per figure.

Latest per-GPU state (GpuState rows) comes from the agents' reports or, for Prometheus
clusters, from telemetry.promstate (copied every minute); only history is read here.

A Prometheus that does not answer (or refuses a query) costs its cluster's figures, not
the page: the failure is recorded for the request (:func:`outages`, shown as a banner by
the ``telemetry_outages`` context processor), logged, and the other clusters' figures
still come.
"""

from __future__ import annotations

import logging
from collections import defaultdict
from contextlib import contextmanager
from contextvars import ContextVar
from dataclasses import dataclass
from datetime import datetime, timedelta

from ..models_source import PrometheusSource
from ..promsource import PromClient, PrometheusUnavailable, QueryRefused
from . import agent
from .prom import PromHistory

log = logging.getLogger(__name__)


@dataclass(frozen=True)
class Outage:
    cluster: str
    message: str


# Per request (set by OutageMiddleware): {"outages": {cluster: Outage}, "sources": ...}.
_request: ContextVar[dict | None] = ContextVar("telemetry_sources_request", default=None)


class OutageMiddleware:
    """Gives each request its own record of telemetry outages and its own source map."""

    def __init__(self, get_response) -> None:
        self.get_response = get_response

    def __call__(self, request):
        token = _request.set({"outages": {}, "sources": None})
        try:
            return self.get_response(request)
        finally:
            _request.reset(token)


def outages() -> list[Outage]:
    state = _request.get()
    return list(state["outages"].values()) if state else []


def record_outage(cluster_id: int, outage: Outage) -> None:
    """Add an outage to the request's record (a figure read from a summary computed while
    the cluster's source did not answer: the page shows the banner all the same)."""
    state = _request.get()
    if state is not None:
        state["outages"].setdefault(cluster_id, outage)


@contextmanager
def recording():
    """A record of outages and a source map of its own, outside any request (a beat task)
    or apart from the request's (a summary computed while a page waits): yields the state,
    whose ``outages`` the caller reads."""
    token = _request.set({"outages": {}, "sources": None})
    try:
        yield _request.get()
    finally:
        _request.reset(token)


def outages_context(request) -> dict:
    """Context processor: ``telemetry_outages`` (read lazily, after the view's work)."""
    return {"telemetry_outages": outages}


def prometheus_sources() -> dict[int, PromHistory]:
    """{cluster id: PromHistory} of every cluster with an enabled Prometheus source (one
    query, once per request)."""
    state = _request.get()
    if state is not None and state["sources"] is not None:
        return state["sources"]
    rows = PrometheusSource.objects.filter(enabled=True).select_related("cluster")
    sources = {s.cluster_id: PromHistory(PromClient(s)) for s in rows}
    if state is not None:
        state["sources"] = sources
    return sources


def _split(gpus) -> tuple[list, dict[int, list]]:
    """(GPUs of agent clusters, {cluster id: GPUs} of Prometheus clusters)."""
    prom = prometheus_sources()
    mine: list = []
    theirs: dict[int, list] = defaultdict(list)
    for g in gpus:
        if g.node.cluster_id in prom:
            theirs[g.node.cluster_id].append(g)
        else:
            mine.append(g)
    return mine, theirs


def _ask(cluster_id: int, default, method: str, *args, **kwargs):
    """``prometheus_sources()[cluster_id].<method>(*args, **kwargs)``; on a Prometheus
    failure, the failure recorded for the request and logged, and ``default``."""
    source = prometheus_sources()[cluster_id]
    try:
        return getattr(source, method)(*args, **kwargs)
    except (PrometheusUnavailable, QueryRefused) as err:
        name = source.client.source.cluster.name
        log.warning("telemetry of cluster %s from Prometheus: %s", name, err)
        state = _request.get()
        if state is not None:
            state["outages"].setdefault(cluster_id, Outage(name, str(err)))
        return default


# -- the interface ---------------------------------------------------------------------------


def window_stats(gpus, now: datetime, window: timedelta) -> tuple[dict, dict[int, str]]:
    """({gpu id or (gpu id, MIG instance id): (peak 5-minute mean %, 5-minute points)},
    {cluster id: the metric its figures come from}) over ``window`` before ``now``."""
    mine, theirs = _split(gpus)
    stats = dict(agent.window_stats([g.pk for g in mine], now, window))
    metrics = {g.node.cluster_id: agent.METRIC for g in mine}
    for cluster_id, some in theirs.items():
        stats.update(_ask(cluster_id, {}, "window_stats", some, now, window))
        metrics[cluster_id] = _ask(cluster_id, "", "metric_name")
    return stats, metrics


def last_hour_util(gpus, now: datetime) -> dict[int, float]:
    """{gpu id: mean utilisation (activity) over the last hour}."""
    mine, theirs = _split(gpus)
    out = agent.last_hour_util([g.pk for g in mine], now)
    for cluster_id, some in theirs.items():
        out.update(_ask(cluster_id, {}, "last_hour_util", some, now))
    return out


def last_busy(gpus, now: datetime, threshold: float, lookback: timedelta) -> tuple[dict, dict]:
    """({gpu id or (gpu id, MIG instance id): when its last 5-minute point at or above
    ``threshold`` ended}, {gpu id: the earliest instant its source looked at, where that is
    later than ``now - lookback``})."""
    mine, theirs = _split(gpus)
    busy = agent.last_busy([g.pk for g in mine], now, threshold)
    floors: dict = {}
    for cluster_id, some in theirs.items():
        b, f = _ask(cluster_id, ({}, {}), "last_busy", some, now, threshold, lookback)
        busy.update(b)
        floors.update(f)
    return busy, floors


def gpu_hours(gpus, start: datetime, end: datetime, now: datetime, *, by_hour: bool = False):
    """[(gpu id, hour or None, reported GPU-hours, utilisation-weighted GPU-hours)]."""
    mine, theirs = _split(gpus)
    out = agent.gpu_hours([g.pk for g in mine], start, end, now, by_hour=by_hour)
    for cluster_id, some in theirs.items():
        out += _ask(cluster_id, [], "gpu_hours", some, start, end, now, by_hour=by_hour)
    return out


def product_series(cluster_id: int, start: datetime, now: datetime) -> dict:
    """{base product: {hour: [utilisation sum, samples]}} of one cluster's GPUs from
    ``start`` (an hour) to now, from the cluster's source."""
    from inventory.models import Node

    if cluster_id not in prometheus_sources():
        return agent.product_series(start, now, cluster_id)
    products = dict(
        Node.objects.filter(cluster_id=cluster_id, gone_at__isnull=True).values_list(
            "name", "gpu_product"
        )
    )
    return _ask(cluster_id, {}, "product_series", start, now, products)


def node_history(node, gpus, start: datetime) -> tuple[dict, dict, dict]:
    """One node's 5-minute utilisation, memory-used % and temperature since ``start``."""
    if node.cluster_id not in prometheus_sources():
        return agent.node_history(node, gpus, start)
    return _ask(node.cluster_id, ({}, {}, {}), "node_history", node, gpus, start)


def source_name(cluster_id: int) -> str:
    """``prometheus`` or ``agent``: where the cluster's telemetry comes from."""
    return PromHistory.name if cluster_id in prometheus_sources() else agent.NAME
