"""Account page: personal API tokens (create once-shown, list, revoke with confirmation)."""

from __future__ import annotations

import uuid

import pytest
from django.test import Client
from django.urls import reverse

from portal.models import ApiToken, hash_token

pytestmark = pytest.mark.django_db


@pytest.fixture
def as_researcher(client, researcher):
    client.force_login(researcher)
    return client


def test_account_requires_login(client):
    response = client.get(reverse("account"))
    assert response.status_code == 302
    assert response["Location"].startswith(reverse("login"))


def test_create_token_shows_raw_once_and_stores_hash(as_researcher, researcher):
    response = as_researcher.post(reverse("account"), {"name": "CI pipeline"})
    assert response.status_code == 200
    raw = response.context["new_raw"]
    assert raw.startswith("gqp_")
    html = response.content.decode()
    assert raw in html
    assert "shown only once" in html

    token = ApiToken.objects.get(user=researcher)
    assert token.name == "CI pipeline"
    assert token.key_hash != raw
    assert token.key_hash == hash_token(raw)
    assert raw.startswith(token.prefix)
    assert "no-store" in response["Cache-Control"]

    # The list shows the token's prefix but never the secret again.
    again = as_researcher.get(reverse("account")).content.decode()
    assert "CI pipeline" in again
    assert token.prefix in again
    assert raw not in again


def test_create_token_requires_a_name(as_researcher):
    response = as_researcher.post(reverse("account"), {"name": "   "})
    assert response.status_code == 200
    assert "This field is required" in response.content.decode()
    assert not ApiToken.objects.exists()


def test_token_forms_require_csrf(researcher):
    client = Client(enforce_csrf_checks=True)
    client.force_login(researcher)
    assert client.post(reverse("account"), {"name": "x"}).status_code == 403
    token, _ = ApiToken.issue(researcher, "laptop")
    assert client.post(reverse("token-revoke", args=[token.pk])).status_code == 403
    token.refresh_from_db()
    assert token.revoked_at is None


def test_revoke_asks_for_confirmation_then_revokes_on_post(as_researcher, researcher):
    token, _ = ApiToken.issue(researcher, "laptop")
    url = reverse("token-revoke", args=[token.pk])

    confirm = as_researcher.get(url)
    assert confirm.status_code == 200
    assert "Revoke “laptop”?" in confirm.content.decode()
    token.refresh_from_db()
    assert token.revoked_at is None  # GET never revokes

    response = as_researcher.post(url, follow=True)
    assert response.redirect_chain == [(reverse("account"), 302)]
    token.refresh_from_db()
    assert token.revoked_at is not None
    assert not ApiToken.objects.active().filter(pk=token.pk).exists()
    html = response.content.decode()
    assert "revoked" in html
    assert "Revoked" in html


def test_user_never_sees_another_users_tokens(as_researcher, admin_user):
    theirs, _ = ApiToken.issue(admin_user, "admin-automation")

    page = as_researcher.get(reverse("account")).content.decode()
    assert "admin-automation" not in page
    assert theirs.prefix not in page

    url = reverse("token-revoke", args=[theirs.pk])
    assert as_researcher.get(url).status_code == 404
    assert as_researcher.post(url).status_code == 404
    theirs.refresh_from_db()
    assert theirs.revoked_at is None


def test_revoke_unknown_token_is_404(as_researcher):
    assert as_researcher.post(reverse("token-revoke", args=[uuid.uuid4()])).status_code == 404
