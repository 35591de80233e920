"""Journey 3 (issue #12 section 4): the dashboards render with data, and the API docs.

After the demo's telemetry backfill (``manage.py backfill_telemetry``, as devstack/demo.py
runs it), the admin opens the fleet, telemetry fleet, team, idle and showback pages: each
has its data (no empty state, no "no data"), and the charts are drawn (uPlot's canvas).
Swagger UI at /api/docs/ renders the operations. Every page passes axe-core (no serious or
critical violation) with no horizontal overflow at 1280 and 390 px.
"""

from __future__ import annotations

import io

import pytest
from django.core.management import call_command

from tests.e2e.browser import new_page, sign_in, text

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]

# step name, path, what the page shows when it has data, whether it draws a chart
DASHBOARDS = [
    ("fleet", "/", "table tbody tr", False),
    ("telemetry fleet", "/telemetry/", ".chart__plot", True),
    ("telemetry team", "/telemetry/teams/vision/", ".chart__plot", True),
    ("telemetry idle", "/telemetry/idle/", "table tbody tr", False),
    ("telemetry showback", "/telemetry/showback/", "table tbody tr", False),
    # The capacity calendar (issue #25 section 1): its slots, by the day and by the hour.
    ("capacity calendar", "/calendar/?cluster=demo", ".cal-cell", False),
    ("capacity calendar by the hour", "/calendar/?cluster=demo&view=hour", ".cal-cell", False),
]


@pytest.fixture
def telemetry(demo):
    """Half a day of the demo agent fleet's history, through the ingest and rollups."""
    call_command("backfill_telemetry", "--days", "0.5", stdout=io.StringIO())


def test_dashboards_render_with_data(telemetry, browser, live_server, checker):
    admin = new_page(browser, live_server)
    sign_in(admin, "admin", "admin-demo-pass")
    for step, path, data, chart in DASHBOARDS:
        admin.goto(path)
        main = admin.locator("main")
        assert main.locator(".empty").count() == 0, f"{path}: empty state: {text(admin)[:300]}"
        assert "no data" not in text(admin).lower(), f"{path} says no data"
        assert main.locator(data).count() > 0, f"{path}: no {data}"
        if chart:
            plots = main.locator(".chart__plot")
            plots.first.locator("canvas, svg").first.wait_for()
            for i in range(plots.count()):
                assert plots.nth(i).locator("canvas, svg").count() > 0, (
                    f"{path}: chart {i} not drawn"
                )
        checker.check(admin, step)
    checker.assert_clean()


def test_api_docs_pass_axe(researcher, browser, live_server, checker):
    page = new_page(browser, live_server)
    sign_in(page, "rob", "pw-researcher-1")
    page.goto("/api/docs/")
    page.locator(".swagger-ui .opblock").first.wait_for()
    assert page.locator(".swagger-ui .opblock").count() > 10
    # One operation opened (its parameters and responses), the others' summaries around
    # it: one check covers both (axe over Swagger UI's large page is the slow part).
    page.locator(".swagger-ui .opblock-summary").first.click()
    page.locator(".swagger-ui .opblock-body").first.wait_for()
    assert "#/" in page.url  # deep linking still names the operation
    checker.check(page, "Swagger UI, an operation open")
    checker.assert_clean()
