"""Reading GPU telemetry from a cluster's Prometheus (issue #13 section 1).

Clusters that run the NVIDIA GPU Operator usually run dcgm-exporter and a Prometheus that
scrapes it; for them the portal queries that Prometheus (HTTP API ``/api/v1/query`` and
``/api/v1/query_range``) instead of storing its own points. The metric and label names are
dcgm-exporter's (NVIDIA/dcgm-exporter ``etc/default-counters.csv``; labels ``Hostname``,
``gpu``, ``UUID``, ``modelName``, ``GPU_I_PROFILE``, ``GPU_I_ID`` and, with the Kubernetes
pod mapping on, ``namespace``/``pod``/``container``).

Every query is bounded, so a page cannot ask a shared Prometheus for more than it can
answer: a range is at most ``MAX_RANGE``, its step at least ``MIN_STEP`` and at most
``MAX_POINTS`` points per series (Prometheus' own limit is 11,000); an answer with more
than ``max_series`` series is refused; the server is given a ``timeout`` and the client one
too. Answers are cached briefly (``CACHE_SECONDS``) in the Django cache, so several pages
(or users) asking the same thing within seconds cost one query. Any failure (connection,
timeout, HTTP error, a Prometheus error answer, a malformed body) raises
:class:`PrometheusUnavailable` with a message fit for a page banner, never a 500.
"""

from __future__ import annotations

import hashlib
import json
import math
from dataclasses import dataclass
from datetime import datetime, timedelta

import requests
from django.core.cache import cache

from portal.env import secret

from .models_source import PrometheusSource

MAX_RANGE = timedelta(days=31)
MIN_STEP = timedelta(seconds=30)
MAX_POINTS = 11_000
# An answer is one series per GPU (or MIG instance, or node) at most: 40,000 GPUs with
# room for MIG. Range answers are bounded in points per series as well (MAX_POINTS).
MAX_SERIES = 100_000
CACHE_SECONDS = 30
# After a failure, the same Prometheus is not asked again for this long: a page that
# needs it several times answers at once with the banner instead of waiting each time.
DOWN_SECONDS = 30


class PrometheusUnavailable(RuntimeError):
    """The cluster's Prometheus could not answer; the message says why (for a banner)."""


class QueryRefused(ValueError):
    """The query is outside the bounds (range, step, series): the caller's mistake."""


@dataclass(frozen=True)
class Series:
    labels: dict[str, str]
    points: list[tuple[float, float]]  # (unix time, value); an instant query: one point

    @property
    def value(self) -> float:
        return self.points[-1][1]


def quote(value: str) -> str:
    """A PromQL string literal (label values come from admins and node names)."""
    return json.dumps(value)


class PromClient:
    def __init__(self, source: PrometheusSource, *, max_series: int = MAX_SERIES) -> None:
        self.source = source
        self.base = source.url.rstrip("/")
        self.timeout = float(source.timeout_seconds)
        self.max_series = max_series

    # -- selectors -------------------------------------------------------------------------

    def selector(self, metric: str, regex: dict[str, str] | None = None, **labels: str) -> str:
        """``metric{cluster="prod",Hostname="gpu-1"}``: the cluster's own series only;
        ``regex`` adds ``label=~"pattern"`` matchers (patterns are fully anchored)."""
        matchers = dict(labels)
        if self.source.cluster_label:
            matchers[self.source.cluster_label] = self.source.selector_value
        parts = [f"{k}={quote(v)}" for k, v in sorted(matchers.items())]
        parts += [f"{k}=~{quote(v)}" for k, v in sorted((regex or {}).items())]
        inner = ",".join(parts)
        return f"{metric}{{{inner}}}" if inner else metric

    # -- queries ---------------------------------------------------------------------------

    def instant(self, expr: str, at: datetime | None = None) -> list[Series]:
        params = {"query": expr}
        if at is not None:
            params["time"] = f"{at.timestamp():.3f}"
        return self._series(self._get("query", params), instant=True)

    def range(self, expr: str, start: datetime, end: datetime, step: timedelta) -> list[Series]:
        if end <= start:
            raise QueryRefused("The range must end after it starts.")
        if end - start > MAX_RANGE:
            raise QueryRefused(f"At most {MAX_RANGE.days} days of history per query.")
        step = max(step, MIN_STEP)
        points = (end - start) / step
        if points > MAX_POINTS:
            step = timedelta(seconds=math.ceil((end - start).total_seconds() / MAX_POINTS))
        params = {
            "query": expr,
            "start": f"{start.timestamp():.3f}",
            "end": f"{end.timestamp():.3f}",
            "step": f"{int(step.total_seconds())}s",
        }
        return self._series(self._get("query_range", params), instant=False)

    # -- transport -------------------------------------------------------------------------

    def _auth(self) -> dict:
        prefix = self.source.secret_env
        if not prefix:
            return {}
        token = secret(f"{prefix}_TOKEN")
        if token:
            return {"headers": {"Authorization": f"Bearer {token}"}}
        user, password = secret(f"{prefix}_USERNAME"), secret(f"{prefix}_PASSWORD")
        if user and password is not None:
            return {"auth": (user, password)}
        raise PrometheusUnavailable(
            f"No credentials for {self.base}: set {prefix}_TOKEN, or {prefix}_USERNAME and "
            f"{prefix}_PASSWORD (each also as _FILE)."
        )

    def _get(self, path: str, params: dict[str, str]) -> dict:
        params = {**params, "timeout": f"{self.timeout:g}s", "limit": str(self.max_series + 1)}
        key = (
            "prom:"
            + hashlib.sha256(
                json.dumps([self.base, path, sorted(params.items())]).encode()
            ).hexdigest()
        )
        cached = cache.get(key)
        if cached is not None:
            return cached
        kwargs = self._auth()  # missing credentials: a setting to fix, not an outage
        down_key = "prom-down:" + hashlib.sha256(self.base.encode()).hexdigest()
        down = cache.get(down_key)
        if down is not None:
            raise PrometheusUnavailable(down)
        try:
            return self._ask(path, params, key, kwargs)
        except PrometheusUnavailable as err:
            cache.set(down_key, str(err), DOWN_SECONDS)
            raise

    def _ask(self, path: str, params: dict[str, str], key: str, kwargs: dict) -> dict:
        verify = self.source.ca_file or True
        try:
            # POST (form-encoded, as the HTTP API accepts): host matchers make long queries.
            resp = requests.post(f"{self.base}/api/v1/{path}", data=params, timeout=self.timeout,
                                 verify=verify, allow_redirects=False, **kwargs)  # fmt: skip
        except requests.Timeout as err:
            raise PrometheusUnavailable(
                f"Prometheus at {self.base} did not answer within {self.timeout:g} s."
            ) from err
        except requests.RequestException as err:
            raise PrometheusUnavailable(
                f"Prometheus at {self.base} cannot be reached: {_why(err)}."
            ) from err
        try:
            body = resp.json()
        except ValueError as err:
            raise PrometheusUnavailable(
                f"Prometheus at {self.base} answered HTTP {resp.status_code} without JSON."
            ) from err
        if resp.status_code != 200 or body.get("status") != "success":
            what = body.get("error") or f"HTTP {resp.status_code}"
            if resp.status_code in (400, 422):
                raise QueryRefused(f"Prometheus refused the query: {what}")
            raise PrometheusUnavailable(f"Prometheus at {self.base} failed: {what}")
        data = body.get("data") or {}
        cache.set(key, data, CACHE_SECONDS)
        return data

    def _series(self, data: dict, *, instant: bool) -> list[Series]:
        result = data.get("result")
        if data.get("resultType") not in ("vector", "matrix") or not isinstance(result, list):
            raise PrometheusUnavailable("Prometheus answered with an unexpected result type.")
        if len(result) > self.max_series:
            raise QueryRefused(
                f"More than {self.max_series} series: narrow the query (a cluster, a node)."
            )
        out = []
        for item in result:
            pairs = [item["value"]] if instant else item.get("values", [])
            points = [(float(t), float(v)) for t, v in pairs]
            out.append(Series(dict(item.get("metric") or {}), points))
        return out


# What a connection failure means, in words (requests' own text is a nest of wrappers).
_WHY = (
    ("Connection refused", "connection refused (is it running, on that port?)"),
    ("Name or service not known", "its host name does not resolve"),
    ("nodename nor servname", "its host name does not resolve"),
    ("Temporary failure in name resolution", "its host name does not resolve"),
    ("CERTIFICATE_VERIFY_FAILED", "its TLS certificate is not trusted (set the CA file)"),
    ("No route to host", "no route to its host"),
    ("Connection reset", "the connection was reset"),
)


def _why(err: Exception) -> str:
    text = str(err)
    for needle, why in _WHY:
        if needle in text:
            return why
    return f"{type(err).__name__} ({text[:200]})"


# -- what the pages ask ----------------------------------------------------------------------

ENGINE_ACTIVE = "DCGM_FI_PROF_GR_ENGINE_ACTIVE"  # ratio 0..1 (a DCP profiling counter)
GPU_UTIL = "DCGM_FI_DEV_GPU_UTIL"  # percent (NVML utilisation: "a kernel ran")


def host_of(labels: dict[str, str]) -> str:
    """The node of a series: ``Hostname`` as dcgm-exporter has long spelled it, or
    ``hostname`` as its newest releases do (NVIDIA/dcgm-exporter#655)."""
    return labels.get("Hostname") or labels.get("hostname", "")
