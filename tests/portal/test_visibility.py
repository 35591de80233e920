"""One rule for pod names (telemetry/visibility.py), on every page and endpoint showing them.

Admins see every pod name; a member sees the names of pods in their own teams'
namespaces and only the namespace of every other pod (issue #11, section 3).
"""

from __future__ import annotations

from datetime import timedelta

import pytest
from django.urls import reverse
from django.utils import timezone

from tests.conftest import api_for
from tests.factories import make_cluster, make_node, make_pod
from tests.quotas.builders import make_namespace, make_team, make_user
from tests.telemetry.telebuilders import fill_5m, make_telemetry

pytestmark = pytest.mark.django_db

OLD = timezone.now() - timedelta(days=1)
MINE, THEIRS = "vision-secret-0", "nlp-secret-1"


@pytest.fixture
def world():
    cluster = make_cluster("c1")
    node = make_node(cluster, "gpu-a", gpus=2)
    member, outsider, admin = make_user("mia"), make_user("otto"), make_user("ada", staff=True)
    make_namespace(make_team("vision", members=[member]), cluster, "ml-vision")
    make_namespace(make_team("nlp", members=[outsider]), cluster, "ml-nlp")
    g0, g1 = make_telemetry(node, 2)
    g0.processes = [{"pid": 42, "used_memory_mib": 100, "pod": f"ml-vision/{MINE}"}]
    g1.processes = [{"pid": 43, "used_memory_mib": 100, "pod": f"ml-nlp/{THEIRS}"}]
    for g in (g0, g1):
        g.utilization_gpu_pct = 0
        g.save()
        fill_5m(g, timezone.now() - timedelta(hours=3), timezone.now(), 0)  # idle: badges
    make_pod(node, MINE, "ml-vision", 1, k8s_created_at=OLD)
    make_pod(node, THEIRS, "ml-nlp", 1, k8s_created_at=OLD)
    return {"node": node, "member": member, "outsider": outsider, "admin": admin}


def _page(client, user, url) -> str:
    client.force_login(user)
    response = client.get(url)
    assert response.status_code == 200, response.content[:300]
    return response.content.decode()


def test_node_page_member_sees_own_pod_names_only(client, world):
    url = reverse("inventory:node", args=[world["node"].pk])
    html = _page(client, world["member"], url)
    assert MINE in html  # pods table, GPU processes and idle badge
    assert THEIRS not in html
    assert "ml-nlp" in html  # the other team's namespace is still shown
    assert "Pod names are shown to portal staff only" in html


def test_node_page_admin_sees_all(client, world):
    html = _page(client, world["admin"], reverse("inventory:node", args=[world["node"].pk]))
    assert MINE in html and THEIRS in html
    assert "Pod names are shown to portal staff only" not in html


def test_node_page_other_member_sees_the_mirror_image(client, world):
    html = _page(client, world["outsider"], reverse("inventory:node", args=[world["node"].pk]))
    assert THEIRS in html and MINE not in html


def _gpu_pods(user) -> list:
    response = api_for(user).get("/api/v1/gpus/")
    assert response.status_code == 200, response.content[:300]
    rows = response.json()
    rows = rows["results"] if isinstance(rows, dict) else rows
    return sorted((p["pod"] or "") for r in rows for p in r["processes"])


def test_gpu_list_api_member_sees_own_pod_names_only(world):
    assert _gpu_pods(world["member"]) == ["", f"ml-vision/{MINE}"]
    assert _gpu_pods(world["outsider"]) == ["", f"ml-nlp/{THEIRS}"]


def test_gpu_list_api_admin_sees_all(world):
    assert _gpu_pods(world["admin"]) == [f"ml-nlp/{THEIRS}", f"ml-vision/{MINE}"]


def test_gpu_list_api_keeps_other_process_fields(world):
    rows = api_for(world["member"]).get("/api/v1/gpus/").json()
    rows = rows["results"] if isinstance(rows, dict) else rows
    procs = [p for r in rows for p in r["processes"]]
    assert {p["pid"] for p in procs} == {42, 43}
    assert {p["used_memory_mib"] for p in procs} == {100}


def _node_api_pods(user, node) -> dict:
    response = api_for(user).get(f"/api/v1/nodes/{node.pk}/")
    assert response.status_code == 200, response.content[:300]
    return {p["namespace"]: p["name"] for p in response.json()["pods"]}


def test_node_detail_api_follows_the_rule(world):
    node = world["node"]
    assert _node_api_pods(world["member"], node) == {"ml-vision": MINE, "ml-nlp": None}
    assert _node_api_pods(world["outsider"], node) == {"ml-vision": None, "ml-nlp": THEIRS}
    assert _node_api_pods(world["admin"], node) == {"ml-vision": MINE, "ml-nlp": THEIRS}


def test_team_dashboard_shows_own_idle_pods_only(client, world):
    html = _page(client, world["member"], reverse("telemetry:team", args=["vision"]))
    assert MINE in html and THEIRS not in html
    client.force_login(world["member"])
    assert client.get(reverse("telemetry:team", args=["nlp"])).status_code == 404


def test_idle_allocations_page_is_admins_only(client, world):
    html = _page(client, world["admin"], reverse("telemetry:idle"))
    assert MINE in html and THEIRS in html
    client.force_login(world["member"])
    assert client.get(reverse("telemetry:idle")).status_code == 403


def test_idle_allocations_api_lists_own_pods_only(world):
    def pods(user) -> set[str]:
        return {a["pod"] for a in api_for(user).get("/api/v1/idle-allocations/").json()["results"]}

    assert pods(world["member"]) == {MINE}
    assert pods(world["admin"]) == {MINE, THEIRS}


def test_teams_page_names_only_own_pods(client, world):
    html = _page(client, world["member"], reverse("quotas:teams"))
    assert THEIRS not in html


# -- /metrics names teams: always behind its token ------------------------------------------


def test_metrics_need_the_token_in_development_too(client, settings, world):
    settings.DEBUG = True
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 401  # anonymous, even with DEBUG
    client.force_login(world["member"])
    assert client.get("/metrics").status_code == 401  # a member may not read other teams
    client.force_login(world["admin"])
    assert client.get("/metrics").status_code == 200  # a staff session may look
    client.logout()
    settings.METRICS_TOKEN = "tok-for-tests"
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer nope").status_code == 401
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer tok-for-tests")
    assert ok.status_code == 200 and b"portal_" in ok.content


def test_demo_sets_a_metrics_token_and_prints_how_to_scrape(tmp_path, monkeypatch):
    from devstack import demo
    from portal.env import secret

    monkeypatch.delenv("METRICS_TOKEN", raising=False)
    monkeypatch.delenv("METRICS_TOKEN_FILE", raising=False)

    class _Services:  # the two methods child_env and banner read
        database_url, redis_url = "postgresql://x/y", "unix:///r.sock"

        def env(self):
            return {}

        def describe(self):
            return []

    env = demo.child_env(_Services(), tmp_path, tmp_path / "portal.kubeconfig")
    path = tmp_path / "metrics-token"
    assert env["METRICS_TOKEN_FILE"] == str(path)
    assert path.stat().st_mode & 0o077 == 0 and len(path.read_text().strip()) >= 32
    monkeypatch.setenv("METRICS_TOKEN_FILE", env["METRICS_TOKEN_FILE"])
    assert secret("METRICS_TOKEN") == path.read_text().strip()  # what settings reads
    again = demo.child_env(_Services(), tmp_path, tmp_path / "portal.kubeconfig")
    assert again["METRICS_TOKEN_FILE"] == str(path)  # kept across restarts
    text = "\n".join(demo.banner(8000, "", tmp_path / "kubeconfig", _Services(), env))
    assert f'Authorization: Bearer $(cat {path})" http://127.0.0.1:8000/metrics' in text
