"""In-app notifications: the one entry point ``notify`` and the read state.

``notify`` writes one row per recipient in the caller's transaction (one bulk_create) and
queues the event's webhook deliveries (``notices.webhooks``), which go out after commit.
E-mail opt-outs (quotas.NotificationOptOut) are e-mail only: in-app notices always go.
"""

from __future__ import annotations

from collections.abc import Iterable
from typing import Any

from django.conf import settings
from django.utils import timezone
from django.utils.http import url_has_allowed_host_and_scheme

from .models import Event, Notification

TITLE_MAX = Notification._meta.get_field("title").max_length
URL_MAX = Notification._meta.get_field("url").max_length


def local_path(url: str) -> str:
    """``url`` as a path of the portal ("/requests/<id>/"), or "" when it is not one.

    Absolute links under ``PORTAL_URL`` lose their origin; anything else off-site
    ("https://evil.example/", "//evil.example/", "/\\evil", "javascript:") becomes "".
    """
    url = (url or "").strip()
    base = settings.PORTAL_URL.rstrip("/")
    if base and url.startswith(base + "/"):
        url = url[len(base) :]
    return url if is_local_path(url) else ""


def is_local_path(url: str) -> bool:
    return (
        bool(url)
        and len(url) <= URL_MAX
        and url.startswith("/")
        and not url.startswith("//")
        and "\\" not in url
        and not any(c.isspace() or ord(c) < 32 or ord(c) == 127 for c in url)
        and url_has_allowed_host_and_scheme(url, allowed_hosts=None)
    )


def notify(
    users: Iterable[Any],
    *,
    event: str,
    title: str,
    body: str = "",
    url: str = "",
    team=None,
    webhook: bool = True,
) -> list[Notification]:
    """Tell ``users`` (each active user once; None and duplicates skipped) about ``event``.

    Call inside the transaction that made the change: the rows commit with it, and the
    webhook deliveries for the event (unless ``webhook`` is False) are dispatched once it
    commits.
    """
    if event not in Event.values:
        raise ValueError(f"unknown notification event {event!r}")
    path = local_path(url)
    title = " ".join(title.split())[:TITLE_MAX]
    seen: set = set()
    rows = []
    for user in users:
        if user is None or user.pk is None or user.pk in seen or not user.is_active:
            continue
        seen.add(user.pk)
        rows.append(
            Notification(recipient=user, event=event, title=title, body=body, url=path, team=team)
        )
    created = Notification.objects.bulk_create(rows)
    if webhook:
        from . import webhooks

        webhooks.queue(event, title=title, body=body, url=path, team=team)
    return created


def for_user(user):
    """The notices ``user`` may see: their own, never anyone else's."""
    return Notification.objects.filter(recipient_id=user.pk)


def unread_count(user) -> int:
    return for_user(user).filter(read_at__isnull=True).count()


def mark_read(user, notification_id) -> Notification | None:
    """Mark one of ``user``'s notices read (idempotent); None when it is not theirs."""
    note = for_user(user).filter(pk=notification_id).first()
    if note is None:
        return None
    if note.read_at is None:
        note.read_at = timezone.now()
        for_user(user).filter(pk=note.pk, read_at__isnull=True).update(read_at=note.read_at)
    return note


def mark_all_read(user) -> int:
    """Mark every unread notice of ``user`` read; returns how many."""
    return for_user(user).filter(read_at__isnull=True).update(read_at=timezone.now())
