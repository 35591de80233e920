"""Webhook deliveries against a real local HTTP receiver: signatures, Slack bodies,
retries with backoff, giving up, and the admins' pages (test button, retry, audit)."""

from __future__ import annotations

import hashlib
import hmac
import json
import socket
from datetime import timedelta

import pytest
from django.test import Client
from django.utils import timezone

import notices
from notices import webhooks
from notices.models import Webhook, WebhookDelivery
from quotas.models import AuditEvent
from tests.quotas.builders import make_team, make_user

pytestmark = pytest.mark.django_db
SECRET = "s3cret-for-tests"


@pytest.fixture
def team(db):
    return make_team("vision")


def hook_for(receiver, **kw) -> Webhook:
    fields = {"name": "ops", "url": receiver.url, "format": "generic", "secret": SECRET}
    fields.update(kw)
    return Webhook.objects.create(**fields)


def one_delivery(team, event="approved") -> WebhookDelivery:
    notices.notify([], event=event, title="Request approved: 2 <GPU> & more",
                   body="2 x nvidia.com/gpu in vision", url="/requests/1/", team=team)  # fmt: skip
    return WebhookDelivery.objects.get()


def verify(secret: str, headers: dict, body: bytes) -> bool:
    """What a receiver does (docs): HMAC-SHA256 over "<timestamp>.<body>"."""
    expected = hmac.new(secret.encode(), headers["X-Portal-Timestamp"].encode() + b"." + body,
                        hashlib.sha256).hexdigest()  # fmt: skip
    return hmac.compare_digest(headers["X-Portal-Signature"], "sha256=" + expected)


def test_generic_delivery_is_signed_json(receiver, team):
    hook_for(receiver)
    row = one_delivery(team)
    assert webhooks.deliver(row.pk) == "done"
    (got,) = receiver.requests
    assert got.path == "/hook" and got.headers["Content-Type"] == "application/json"
    assert verify(SECRET, got.headers, got.body)
    assert not verify("another secret", got.headers, got.body)
    assert abs(int(got.headers["X-Portal-Timestamp"]) - timezone.now().timestamp()) < 30
    assert got.headers["X-Portal-Event"] == "approved"
    assert got.json() == {
        "id": str(row.pk), "event": "approved", "title": "Request approved: 2 <GPU> & more",
        "body": "2 x nvidia.com/gpu in vision", "url": "http://127.0.0.1:8000/requests/1/",
        "team": "vision", "at": row.payload["at"],
    }  # fmt: skip
    row.refresh_from_db()
    assert (row.status, row.attempts, row.response_code, row.last_error) == ("done", 1, 200, "")


def test_slack_body_is_text_with_a_link(receiver, team):
    hook_for(receiver, format="slack", secret="")
    assert webhooks.deliver(one_delivery(team).pk) == "done"
    (got,) = receiver.requests
    assert got.json() == {
        "text": "<http://127.0.0.1:8000/requests/1/|Request approved: 2 "
        "&lt;GPU&gt; &amp; more>\n2 x nvidia.com/gpu in vision"
    }
    assert "X-Portal-Signature" not in got.headers  # no secret set


def test_a_500_is_retried_with_backoff_then_done(receiver, team, settings):
    settings.NOTICES_WEBHOOK_BACKOFF_SECONDS = 30
    receiver.answers = [500]
    hook_for(receiver)
    row = one_delivery(team)
    before = timezone.now()
    assert webhooks.deliver(row.pk) == "pending"
    row.refresh_from_db()
    assert (row.attempts, row.response_code) == (1, 500)
    assert row.last_error.startswith("HTTP 500")
    assert before + timedelta(seconds=29) < row.next_attempt_at < before + timedelta(seconds=40)
    assert webhooks.deliver(row.pk) == "skipped"  # not due yet
    assert webhooks.deliver(row.pk, now=row.next_attempt_at) == "done"
    first, second = receiver.requests
    assert first.json()["id"] == second.json()["id"] == str(row.pk)  # receivers de-duplicate
    assert verify(SECRET, second.headers, second.body)
    row.refresh_from_db()
    assert (row.status, row.attempts, row.response_code, row.last_error) == ("done", 2, 200, "")


def test_gives_up_after_max_attempts_with_doubling_waits(receiver, team, settings):
    settings.NOTICES_WEBHOOK_MAX_ATTEMPTS = 3
    settings.NOTICES_WEBHOOK_BACKOFF_SECONDS = 10
    receiver.default = 503
    hook_for(receiver)
    row = one_delivery(team)
    waits = []
    now = timezone.now()
    for expected in ["pending", "pending", "failed"]:
        assert webhooks.deliver(row.pk, now=now) == expected
        row.refresh_from_db()
        waits.append(round((row.next_attempt_at - now).total_seconds()))
        now = row.next_attempt_at
    assert waits[:2] == [10, 20]
    assert webhooks.deliver(row.pk, now=now + timedelta(hours=1)) == "skipped"
    assert len(receiver.requests) == 3
    assert (row.status, row.attempts, row.response_code) == ("failed", 3, 503)
    assert row.finished_at is not None


def test_a_redirect_is_not_followed(receiver, team):
    receiver.answers = [302]
    hook_for(receiver)
    assert webhooks.deliver(one_delivery(team).pk) == "pending"
    assert len(receiver.requests) == 1
    assert WebhookDelivery.objects.get().response_code == 302


def test_an_unreachable_endpoint_is_an_error_not_a_crash(team):
    with socket.socket() as s:  # a port nobody listens on
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    Webhook.objects.create(name="down", url=f"http://127.0.0.1:{port}/", secret=SECRET)
    assert webhooks.deliver(one_delivery(team).pk) == "pending"
    row = WebhookDelivery.objects.get()
    assert row.response_code is None and "refused" in row.last_error.lower()


def test_an_inactive_webhook_drops_its_queued_deliveries(receiver, team):
    hook = hook_for(receiver)
    row = one_delivery(team)
    Webhook.objects.filter(pk=hook.pk).update(active=False)
    assert webhooks.deliver(row.pk) == "failed"
    assert receiver.requests == []


def test_beat_reclaims_a_dead_workers_delivery(receiver, team):
    hook_for(receiver)
    row = one_delivery(team)
    past = timezone.now() - timedelta(minutes=5)
    WebhookDelivery.objects.filter(pk=row.pk).update(
        status="running", attempts=1, lease_until=past, next_attempt_at=past
    )
    assert webhooks.redispatch_due() == 0  # reclaimed now, re-sent after the grace
    row.refresh_from_db()
    assert row.status == "pending" and "lease expired" in row.last_error
    assert webhooks.redispatch_due(now=timezone.now() + timedelta(seconds=10)) == 1
    assert webhooks.deliver(row.pk) == "done"


# -- the admins' pages --------------------------------------------------------------------


@pytest.fixture
def admin(db):
    client = Client()
    client.force_login(make_user("root", staff=True))
    return client


def form(receiver, **kw) -> dict:
    data = {"name": "ops", "url": receiver.url, "format": "generic", "secret": SECRET,
            "active": "on"}  # fmt: skip
    data.update(kw)
    return {k: v for k, v in data.items() if v is not None}


def test_members_cannot_open_the_webhook_pages(receiver):
    client = Client()
    client.force_login(make_user("bob"))
    assert client.get("/admin-webhooks/").status_code == 403
    assert client.post("/admin-webhooks/new/", form(receiver)).status_code == 403
    assert not Webhook.objects.exists()


def test_add_edit_and_delete_are_validated_and_audited_and_the_secret_stays_hidden(
    admin, receiver, team
):
    bad = admin.post("/admin-webhooks/new/", form(receiver, url="ftp://example.org/", secret=""))
    assert bad.status_code == 200
    assert "Enter a full http:// or https:// URL." in bad.content.decode()
    assert "Generic webhooks are signed: set a secret." in bad.content.decode()
    ok = admin.post("/admin-webhooks/new/", {**form(receiver), "events": ["approved", "comment"],
                                             "team": str(team.pk)})  # fmt: skip
    assert ok.status_code == 302
    hook = Webhook.objects.get()
    assert (hook.events, hook.team, hook.secret) == (["approved", "comment"], team, SECRET)
    edit = admin.get(f"/admin-webhooks/{hook.pk}/edit/").content.decode()
    assert SECRET not in edit and "A secret is set" in edit
    assert SECRET not in admin.get("/admin-webhooks/").content.decode()
    admin.post(f"/admin-webhooks/{hook.pk}/edit/", form(receiver, name="ops 2", secret=""))
    hook.refresh_from_db()
    assert hook.name == "ops 2" and hook.secret == SECRET and hook.events == []  # kept
    page = admin.get(f"/admin-webhooks/{hook.pk}/delete/")
    assert page.status_code == 200 and "Delete webhook ops 2?" in page.content.decode()
    assert Webhook.objects.exists()  # the GET only asks
    assert admin.post(f"/admin-webhooks/{hook.pk}/delete/").status_code == 302
    assert not Webhook.objects.exists()
    events = list(AuditEvent.objects.filter(action__startswith="webhook.").order_by("at"))
    assert [e.action for e in events] == ["webhook.created", "webhook.updated", "webhook.deleted"]
    assert events[0].after["secret_set"] is True
    assert all(SECRET not in json.dumps([e.before, e.after, e.note]) for e in events)


def test_the_test_button_delivers_at_once(admin, receiver):
    hook = hook_for(receiver)
    response = admin.post(f"/admin-webhooks/{hook.pk}/test/", follow=True)
    assert "Test delivered to ops: HTTP 200." in response.content.decode()
    (got,) = receiver.requests
    assert got.json()["event"] == "test" and verify(SECRET, got.headers, got.body)
    assert AuditEvent.objects.filter(action="webhook.tested").exists()
    assert admin.get(f"/admin-webhooks/{hook.pk}/test/").status_code == 405


def test_a_failing_test_shows_the_error_and_an_admin_retries_a_failed_delivery(
    admin, receiver, settings
):
    settings.NOTICES_WEBHOOK_MAX_ATTEMPTS = 1
    receiver.answers = [500]
    hook = hook_for(receiver)
    page = admin.post(f"/admin-webhooks/{hook.pk}/test/", follow=True).content.decode()
    assert "Test to ops failed: HTTP 500" in page
    row = WebhookDelivery.objects.get()
    assert row.status == "failed"
    listing = admin.get("/admin-webhooks/").content.decode()
    assert (
        f"/admin-webhooks/deliveries/{row.pk}/retry/" in listing and "receiver says no" in listing
    )
    assert admin.post(f"/admin-webhooks/deliveries/{row.pk}/retry/").status_code == 302
    row.refresh_from_db()
    assert (row.status, row.attempts) == ("pending", 0)
    assert AuditEvent.objects.filter(action="webhook.retried").exists()
    assert webhooks.deliver(row.pk) == "done"
    again = admin.post(f"/admin-webhooks/deliveries/{row.pk}/retry/", follow=True)
    assert "Only a failed delivery can be retried." in again.content.decode()
