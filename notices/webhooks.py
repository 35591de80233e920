"""Outgoing webhooks: queue deliveries for an event, send them, retry with backoff.

Deliveries are outbox rows (``WebhookDelivery``, portal/outbox.py): written in the
transaction of the change, dispatched to Celery on commit, claimed by a worker with a
conditional UPDATE, and re-sent by beat when a message was lost or a worker died. A 2xx
answer is done; anything else (or no answer within ``NOTICES_WEBHOOK_TIMEOUT_SECONDS``)
is retried after ``NOTICES_WEBHOOK_BACKOFF_SECONDS`` x 2^(attempt-1), up to
``NOTICES_WEBHOOK_MAX_ATTEMPTS`` attempts, then failed (an admin can retry it).

Generic deliveries are signed: ``X-Portal-Timestamp: <unix seconds>`` and
``X-Portal-Signature: sha256=<hex HMAC-SHA256(secret, "<timestamp>.<body>")>``.
"""

from __future__ import annotations

import hashlib
import hmac
import json
import logging
import time
import urllib.error
import urllib.request
import uuid
from datetime import datetime, timedelta

from django.conf import settings
from django.db import transaction
from django.db.models import F, Q
from django.utils import timezone

from portal import broker, outbox

from .models import Webhook, WebhookDelivery

log = logging.getLogger(__name__)
Status = WebhookDelivery.Status
TEST_EVENT = "test"
USER_AGENT = "gpu-quota-portal-webhooks/1"


def max_attempts() -> int:
    return max(int(settings.NOTICES_WEBHOOK_MAX_ATTEMPTS), 1)


def backoff(attempt: int) -> timedelta:
    """Base, 2 x base, 4 x base, ... after attempt 1, 2, 3; capped at one hour."""
    base = float(settings.NOTICES_WEBHOOK_BACKOFF_SECONDS)
    return timedelta(seconds=min(base * 2 ** max(attempt - 1, 0), 3600))


def lease() -> timedelta:
    """A claimed delivery is the worker's for its timeout plus a margin."""
    return timedelta(seconds=float(settings.NOTICES_WEBHOOK_TIMEOUT_SECONDS) + 30)


# -- bodies and signatures ---------------------------------------------------------------


def absolute(path: str) -> str:
    return settings.PORTAL_URL.rstrip("/") + path if path else ""


def payload(event: str, *, title: str, body: str, url: str, team, delivery_id) -> dict:
    return {
        "id": str(delivery_id),
        "event": event,
        "title": title,
        "body": body,
        "url": absolute(url),
        "team": team.slug if team is not None else None,
        "at": timezone.now().isoformat(),
    }


def _slack_escape(text: str) -> str:
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def encode(hook: Webhook, data: dict) -> bytes:
    """The request body: Slack's ``{"text": ...}`` (with a link) or the generic JSON."""
    if hook.format == Webhook.Format.SLACK:
        title = _slack_escape(data["title"])
        head = f"<{data['url']}|{title}>" if data.get("url") else title
        text = head + (f"\n{_slack_escape(data['body'])}" if data.get("body") else "")
        return json.dumps({"text": text}).encode()
    return json.dumps(data, separators=(",", ":"), sort_keys=True).encode()


def sign(secret: str, timestamp: str, body: bytes) -> str:
    """``sha256=<hex>`` of HMAC-SHA256 over ``<timestamp>.<body>``."""
    mac = hmac.new(secret.encode(), timestamp.encode() + b"." + body, hashlib.sha256)
    return "sha256=" + mac.hexdigest()


def headers_for(hook: Webhook, data: dict, body: bytes, timestamp: str) -> dict[str, str]:
    headers = {
        "Content-Type": "application/json",
        "User-Agent": USER_AGENT,
        "X-Portal-Event": data["event"],
        "X-Portal-Delivery": data["id"],
        "X-Portal-Timestamp": timestamp,
    }
    if hook.secret:
        headers["X-Portal-Signature"] = sign(hook.secret, timestamp, body)
    return headers


# -- queueing ------------------------------------------------------------------------------


def queue(event: str, *, title: str, body: str, url: str, team) -> list[WebhookDelivery]:
    """One delivery per active webhook that wants ``event`` (and ``team``); dispatched on
    commit of the caller's transaction."""
    hooks = Webhook.objects.filter(active=True).filter(Q(events=[]) | Q(events__contains=[event]))
    hooks = (
        hooks.filter(Q(team__isnull=True) | Q(team=team))
        if team
        else hooks.filter(team__isnull=True)
    )
    now = timezone.now()
    rows = []
    for hook in hooks:
        pk = uuid.uuid4()
        data = payload(event, title=title, body=body, url=url, team=team, delivery_id=pk)
        rows.append(
            WebhookDelivery(id=pk, webhook=hook, event=event, payload=data, next_attempt_at=now)
        )
    created = WebhookDelivery.objects.bulk_create(rows)
    for row in created:
        transaction.on_commit(lambda pk=row.pk: dispatch(pk))
    return created


def queue_test(hook: Webhook, by) -> WebhookDelivery:
    """A test delivery to ``hook`` (active or not), dispatched on commit."""
    pk = uuid.uuid4()
    who = by.get_username() if by is not None else "an admin"
    data = payload(
        TEST_EVENT, title=f"Test delivery to {hook.name}",
        body=f"{who} sent this test from the portal's webhook page.",
        url="/admin-webhooks/", team=hook.team, delivery_id=pk,
    )  # fmt: skip
    row = WebhookDelivery.objects.create(
        id=pk, webhook=hook, event=TEST_EVENT, payload=data, next_attempt_at=timezone.now()
    )
    transaction.on_commit(lambda: dispatch(row.pk))
    return row


def dispatch(delivery_id, countdown: float = 0) -> None:
    from .tasks import deliver_webhook

    broker.send(deliver_webhook, (str(delivery_id),), countdown=countdown,
                what=f"webhook delivery {delivery_id}")  # fmt: skip


# -- sending -------------------------------------------------------------------------------


class _NoRedirect(urllib.request.HTTPRedirectHandler):
    """A redirect is an answer that is not 2xx: never follow it with the signed body."""

    def redirect_request(self, req, fp, code, msg, headers, newurl):
        return None


_opener = urllib.request.build_opener(_NoRedirect)


def post(hook: Webhook, data: dict) -> tuple[int | None, str]:
    """POST one delivery; returns (HTTP status or None, error text or "")."""
    if not hook.url.lower().startswith(("http://", "https://")):
        return None, "Only http:// and https:// URLs are sent."
    body = encode(hook, data)
    headers = headers_for(hook, data, body, str(int(time.time())))
    # The scheme is checked above (and stored URLs are http(s) only: validate_webhook_url).
    request = urllib.request.Request(hook.url, data=body, headers=headers, method="POST")  # noqa: S310
    timeout = float(settings.NOTICES_WEBHOOK_TIMEOUT_SECONDS)
    try:
        with _opener.open(request, timeout=timeout) as response:
            response.read(1024)
            return response.status, ""
    except urllib.error.HTTPError as err:
        text = err.read(300).decode("utf-8", "replace").strip()
        return err.code, f"HTTP {err.code} {err.reason}" + (f": {text}" if text else "")
    except (urllib.error.URLError, OSError, ValueError) as err:
        reason = getattr(err, "reason", err)
        return None, f"{type(err).__name__}: {reason}"[:1000]


def deliver(delivery_id, now: datetime | None = None) -> str:
    """Claim one due delivery, POST it, record the answer; returns the new status or
    "skipped" (not due, not pending, or another worker has it)."""
    now = now or timezone.now()
    due = WebhookDelivery.objects.filter(
        pk=delivery_id, status=Status.PENDING, next_attempt_at__lte=now + timedelta(seconds=1),
        attempts__lt=max_attempts(),
    )  # fmt: skip
    claimed = due.update(
        status=Status.RUNNING, attempts=F("attempts") + 1, lease_until=now + lease()
    )
    if not claimed:
        return "skipped"
    row = WebhookDelivery.objects.select_related("webhook").get(pk=delivery_id)
    hook = row.webhook
    if not hook.active and row.event != TEST_EVENT:
        code, error = None, "The webhook is inactive."
        return _finish(row, code, error, now, give_up=True)
    code, error = post(hook, row.payload)
    if code is not None and 200 <= code < 300:
        error = ""
    elif not error:
        error = f"HTTP {code}"
    return _finish(row, code, error, now)


def _finish(row: WebhookDelivery, code, error: str, now, give_up: bool = False) -> str:
    mine = WebhookDelivery.objects.filter(pk=row.pk, status=Status.RUNNING, attempts=row.attempts)
    end = timezone.now()
    if not error:
        mine.update(status=Status.DONE, response_code=code, last_error="", lease_until=None,
                    finished_at=end)  # fmt: skip
        return Status.DONE
    if give_up or row.attempts >= max_attempts():
        mine.update(status=Status.FAILED, response_code=code, last_error=error[:4000],
                    lease_until=None, finished_at=end)  # fmt: skip
        log.warning("webhook delivery %s failed for good: %s", row.pk, error)
        return Status.FAILED
    wait = backoff(row.attempts)
    updated = mine.update(status=Status.PENDING, response_code=code, last_error=error[:4000],
                          lease_until=None, next_attempt_at=now + wait)  # fmt: skip
    if updated:
        dispatch(row.pk, countdown=wait.total_seconds())
    return Status.PENDING


def reclaim_expired(now: datetime) -> int:
    """Running deliveries whose worker died: back to pending, or failed after the last
    attempt."""
    expired = WebhookDelivery.objects.filter(status=Status.RUNNING, lease_until__lt=now)
    error = "The worker sending it stopped (lease expired)."
    failed = expired.filter(attempts__gte=max_attempts()).update(
        status=Status.FAILED, last_error=error, lease_until=None, finished_at=now
    )
    back = expired.update(
        status=Status.PENDING, last_error=error, lease_until=None, next_attempt_at=now
    )
    return failed + back


def redispatch_due(now: datetime | None = None) -> int:
    """Beat: reclaim dead workers' deliveries and re-send every due pending one."""
    return outbox.redispatch_due(WebhookDelivery, dispatch, now, reclaim=reclaim_expired)


def retry(row: WebhookDelivery) -> bool:
    """An admin's retry of a failed delivery: pending again with a fresh set of attempts."""
    updated = WebhookDelivery.objects.filter(pk=row.pk, status=Status.FAILED).update(
        status=Status.PENDING, attempts=0, next_attempt_at=timezone.now(), finished_at=None
    )
    if updated:
        transaction.on_commit(lambda: dispatch(row.pk))
    return bool(updated)
