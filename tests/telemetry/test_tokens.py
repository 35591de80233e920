"""Node agent tokens over the API: admins issue (secret shown once, hashed at rest), list
and revoke; nobody else may. Personas: ``alice-admin`` and ``rob`` (a researcher)."""

from __future__ import annotations

import hashlib
import json

import pytest
from django.test import Client

from telemetry import tokens
from telemetry.models import NodeToken
from tests.factories import make_cluster, make_node

pytestmark = pytest.mark.django_db

URL = "/api/v1/agent/tokens/"


@pytest.fixture
def node():
    return make_node(make_cluster("lab"), "a100-00")


def test_admin_issues_a_token_shown_once_and_hashed_at_rest(admin_api, admin_user, node):
    r = admin_api.post(URL, {"node": "a100-00", "name": "daemonset"}, format="json")
    assert r.status_code == 201, r.content
    body = r.json()
    raw = body["token"]
    assert raw.startswith("gqa_") and len(raw) > 40
    assert (body["node"], body["cluster"], body["created_by"]) == ("a100-00", "lab",
                                                                    "alice-admin")  # fmt: skip
    token = NodeToken.objects.get(pk=body["id"])
    assert token.key_hash == hashlib.sha256(raw.encode()).hexdigest()
    assert raw[:8] == token.prefix
    stored = json.dumps(list(NodeToken.objects.values()), default=str)
    assert raw not in stored
    # Never shown again.
    listed = admin_api.get(URL).json()["results"]
    assert [t["id"] for t in listed] == [body["id"]] and "token" not in listed[0]
    assert "token" not in admin_api.get(f"{URL}{body['id']}/").json()


def test_issue_by_node_id_and_cluster(admin_api, node):
    make_node(make_cluster("other"), "a100-00")
    r = admin_api.post(URL, {"node": "a100-00"}, format="json")
    assert r.status_code == 400 and "cluster" in r.json()
    r = admin_api.post(URL, {"node": "a100-00", "cluster": "lab"}, format="json")
    assert r.status_code == 201 and r.json()["node_id"] == str(node.pk)
    r = admin_api.post(URL, {"node": str(node.pk)}, format="json")
    assert r.status_code == 201 and r.json()["cluster"] == "lab"
    assert admin_api.post(URL, {"node": "nope"}, format="json").status_code == 404
    r = admin_api.post(URL, {"node": "a100-00", "cluster": "nope"}, format="json")
    assert r.status_code == 404 and "cluster" in r.json()  # a body naming no cluster


def test_gone_node_gets_no_token(admin_api, node):
    from django.utils import timezone

    node.gone_at = timezone.now()
    node.save()
    assert admin_api.post(URL, {"node": "a100-00"}, format="json").status_code == 404


def test_revoke_keeps_the_row_and_the_token_stops_working(admin_api, node):
    body = admin_api.post(URL, {"node": "a100-00"}, format="json").json()
    agent = Client(HTTP_AUTHORIZATION=f"Bearer {body['token']}")
    report = {"node": "a100-00", "timestamp": "2000-01-01T00:00:00Z", "gpus": []}
    # Authenticated (the old timestamp is a 400, not a 401).
    assert agent.post("/api/v1/agent/reports/", report, "application/json").status_code == 400
    assert admin_api.delete(f"{URL}{body['id']}/").status_code == 204
    token = NodeToken.objects.get(pk=body["id"])
    assert token.revoked_at is not None and not token.is_active
    first = token.revoked_at
    token.revoke()
    token.refresh_from_db()
    assert token.revoked_at == first
    assert agent.post("/api/v1/agent/reports/", report, "application/json").status_code == 401
    assert admin_api.get(URL).json()["results"][0]["is_active"] is False


def test_only_admins_manage_tokens(researcher_api, anon_api, node):
    tokens.issue(node)
    assert researcher_api.get(URL).status_code == 403
    assert researcher_api.post(URL, {"node": "a100-00"}, format="json").status_code == 403
    token = NodeToken.objects.get()
    assert researcher_api.delete(f"{URL}{token.pk}/").status_code == 403
    assert anon_api.get(URL).status_code == 401
    assert NodeToken.objects.get().revoked_at is None


def test_a_node_token_is_not_an_api_credential(node):
    _, raw = tokens.issue(node)
    client = Client(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert client.get("/api/v1/gpus/").status_code == 401
    assert client.get(URL).status_code == 401


def test_list_filters_by_node(admin_api, node):
    other = make_node(node.cluster, "a100-01")
    tokens.issue(node)
    tokens.issue(other)
    r = admin_api.get(URL, {"node__name": "a100-01"})
    assert [t["node"] for t in r.json()["results"]] == ["a100-01"]


@pytest.mark.parametrize(
    "header", ["Bearer", "Bearer a b", "Token gqa_x", "Bearer gqp_personal", "Bearer gqa_unknown"]
)
def test_malformed_or_unknown_headers_are_rejected(node, header):
    client = Client(HTTP_AUTHORIZATION=header)
    r = client.post("/api/v1/agent/reports/", {}, "application/json")
    assert r.status_code == 401
