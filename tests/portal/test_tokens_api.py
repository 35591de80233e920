"""Personal API tokens: issue, use, revoke; stored hashed."""

import pytest

from portal.models import ApiToken, hash_token

pytestmark = pytest.mark.django_db


def test_issue_token_with_password_then_use_it(anon_api, researcher):
    r = anon_api.post(
        "/api/v1/auth/token/",
        {"username": "rob", "password": "pw-researcher-1", "name": "ci"},
        format="json",
    )
    assert r.status_code == 201
    raw = r.json()["token"]
    row = ApiToken.objects.get(pk=r.json()["id"])
    assert row.key_hash == hash_token(raw) and raw not in (row.key_hash, row.prefix)
    anon_api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert anon_api.get("/api/v1/nodes/").status_code == 200
    row.refresh_from_db()
    assert row.last_used_at is not None


@pytest.mark.parametrize(
    ("body", "status", "field"),
    [
        ({"username": "rob", "password": "wrong"}, 401, None),
        ({"username": "rob"}, 400, "password"),
        ({}, 400, "username"),
        ({"username": "x" * 200, "password": "p"}, 400, "username"),
    ],
)
def test_issue_token_bad_input_is_4xx_with_message(anon_api, researcher, body, status, field):
    r = anon_api.post("/api/v1/auth/token/", body, format="json")
    assert r.status_code == status
    data = r.json()
    assert data["detail"]
    if field:
        assert field in data


def test_malformed_json_is_400(anon_api):
    r = anon_api.post("/api/v1/auth/token/", "{not json", content_type="application/json")
    assert r.status_code == 400 and "JSON" in r.json()["detail"]


def test_revoked_or_unknown_token_is_refused(researcher, anon_api):
    token, raw = ApiToken.issue(researcher, "t")
    anon_api.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    assert anon_api.get("/api/v1/clusters/").status_code == 200
    token.revoke()
    r = anon_api.get("/api/v1/clusters/")
    assert r.status_code == 401 and "revoked" in r.json()["detail"]
    anon_api.credentials(HTTP_AUTHORIZATION="Bearer gqp_nope")
    assert anon_api.get("/api/v1/clusters/").status_code == 401
    anon_api.credentials(HTTP_AUTHORIZATION="Bearer a b")
    assert anon_api.get("/api/v1/clusters/").status_code == 401


def test_unauthenticated_api_is_401(anon_api):
    assert anon_api.get("/api/v1/nodes/").status_code == 401


def test_tokens_list_is_own_only_and_delete_revokes(researcher_api, admin_user, researcher):
    other, _ = ApiToken.issue(admin_user, "admin-token")
    r = researcher_api.get("/api/v1/auth/tokens/")
    assert r.status_code == 200
    names = [t["name"] for t in r.json()["results"]]
    assert names == ["test"]
    assert researcher_api.delete(f"/api/v1/auth/tokens/{other.pk}/").status_code == 404
    other.refresh_from_db()
    assert other.revoked_at is None
    own = ApiToken.objects.get(user=researcher)
    assert researcher_api.delete(f"/api/v1/auth/tokens/{own.pk}/").status_code == 204
    own.refresh_from_db()
    assert own.revoked_at is not None
