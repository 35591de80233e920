"""The Django project: settings, URLs, the Celery app, API tokens and health endpoints."""

from .celery import app as celery_app

__all__ = ("celery_app",)
