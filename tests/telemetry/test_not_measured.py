"""A cluster that sends no GPU telemetry is "not measured" wherever a measured figure would
stand, never 0 (issue #21 section 2; telemetry/measured.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from telemetry.insight import team_rows
from telemetry.measured import measured_cluster_ids
from telemetry.models import NodeTelemetry
from telemetry.renewals import annotate_renewals
from telemetry.showback import showback
from telemetry.summary import read
from tests.factories import make_cluster, make_node
from tests.quotas.builders import make_grant, make_namespace, make_team, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def world():
    now = timezone.now()
    agents, kueue = make_cluster("agents"), make_cluster("kueue")
    node = make_node(agents, "a-0")
    make_node(kueue, "k-0")
    NodeTelemetry.objects.create(node=node, last_report_at=now, last_report_timestamp=now,
                                 stale_after=now + timedelta(minutes=1))  # fmt: skip
    both, dark = make_team("both"), make_team("dark")
    make_namespace(both, agents, "b-1")
    make_namespace(both, kueue, "b-2")
    dark_ns = make_namespace(dark, kueue, "d-1")
    grant = make_grant(dark_ns, 4, days=10, start_in=-timedelta(days=3))
    return {"agents": agents, "kueue": kueue, "both": both, "dark": dark, "grant": grant}


def test_clusters_with_an_agent_or_a_prometheus_are_measured(world):
    from telemetry.models_source import PrometheusSource

    assert measured_cluster_ids() == {world["agents"].pk}
    PrometheusSource.objects.create(cluster=world["kueue"], url="http://prometheus:9090")
    assert measured_cluster_ids([world["kueue"].pk]) == {world["kueue"].pk}


def test_team_use_names_what_is_not_measured(world):
    rows = {r.team.slug: r for r in team_rows([world["both"], world["dark"]], read().held)}
    assert (rows["both"].measured_any, rows["both"].unmeasured) == (True, ["Kueue"])
    assert (rows["dark"].measured_any, rows["dark"].unmeasured) == (False, ["Kueue"])


def test_showback_and_a_renewal_say_not_measured_instead_of_0(world):
    from quotas.models import QuotaRequest

    now = timezone.now()
    [row] = showback([world["dark"]], now - timedelta(days=5), now + timedelta(days=1), now)
    assert row.granted_hours > 0 and row.allocated_hours is None
    renewal = QuotaRequest(
        kind=QuotaRequest.Kind.RENEWAL, resource="nvidia.com/gpu", amount=4,
        namespace=world["grant"].namespace, team=world["dark"], target_grant=world["grant"],
    )  # fmt: skip
    annotate_renewals([renewal], now)
    assert renewal.utilisation.measured is False
    assert renewal.utilisation.avg_granted == pytest.approx(4.0)


# -- allocated GPU-hours from the inventory's pod records (inventory/podruns.py) -----------


@pytest.fixture
def recorded(world):
    """The Kueue cluster's pods recorded for two days: one pod running for 10 h (4 GPUs), one
    that ran 10 h and ended (2 GPUs), one of another team's namespace, and one of ``both``
    running for 5 h (1 GPU), all on a node of class H100."""
    from inventory.models import GpuClass, Node, PodRun
    from tests.factories import make_pod

    now = timezone.now()
    kueue = world["kueue"]
    kueue.pods_recorded_since = now - timedelta(days=2)
    kueue.save()
    h100 = GpuClass.objects.create(cluster=kueue, slug="h100", name="H100",
                                   selector={"nvidia.com/gpu.product": "H100"})  # fmt: skip
    node = Node.objects.get(cluster=kueue, name="k-0")
    node.gpu_class = h100
    node.save()
    make_pod(node, "train", namespace="d-1", gpus=4, started_at=now - timedelta(hours=10))
    make_pod(node, "nb", namespace="b-2", gpus=1, started_at=now - timedelta(hours=5))
    for ns in ("d-1", "not-a-team"):
        PodRun.objects.create(cluster=kueue, namespace=ns, name="done", node_name="k-0",
                              gpu_class=h100, gpus=2, started_at=now - timedelta(hours=30),
                              ended_at=now - timedelta(hours=20))  # fmt: skip
    return {**world, "h100": h100, "now": now}


def test_showback_takes_allocated_hours_from_the_inventory_and_says_so(recorded):
    from telemetry.classes import class_rows
    from telemetry.showback import ledger, rows

    now = recorded["now"]
    start = now - timedelta(days=5)
    led = ledger([recorded["both"], recorded["dark"]], start, now + timedelta(days=1), now)
    by_team = {r.team.slug: r for r in rows(led)}
    dark = by_team["dark"]
    # 4 GPUs x 10 h running + 2 GPUs x 10 h ended; how busy is not measured.
    assert dark.allocated_hours == pytest.approx(60, rel=1e-3)
    assert (dark.allocated_from, dark.busy_hours, dark.busy_pct) == (("inventory",), None, None)
    assert dark.granted_hours == pytest.approx(4 * 72, rel=1e-3)
    assert dark.allocated_pct == pytest.approx(100 * 60 / (4 * 72), rel=1e-3)
    assert dark.recorded_since == recorded["kueue"].pods_recorded_since  # inside the period
    assert dark.as_dict()["allocated_from"] == ["inventory"]
    # A team on both kinds of cluster: telemetry (no history yet: 0) plus the inventory.
    both = by_team["both"]
    assert both.allocated_from == ("telemetry", "inventory")
    assert both.allocated_hours == pytest.approx(5, rel=1e-3) and both.busy_hours == 0
    # Per class: the H100 row holds the hours; the any-class grant's row holds none; they
    # add up to the team's row.
    report = class_rows(led)
    dark_rows = {r.label: r for r in report.rows if r.team.slug == "dark"}
    assert dark_rows["H100"].allocated_hours == pytest.approx(60, rel=1e-3)
    assert dark_rows["H100"].allocated_from == ("inventory",)
    assert dark_rows["H100"].busy_hours is None
    assert sum(r.allocated_hours for r in dark_rows.values()) == pytest.approx(60, rel=1e-3)


def test_a_cluster_never_synced_stays_not_measured(recorded):
    from telemetry.showback import showback

    recorded["kueue"].pods_recorded_since = None
    recorded["kueue"].save()
    now = recorded["now"]
    [row] = showback([recorded["dark"]], now - timedelta(days=5), now, now)
    assert (row.allocated_hours, row.allocated_from) == (None, ())


def test_a_renewal_on_an_unmeasured_cluster_shows_what_the_inventory_recorded(recorded):
    from django.template.loader import render_to_string

    from quotas.models import QuotaRequest

    now = recorded["now"]
    renewal = QuotaRequest(
        kind=QuotaRequest.Kind.RENEWAL, resource="nvidia.com/gpu", amount=4,
        namespace=recorded["grant"].namespace, team=recorded["dark"],
        target_grant=recorded["grant"],
    )  # fmt: skip
    annotate_renewals([renewal], now)
    u = renewal.utilisation
    # From the start of the record (2 days ago), later than the grant's start (3 days ago).
    assert (u.measured, u.allocated_from) == (False, "inventory")
    assert u.start == recorded["kueue"].pods_recorded_since
    assert u.avg_allocated == pytest.approx(60 / 48, rel=1e-3)
    assert u.avg_granted == pytest.approx(4.0)
    html = render_to_string("telemetry/_renewal_utilisation.html", {"req": renewal})
    assert 'data-allocated-from="inventory"' in html
    assert "of 4.0</strong> granted GPUs held" in html, html
    assert "not measured" in html


def test_the_showback_page_says_which_hours_come_from_pod_records(recorded, client):
    from tests.quotas.builders import make_user

    client.force_login(make_user("admin", staff=True))
    html = client.get("/telemetry/showback/").content.decode()
    # dark: from the inventory only; both: telemetry and the inventory
    assert 'data-allocated-from="inventory"' in html
    assert 'data-allocated-from="telemetry inventory"' in html and "partly from pod records" in html
    assert "measured clusters only" in html  # the busy total leaves dark's hours out
    body = client.get("/api/v1/showback/").json()
    dark = next(r for r in body["results"] if r["team"] == "dark")
    assert dark["allocated_from"] == ["inventory"] and dark["busy_gpu_hours"] is None


def test_the_team_page_says_not_measured_per_namespace_instead_of_0(world, client):
    client.force_login(make_user("ada", staff=True))
    html = client.get(reverse("telemetry:team", args=["both"])).content.decode()
    rows = {r.split("</code>")[0]: r for r in html.split("<code>")[1:] if "</tr>" in r}
    assert "not measured" in rows["b-2"]  # the Kueue cluster sends no telemetry
    assert "not measured" not in rows["b-1"] and '<td class="num">0</td>' in rows["b-1"]
