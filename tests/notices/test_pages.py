"""The notifications page, the header count and the API: each user sees only their own."""

from __future__ import annotations

import re

import pytest
from django.db import connection
from django.test import Client
from django.test.utils import CaptureQueriesContext

import notices
from notices.models import Notification
from tests.conftest import api_for
from tests.quotas.builders import make_team, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def people(db):
    bob, carol, admin = make_user("bob"), make_user("carol"), make_user("root", staff=True)
    make_team("vision", managers=[bob])
    make_team("nlp", members=[carol])
    return {"bob": bob, "carol": carol, "admin": admin}


def client_for(user) -> Client:
    client = Client()
    client.force_login(user)
    return client


def test_header_shows_the_unread_count_with_an_accessible_name(people):
    notices.notify([people["bob"]], event="approved", title="one", url="/requests/")
    notices.notify([people["bob"]], event="applied", title="two", url="/requests/")
    html = client_for(people["bob"]).get("/teams/").content.decode()
    assert 'aria-label="Notifications, 2 unread"' in html
    assert re.search(r">Notifications</span> <span[^>]*>\(2\)</span></a>", html)
    assert "Notifications (2 unread)" in html  # the account menu's entry (phones)
    html = client_for(people["carol"]).get("/teams/").content.decode()
    assert 'aria-label="Notifications, 0 unread"' in html and "(0)" not in html


def test_header_count_is_one_query_and_absent_when_signed_out(people):
    client = client_for(people["bob"])
    client.get("/teams/")
    with CaptureQueriesContext(connection) as ctx:
        client.get("/teams/")
    counts = [q for q in ctx.captured_queries if '"notices_notification"' in q["sql"]]
    assert len(counts) == 1 and "COUNT(" in counts[0]["sql"]
    assert "Notifications," not in Client().get("/login/").content.decode()


def test_list_newest_first_paginated_unread_marked_and_email_settings_linked(people):
    for n in range(23):
        notices.notify([people["bob"]], event="approved", title=f"notice {n:02d}")
    client = client_for(people["bob"])
    first = client.get("/notifications/").content.decode()
    assert first.index("notice 22") < first.index("notice 21")
    assert first.count('class="notice notice--unread"') == 20 and "notice 02" not in first
    assert 'href="/account/notifications/"' in first and "E-mail settings" in first
    second = client.get("/notifications/?page=2").content.decode()
    assert "notice 02" in second and "notice 00" in second
    assert client.get("/notifications/?page=x").status_code == 200  # bad page: the first


def test_empty_state(people):
    html = client_for(people["carol"]).get("/notifications/").content.decode()
    assert "No notifications" in html and "Mark all read" not in html


def test_opening_marks_read_and_goes_to_the_portal_path(people):
    (row,) = notices.notify([people["bob"]], event="approved", title="go", url="/requests/")
    client = client_for(people["bob"])
    response = client.get(f"/notifications/{row.pk}/open/")
    assert response.status_code == 302 and response["Location"] == "/requests/"
    row.refresh_from_db()
    assert row.read_at is not None


def test_a_stored_offsite_link_never_redirects_off_the_portal(people):
    (row,) = notices.notify([people["bob"]], event="approved", title="x")
    Notification.objects.filter(pk=row.pk).update(url="//evil.example/")  # a bad row
    response = client_for(people["bob"]).get(f"/notifications/{row.pk}/open/")
    assert response["Location"] == "/notifications/"


def test_bob_cannot_open_carols_notification(people):
    (row,) = notices.notify([people["carol"]], event="approved", title="hers", url="/teams/")
    assert client_for(people["bob"]).get(f"/notifications/{row.pk}/open/").status_code == 404
    assert "hers" not in client_for(people["bob"]).get("/notifications/").content.decode()
    row.refresh_from_db()
    assert row.read_at is None


def test_mark_all_read_is_a_post_with_csrf(people):
    notices.notify([people["bob"], people["carol"]], event="expired", title="ended")
    strict = Client(enforce_csrf_checks=True)
    strict.force_login(people["bob"])
    assert strict.post("/notifications/read-all/").status_code == 403  # no token
    client = client_for(people["bob"])
    assert client.get("/notifications/read-all/").status_code == 405
    assert client.post("/notifications/read-all/").status_code == 302
    assert Notification.objects.filter(read_at__isnull=True).get().recipient == people["carol"]


def test_signed_out_goes_to_sign_in(people):
    response = Client().get("/notifications/")
    assert response.status_code == 302 and "/login/" in response["Location"]


# -- API ------------------------------------------------------------------------------


def test_api_lists_only_own_and_filters_unread(people):
    (read,) = notices.notify([people["bob"]], event="approved", title="old")
    notices.notify([people["bob"]], event="applied", title="new", url="/requests/")
    notices.notify([people["carol"]], event="approved", title="carol's")
    notices.notify([people["admin"]], event="new_request", title="admin's")
    api = api_for(people["bob"])
    api.post(f"/api/v1/notifications/{read.pk}/read/")
    body = api.get("/api/v1/notifications/").json()
    assert [n["title"] for n in body["results"]] == ["new", "old"]
    unread = api.get("/api/v1/notifications/?unread=true").json()["results"]
    assert [n["title"] for n in unread] == ["new"] and unread[0]["unread"] is True
    assert unread[0]["url"] == "/requests/" and unread[0]["event"] == "applied"
    admin = api_for(people["admin"]).get("/api/v1/notifications/").json()["results"]
    assert [n["title"] for n in admin] == ["admin's"]  # admins too: their own only
    assert api.get("/api/v1/notifications/?unread=maybe").status_code == 400


def test_api_bob_cannot_read_or_mark_carols(people):
    (hers,) = notices.notify([people["carol"]], event="approved", title="hers")
    api = api_for(people["bob"])
    assert api.get(f"/api/v1/notifications/{hers.pk}/").status_code == 404
    assert api.post(f"/api/v1/notifications/{hers.pk}/read/").status_code == 404
    assert api.post("/api/v1/notifications/not-a-uuid/read/").status_code == 404
    hers.refresh_from_db()
    assert hers.read_at is None


def test_api_mark_read_and_read_all(people):
    a, b = (notices.notify([people["bob"]], event="approved", title=t)[0] for t in "ab")
    api = api_for(people["bob"])
    response = api.post(f"/api/v1/notifications/{a.pk}/read/")
    assert response.status_code == 200 and response.json()["read_at"] is not None
    assert api.post(f"/api/v1/notifications/{a.pk}/read/").status_code == 200  # idempotent
    assert api.post("/api/v1/notifications/read-all/").json() == {"marked": 1}
    assert b.pk and not Notification.objects.filter(read_at__isnull=True).exists()
    assert Client().get("/api/v1/notifications/").status_code in (401, 403)
