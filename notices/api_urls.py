"""Notification routes under /api/v1/."""

from .api import urlpatterns

__all__ = ["urlpatterns"]
