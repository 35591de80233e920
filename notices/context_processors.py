"""``unread_notifications`` for the header: one COUNT, only when a page shows it."""

from __future__ import annotations

from django.utils.functional import SimpleLazyObject

from . import services


def unread(request) -> dict:
    user = getattr(request, "user", None)
    if user is None or not user.is_authenticated:
        return {}
    return {"unread_notifications": SimpleLazyObject(lambda: services.unread_count(user))}
