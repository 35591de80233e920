"""Telemetry pages: node GPU cards, dashboards (scoped), idle and health lists, showback
page, CSV and API; query counts bounded."""

from __future__ import annotations

import csv
import io
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext
from django.urls import path, reverse
from django.utils import timezone

from portal import urls as portal_urls
from quotas.models import Grant
from telemetry import api_insight
from telemetry.models import GpuState
from tests.factories import make_cluster, make_node, make_pod
from tests.quotas.builders import make_namespace, make_team, make_user

from .telebuilders import fill_5m, make_telemetry

pytestmark = pytest.mark.django_db

OLD = timezone.now() - timedelta(days=1)


@pytest.fixture
def world():
    cluster = make_cluster("c1")
    node = make_node(cluster, "gpu-a", gpus=2)
    member, outsider, admin = make_user("mia"), make_user("otto"), make_user("ada", staff=True)
    vision = make_team("vision", members=[member])
    nlp = make_team("nlp", members=[outsider])
    make_namespace(vision, cluster, "ml-vision")
    make_namespace(nlp, cluster, "ml-nlp")
    g0, g1 = make_telemetry(node, 2, topology=[["X", "NV12"], ["NV12", "X"]])
    g0.processes = [{"pid": 42, "used_memory_mib": 1234, "pod": "ml-vision/secret-train-0"}]
    g0.utilization_gpu_pct = 0
    g0.save()
    make_pod(node, "secret-train-0", "ml-vision", 1, k8s_created_at=OLD)
    now = timezone.now()
    fill_5m(g0, now - timedelta(hours=3), now, 0)
    fill_5m(g1, now - timedelta(hours=3), now, 70)
    return {"node": node, "member": member, "outsider": outsider, "admin": admin,
            "vision": vision, "nlp": nlp, "gpus": (g0, g1)}  # fmt: skip


def _get(client, user, url, status=200):
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == status, response.content[:500]
    return response


# -- node page ------------------------------------------------------------------------------


def test_node_cards_show_values_lost_and_stale(client, world):
    _g0, g1 = world["gpus"]
    GpuState.objects.filter(pk=g1.pk).update(lost=True, utilization_gpu_pct=None)
    url = reverse("inventory:node", args=[world["node"].pk])
    html = _get(client, world["admin"], url).content.decode()
    assert "GPU 0" in html and "GPU 1" in html
    assert "1,000" in html and "81,920 MiB" in html  # memory used / total
    assert "40 °C" in html and "60" in html
    assert ">lost<" in html
    assert "NV12" in html and "Topology" in html
    assert "secret-train-0" in html  # staff see pod names
    assert 'role="img"' in html  # sparkline with a text alternative

    GpuState.objects.update(stale_after=timezone.now() - timedelta(minutes=5))
    html = _get(client, world["admin"], url).content.decode()
    assert ">stale<" in html


def test_pod_names_hidden_from_non_staff(client, world):
    url = reverse("inventory:node", args=[world["node"].pk])
    html = _get(client, world["outsider"], url).content.decode()
    assert "secret-train-0" not in html
    assert "ml-vision" in html  # the namespace is shown
    assert "Pod names are shown to portal staff only" in html


def test_node_section_queries_constant_in_gpus(client, world):
    url = reverse("inventory:node", args=[world["node"].pk])
    client.force_login(world["admin"])
    client.get(url)
    with CaptureQueriesContext(connection) as few:
        client.get(url)
    node = world["node"]
    now = timezone.now()
    for i in range(2, 10):
        g = GpuState.objects.create(
            node=node, index=i, uuid=f"u{i}", reported_at=now,
            stale_after=now + timedelta(minutes=1),
        )  # fmt: skip
        fill_5m(g, now - timedelta(hours=1), now, 10)
    with CaptureQueriesContext(connection) as many:
        response = client.get(url)
    assert "GPU 9" in response.content.decode()
    assert len(many) == len(few)


def test_node_without_telemetry_has_empty_state(client, world):
    other = make_node(world["node"].cluster, "plain", gpus=1)
    html = _get(client, world["admin"], reverse("inventory:node", args=[other.pk])).content
    assert b"No GPU agent reports from this node yet" in html


# -- dashboards -----------------------------------------------------------------------------


def test_fleet_dashboard(client, world):
    html = _get(client, world["admin"], reverse("telemetry:fleet")).content.decode()
    assert "Utilisation per product" in html
    assert "NVIDIA-A100-SXM4-80GB" in html
    assert "Vision" in html and "Nlp" in html
    assert "chart-products-data" in html
    assert "uPlot.iife.min.js" in html


def test_fleet_shows_members_only_their_teams(client, world):
    html = _get(client, world["member"], reverse("telemetry:fleet")).content.decode()
    assert "Vision" in html
    assert reverse("telemetry:team", args=["nlp"]) not in html


def test_team_dashboard_scoped(client, world):
    url = reverse("telemetry:team", args=["vision"])
    html = _get(client, world["member"], url).content.decode()
    assert "ml-vision" in html
    assert "Idle allocations" in html and "secret-train-0" in html  # its own idle pod
    _get(client, world["outsider"], url, status=404)
    _get(client, world["admin"], url)


def test_dashboard_queries_bounded(client, world):
    client.force_login(world["admin"])
    url = reverse("telemetry:fleet")
    client.get(url)
    with CaptureQueriesContext(connection) as few:
        client.get(url)
    cluster = world["node"].cluster
    now = timezone.now()
    for n in range(3):
        node = make_node(cluster, f"more-{n}", gpus=4)
        for g in make_telemetry(node, 4):
            fill_5m(g, now - timedelta(hours=1), now, 30)
        team = make_team(f"t{n}")
        make_namespace(team, cluster, f"ns-{n}")
        make_pod(node, f"p{n}", f"ns-{n}", 2, k8s_created_at=OLD)
    with CaptureQueriesContext(connection) as many:
        client.get(url)
    assert len(many) == len(few)


def test_idle_and_health_lists_are_for_admins(client, world):
    for name in ("telemetry:idle", "telemetry:health"):
        _get(client, world["member"], reverse(name), status=403)
    html = _get(client, world["admin"], reverse("telemetry:idle")).content.decode()
    assert "secret-train-0" in html and "agent (pod-resources)" in html
    html = _get(client, world["admin"], reverse("telemetry:health")).content.decode()
    assert "Allocated GPUs idle" in html


def test_team_usage_on_my_teams(client, world):
    html = _get(client, world["member"], reverse("quotas:teams")).content.decode()
    assert "Measured GPU use" in html


# -- showback -------------------------------------------------------------------------------


def _grant(world, year):
    ns = world["vision"].namespaces.get()
    Grant.objects.create(
        namespace=ns, resource="nvidia.com/gpu", amount=3,
        starts_at=datetime(year, 11, 30, 12, tzinfo=UTC), ends_at=datetime(year, 12, 2, tzinfo=UTC),
    )  # fmt: skip


def test_showback_page_and_csv(client, world):
    year = timezone.now().year - 1
    _grant(world, year)
    url = reverse("telemetry:showback") + f"?month={year}-11"
    html = _get(client, world["member"], url).content.decode()
    assert "Showback" in html and "36.0" in html
    assert "Nlp" not in html  # scoped
    response = _get(
        client, world["member"], reverse("telemetry:showback-csv") + f"?month={year}-11"
    )
    assert response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert rows[0] == ["month", "team", "resource", "granted_gpu_hours", "allocated_gpu_hours",
                       "busy_gpu_hours", "allocated_from"]  # fmt: skip
    assert rows[1][:4] == [f"{year}-11", "vision", "nvidia.com/gpu", "36.000"]
    assert len(rows) == 2
    _get(client, world["member"], reverse("telemetry:showback") + "?month=bad", status=404)


def test_showback_csv_with_an_api_token(client, world):
    # Automation fetches the CSV with its token (seen writing the API guide: a token was
    # redirected to the sign-in page); scoped like the page; a bad token is a 401.
    from portal.models import ApiToken

    year = timezone.now().year - 1
    _grant(world, year)
    _, raw = ApiToken.issue(world["member"], "csv")
    url = reverse("telemetry:showback-csv") + f"?month={year}-11"
    response = client.get(url, HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert response.status_code == 200 and response["Content-Type"].startswith("text/csv")
    rows = list(csv.reader(io.StringIO(response.content.decode())))
    assert [r[1] for r in rows[1:]] == ["vision"]
    classes = client.get(
        reverse("telemetry:showback-classes-csv"), HTTP_AUTHORIZATION=f"Bearer {raw}"
    )
    assert classes.status_code == 200
    bad = client.get(url, HTTP_AUTHORIZATION="Bearer gqp_not-a-token")
    assert bad.status_code == 401 and bad["WWW-Authenticate"] == "Bearer"
    assert client.get(url).status_code == 302  # a browser without a session: sign in
    assert "_auth_user_id" not in client.session  # the token signed in this request only


# Until telemetry/api_urls.py routes it (its owner adds the line), route the API here too.
urlpatterns = [
    *portal_urls.urlpatterns,
    path("api/v1/showback/", api_insight.showback_api, name="showback-test"),
]


@pytest.mark.urls(__name__)
def test_showback_api_scoped(client, world):
    from rest_framework.test import APIClient

    year = timezone.now().year - 1
    _grant(world, year)
    api = APIClient()
    api.force_authenticate(world["outsider"])
    body = api.get(f"/api/v1/showback/?month={year}-12").json()
    assert [r["team"] for r in body["results"]] == []  # nlp has nothing
    api.force_authenticate(world["admin"])
    body = api.get(f"/api/v1/showback/?month={year}-12").json()
    assert body["month"] == f"{year}-12"
    assert body["results"][0]["team"] == "vision"
    assert body["results"][0]["granted_gpu_hours"] == 3 * 24
    assert api.get("/api/v1/showback/?month=2026-1").status_code == 400


def test_showback_api_in_openapi_schema():
    from drf_spectacular.generators import SchemaGenerator

    schema = SchemaGenerator(patterns=urlpatterns).get_schema(request=None, public=True)
    op = schema["paths"]["/api/v1/showback/"]["get"]
    assert op["operationId"] == "showback"
    assert [p["name"] for p in op["parameters"]] == ["month"]
