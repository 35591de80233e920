"""A secret URL per user that serves their teams' bookings as iCalendar (issue #25 section 1).

The URL holds the secret; only its SHA-256 is stored (as API tokens, portal/models.py), so a
database copy cannot read anyone's calendar. A user has at most one feed in use: a new one
revokes the old. Revoking stops the URL at once (404); the rows it serves are read at each
request, so leaving a team drops that team's bookings from the feed.
"""

from __future__ import annotations

import secrets
import uuid

from django.conf import settings
from django.db import models, transaction
from django.utils import timezone

from portal.models import hash_token

FEED_PREFIX = "gpf_"


class CalendarFeed(models.Model):
    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="calendar_feeds"
    )
    prefix = models.CharField(max_length=12, help_text="the URL's first characters")
    key_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        ordering = ["-created_at"]

    def __str__(self) -> str:
        return f"calendar feed {self.prefix}… of {self.user}"

    @classmethod
    def issue(cls, user) -> tuple[CalendarFeed, str]:
        """A new feed for ``user`` (the one in use, if any, revoked) and its raw secret."""
        raw = FEED_PREFIX + secrets.token_urlsafe(30)
        with transaction.atomic():
            cls.objects.filter(user=user, revoked_at__isnull=True).update(revoked_at=timezone.now())
            feed = cls.objects.create(user=user, prefix=raw[:8], key_hash=hash_token(raw))
        return feed, raw

    @classmethod
    def find(cls, raw: str) -> CalendarFeed | None:
        """The feed in use with this secret, of an active user; None otherwise."""
        if not raw.startswith(FEED_PREFIX) or len(raw) > 100:
            return None
        return (
            cls.objects.select_related("user")
            .filter(key_hash=hash_token(raw), revoked_at__isnull=True, user__is_active=True)
            .first()
        )
