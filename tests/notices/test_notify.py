"""The domain rules of ``notices.notify``: rows, de-duplication, links, webhook queueing."""

from __future__ import annotations

import pytest
from django.db import connection
from django.test.utils import CaptureQueriesContext

import notices
from notices import services
from notices.models import Event, Notification, Webhook, WebhookDelivery
from tests.quotas.builders import make_team, make_user

pytestmark = pytest.mark.django_db


@pytest.fixture
def people(db):
    alice, bob, carol = make_user("alice"), make_user("bob"), make_user("carol")
    return {"alice": alice, "bob": bob, "carol": carol,
            "vision": make_team("vision", members=[alice], managers=[bob]),
            "nlp": make_team("nlp", members=[carol])}  # fmt: skip


def test_one_row_per_distinct_active_user_in_one_insert(people):
    gone = make_user("gone")
    gone.is_active = False
    gone.save()
    users = [people["alice"], people["bob"], people["alice"], None, gone]
    with CaptureQueriesContext(connection) as ctx:
        rows = notices.notify(users, event=Event.APPROVED, title="Request approved",
                              body="2 x GPU", url="/requests/", team=people["vision"])  # fmt: skip
    inserts = [
        q for q in ctx.captured_queries if q["sql"].startswith('INSERT INTO "notices_notification"')
    ]
    assert len(inserts) == 1
    assert sorted(r.recipient.username for r in rows) == ["alice", "bob"]
    assert Notification.objects.filter(read_at__isnull=True).count() == 2
    assert set(Notification.objects.values_list("team__slug", flat=True)) == {"vision"}


def test_every_event_of_the_brief_exists_including_comment():
    for value in ["new_request", "approved", "rejected", "applied", "failed", "expiring",
                  "expired", "confirm", "mig_decided", "mig_finished", "mig_failed",
                  "membership", "comment"]:  # fmt: skip
        assert value in Event.values


def test_an_unknown_event_is_refused(people):
    with pytest.raises(ValueError):
        notices.notify([people["alice"]], event="nonsense", title="x")
    assert not Notification.objects.exists()


def test_a_comment_notice(people):
    (row,) = notices.notify([people["carol"]], event="comment", title="bob commented",
                            url="/requests/abc/")  # fmt: skip
    assert row.event == "comment" and row.url == "/requests/abc/"


@pytest.mark.parametrize(
    ("given", "stored"),
    [
        ("http://127.0.0.1:8000/requests/1/", "/requests/1/"),  # PORTAL_URL: made a path
        ("/mig/requests/2/", "/mig/requests/2/"),
        ("https://evil.example/phish", ""),
        ("//evil.example/phish", ""),
        ("/\\evil.example", ""),
        ("javascript:alert(1)", ""),
        ("/ok/\n/x", ""),
        ("", ""),
    ],
)
def test_links_are_only_portal_paths(people, given, stored):
    (row,) = notices.notify([people["alice"]], event="approved", title="t", url=given)
    assert row.url == stored


def test_read_state_is_per_user(people):
    notices.notify([people["alice"], people["carol"]], event="expired", title="ended")
    mine = services.for_user(people["alice"]).get()
    assert services.mark_read(people["carol"], mine.pk) is None  # not hers: nothing
    assert services.unread_count(people["alice"]) == 1
    assert services.mark_read(people["alice"], mine.pk).read_at is not None
    assert services.unread_count(people["alice"]) == 0
    assert services.unread_count(people["carol"]) == 1
    assert services.mark_all_read(people["carol"]) == 1
    assert services.mark_all_read(people["carol"]) == 0


def test_webhooks_get_one_delivery_per_event_by_event_and_team_filter(people):
    every = Webhook.objects.create(name="all", url="https://hooks.example/a", secret="s")
    approvals = Webhook.objects.create(name="approvals", url="https://hooks.example/b",
                                       events=["approved"], secret="s")  # fmt: skip
    nlp_only = Webhook.objects.create(name="nlp", url="https://hooks.example/c",
                                      team=people["nlp"], secret="s")  # fmt: skip
    Webhook.objects.create(name="off", url="https://hooks.example/d", active=False, secret="s")
    notices.notify([people["alice"], people["bob"]], event="approved", title="ok",
                   url="/requests/1/", team=people["vision"])  # fmt: skip
    notices.notify([], event="rejected", title="no", team=people["nlp"])
    notices.notify([], event="confirm", title="no team")
    sent = sorted(
        (d.webhook.name, d.event) for d in WebhookDelivery.objects.select_related("webhook")
    )
    assert sent == [("all", "approved"), ("all", "confirm"), ("all", "rejected"),
                    ("approvals", "approved"), ("nlp", "rejected")]  # fmt: skip
    delivery = WebhookDelivery.objects.get(webhook=approvals)
    assert delivery.payload == {
        "id": str(delivery.pk), "event": "approved", "title": "ok", "body": "",
        "url": "http://127.0.0.1:8000/requests/1/", "team": "vision", "at": delivery.payload["at"],
    }  # fmt: skip
    assert every and nlp_only


def test_webhook_false_writes_rows_without_deliveries(people):
    Webhook.objects.create(name="all", url="https://hooks.example/a", secret="s")
    notices.notify([people["alice"]], event="membership", title="x", webhook=False)
    assert Notification.objects.count() == 1 and not WebhookDelivery.objects.exists()
