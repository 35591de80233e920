"""A cluster that sends no GPU telemetry is "not measured" wherever a measured figure would
stand, never 0 (issue #21 section 2; telemetry/measured.py)."""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.utils import timezone

from telemetry.insight import annotate_renewals, team_rows
from telemetry.measured import measured_cluster_ids
from telemetry.models import NodeTelemetry
from telemetry.showback import showback
from tests.factories import make_cluster, make_node
from tests.quotas.builders import make_grant, make_namespace, make_team

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
    rows = {r.team.slug: r for r in team_rows([world["both"], world["dark"]])}
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
