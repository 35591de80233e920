"""A dependency that does not answer is a 503 with ``Retry-After``, never a 500 (#24).

PostgreSQL refusing connections, Redis (the cache behind the rate limits, and the broker)
refused or timing out: the request changed nothing (its transaction rolled back, or it
never began), so the truthful answer is "unavailable, try again", fast. Caught where a view
raises (:class:`DependencyOutageMiddleware`) and where a middleware does (:func:`server_error`,
Django's ``handler500``). The page answer is plain HTML that needs no database: the usual
templates read the session and the user.

What bounds "fast": ``CACHES`` and ``CELERY_BROKER_TRANSPORT_OPTIONS`` socket timeouts, the
database's ``connect_timeout``, and one attempt per broker send (``portal/broker.py``).
"""

from __future__ import annotations

import sys

import redis
from django.conf import settings
from django.db import InterfaceError, OperationalError
from django.http import HttpResponse, JsonResponse
from django.utils.html import escape
from django.views import defaults
from kombu.exceptions import OperationalError as BrokerError
from rest_framework.exceptions import APIException


class DependencyUnavailable(APIException):
    """Raised by code that knows a dependency is down (the broker for a manual sync)."""

    status_code = 503
    default_code = "unavailable"
    default_detail = "A service the portal depends on does not answer; nothing was changed."

    def __init__(self, detail: str | None = None) -> None:
        super().__init__(detail)
        self.wait = retry_after()  # DRF's handler turns ``wait`` into Retry-After


def retry_after() -> int:
    return int(settings.OUTAGE_RETRY_AFTER_SECONDS)


def dependency(exc: BaseException | None) -> str | None:
    """Which dependency ``exc`` says is down: "database", "redis", or None."""
    if isinstance(exc, OperationalError | InterfaceError):
        return "database"
    if isinstance(
        exc, redis.exceptions.ConnectionError | redis.exceptions.TimeoutError | BrokerError
    ):
        return "redis"
    return None


MESSAGES = {
    "database": "The portal's database does not answer.",
    "redis": "The portal's cache and task queue (Redis) do not answer.",
}


def unavailable(request, what: str) -> HttpResponse:
    detail = f"{MESSAGES[what]} Nothing was changed; try again in {retry_after()} seconds."
    if request.path_info.startswith("/api/"):
        response = JsonResponse({"detail": detail}, status=503)
    else:
        response = HttpResponse(
            "<!doctype html><html lang=en><meta charset=utf-8><title>Unavailable</title>"
            f"<h1>Temporarily unavailable</h1><p>{escape(detail)}</p></html>",
            status=503,
        )
    response["Retry-After"] = str(retry_after())
    return response


class DependencyOutageMiddleware:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        return self.get_response(request)

    def process_exception(self, request, exception):
        what = dependency(exception)
        return unavailable(request, what) if what else None


def server_error(request, *args, **kwargs):
    """``handler500``: an outage raised outside a view (a session saved by a middleware)."""
    what = dependency(sys.exc_info()[1])
    if what:
        return unavailable(request, what)
    return defaults.server_error(request, *args, **kwargs)
