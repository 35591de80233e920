"""Request bodies are as strict as the schema says (#24 finding 9).

- Every operation with a body refuses a key it does not write (DRF dropped it silently) with
  a 400 naming the key, and its schema component says ``additionalProperties: false``.
- The API reads JSON only: a form body is a 415.
- A valid body naming an object that does not exist or is not visible is a 404; one the
  object's state refuses a 409; anything else wrong keeps it a 400.
"""

from __future__ import annotations

import pytest
from django.utils import timezone
from rest_framework import exceptions

from portal.rest import validation_status
from portal.validation import CONFLICT, NOT_FOUND
from quotas.models import QuotaRequest
from tests.conftest import api_for
from tests.factories import make_cluster
from tests.quotas.builders import make_grant, make_namespace, make_team, make_user

pytestmark = pytest.mark.django_db


def _schema(admin) -> dict:
    response = admin.get("/api/schema/", HTTP_ACCEPT="application/json")
    assert response.status_code == 200
    return response.json()


@pytest.fixture
def world(db):
    admin = make_user("strict-admin", staff=True)
    member = make_user("strict-member")
    cluster = make_cluster("lab")
    team = make_team("vision", members=[member], managers=[admin])
    ns = make_namespace(team, cluster, "ml-vision")
    make_grant(ns, 2)
    req = QuotaRequest.objects.create(
        team=team, namespace=ns, resource="nvidia.com/gpu", amount=1, requested_by=member,
        justification="strict bodies", starts_at=timezone.now(),
    )  # fmt: skip
    return {"admin": api_for(admin), "ns": ns, "req": req}


def _path(path: str, world) -> str:
    """A real object for each path parameter, by the resource the path names."""
    resource = path.strip("/").split("/")[2]
    real = {
        "clusters": "lab", "teams": "vision", "namespaces": str(world["ns"].pk),
        "quota-requests": str(world["req"].pk), "mig-requests": "1", "gpu-classes": "1",
        "label-sets": "1", "team-queues": "1",
    }  # fmt: skip
    for name in ("{slug}", "{id}"):
        path = path.replace(name, real.get(resource, "1"))
    return path.replace("{username}", "strict-member")


def test_every_body_refuses_an_unknown_key_and_says_so_in_the_schema(world):
    admin = world["admin"]
    schema = _schema(admin)
    components = schema["components"]["schemas"]
    checked = 0
    for path, item in schema["paths"].items():
        for method, operation in item.items():
            body = operation.get("requestBody") if isinstance(operation, dict) else None
            if not body or path == "/api/v1/agent/reports/":  # node tokens only: its own test
                continue
            content = body["content"]
            assert list(content) == ["application/json"], (method, path)
            ref = content["application/json"]["schema"]["$ref"].rsplit("/", 1)[-1]
            assert components[ref]["additionalProperties"] is False, ref
            url = _path(path, world)
            response = getattr(admin, method)(url, {"zz_not_a_field": 1}, format="json")
            if response.status_code == 404 and "zz_not_a_field" not in response.json():
                continue  # no such object in this world (mig requests, classes, queues)
            assert response.status_code == 400, (method, path, response.json())
            assert "zz_not_a_field" in response.json(), (method, path, response.json())
            checked += 1
    assert checked >= 20  # the operations with a body on real objects or collections


def test_a_read_only_key_is_named_as_such(world):
    r = world["admin"].post(
        f"/api/v1/quota-requests/{world['req'].pk}/approve/", {"id": 1}, format="json"
    )
    assert r.status_code == 400 and r.json()["id"] == [
        "Unknown field. This operation takes: amount, ends_at, note."
    ]
    r = world["admin"].post("/api/v1/label-sets/", {"id": 7}, format="json")
    assert r.status_code == 400 and r.json()["id"] == ["Read-only: leave it out of the body."]


def test_a_form_body_is_refused_with_415(world):
    r = world["admin"].post(
        f"/api/v1/quota-requests/{world['req'].pk}/approve/", {"amount": "1"}, format="multipart"
    )
    assert r.status_code == 415
    world["req"].refresh_from_db()
    assert world["req"].status == QuotaRequest.Status.PENDING


def test_unknown_references_are_404_and_state_conflicts_409(world):
    admin = world["admin"]
    r = admin.post("/api/v1/teams/vision/members/", {"user": "nobody-here"}, format="json")
    assert r.status_code == 404 and "No such user" in r.json()["user"][0]
    r = admin.post(f"/api/v1/namespaces/{world['ns'].pk}/adopt/", {"quota": "gpu"},
                   format="json")  # fmt: skip
    assert r.status_code == 404 and "No quota 'gpu'" in r.json()["quota"][0]
    r = admin.post(f"/api/v1/namespaces/{world['ns'].pk}/confirm-lowering/", {}, format="json")
    assert r.status_code == 409 and "Nothing in this namespace" in r.json()["expected"][0]
    url = f"/api/v1/quota-requests/{world['req'].pk}/approve/"
    assert admin.post(url, {"amount": 0}, format="json").status_code == 400  # schema: >= 1
    r = admin.post(url, {"amount": 5}, format="json")  # valid; the request asked for 1
    assert r.status_code == 409 and r.json()["amount"] == ["Approve between 1 and 1."]
    world["req"].refresh_from_db()
    assert world["req"].status == QuotaRequest.Status.PENDING


def test_an_empty_patch_of_a_member_changes_nothing(world):
    r = world["admin"].patch("/api/v1/teams/vision/members/strict-member/", {}, format="json")
    assert r.status_code == 200 and r.json()["role"] == "member"


def test_a_layout_count_written_as_a_whole_float_is_a_count(world):
    r = world["admin"].post(
        "/api/v1/mig-layouts/validate/",
        {"product": "A100-80GB", "layout": {"3g.40gb": 2.0}}, format="json",
    )  # fmt: skip
    assert r.status_code == 200 and r.json()["valid"] is True
    r = world["admin"].post(
        "/api/v1/mig-layouts/validate/",
        {"product": "A100-80GB", "layout": {"3g.40gb": 1.5}}, format="json",
    )  # fmt: skip
    assert r.status_code == 400


@pytest.mark.parametrize(
    ("codes", "status"),
    [
        ({"team": [NOT_FOUND]}, 404),
        ({"team": [NOT_FOUND], "user": [NOT_FOUND]}, 404),
        ({"amount": [CONFLICT]}, 409),
        ({"slug": ["unique"]}, 409),
        ({"team": [NOT_FOUND], "amount": [CONFLICT]}, 409),
        ({"team": [NOT_FOUND], "amount": ["invalid"]}, 400),
        ({"amount": [CONFLICT, "max_value"]}, 400),
        ({"items": {"0": [NOT_FOUND]}}, 404),
    ],
)
def test_the_status_follows_the_codes_of_all_messages(codes, status):
    def detail(node):
        if isinstance(node, dict):
            return {k: detail(v) for k, v in node.items()}
        return [exceptions.ErrorDetail("m", code=c) for c in node]

    assert validation_status(exceptions.ValidationError(detail(codes))) == status
