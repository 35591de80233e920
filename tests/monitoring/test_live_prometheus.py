"""The alert expressions on a real Prometheus (Debian ``prometheus``, tests/prom.py) that
scrapes the portal's real /metrics (pytest-django's live_server, PostgreSQL) with the
bearer token, as a production scrape config would: seeded data (a stale cluster, a failed
operation, an expiring grant of a busy namespace, idle GPUs, a failed MIG run) must come
back from each alert's ``expr`` through Prometheus' HTTP API, and nothing else.
"""

from __future__ import annotations

import time
import urllib.request

import pytest
import yaml

from tests.prom import start_prometheus

from .conftest import GPU, alerts, records, seed_portal

pytestmark = pytest.mark.django_db(transaction=True)

TOKEN = "live-scrape-token-for-the-monitoring-test"


def _use_bearer_token(prom, tmp_path, token_file) -> None:
    """Add ``authorization: {credentials_file}`` to every scrape job of the config
    tests/prom.py wrote, and reload Prometheus (it runs with --web.enable-lifecycle)."""
    path = tmp_path / "prometheus" / "prometheus.yml"
    config = yaml.safe_load(path.read_text())
    for job in config["scrape_configs"]:
        job["authorization"] = {"type": "Bearer", "credentials_file": str(token_file)}
    path.write_text(yaml.safe_dump(config, sort_keys=False))
    request = urllib.request.Request(f"{prom.url}/-/reload", method="POST")
    with urllib.request.urlopen(request, timeout=10) as resp:
        assert resp.status == 200


def _series(prom, expr: str, keys: tuple[str, ...]) -> dict[tuple, float]:
    return {
        tuple(r["metric"].get(k, "") for k in keys): float(r["value"][1]) for r in prom.query(expr)
    }


def test_alert_expressions_on_a_real_prometheus_scraping_the_portal(
    live_server, settings, tmp_path, rules_file
):
    settings.METRICS_TOKEN = TOKEN
    settings.TELEMETRY_IDLE_THRESHOLD_PCT = 5
    settings.TELEMETRY_IDLE_WINDOW_HOURS = 2
    expiring, vision = seed_portal()
    token_file = tmp_path / "metrics-token"
    token_file.write_text(TOKEN)
    target = {"targets": [live_server.url.removeprefix("http://")], "job": "portal"}
    prom = start_prometheus(tmp_path, [target], rule_files=[rules_file])
    try:
        # Without the token the portal refuses the scrape.
        deadline = time.monotonic() + 30
        while not any("401" in (t.get("lastError") or "") for t in prom.targets()):
            assert time.monotonic() < deadline, prom.targets()
            time.sleep(0.25)
        _use_bearer_token(prom, tmp_path, token_file)
        prom.wait_for('portal_operations{status="failed"} == 0')
        # A failed operation after Prometheus has seen none: the count rises.
        from quotas.models import Operation

        Operation.objects.create(namespace=vision, reason="approval", status="failed")
        prom.wait_for('portal_operations{status="failed"} == 1')
        rules = alerts()

        def expr(name):
            return rules[name]["expr"]

        assert _series(prom, expr("GpuPortalClusterSyncStale"), ("cluster",)) == {("prod",): 1.0}
        assert _series(prom, expr("GpuPortalOperationsFailing"), ("status",)) == {("failed",): 1.0}
        keys = ("team", "namespace", "resource", "grant")
        grants = _series(prom, expr("GpuPortalGrantExpiringWithHighUse"), keys)
        assert list(grants) == [("vision", "ml-vision", GPU, str(expiring.pk))]
        left = expiring.ends_at.timestamp() - time.time()
        assert abs(grants[("vision", "ml-vision", GPU, str(expiring.pk))] - left) < 60
        idle = _series(prom, expr("GpuPortalIdleAllocations"), ("team", "namespace"))
        assert idle == {("vision", "ml-vision"): 2.0}
        assert _series(prom, expr("GpuPortalMigRunFailed"), ("node",)) == {("a100-00",): 1.0}
        # No DCGM series are scraped here: the XID rule finds nothing (its promtool unit
        # test covers it firing).
        assert prom.query(expr("GpuXidError")) == []

        # The rules loaded into the same Prometheus evaluate without errors, and the
        # alerts that wait out their ``for:`` are pending with their figures filled in.
        groups = prom.api("rules")["groups"]
        assert {r["name"] for g in groups for r in g["rules"]} == set(rules) | set(records())
        # (the 5-minute recording group may not have run yet: unknown, but no error)
        assert all(
            r["health"] == "ok" or (g["interval"] >= 300 and r["health"] == "unknown")
            for g in groups
            for r in g["rules"]
        ), groups
        assert not [r["lastError"] for g in groups for r in g["rules"] if r.get("lastError")]
        deadline = time.monotonic() + 30
        while True:
            pending = {a["labels"]["alertname"]: a for a in prom.api("alerts")["alerts"]}
            waiting = {"GpuPortalClusterSyncStale", "GpuPortalMigRunFailed",
                       "GpuPortalGrantExpiringWithHighUse"}  # fmt: skip
            if waiting <= set(pending):
                break
            assert time.monotonic() < deadline, pending
            time.sleep(0.5)
        stale = pending["GpuPortalClusterSyncStale"]
        assert stale["state"] == "pending"
        assert "it was last known current 2h 0m" in stale["annotations"]["description"]
        grant = pending["GpuPortalGrantExpiringWithHighUse"]["annotations"]["description"]
        assert (
            "A grant of 2 nvidia.com/gpu for team vision (prod/ml-vision) ends in 2d 23h" in grant
        )
        assert "the namespace uses 4 of its limit of 5." in grant
        mig = pending["GpuPortalMigRunFailed"]["annotations"]["description"]
        assert "node a100-00 of cluster prod failed (2 failed MIG requests" in mig
    finally:
        prom.stop()
