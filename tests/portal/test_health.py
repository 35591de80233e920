"""/healthz, /readyz and /metrics against the real database and Redis."""

from datetime import timedelta

import pytest
from django.utils import timezone

from inventory.models import Cluster
from tests.factories import make_cluster, make_node

pytestmark = pytest.mark.django_db


def test_healthz(client):
    r = client.get("/healthz")
    assert r.status_code == 200 and r.json() == {"status": "ok"}


def test_readyz_ok_then_degraded_when_a_cluster_is_stale(client, admin_user):
    client.force_login(admin_user)
    make_cluster("fresh", sync_status=Cluster.SyncStatus.OK, last_success_at=timezone.now())
    r = client.get("/readyz")
    assert r.status_code == 200
    assert r.json()["status"] == "ok"
    assert r.json()["checks"] == {"database": "ok", "broker": "ok"}
    make_cluster(
        "old",
        sync_status=Cluster.SyncStatus.FAILED,
        last_success_at=timezone.now() - timedelta(hours=1),
        last_error="HTTP 500",
    )
    body = client.get("/readyz").json()
    assert body["status"] == "degraded"
    assert body["clusters"]["old"]["status"] == "stale"
    assert body["clusters"]["old"]["last_error"] == "HTTP 500"


def test_readyz_fails_when_broker_unreachable(client, settings):
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    r = client.get("/readyz")
    assert r.status_code == 503
    assert r.json()["status"] == "fail" and r.json()["checks"]["broker"] != "ok"


def scrape(client, settings) -> str:
    """GET /metrics as Prometheus would, with the scrape token."""
    settings.METRICS_TOKEN = "scrape-token-for-tests"
    response = client.get("/metrics", HTTP_AUTHORIZATION="Bearer scrape-token-for-tests")
    assert response.status_code == 200
    return response.content.decode()


def test_metrics_exposes_capacity_and_sync_age(client, settings):
    c = make_cluster("prod", sync_status=Cluster.SyncStatus.OK, last_success_at=timezone.now())
    make_node(c, "a", resources={"nvidia.com/gpu": (8, 7, 3)})
    make_node(c, "b", resources={"nvidia.com/gpu": (8, 8, 1)})
    text = scrape(client, settings)
    labels = 'cluster="prod",product="NVIDIA-A100-SXM4-80GB",resource="nvidia.com/gpu"'
    assert f"portal_gpu_capacity{{{labels}}} 16.0" in text
    assert f"portal_gpu_allocatable{{{labels}}} 15.0" in text
    assert f"portal_gpu_requested{{{labels}}} 4.0" in text
    assert 'portal_cluster_stale{cluster="prod"} 0.0' in text
    assert 'portal_cluster_sync_age_seconds{cluster="prod"}' in text
    assert 'portal_cluster_data_age_seconds{cluster="prod"}' in text


def test_a_watched_clusters_data_age_is_the_watchs(client, settings):
    from datetime import timedelta

    now = timezone.now()
    make_cluster("prod", sync_status=Cluster.SyncStatus.OK,
                 last_success_at=now - timedelta(minutes=9), watched_at=now)  # fmt: skip
    text = scrape(client, settings)
    ages = {
        line.split("{")[0]: float(line.rsplit(" ", 1)[1])
        for line in text.splitlines()
        if line.startswith(("portal_cluster_sync_age_seconds{", "portal_cluster_data_age_seconds{"))
    }
    assert ages["portal_cluster_data_age_seconds"] < 60 < ages["portal_cluster_sync_age_seconds"]
    assert 'portal_cluster_stale{cluster="prod"} 0.0' in text
    body = client.get("/readyz", HTTP_AUTHORIZATION="Bearer scrape-token-for-tests")
    body = body.json()["clusters"]["prod"]
    assert body["watched"] is True and body["data_age_s"] < 60 <= body["last_success_age_s"]


def test_metrics_expose_quota_and_workflow_gauges(client, settings):
    from quotas.models import Operation, QuotaRequest
    from tests.quotas.builders import make_namespace, make_team, make_user

    c = make_cluster("prod")
    make_node(c, "a", resources={"nvidia.com/gpu": (8, 8, 0)})
    ns = make_namespace(make_team("vision"), c, "ml-vision")
    ns.quota_status = {
        "hard": {"requests.nvidia.com/gpu": "6"},
        "used": {"requests.nvidia.com/gpu": "4"},
    }
    ns.save()
    QuotaRequest.objects.create(
        team=ns.team, namespace=ns, resource="nvidia.com/gpu", amount=1,
        starts_at=timezone.now(), justification="x" * 20, requested_by=make_user("al"),
    )  # fmt: skip
    Operation.objects.create(namespace=ns, reason="approval", status="failed")
    text = scrape(client, settings)
    labels = 'cluster="prod",namespace="ml-vision",resource="nvidia.com/gpu",team="vision"'
    assert f"portal_quota_hard{{{labels}}} 6.0" in text
    assert f"portal_quota_used{{{labels}}} 4.0" in text
    assert "portal_quota_requests_pending 1.0" in text
    assert 'portal_operations{status="failed"} 1.0' in text
    assert 'portal_operations{status="pending"} 0.0' in text


def test_metrics_need_the_token_outside_development(client, settings, admin_user):
    settings.DEBUG = False
    settings.METRICS_TOKEN = ""
    assert client.get("/metrics").status_code == 401
    client.force_login(admin_user)
    assert client.get("/metrics").status_code == 200  # a staff session may look
    client.logout()
    settings.METRICS_TOKEN = "s3cret-scrape-token"
    assert client.get("/metrics", HTTP_AUTHORIZATION="Bearer wrong").status_code == 401
    ok = client.get("/metrics", HTTP_AUTHORIZATION="Bearer s3cret-scrape-token")
    assert ok.status_code == 200 and b"portal_cluster_stale" in ok.content


def test_metrics_expose_grant_expiry_with_its_namespace_use_and_limit(client, settings):
    from tests.quotas.builders import make_grant, make_namespace, make_team

    c = make_cluster("prod")
    ns = make_namespace(make_team("vision"), c, "ml-vision")
    ns.quota_status = {
        "hard": {"requests.nvidia.com/gpu": "4"},
        "used": {"requests.nvidia.com/gpu": "4"},
    }
    ns.save()
    windowed = make_grant(ns, 4, days=3)
    make_grant(ns, 2)  # permanent: no expiry series
    text = scrape(client, settings)
    labels = (f'cluster="prod",gpu_class="",grant="{windowed.pk}",namespace="ml-vision",'
              'resource="nvidia.com/gpu",team="vision"')  # fmt: skip
    line = next(x for x in text.splitlines() if x.startswith("portal_grant_expiry_timestamp"))
    assert line.startswith(f"portal_grant_expiry_timestamp_seconds{{{labels}}} ")
    assert abs(float(line.split()[-1]) - windowed.ends_at.timestamp()) < 1
    assert f"portal_grant_amount{{{labels}}} 4.0" in text
    assert sum(x.startswith("portal_grant_amount{") for x in text.splitlines()) == 1
    # quotas.preview's figures: used 4 (the ResourceQuota's status), limit 4 + 2 granted.
    assert f"portal_grant_namespace_used{{{labels}}} 4.0" in text
    assert f"portal_grant_namespace_limit{{{labels}}} 6.0" in text


def test_metrics_expose_mig_requests_by_status_and_the_nodes_whose_last_run_failed(
    client, settings
):
    from mig.models import MigRequest
    from tests.quotas.builders import make_namespace, make_team, make_user

    c = make_cluster("prod")
    ns = make_namespace(make_team("vision"), c, "ml-vision")
    user = make_user("al")
    a, b = make_node(c, "a100-00"), make_node(c, "a100-01")
    now = timezone.now()

    def run(node, status, minutes_ago):
        return MigRequest.objects.create(
            team=ns.team, namespace=ns, cluster=c, product="A100-80GB", layout={"3g.40gb": 2},
            gpus=1, justification="x" * 20, requested_by=user, status=status, node=node,
            drain_policy="evict", config_name="portal-x",
            updated_at=now - timedelta(minutes=minutes_ago),
        )  # fmt: skip

    run(a, "failed", 30)
    run(b, "failed", 60)
    run(b, "succeeded", 10)  # a later success clears b
    text = scrape(client, settings)
    assert 'portal_mig_requests{cluster="prod",kind="apply",status="failed"} 2.0' in text
    assert 'portal_mig_requests{cluster="prod",kind="apply",status="succeeded"} 1.0' in text
    assert 'portal_mig_requests{cluster="prod",kind="revert",status="failed"} 0.0' in text
    assert 'portal_mig_last_run_failed{cluster="prod",node="a100-00"} 1.0' in text
    assert 'portal_mig_last_run_failed{cluster="prod",node="a100-01"} 0.0' in text


def test_readyz_tells_anyone_whether_and_only_an_admin_or_the_token_why(
    client, settings, admin_user, researcher
):
    """#24 finding 6: exception texts, cluster names and errors were shown to anyone."""
    make_cluster("old", sync_status=Cluster.SyncStatus.FAILED, last_error="HTTP 500 secret",
                 last_success_at=timezone.now() - timedelta(hours=1))  # fmt: skip
    settings.REDIS_URL = "redis://127.0.0.1:1/0"
    settings.METRICS_TOKEN = "scrape-token-for-tests"
    anonymous = client.get("/readyz")
    assert anonymous.status_code == 503
    assert anonymous.json() == {"status": "fail", "checks": {"database": "ok", "broker": "fail"}}
    client.force_login(researcher)
    assert client.get("/readyz").json() == anonymous.json()  # a member is no admin
    client.logout()
    for headers in ({"HTTP_AUTHORIZATION": "Bearer scrape-token-for-tests"}, {}):
        if not headers:
            client.force_login(admin_user)
        body = client.get("/readyz", **headers).json()
        assert "Error" in body["checks"]["broker"]  # the exception's text
        assert body["clusters"]["old"]["last_error"] == "HTTP 500 secret"


def test_the_api_schema_and_docs_need_a_user_unless_opened(client, settings, researcher):
    from tests.conftest import api_for

    assert client.get("/api/schema/").status_code == 401
    docs = client.get("/api/docs/")
    assert docs.status_code == 302 and docs["Location"].startswith("/login/?next=/api/docs/")
    assert api_for(researcher).get("/api/schema/", {"format": "json"}).status_code == 200
    client.force_login(researcher)
    assert client.get("/api/docs/").status_code == 200
    client.logout()
    settings.API_DOCS_PUBLIC = True
    assert client.get("/api/schema/", {"format": "json"}).status_code == 200
    assert client.get("/api/docs/").status_code == 200
