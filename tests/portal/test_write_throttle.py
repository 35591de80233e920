"""Members' API writes are rate limited (issue #11, section 5; portal/throttles.py)."""

from __future__ import annotations

import pytest
from django.conf import settings as django_settings

from tests.conftest import api_for
from tests.quotas.builders import make_team, make_user

pytestmark = pytest.mark.django_db

PREVIEW = "/api/v1/quota-requests/preview/"


@pytest.fixture
def low_rate(settings):
    settings.MEMBER_WRITE_RATE = "3/min"


def test_default_is_60_writes_a_minute_for_every_api_view():
    assert django_settings.MEMBER_WRITE_RATE == "60/min"
    classes = django_settings.REST_FRAMEWORK["DEFAULT_THROTTLE_CLASSES"]
    assert "portal.throttles.MemberWriteThrottle" in classes


def test_member_writes_over_the_rate_get_429_with_retry_after(low_rate):
    member = make_user("mia")
    make_team("vision", members=[member])
    api = api_for(member)
    writes = [
        api.post(PREVIEW, {}, format="json"),
        api.post("/api/v1/quota-requests/", {}, format="json"),
        # refused by its permission first (DRF checks permissions, then throttles): no work
        # done, not counted
        api.patch("/api/v1/team-queues/00000000-0000-0000-0000-000000000000/", {}, format="json"),
        api.post(PREVIEW, {}, format="json"),
    ]
    assert [r.status_code for r in writes] == [400, 400, 403, 400]
    over = api.post(PREVIEW, {}, format="json")
    assert over.status_code == 429
    assert int(over["Retry-After"]) > 0
    assert "throttled" in over.json()["detail"]
    assert api.get("/api/v1/teams/").status_code == 200  # reads are not limited
    other = api_for(make_user("otto"))  # per user
    assert other.post(PREVIEW, {}, format="json").status_code == 400


def test_admins_are_not_limited(low_rate):
    api = api_for(make_user("ada", staff=True))
    assert {api.post(PREVIEW, {}, format="json").status_code for _ in range(6)} == {400}


def test_empty_rate_turns_the_limit_off(settings):
    settings.MEMBER_WRITE_RATE = ""
    api = api_for(make_user("mia"))
    assert {api.post(PREVIEW, {}, format="json").status_code for _ in range(5)} == {400}


def test_a_member_at_the_limit_can_still_revoke_a_token(low_rate):
    from portal.models import ApiToken

    member = make_user("mia")
    api = api_for(member)
    leaked, _ = ApiToken.issue(member, "leaked")
    for _ in range(3):
        api.post(PREVIEW, {}, format="json")
    assert api.post(PREVIEW, {}, format="json").status_code == 429
    assert api.delete(f"/api/v1/auth/tokens/{leaked.pk}/").status_code == 204
    leaked.refresh_from_db()
    assert leaked.revoked_at is not None
