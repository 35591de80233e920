"""Connecting and editing a cluster (page and API): credentials validated per auth method,
the preflight before saving, "save anyway" audited, tokens never shown back, admins only.

Against the simulated cluster as the portal's ServiceAccount (tests/kubesim.py).
"""

from __future__ import annotations

import socket

import pytest
from django.test import Client
from django.urls import reverse

from inventory.models import Cluster
from quotas.models import AuditEvent
from tests.conftest import api_for

pytestmark = pytest.mark.django_db

URL = "/api/v1/clusters/"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def https_url(sim) -> str:
    return sim.url.replace("http://", "https://", 1)


# ---- API -----------------------------------------------------------------------------------


def test_connect_with_a_kubeconfig_runs_the_preflight_and_saves(sim, admin_api):
    response = admin_api.post(
        URL,
        {"slug": "sim", "name": "Sim", "auth_method": "kubeconfig",
         "kubeconfig_path": str(sim.kubeconfig_path), "preflight_namespaces": ["ml-a"]},
        format="json",
    )  # fmt: skip
    assert response.status_code == 201, response.json()
    body = response.json()
    assert body["slug"] == "sim"
    assert body["preflight"]["findings"][0]["check"] == "version"
    assert body["preflight_status"] in ("ok", "warning")
    assert body["missing_permissions"] == []
    assert body["preflight"]["namespaces"] == ["ml-a"]
    cluster = Cluster.objects.get(slug="sim")
    assert cluster.preflight_at is not None
    event = AuditEvent.objects.get(action="cluster.connect", object_id=str(cluster.pk))
    assert event.actor_name == "alice-admin"
    assert event.note == ""


def test_connect_with_a_token_never_returns_it(sim, admin_api):
    response = admin_api.post(
        URL,
        {"slug": "tok", "name": "Tok", "auth_method": "token", "api_url": https_url(sim),
         "bearer_token": sim.portal_token, "ca_cert": sim.ca_pem},
        format="json",
    )  # fmt: skip
    assert response.status_code == 201, response.json()
    assert sim.portal_token not in response.content.decode()
    assert "bearer_token" not in response.json()
    assert Cluster.objects.get(slug="tok").bearer_token == sim.portal_token
    detail = admin_api.get(URL + "tok/")
    assert sim.portal_token not in detail.content.decode()
    event = AuditEvent.objects.get(action="cluster.connect")
    assert event.after["bearer_token"] is True  # "set", never the value
    assert sim.portal_token not in str(event.after)


def test_preflight_errors_refuse_the_save_unless_save_anyway(db, admin_api):
    data = {"slug": "down", "name": "Down", "auth_method": "token",
            "api_url": f"https://127.0.0.1:{closed_port()}",
            "bearer_token": "secret-token"}  # fmt: skip
    response = admin_api.post(URL, data, format="json")
    assert response.status_code == 409  # a valid body; the cluster as it is refuses it
    body = response.json()
    assert body["preflight"]["status"] == "error"
    assert body["preflight"]["findings"][0]["summary"].startswith("Cannot connect")
    assert "save_anyway" in body
    assert "secret-token" not in response.content.decode()
    assert not Cluster.objects.filter(slug="down").exists()

    response = admin_api.post(URL, {**data, "save_anyway": True}, format="json")
    assert response.status_code == 201
    assert response.json()["preflight_status"] == "error"
    event = AuditEvent.objects.get(action="cluster.connect")
    assert event.note.startswith("Saved despite preflight errors: Cannot connect")


KC, TOKEN, POD = (
    {"auth_method": "kubeconfig"},
    {"auth_method": "token"},
    {"auth_method": "in_cluster"},
)
API = {**TOKEN, "api_url": "https://10.0.0.1:6443"}


@pytest.mark.parametrize(
    ("data", "field", "says"),
    [
        (KC, "kubeconfig_path", "required"),
        ({**KC, "kubeconfig_path": "relative/kc"}, "kubeconfig_path", "absolute"),
        ({**KC, "kubeconfig_path": "/var/run/secrets/no/kc"}, "kubeconfig_path", "No file"),
        ({**TOKEN, "bearer_token": "t"}, "api_url", "required"),
        ({**TOKEN, "api_url": "http://10.0.0.1", "bearer_token": "t"}, "api_url", "https"),
        ({**TOKEN, "api_url": "not a url", "bearer_token": "t"}, "api_url", "https://"),
        ({**TOKEN, "api_url": "https://me@10.0.0.1", "bearer_token": "t"}, "api_url", "user"),
        (API, "bearer_token", "token"),
        ({**API, "bearer_token": "t", "bearer_token_file": "/etc/hostname"},
         "bearer_token_file", "not both"),
        ({**API, "bearer_token_file": "/var/run/secrets/no/token"}, "bearer_token_file",
         "No file"),
        ({**API, "bearer_token": "t", "ca_cert": "not a pem"}, "ca_cert", "PEM"),
        # ssl refuses non-ASCII PEM text with a TypeError: it was a 500 (#24 finding 4)
        ({**API, "bearer_token": "t", "ca_cert": "-----BEGIN CERTIFICATE-----\nÄÖ\n"
          "-----END CERTIFICATE-----"}, "ca_cert", "PEM"),
        (POD, "auth_method", "not running in a Kubernetes pod"),
        ({"auth_method": "carrier-pigeon"}, "auth_method", "not a valid choice"),
        ({**POD, "preflight_namespaces": ["Not_A_Name"]}, "preflight_namespaces", "DNS"),
        ({**POD, "preflight_namespaces": "ml-a"}, "preflight_namespaces", "list"),
        ({**POD, "slug": "Not A Slug"}, "slug", "slug"),
    ],
)  # fmt: skip
def test_bad_input_is_a_4xx_with_field_errors(db, admin_api, data, field, says, monkeypatch):
    """400 for the body's fault; 404 for a credential file the portal cannot or may not
    read, 409 for a portal not running in a pod (valid bodies: portal.validation)."""
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    response = admin_api.post(URL, {"slug": "x", "name": "X"} | data, format="json")
    expected = {"No file": 404, "not running in a Kubernetes pod": 409}.get(says, 400)
    assert response.status_code == expected, response.json()
    body = response.json()
    assert field in body, body
    messages = body[field]  # a list, or per item of a list field
    text = (
        " ".join(m for ms in messages.values() for m in ms)
        if isinstance(messages, dict)
        else " ".join(messages)
    )
    assert says.lower() in text.lower()
    assert not Cluster.objects.exists()


def test_kubeconfig_context_must_exist(sim, admin_api):
    response = admin_api.post(
        URL,
        {"slug": "x", "name": "X", "auth_method": "kubeconfig",
         "kubeconfig_path": str(sim.kubeconfig_path), "kubeconfig_context": "prod"},
        format="json",
    )  # fmt: skip
    assert response.status_code == 409  # what the file holds, not the body
    assert "No context 'prod'" in response.json()["kubeconfig_context"][0]
    assert "gpu-quota-portal" in response.json()["kubeconfig_context"][0]  # the ones it has


def test_edit_keeps_the_stored_token_and_the_sync_state(sim, admin_api):
    cluster = Cluster.objects.create(
        slug="tok", name="Tok", auth_method="token", api_url=https_url(sim),
        bearer_token=sim.portal_token, ca_cert=sim.ca_pem, last_error="from the sync",
    )  # fmt: skip
    response = admin_api.patch(URL + "tok/", {"name": "Renamed"}, format="json")
    assert response.status_code == 200, response.json()
    cluster.refresh_from_db()
    assert cluster.name == "Renamed"
    assert cluster.bearer_token == sim.portal_token
    assert cluster.last_error == "from the sync"
    assert cluster.preflight_status in ("ok", "warning")
    event = AuditEvent.objects.get(action="cluster.update")
    assert event.before["name"] == "Tok"
    assert event.after["name"] == "Renamed"
    response = admin_api.patch(URL + "tok/", {"slug": "other"}, format="json")
    assert response.status_code == 409  # the cluster's slug is fixed
    assert "slug" in response.json()


def test_only_admins_connect_edit_or_rerun(sim, researcher, researcher_api, anon_api):
    Cluster.objects.create(slug="sim", name="Sim", auth_method="kubeconfig",
                           kubeconfig_path=str(sim.kubeconfig_path))  # fmt: skip
    data = {"slug": "x", "name": "X", "auth_method": "in_cluster"}
    assert researcher_api.post(URL, data, format="json").status_code == 403
    assert researcher_api.patch(URL + "sim/", {"name": "n"}, format="json").status_code == 403
    assert researcher_api.post(URL + "sim/preflight/").status_code == 403
    assert anon_api.post(URL, data, format="json").status_code == 401
    assert not AuditEvent.objects.exists()


def test_the_report_is_for_admins_only(sim, admin_user, researcher, client):
    """It names every team's namespaces and quotas: researchers see the status only."""
    Cluster.objects.create(slug="sim", name="Sim", auth_method="kubeconfig",
                           kubeconfig_path=str(sim.kubeconfig_path),
                           preflight_namespaces=["team-secret-ns"])  # fmt: skip
    assert api_for(admin_user).post(URL + "sim/preflight/").status_code == 200
    body = api_for(researcher).get(URL + "sim/").json()
    assert body["preflight"] is None
    assert body["preflight_namespaces"] == []
    assert body["preflight_status"] in ("ok", "warning")
    assert api_for(admin_user).get(URL + "sim/").json()["preflight"]["namespaces"] == [
        "team-secret-ns"
    ]
    client.force_login(researcher)
    page = client.get(reverse("inventory:cluster", args=["sim"])).content.decode()
    assert "team-secret-ns" not in page
    assert "Last preflight" not in page


def test_rerun_preflight_action_stores_the_result(sim, admin_user):
    Cluster.objects.create(slug="sim", name="Sim", auth_method="kubeconfig",
                           kubeconfig_path=str(sim.kubeconfig_path))  # fmt: skip
    response = api_for(admin_user).post(URL + "sim/preflight/")
    assert response.status_code == 200
    assert response.json()["findings"][0]["check"] == "version"
    cluster = Cluster.objects.get(slug="sim")
    assert cluster.preflight["status"] == response.json()["status"]
    assert AuditEvent.objects.filter(action="cluster.preflight").count() == 1


def test_openapi_describes_the_new_endpoints(admin_api):
    schema = admin_api.get("/api/schema/", {"format": "json"}).json()
    clusters = schema["paths"]["/api/v1/clusters/"]
    assert "post" in clusters
    assert "400" in clusters["post"]["responses"]
    assert "patch" in schema["paths"]["/api/v1/clusters/{slug}/"]
    assert "post" in schema["paths"]["/api/v1/clusters/{slug}/preflight/"]
    connect = schema["components"]["schemas"]["ClusterConnectRequest"]["properties"]
    assert connect["bearer_token"]["writeOnly"] is True
    assert "bearer_token" not in schema["components"]["schemas"]["Cluster"]["properties"]
    assert "PreflightReport" in schema["components"]["schemas"]


# ---- pages ---------------------------------------------------------------------------------


def test_connect_page_saves_after_a_passing_preflight(sim, client, admin_user):
    client.force_login(admin_user)
    url = reverse("inventory:cluster-connect")
    assert client.get(url).status_code == 200
    response = client.post(url, {"slug": "sim", "name": "Sim", "auth_method": "kubeconfig",
                                 "kubeconfig_path": str(sim.kubeconfig_path),
                                 "preflight_namespaces": "ml-a, ml-b", "verify_tls": "on",
                                 "sync_enabled": "on"})  # fmt: skip
    assert response.status_code == 302
    assert response["Location"] == reverse("inventory:cluster", args=["sim"])
    cluster = Cluster.objects.get(slug="sim")
    assert cluster.preflight_namespaces == ["ml-a", "ml-b"]
    page = client.get(response["Location"]).content.decode()
    assert "Last preflight" in page
    assert "Run preflight again" in page
    assert "permissions granted" in page


def test_connect_page_shows_the_errors_and_offers_save_anyway(db, client, admin_user):
    client.force_login(admin_user)
    url = reverse("inventory:cluster-connect")
    data = {"slug": "down", "name": "Down", "auth_method": "token",
            "api_url": f"https://127.0.0.1:{closed_port()}", "bearer_token": "secret-token",
            "verify_tls": "on"}  # fmt: skip
    response = client.post(url, data)
    assert response.status_code == 400
    page = response.content.decode()
    assert "Cannot connect" in page
    assert 'name="save_anyway"' in page
    assert "secret-token" not in page  # the password field is not filled back in
    assert not Cluster.objects.exists()
    response = client.post(url, {**data, "save_anyway": "on"})
    assert response.status_code == 302
    assert AuditEvent.objects.get(action="cluster.connect").note.startswith("Saved despite")


def test_connect_page_field_errors(db, client, admin_user):
    client.force_login(admin_user)
    response = client.post(reverse("inventory:cluster-connect"),
                           {"slug": "x", "name": "X", "auth_method": "kubeconfig",
                            "kubeconfig_path": "/var/run/secrets/nonexistent/kc"})  # fmt: skip
    assert response.status_code == 400
    assert "No file at /var/run/secrets/nonexistent/kc" in response.content.decode()


def test_cluster_pages_are_admin_only(sim, client, researcher):
    Cluster.objects.create(slug="sim", name="Sim", auth_method="kubeconfig",
                           kubeconfig_path=str(sim.kubeconfig_path))  # fmt: skip
    client.force_login(researcher)
    assert client.get(reverse("inventory:cluster-connect")).status_code == 403
    assert client.get(reverse("inventory:cluster-edit", args=["sim"])).status_code == 403
    assert client.post(reverse("inventory:cluster-preflight", args=["sim"])).status_code == 403
    page = client.get(reverse("inventory:cluster", args=["sim"])).content.decode()
    assert "Run preflight again" not in page


def test_rerun_button_needs_post_and_csrf(sim, admin_user):
    Cluster.objects.create(slug="sim", name="Sim", auth_method="kubeconfig",
                           kubeconfig_path=str(sim.kubeconfig_path))  # fmt: skip
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(admin_user)
    url = reverse("inventory:cluster-preflight", args=["sim"])
    assert strict.get(url).status_code == 405
    assert strict.post(url).status_code == 403  # no CSRF token
    page = strict.get(reverse("inventory:cluster", args=["sim"]))
    token = page.cookies["csrftoken"].value
    response = strict.post(url, {"csrfmiddlewaretoken": token})
    assert response.status_code == 302
    assert Cluster.objects.get(slug="sim").preflight_status in ("ok", "warning")


def test_edit_page_keeps_the_token_when_left_empty(sim, client, admin_user):
    cluster = Cluster.objects.create(
        slug="tok", name="Tok", auth_method="token", api_url=https_url(sim),
        bearer_token=sim.portal_token, ca_cert=sim.ca_pem,
    )  # fmt: skip
    client.force_login(admin_user)
    url = reverse("inventory:cluster-edit", args=["tok"])
    page = client.get(url).content.decode()
    assert sim.portal_token not in page
    response = client.post(url, {"name": "Renamed", "auth_method": "token",
                                 "api_url": https_url(sim), "ca_cert": sim.ca_pem,
                                 "verify_tls": "on", "sync_enabled": "on"})  # fmt: skip
    assert response.status_code == 302, response.content.decode()[-2000:]
    cluster.refresh_from_db()
    assert (cluster.name, cluster.slug, cluster.bearer_token) == (
        "Renamed",
        "tok",
        sim.portal_token,
    )


def test_a_taken_slug_is_a_field_error(sim, admin_api, client, admin_user):
    Cluster.objects.create(slug="sim", name="Sim", auth_method="kubeconfig",
                           kubeconfig_path=str(sim.kubeconfig_path))  # fmt: skip
    data = {"slug": "sim", "name": "Again", "auth_method": "kubeconfig",
            "kubeconfig_path": str(sim.kubeconfig_path)}  # fmt: skip
    response = admin_api.post(URL, data, format="json")
    assert response.status_code == 409  # the slug is taken
    assert "slug" in response.json()
    client.force_login(admin_user)
    response = client.post(reverse("inventory:cluster-connect"), data)
    assert response.status_code == 400
    assert "already exists" in response.content.decode()
    assert Cluster.objects.count() == 1
