"""Shared fixtures: personas, API clients, and a simulated cluster per test.

The database is the real PostgreSQL named by DATABASE_URL (``make test`` starts an embedded
one); Redis likewise.
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model
from rest_framework.test import APIClient

from portal.models import ApiToken


@pytest.fixture(autouse=True)
def _fast_settings(settings):
    settings.PASSWORD_HASHERS = ["django.contrib.auth.hashers.MD5PasswordHasher"]


@pytest.fixture(autouse=True)
def _clear_cache():
    """Throttle counters live in the (real) Redis cache: start every test with none."""
    from django.core.cache import cache

    cache.clear()


@pytest.fixture
def admin_user(db):
    return get_user_model().objects.create_user(
        "alice-admin", "alice@example.com", "pw-admin-1", is_staff=True, is_superuser=True
    )


@pytest.fixture
def researcher(db):
    return get_user_model().objects.create_user("rob", "rob@example.com", "pw-researcher-1")


def _token_client(user) -> APIClient:
    _, raw = ApiToken.issue(user, "test")
    client = APIClient()
    client.credentials(HTTP_AUTHORIZATION=f"Bearer {raw}")
    return client


@pytest.fixture
def admin_api(admin_user) -> APIClient:
    return _token_client(admin_user)


@pytest.fixture
def researcher_api(researcher) -> APIClient:
    return _token_client(researcher)


@pytest.fixture
def anon_api() -> APIClient:
    return APIClient()
