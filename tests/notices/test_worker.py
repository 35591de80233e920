"""Webhooks through a real Celery worker: an approval's delivery is sent after commit,
answered 500 first, retried by the worker after the backoff, then done."""

from __future__ import annotations

import hashlib
import hmac

import pytest

from notices.models import Notification, Webhook, WebhookDelivery
from quotas import services
from quotas.services import RequestData
from tests.conftest import wait_for

pytestmark = [pytest.mark.slow, pytest.mark.django_db(transaction=True)]
SECRET = "worker-secret"


def test_an_approval_reaches_the_webhook_through_a_worker_with_a_retry(
    setup, receiver, start_worker
):
    start_worker(NOTICES_WEBHOOK_BACKOFF_SECONDS=0.5)
    Webhook.objects.create(name="ops", url=receiver.url, format="generic", secret=SECRET,
                           events=["approved"])  # fmt: skip
    receiver.answers = [500]
    data = RequestData(team=setup["team"], namespace=setup["ns"], resource="nvidia.com/gpu",
                       amount=2, justification="fine-tuning run for the benchmarks")  # fmt: skip
    req = services.approve(services.submit(setup["alice"], data), setup["admin"])  # commits
    assert Notification.objects.filter(event="approved", recipient=setup["alice"]).exists()
    row = wait_for(lambda: WebhookDelivery.objects.filter(status="done").first(), timeout=40)
    assert row.attempts == 2 and row.response_code == 200
    first, second = receiver.requests
    assert first.json()["id"] == second.json()["id"] == str(row.pk)
    body = second.json()
    assert body["event"] == "approved" and body["url"].endswith(f"/requests/{req.pk}/")
    mac = hmac.new(SECRET.encode(), second.headers["X-Portal-Timestamp"].encode() + b"."
                   + second.body, hashlib.sha256).hexdigest()  # fmt: skip
    assert second.headers["X-Portal-Signature"] == f"sha256={mac}"
