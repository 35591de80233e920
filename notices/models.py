"""In-app notifications and outgoing webhooks (issue #12 section 2).

A ``Notification`` is one row per recipient; a ``Webhook`` is an admin-configured
endpoint; a ``WebhookDelivery`` is an outbox row (portal/outbox.py) that a Celery task
sends, retried with backoff.
"""

from __future__ import annotations

import uuid

from django.conf import settings
from django.core.validators import URLValidator
from django.db import models
from django.db.models import Q


class Event(models.TextChoices):
    """What happened. The quota kinds reuse quotas.NotificationOptOut.Kind's values."""

    NEW_REQUEST = "new_request", "quota request submitted (admins)"
    APPROVED = "approved", "quota request approved"
    REJECTED = "rejected", "quota request rejected"
    APPLIED = "applied", "quota applied"
    FAILED = "failed", "quota apply failed"
    EXPIRING = "expiring", "grant expiring soon"
    STARTING = "starting", "booking starting soon"
    EXPIRED = "expired", "grant expired"
    RECLAIM = "reclaim", "idle GPUs of a grant to be taken back, or taken back"
    CONFIRM = "confirm", "quota lowering needs confirmation (admins)"
    MIG_DECIDED = "mig_decided", "MIG request approved or rejected"
    MIG_FINISHED = "mig_finished", "MIG run finished"
    MIG_FAILED = "mig_failed", "MIG run failed"
    MEMBERSHIP = "membership", "team membership changed"
    COMMENT = "comment", "new comment"


class Notification(models.Model):
    """One notice for one user; ``read_at`` is set when they open it or mark all read."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    recipient = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="notifications"
    )
    event = models.CharField(max_length=20, choices=Event.choices)
    title = models.CharField(max_length=300)
    body = models.TextField(blank=True)
    # A path of the portal ("/requests/<id>/"), never an absolute URL (notices.links).
    url = models.CharField(max_length=500, blank=True)
    team = models.ForeignKey(
        "quotas.Team", null=True, blank=True, on_delete=models.SET_NULL, related_name="+"
    )
    created_at = models.DateTimeField(auto_now_add=True, db_index=False)
    read_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        indexes = [
            # The list page: a user's notices, newest first.
            models.Index(fields=["recipient", "-created_at"], name="notice_recipient_new"),
            # The header's unread count: WHERE recipient_id = ? AND read_at IS NULL.
            models.Index(
                fields=["recipient"], condition=Q(read_at__isnull=True), name="notice_unread"
            ),
        ]

    def __str__(self) -> str:
        return f"{self.recipient_id}: {self.title}"

    @property
    def unread(self) -> bool:
        return self.read_at is None


def validate_webhook_url(value: str) -> None:
    URLValidator(schemes=["http", "https"])(value)


class Webhook(models.Model):
    """An endpoint told about events: Slack-compatible or generic signed JSON."""

    class Format(models.TextChoices):
        SLACK = "slack", 'Slack-compatible ({"text": ...})'
        GENERIC = "generic", "Generic JSON, signed"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    name = models.CharField(max_length=100)
    url = models.URLField(max_length=500, validators=[validate_webhook_url])
    format = models.CharField(max_length=10, choices=Format.choices, default=Format.GENERIC)
    # Empty: every event; else the Event values it wants.
    events = models.JSONField(default=list, blank=True)
    team = models.ForeignKey(
        "quotas.Team", null=True, blank=True, on_delete=models.CASCADE, related_name="+",
        help_text="Only events of this team (empty: every team, and events of no team).",
    )  # fmt: skip
    # HMAC key of generic deliveries; write-only on every page and API (never shown back).
    secret = models.CharField(max_length=200, blank=True)
    active = models.BooleanField(default=True)
    created_at = models.DateTimeField(auto_now_add=True)
    updated_at = models.DateTimeField(auto_now=True)

    class Meta:
        ordering = ["name"]

    def __str__(self) -> str:
        return self.name

    def wants(self, event: str, team_id) -> bool:
        if self.events and event not in self.events:
            return False
        return self.team_id is None or self.team_id == team_id

    @property
    def events_display(self) -> str:
        if not self.events:
            return "all events"
        labels = dict(Event.choices)
        return ", ".join(str(labels.get(e, e)) for e in self.events)


class WebhookDelivery(models.Model):
    """One POST of one event to one webhook: an outbox row (portal/outbox.py)."""

    class Status(models.TextChoices):
        PENDING = "pending"
        RUNNING = "running"
        DONE = "done"
        FAILED = "failed"

    OPEN = (Status.PENDING, Status.RUNNING)
    TERMINAL = (Status.DONE, Status.FAILED)

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    webhook = models.ForeignKey(Webhook, on_delete=models.CASCADE, related_name="deliveries")
    event = models.CharField(max_length=20)
    # The generic body without its signature: {event, title, body, url, team, at, id}.
    payload = models.JSONField()
    status = models.CharField(max_length=10, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField()
    lease_until = models.DateTimeField(null=True, blank=True)
    last_error = models.TextField(blank=True)
    response_code = models.PositiveIntegerField(null=True, blank=True)
    created_at = models.DateTimeField(auto_now_add=True)
    finished_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]
        verbose_name_plural = "webhook deliveries"
        indexes = [
            # Beat's re-dispatch: WHERE status = 'pending' AND next_attempt_at <= now.
            models.Index(
                fields=["next_attempt_at"], condition=Q(status="pending"), name="hookdel_due"
            ),
            models.Index(fields=["webhook", "-created_at"], name="hookdel_recent"),
        ]

    def __str__(self) -> str:
        return f"{self.event} -> {self.webhook_id} ({self.status})"
