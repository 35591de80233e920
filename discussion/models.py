"""A comment on one request: a quota request or a MIG request, never both, never neither."""

from __future__ import annotations

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

BODY_MAX = 5000


class Comment(models.Model):
    """One message in a request's thread. Append-only: comments are not edited."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    quota_request = models.ForeignKey(
        "quotas.QuotaRequest", on_delete=models.CASCADE, null=True, blank=True,
        related_name="comments",
    )  # fmt: skip
    mig_request = models.ForeignKey(
        "mig.MigRequest", on_delete=models.CASCADE, null=True, blank=True,
        related_name="comments",
    )  # fmt: skip
    author = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="comments"
    )
    # Whether the author wrote as a portal admin (the "admin" badge; who is told).
    by_admin = models.BooleanField(default=False)
    body = models.TextField(max_length=BODY_MAX)
    created_at = models.DateTimeField(default=timezone.now)

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [
            models.CheckConstraint(
                condition=(Q(quota_request__isnull=False) & Q(mig_request__isnull=True))
                | (Q(quota_request__isnull=True) & Q(mig_request__isnull=False)),
                name="comment_exactly_one_request",
                violation_error_message="A comment belongs to exactly one request.",
            ),
        ]

    def __str__(self) -> str:
        return f"comment by {self.author_id} on {self.target_id}"

    @property
    def target(self):
        return self.quota_request if self.quota_request_id else self.mig_request

    @property
    def target_id(self):
        return self.quota_request_id or self.mig_request_id
