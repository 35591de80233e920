"""deploy/monitoring/grafana/*.json: every query parses in a real Prometheus, and every
metric it names is one the portal's /metrics (a real response) or the portal agent's
exporter (gpuagent/exporter.py, dcgm-exporter's names) exports."""

from __future__ import annotations

import json
import re

import pytest

from gpuagent import exporter
from tests.prom import PrometheusError, start_prometheus

from .conftest import DASHBOARDS, seed_portal

FILES = sorted(DASHBOARDS.glob("*.json"))
# Words of PromQL that look like metric names: functions, aggregations, operators.
PROMQL_WORDS = {
    "sum", "min", "max", "avg", "count", "stddev", "stdvar", "topk", "bottomk", "quantile",
    "count_values", "group", "and", "or", "unless", "offset", "bool", "time", "vector",
    "scalar", "abs", "absent", "ceil", "floor", "round", "clamp", "clamp_min", "clamp_max",
    "rate", "irate", "increase", "delta", "idelta", "deriv", "changes", "resets",
    "label_replace", "label_join", "sort", "sort_desc", "histogram_quantile", "timestamp",
    "avg_over_time", "min_over_time", "max_over_time", "sum_over_time", "count_over_time",
    "last_over_time", "present_over_time", "quantile_over_time", "label_values", "inf", "nan",
}  # fmt: skip


def metric_names(expr: str) -> set[str]:
    """The metric names a PromQL expression (or a Grafana label_values()) reads."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    e = re.sub(r"\{[^}]*\}", " ", e)
    e = re.sub(r"\[[^\]]*\]", " ", e)
    e = re.sub(r"\b(by|without|on|ignoring|group_left|group_right)\s*\([^)]*\)", " ", e)
    e = re.sub(r",\s*[A-Za-z_][A-Za-z0-9_]*\s*\)", ")", e)  # label_values(metric, label)
    words = re.findall(r"(?<![0-9.$])\b[A-Za-z_:][A-Za-z0-9_:]*", e)
    return {w for w in words if w.lower() not in PROMQL_WORDS}


def queries(dashboard: dict) -> list[str]:
    out = [t["expr"] for p in dashboard["panels"] for t in p.get("targets", [])]
    for var in dashboard["templating"]["list"]:
        if var["type"] == "query":
            out.append(var["query"]["query"] if isinstance(var["query"], dict) else var["query"])
    return out


def test_metric_names_are_found_in_queries():
    expr = 'sum by (team) (max without (instance, pod) (portal_quota_used{team=~"$team"}))'
    assert metric_names(expr) == {"portal_quota_used"}
    expr = 'count by (pod) (max_over_time(DCGM_FI_DEV_GPU_UTIL{pod!=""}[2h]) < 5) / 86400'
    assert metric_names(expr) == {"DCGM_FI_DEV_GPU_UTIL"}
    assert metric_names("label_values(portal_cluster_stale, cluster)") == {"portal_cluster_stale"}
    assert metric_names("(a - time()) and on (x) b") == {"a", "b"}
    expr = 'sum by (cluster, gpu_class) (max without (instance, pod) (m{resource="x"}))'
    assert label_names(expr) == {"cluster", "gpu_class", "instance", "pod", "resource"}
    assert label_names("label_values(portal_cluster_stale, cluster)") == {"cluster"}


# Labels Prometheus adds to every scraped series (and "pod" from a Kubernetes scrape of the
# portal's replicas, which the queries drop with ``max without (instance, pod)``).
TARGET_LABELS = {"instance", "job", "pod"}


@pytest.fixture
def exported(client, settings, db) -> dict[str, set[str]]:
    """{metric name: its label names} of a real /metrics response of the portal on a
    seeded fleet (tests/monitoring/conftest.py), plus the agent exporter's metrics with
    dcgm-exporter's labels (gpuagent/exporter.py)."""
    seed_portal()
    settings.METRICS_TOKEN = "dashboards-test-token"
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer dashboards-test-token")
    assert response.status_code == 200
    text = response.content.decode()
    names: dict[str, set[str]] = {n: set() for n in re.findall(r"^# TYPE (\S+) ", text, re.M)}
    for name, labels in re.findall(r"^([A-Za-z_:][\w:]*)\{([^}]*)\}", text, re.M):
        names.setdefault(name, set()).update(re.findall(r'(\w+)="', labels))
    agent_labels = {*exporter.BASE_LABELS, *exporter.MIG_LABELS, *exporter.POD_LABELS}
    for name, _type, _help in exporter.COUNTERS:
        names[name] = set(agent_labels)
    names[exporter.GPU_LOST[0]] = set(agent_labels)
    names[exporter.SNAPSHOT_TIME[0]] = {"Hostname"}
    assert names["portal_idle_gpus"] == {"cluster", "team", "namespace"}
    assert "DCGM_FI_DEV_GPU_UTIL" in names
    return names


def label_names(expr: str) -> set[str]:
    """Label names a query matches on or groups by."""
    e = re.sub(r'"(?:[^"\\]|\\.)*"', '""', expr)
    out = set(re.findall(r"[{,]\s*(\w+)\s*(?:=~|!~|!=|=)", e))
    for group in re.findall(r"\b(?:by|without|on|ignoring)\s*\(([^)]*)\)", e):
        out |= {x.strip() for x in group.split(",") if x.strip()}
    out |= set(re.findall(r"label_values\(\s*\w+\s*,\s*(\w+)\s*\)", e))
    return out


def test_the_four_dashboards_are_there():
    assert [f.name for f in FILES] == [
        "gpu-fleet-by-class.json", "gpu-idle-allocations.json", "gpu-mig-usage.json",
        "gpu-team-usage.json",
    ]  # fmt: skip


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_every_queried_metric_is_exported(path, exported):
    dashboard = json.loads(path.read_text())
    unknown, labels = {}, {}
    for expr in queries(dashboard):
        names = metric_names(expr)
        assert names, f"no metric in {expr!r}"
        if names - set(exported):
            unknown[expr] = sorted(names - set(exported))
            continue
        # Every label it names is one of its metrics' (metrics with no series in the
        # seeded fleet say nothing: their labels are not checked).
        known = set(TARGET_LABELS).union(*(exported[n] for n in names))
        if all(exported[n] for n in names) and label_names(expr) - known:
            labels[expr] = sorted(label_names(expr) - known)
    assert not unknown, unknown
    assert not labels, labels


@pytest.mark.parametrize("path", FILES, ids=lambda p: p.stem)
def test_dashboard_shape(path):
    d = json.loads(path.read_text())
    assert d["uid"] and d["title"] and d["panels"]
    assert [v["name"] for v in d["templating"]["list"]][:2] == ["datasource", "cluster"]
    ids = [p["id"] for p in d["panels"]]
    assert len(ids) == len(set(ids))
    for p in d["panels"]:
        assert p["datasource"] == {"type": "prometheus", "uid": "${datasource}"}, p["title"]
        assert {"h", "w", "x", "y"} <= set(p["gridPos"]), p["title"]
        assert p["targets"], p["title"]


def test_every_query_parses_in_a_real_prometheus(tmp_path):
    """Each query (Grafana variables put to what "All" sends) through a real Prometheus'
    HTTP API: a syntax error or a bad function use is an error answer there."""
    prom = start_prometheus(tmp_path, [])
    try:
        with pytest.raises(PrometheusError):  # set operators take no group_left
            prom.query("a and on (x) group_left () b")
        for path in FILES:
            for expr in queries(json.loads(path.read_text())):
                if expr.startswith("label_values("):
                    continue
                prom.query(re.sub(r"\$\{?\w+\}?", ".*", expr))
    finally:
        prom.stop()
