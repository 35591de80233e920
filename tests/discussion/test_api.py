"""The comment threads' REST API: /api/v1/quota-requests/{id}/comments/ and
/api/v1/mig-requests/{id}/comments/ (token auth, team isolation, 400s, throttle, schema)."""

from __future__ import annotations

import uuid

import pytest
import yaml
from django.core import mail

from discussion.models import BODY_MAX, Comment
from quotas.models import AuditEvent
from tests.conftest import api_for

pytestmark = pytest.mark.django_db


def _url(kind: str, w) -> str:
    if kind == "quota":
        return f"/api/v1/quota-requests/{w['req'].pk}/comments/"
    return f"/api/v1/mig-requests/{w['mig'].pk}/comments/"


@pytest.mark.parametrize("kind", ["quota", "mig"])
def test_member_posts_and_reads_the_thread(world, kind, on_commit):
    api = api_for(world["member"])
    with on_commit(execute=True):
        created = api.post(_url(kind, world), {"body": "First question."}, format="json")
    assert created.status_code == 201, created.json()
    body = created.json()
    assert body["author"] == "mo" and body["by_admin"] is False
    assert body["body"] == "First question."
    assert uuid.UUID(body["id"]) and body["created_at"]
    assert api_for(world["admin"]).post(_url(kind, world), {"body": "Answer."}).status_code == 201
    listed = api.get(_url(kind, world))
    assert listed.status_code == 200
    rows = listed.json()["results"]
    assert [(r["author"], r["by_admin"], r["body"]) for r in rows] == [
        ("mo", False, "First question."), ("root", True, "Answer."),
    ]  # fmt: skip
    assert AuditEvent.objects.filter(action="request.commented").count() == 2
    assert sorted(a for m in mail.outbox for a in m.to) == [
        "root2@example.com", "root@example.com"
    ]  # fmt: skip


@pytest.mark.parametrize("kind", ["quota", "mig"])
@pytest.mark.parametrize(
    "payload",
    [{}, {"body": ""}, {"body": "   "}, {"body": None}, {"body": ["a", "b"]},
     {"body": {"x": 1}}, {"body": "x" * (BODY_MAX + 1)}, {"body": "x" * (BODY_MAX * 3)}],
)  # fmt: skip
def test_bad_input_is_400_with_a_message_for_body(world, kind, payload):
    response = api_for(world["requester"]).post(_url(kind, world), payload, format="json")
    assert response.status_code == 400, response.content
    data = response.json()
    assert data["detail"] and data["body"]
    assert not Comment.objects.exists()


def test_a_body_that_is_not_json_is_400(world):
    api = api_for(world["requester"])
    response = api.post(_url("quota", world), "{not json", content_type="application/json")
    assert response.status_code == 400
    assert not Comment.objects.exists()


@pytest.mark.parametrize("kind", ["quota", "mig"])
def test_another_teams_request_is_404_to_read_and_to_post(world, kind):
    api_for(world["requester"]).post(_url(kind, world), {"body": "ours"}, format="json")
    api = api_for(world["outsider"])
    assert api.get(_url(kind, world)).status_code == 404
    # 404 before any field error: the body is not even looked at
    assert api.post(_url(kind, world), {}, format="json").status_code == 404
    assert api.post(_url(kind, world), {"body": "x"}, format="json").status_code == 404
    assert Comment.objects.count() == 1


def test_unknown_request_is_404_and_anonymous_is_401(world, anon_api):
    api = api_for(world["admin"])
    assert api.get(f"/api/v1/quota-requests/{uuid.uuid4()}/comments/").status_code == 404
    assert api.get(f"/api/v1/mig-requests/{uuid.uuid4()}/comments/").status_code == 404
    assert anon_api.get(_url("quota", world)).status_code == 401
    assert anon_api.post(_url("quota", world), {"body": "x"}).status_code == 401


def test_member_writes_are_throttled_like_other_member_writes(world, settings):
    settings.MEMBER_WRITE_RATE = "2/min"
    api = api_for(world["requester"])
    codes = [api.post(_url("quota", world), {"body": f"c{i}"}).status_code for i in range(3)]
    assert codes == [201, 201, 429]
    assert api.get(_url("quota", world)).status_code == 200  # reads are not counted
    assert Comment.objects.count() == 2
    # admins are not throttled
    admin = api_for(world["admin"])
    assert all(admin.post(_url("mig", world), {"body": "a"}).status_code == 201 for _ in range(3))


def test_schema_documents_both_endpoints(admin_api):
    response = admin_api.get("/api/schema/")
    assert response.status_code == 200
    schema = yaml.safe_load(response.content)
    for route in ("/api/v1/quota-requests/{id}/comments/", "/api/v1/mig-requests/{id}/comments/"):
        ops = schema["paths"][route]
        assert set(ops) >= {"get", "post"}
        assert {"201", "400", "404"} <= set(ops["post"]["responses"])
        body = ops["post"]["requestBody"]["content"]["application/json"]["schema"]["$ref"]
        assert body.endswith("/CommentCreateRequest")
    fields = schema["components"]["schemas"]["Comment"]["properties"]
    assert set(fields) == {"id", "author", "by_admin", "body", "created_at"}
