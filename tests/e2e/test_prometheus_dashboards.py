"""Journey 4 (issue #13): the telemetry pages of a cluster read from its Prometheus, in a
real browser, and what the same pages do when that Prometheus goes away.

The demo fleet is seeded as for the other journeys; then, as ``TELEMETRY_SOURCE=prometheus
make demo`` does, half a day of the fake fleet's history is rendered with dcgm-exporter's
names and pod labels (devstack/demo_prometheus.py), turned into TSDB blocks by promtool, and
served by a real Prometheus (Debian package ``prometheus``); the demo cluster gets a
PrometheusSource and the latest GPU state is copied once (``manage.py sync_prometheus``).
The admin opens the telemetry fleet, team, idle, showback and a node page: each has data
and says it comes from Prometheus; the idle and node pages (what differs from the agent
pages that test_dashboards checks) pass axe-core at 1280 and 390 px. Then the
Prometheus stops: the same pages still answer, with a banner naming the cluster (the
fleet and idle pages once the beat's next computation of their figures has met it).
"""

from __future__ import annotations

import io
import json

import pytest
from django.core.management import call_command

from devstack.demo_prometheus import backfill
from inventory.models import Node
from telemetry.models import PrometheusSource
from telemetry.tasks import refresh_summaries
from tests.e2e.browser import new_page, sign_in, text
from tests.prereqs import need
from tests.prom import start_prometheus

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

PAGES = [  # step, path, what the page shows when it has data
    ("telemetry fleet", "/telemetry/", ".chart__plot canvas, .chart__plot svg"),
    ("telemetry team", "/telemetry/teams/vision/", ".chart__plot canvas, .chart__plot svg"),
    ("telemetry idle", "/telemetry/idle/", "table tbody tr"),
    ("telemetry showback", "/telemetry/showback/", "table tbody tr"),
]


@pytest.fixture
def prometheus(demo, tmp_path):
    need("promtool")
    pods = tmp_path / "exporter-pods.json"
    call_command("demo_prometheus_source", url="http://127.0.0.1:9", write_pods=str(pods),
                 stdout=io.StringIO())  # fmt: skip
    spec = json.loads((tmp_path / "agent-tokens.json").read_text())
    root = tmp_path / "recorded"
    backfill(spec, root / "prometheus" / "data", days=0.5, pods=json.loads(pods.read_text()),
             log=lambda _: None)  # fmt: skip
    prom = start_prometheus(root, [], retention="30d")
    PrometheusSource.objects.filter(cluster__slug="demo").update(url=prom.url)
    call_command("sync_prometheus", stdout=io.StringIO())
    yield prom
    prom.stop()


def test_telemetry_pages_from_prometheus_and_through_its_outage(
    prometheus, browser, live_server, checker
):
    admin = new_page(browser, live_server)
    sign_in(admin, "admin", "admin-demo-pass")
    node = Node.objects.get(cluster__slug="demo", name="a100-00")
    pages = [*PAGES, ("node page", f"/nodes/{node.pk}/", ".gpu-card svg polyline")]
    for step, path, data in pages:
        admin.goto(path)
        main = admin.locator("main")
        main.locator(data).first.wait_for()
        assert admin.locator("[role=alert]").count() == 0, f"{path}: {text(admin)[:300]}"
        if step in ("telemetry idle", "node page"):  # the others' templates: test_dashboards
            checker.check(admin, step)
    admin.goto("/telemetry/")
    assert "Source: the cluster's Prometheus (dcgm-exporter) for Demo" in text(admin)
    admin.goto("/telemetry/idle/")
    assert "DCGM_FI_DEV_GPU_UTIL" in text(admin)
    admin.goto(f"/nodes/{node.pk}/")
    assert "Source: dcgm-exporter via the cluster's Prometheus" in text(admin)

    prometheus.stop()
    # The fleet and idle figures are computed every minute by the beat, before anyone asks
    # (telemetry/summary.py): its next computation meets the outage and records it.
    refresh_summaries()
    for _, path, _ in pages:
        admin.goto(path)
        banner = admin.locator("[role=alert]")
        assert banner.count() >= 1, f"{path}: no banner during the outage"
        assert "Telemetry of cluster Demo" in banner.first.inner_text()
        assert "unavailable" in banner.first.inner_text()
    checker.check(admin, "node page, Prometheus down")
    checker.assert_clean()
