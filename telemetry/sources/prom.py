"""The ``prometheus`` telemetry source: dcgm-exporter's series in the cluster's Prometheus.

Every figure the agent source computes from its 5-minute points is computed here by
Prometheus from the raw samples, with the same definitions (docs/telemetry.md,
"Prometheus as a telemetry source"):

- a **5-minute point** of a GPU is ``avg_over_time(<activity>[5m])`` evaluated on 5-minute
  boundaries (a subquery ``[...:5m]``), so "the highest 5-minute mean over the idle
  window" and "5-minute points with data" mean what they mean for the agent's points;
- **activity** is graphics-engine activity (``DCGM_FI_PROF_GR_ENGINE_ACTIVE`` x 100) where
  the exporter provides it (DCP profiling; per MIG instance), else ``DCGM_FI_DEV_GPU_UTIL``;
  the pages name the metric;
- **reported hours** of a GPU are its 5-minute points with data x 5 minutes, **busy
  hours** the same weighted by each point's mean activity (showback, renewals).

With ``recorded_activity`` on, the 5-minute means come from the recording rules shipped in
deploy/monitoring/prometheus-rules.yaml (``RECORDED``) instead of the raw counters: one
sample per 5 minutes and GPU to read, whatever the scrape interval.

Series are matched to the portal's GPUs by node name (``Hostname``, or ``hostname`` as
dcgm-exporter's newest releases spell it) and ``gpu`` (the index); MIG instances by
``GPU_I_ID`` (NVIDIA/dcgm-exporter ``internal/pkg/rendermetrics/render_metrics.go``).
Queries aggregate in Prometheus (``by (Hostname, hostname, gpu[, GPU_I_ID])``), so the
portal receives one series per GPU (or per node, for the fleet chart), never raw samples,
and only the GPUs asked about when they sit on few nodes (a host matcher).
"""

from __future__ import annotations

import re
from collections import defaultdict
from datetime import UTC, datetime, timedelta

from inventory.models import base_product

from ..promsource import ENGINE_ACTIVE, GPU_UTIL, PromClient, host_of

NAME = "prometheus"
FB_USED = "DCGM_FI_DEV_FB_USED"
FB_FREE = "DCGM_FI_DEV_FB_FREE"
GPU_TEMP = "DCGM_FI_DEV_GPU_TEMP"
STEP = timedelta(minutes=5)
HOUR = timedelta(hours=1)
FIVE_MIN_H = 5 / 60
BY_GPU = "Hostname, hostname, gpu"
BY_INSTANCE = "Hostname, hostname, gpu, GPU_I_ID"
# The recording rules of deploy/monitoring/prometheus-rules.yaml (5-minute means, percent):
# read instead of the raw counters where the source says so (``recorded_activity``).
RECORDED = {
    GPU_UTIL: "portal:dcgm_gpu_util:avg5m",
    ENGINE_ACTIVE: "portal:dcgm_gr_engine_active:avg5m",
}
# Up to this many nodes, queries name them (a host matcher); beyond, they read the cluster.
HOST_MATCHER_MAX = 200
# How far back "idle since" looks (the agent source: its 30 days of 5-minute points). Each
# step reads the idle GPUs' samples once, so the cost grows with the span.
BUSY_LOOKBACK = timedelta(days=7)
# ... of which the last day point by point (5-minute means), the rest hour by hour.
RECENT_BUSY = timedelta(hours=6)


def _seconds(d: timedelta) -> int:
    return max(int(d.total_seconds()), 300)


class PromHistory:
    """The read interface of telemetry.sources for one cluster's Prometheus."""

    name = NAME

    def __init__(self, client: PromClient) -> None:
        self.client = client
        # (metric, the series read, PromQL form in percent), asked once per instance
        self._activity: tuple[str, str, str] | None = None

    # -- building blocks -------------------------------------------------------------------

    def _sels(self, metric: str, hosts=None) -> list[str]:
        """The cluster's series of ``metric``, on ``hosts`` when they are few enough: two
        selectors then, one per spelling of the node label (one of them matches nothing)."""
        hosts = sorted(set(hosts or ()))
        if not hosts or len(hosts) > HOST_MATCHER_MAX:
            return [self.client.selector(metric)]
        pattern = "|".join(re.escape(h) for h in hosts)
        return [self.client.selector(metric, regex={label: pattern})
                for label in ("Hostname", "hostname")]  # fmt: skip

    def over(self, fn: str, metric: str, window: str, hosts=None) -> str:
        """``fn(metric[window])`` over the selectors of :meth:`_sels`."""
        return " or ".join(f"{fn}({sel}[{window}])" for sel in self._sels(metric, hosts))

    def activity(self, fn: str = "avg_over_time", window: str = "5m", hosts=None) -> str:
        """PromQL, in percent, of how busy a GPU is over ``window`` (module docstring)."""
        if self._activity is None:
            recorded = self.client.source.recorded_activity
            engine_series = RECORDED[ENGINE_ACTIVE] if recorded else ENGINE_ACTIVE
            engine = self.client.instant(f"count({self.client.selector(engine_series)})")
            if engine and engine[0].value > 0:
                self._activity = (
                    ENGINE_ACTIVE,
                    engine_series,
                    "({})" if recorded else "100 * ({})",
                )
            else:
                self._activity = (GPU_UTIL, RECORDED[GPU_UTIL] if recorded else GPU_UTIL, "({})")
        _, series, form = self._activity
        return form.format(self.over(fn, series, window, hosts))

    def metric_name(self) -> str:
        """The metric :meth:`activity` reads (said on the pages)."""
        self.activity()
        metric, series, _ = self._activity
        return metric if series == metric else f"{metric} (recorded: {series})"

    def _points(self, by: str, hosts=None) -> str:
        """5-minute means of activity, one series per GPU (or MIG instance)."""
        return f"avg by ({by}) ({self.activity(hosts=hosts)})"

    @staticmethod
    def _index(gpus) -> dict[tuple[str, str], int]:
        return {(g.node.name, str(g.index)): g.pk for g in gpus}

    @staticmethod
    def _batches(gpus):
        """(node names, their GPUs) in batches of at most HOST_MATCHER_MAX nodes: every query
        names the nodes it asks about, so its cost follows the GPUs asked, not the cluster."""
        by_host: dict[str, list] = defaultdict(list)
        for g in gpus:
            by_host[g.node.name].append(g)
        hosts = sorted(by_host)
        for i in range(0, len(hosts), HOST_MATCHER_MAX):
            chunk = hosts[i : i + HOST_MATCHER_MAX]
            yield chunk, [g for h in chunk for g in by_host[h]]

    # -- the interface ---------------------------------------------------------------------

    def window_stats(self, gpus, now: datetime, window: timedelta) -> dict:
        """{gpu id: (peak 5-minute mean, points)} and {(gpu id, GPU_I_ID): ...} per MIG
        instance; a GPU's own figures are the highest of its instances'. The points of the
        window (5-minute boundaries after ``now - window``, up to ``now``) are read once, a
        range query at a 5-minute step, and their peak and count taken here."""
        out: dict = {}
        first = _ceil5(now - window + timedelta(seconds=1))
        last = _floor5(now)
        if last < first:
            return out
        for hosts, some in self._batches(gpus):
            index = self._index(some)
            for s in self.client.range(self._points(BY_INSTANCE, hosts), first, last, STEP):
                host, gpu, gi = _key(s.labels)
                gpu_id = index.get((host, gpu))
                if gpu_id is None or not s.points:
                    continue
                cell = (max(v for _, v in s.points), len(s.points))
                if gi:
                    out[(gpu_id, gi)] = cell
                old = out.get(gpu_id)
                out[gpu_id] = cell if old is None else (max(old[0], cell[0]), max(old[1], cell[1]))
        return out

    def last_hour_util(self, gpus, now: datetime) -> dict[int, float]:
        out: dict[int, float] = {}
        for hosts, some in self._batches(gpus):
            act = self.activity(window="1h", hosts=hosts)
            rows = self.client.instant(f"avg by ({BY_GPU}) ({act})", at=now)
            out.update(_by_gpu(rows, self._index(some)))
        return out

    def last_busy(self, gpus, now: datetime, threshold: float, lookback: timedelta):
        """({gpu id: end of its last 5-minute point at or above ``threshold``, (gpu id,
        GPU_I_ID): the same per MIG instance}, {gpu id: now - the span looked at}).

        The last ``RECENT_BUSY`` (6 hours; the idle window is 2) are read point by point
        (5-minute means); GPUs not busy in them are looked for further back, to
        ``BUSY_LOOKBACK``, hour by hour (the highest
        sample of each hour: a lone busy sample counts, so "idle since" errs late, never
        early). An idle figure never claims more than was looked at."""
        back = min(lookback, BUSY_LOOKBACK)
        thr = float(threshold)
        busy: dict = {}

        def take(series, index) -> None:
            for s in series:
                host, gpu, gi = _key(s.labels)
                gpu_id = index.get((host, gpu))
                if gpu_id is None:
                    continue
                when = datetime.fromtimestamp(s.value, UTC)
                if gi:
                    busy[(gpu_id, gi)] = when
                busy[gpu_id] = max(busy.get(gpu_id, when), when)

        recent = _seconds(min(back, RECENT_BUSY))
        for hosts, some in self._batches(gpus):
            points = self._points(BY_INSTANCE, hosts)
            expr = f"max_over_time(timestamp(({points}) >= {thr})[{recent}s:5m])"
            take(self.client.instant(expr, at=now), self._index(some))
        older = [g for g in gpus if g.pk not in busy]
        if back > RECENT_BUSY and older:
            for hosts, some in self._batches(older):
                peaks = f"max by ({BY_INSTANCE}) ({self.activity('max_over_time', '1h', hosts)})"
                expr = f"max_over_time(timestamp({peaks} >= {thr})[{_seconds(back)}s:1h])"
                found = self.client.instant(expr, at=now - RECENT_BUSY)
                take(found, self._index(some))
        return busy, {g.pk: now - back for g in gpus}

    def gpu_hours(self, gpus, start: datetime, end: datetime, now: datetime, *, by_hour=False):
        """[(gpu id, hour or None, reported hours, busy hours)] as the agent source."""
        stop = min(end, now)
        if stop <= start or not gpus:
            return []
        out = []
        for hosts, some in self._batches(gpus):
            out += self._gpu_hours(hosts, some, start, end, now, stop, by_hour)
        return out

    def _gpu_hours(self, hosts, gpus, start, end, now, stop, by_hour) -> list:
        index = self._index(gpus)
        points = self._points(BY_GPU, hosts)
        out = []
        if not by_hour:
            r = _seconds(stop - start)
            counts = self.client.instant(f"count_over_time(({points})[{r}s:5m])", at=stop)
            sums = _by_gpu(
                self.client.instant(f"sum_over_time(({points})[{r}s:5m])", at=stop), index
            )
            for gpu_id, n in _by_gpu(counts, index).items():
                out.append((gpu_id, None, n * FIVE_MIN_H, sums.get(gpu_id, 0.0) / 100 * FIVE_MIN_H))
            return out
        # Hour by hour: the 5-minute points themselves (a point at t is the bucket that
        # starts at t - 5 min), summed per hour here, buckets from ``start`` as the agent's.
        first = _ceil5(start) + STEP
        last = _ceil5(min(end, now + STEP))
        if last < first:
            return []
        cells: dict = defaultdict(lambda: [0, 0.0])
        for s in self.client.range(points, first, last, STEP):
            gpu_id = index.get(_key(s.labels)[:2])
            if gpu_id is None:
                continue
            for t, v in s.points:
                bucket = datetime.fromtimestamp(t, UTC) - STEP
                cell = cells[(gpu_id, bucket.replace(minute=0))]
                cell[0] += 1
                cell[1] += v
        return [
            (gpu_id, hour, n * FIVE_MIN_H, total / 100 * FIVE_MIN_H)
            for (gpu_id, hour), (n, total) in cells.items()
        ]

    def product_series(self, start: datetime, now: datetime, products: dict[str, str]) -> dict:
        """{base product: {hour: [sum of GPU means, GPUs]}} from ``start`` (an hour),
        ``products`` mapping node names to their GPU product: each GPU's mean over the hour
        (``avg_over_time(<activity>[1h])``, the mean of its samples, as the agent's hourly
        points are), summed and counted per node in Prometheus. Two range queries over the
        whole cluster, one series per node."""
        act = self.activity(window="1h")
        last = now.replace(minute=0, second=0, microsecond=0)
        out: dict = defaultdict(lambda: defaultdict(lambda: [0.0, 0]))
        for i, agg in enumerate(("sum", "count")):
            expr = f"{agg} by (Hostname, hostname) (avg by ({BY_GPU}) ({act}))"
            for s in self.client.range(expr, start + HOUR, last + HOUR, HOUR):
                product = products.get(host_of(s.labels))
                if not product:
                    continue
                for t, v in s.points:
                    hour = datetime.fromtimestamp(t, UTC) - HOUR
                    out[base_product(product)][hour][i] += v
        return out

    def node_history(self, node, gpus, start: datetime) -> tuple[dict, dict, dict]:
        """({gpu id: {bucket: activity %}}, {...: memory used %}, {...: temperature}) at
        5-minute steps from ``start``, a point labelled by the start of its 5 minutes."""
        index = {str(g.index): g.pk for g in gpus}
        hosts = [node.name]
        used = f"sum by (gpu) ({self.over('avg_over_time', FB_USED, '5m', hosts)})"
        free = f"sum by (gpu) ({self.over('avg_over_time', FB_FREE, '5m', hosts)})"
        exprs = (
            f"avg by (gpu) ({self.activity(hosts=hosts)})",
            f"100 * {used} / ({used} + {free})",
            f"max by (gpu) ({self.over('max_over_time', GPU_TEMP, '5m', hosts)})",
        )
        end = datetime.now(UTC)
        out = []
        for expr in exprs:
            series: dict = defaultdict(dict)
            if end > start + STEP:
                for s in self.client.range(expr, start + STEP, end, STEP):
                    gpu_id = index.get(s.labels.get("gpu", ""))
                    if gpu_id is None:
                        continue
                    for t, v in s.points:
                        series[gpu_id][datetime.fromtimestamp(t, UTC) - STEP] = v
            out.append(series)
        return out[0], out[1], out[2]


def _floor5(t: datetime) -> datetime:
    """``t`` rounded down to a 5-minute boundary."""
    return datetime.fromtimestamp(int(t.timestamp()) // 300 * 300, UTC)


def _ceil5(t: datetime) -> datetime:
    """``t`` rounded up to a 5-minute boundary."""
    seconds = int(t.timestamp())
    return datetime.fromtimestamp(-(-seconds // 300) * 300, UTC)


def _key(labels: dict[str, str]) -> tuple[str, str, str]:
    return host_of(labels), labels.get("gpu", ""), labels.get("GPU_I_ID", "")


def _by_gpu(series, index) -> dict[int, float]:
    out = {}
    for s in series:
        gpu_id = index.get(_key(s.labels)[:2])
        if gpu_id is not None:
            out[gpu_id] = s.value
    return out
