"""The Django admin keeps a cluster's bearer token write-only, like the connect page."""

from __future__ import annotations

import pytest

from inventory.models import Cluster
from tests.factories import make_cluster

SECRET = "sk-not-for-your-eyes-0123456789"


@pytest.mark.django_db
def test_admin_never_shows_the_token_and_keeps_it_when_left_empty(client, admin_user):
    cluster = make_cluster(
        "prod", auth_method=Cluster.AuthMethod.TOKEN, api_url="https://k8s.example.org:6443",
        bearer_token=SECRET, kubeconfig_path="",
    )  # fmt: skip
    client.force_login(admin_user)
    url = f"/admin/inventory/cluster/{cluster.pk}/change/"
    page = client.get(url)
    assert page.status_code == 200
    assert SECRET not in page.content.decode()

    form = page.context["adminform"].form
    data = {k: v for k, v in form.initial.items() if v is not None and k != "bearer_token"}
    data.update({"name": "Production", "verify_tls": "on", "sync_enabled": "on"})
    answer = client.post(url, {**data, "bearer_token": ""})
    assert answer.status_code == 302, answer.content.decode()[:2000]
    cluster.refresh_from_db()
    assert cluster.name == "Production" and cluster.bearer_token == SECRET

    client.post(url, {**data, "bearer_token": "a-new-token"})
    cluster.refresh_from_db()
    assert cluster.bearer_token == "a-new-token"
