"""How long a lockout lasts, what a locked-out client is told, and the audit trail.

django-axes counts failed password checks (``AccessAttempt`` rows, one per username,
address and user agent, each with its count and the time of its last failure) and refuses
a client once the failures of its account or of its address within ``AXES_COOLOFF_TIME``
reach ``AXES_FAILURE_LIMIT``. With ``AXES_RESET_COOL_OFF_ON_FAILURE_DURING_LOCKOUT`` off,
refused attempts are not counted, so a lockout ends at a time this module can tell the
client (``Retry-After``).
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from axes.handlers.proxy import AxesProxyHandler
from axes.helpers import get_cool_off, get_credentials
from axes.models import AccessAttempt
from axes.signals import user_locked_out
from django.db import transaction
from django.dispatch import receiver
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.shortcuts import render
from django.utils import timezone

from quotas.audit import record

from .handler import limits

TEMPLATE = "registration/locked.html"


def _waits(request: HttpRequest, credentials: dict | None) -> list[int]:
    """Seconds left, for each lockout parameter (account, address) that locks the client."""
    AxesProxyHandler.update_request(request)
    handler = AxesProxyHandler.get_implementation()
    cool_off = get_cool_off(request)
    now = timezone.now()
    found = []
    for attempts, limit in zip(handler.get_user_attempts(request, credentials),
                               limits(request, credentials), strict=True):  # fmt: skip
        failures = 0
        rows = attempts.order_by("-attempt_time").values_list(
            "failures_since_start", "attempt_time"
        )
        for count, at in rows:
            failures += count
            if failures >= limit:
                # When this row expires, the newer ones alone stay under the limit.
                left = (at + cool_off - now).total_seconds() if cool_off else 0
                found.append(max(1, math.ceil(left)))
                break
    return found


def retry_after(request: HttpRequest, credentials: dict | None = None) -> int:
    """Seconds until a locked-out client may try again (at least 1)."""
    waits = _waits(request, credentials)
    if waits:
        return max(waits)
    cool_off = get_cool_off(request)
    return max(1, math.ceil(cool_off.total_seconds())) if cool_off else 1


def describe_wait(seconds: int) -> str:
    """'14 minutes', '1 minute', '40 seconds': what the page and the API say."""
    if seconds >= 90:
        minutes = math.ceil(seconds / 60)
        return f"{minutes} minutes"
    if seconds >= 60:
        return "1 minute"
    return f"{seconds} second{'s' if seconds != 1 else ''}"


def message(seconds: int) -> str:
    return (
        "Too many failed sign-in attempts for this account or from this address. "
        f"Try again in {describe_wait(seconds)}, or ask a portal admin to unlock it."
    )


def lockout_response(
    request: HttpRequest,
    original_response: HttpResponse | None = None,
    credentials: dict | None = None,
) -> HttpResponse:
    """``AXES_LOCKOUT_CALLABLE``: 429 with ``Retry-After``, JSON for the API, else a page.

    The token endpoint answers its own 429 (portal/api.py, through DRF's error format);
    that answer is kept.
    """
    if original_response is not None and original_response.status_code == 429:
        return original_response
    wait = retry_after(request, credentials)
    if request.path.startswith("/api/"):
        response = JsonResponse({"detail": message(wait), "retry_after": wait}, status=429)
    else:
        context = {"wait_seconds": wait, "wait": describe_wait(wait), "message": message(wait)}
        response = render(request, TEMPLATE, context, status=429)
    response["Retry-After"] = str(wait)
    return response


@receiver(user_locked_out, dispatch_uid="portal.signin.audit_lockout")
def audit_lockout(sender, request, username, ip_address, **kwargs) -> None:
    """One audit row when a lockout starts (not for each attempt refused during it)."""
    if getattr(request, "axes_failures_since_start", None) is None:
        return  # refused during a lockout: axes counted nothing, nothing new to record
    credentials = get_credentials(username)
    attempt = AccessAttempt.objects.filter(
        username=username, ip_address=ip_address, user_agent=request.axes_user_agent
    ).first()
    if attempt is None:  # pragma: no cover - axes wrote it in this request
        return
    wait = retry_after(request, credentials)
    by = _locked_by(username, ip_address, request, credentials)
    record(
        None,
        "auth.locked_out",
        attempt,
        after={
            "username": username,
            "ip_address": ip_address,
            "locked_by": by,
            "failures": request.axes_failures_since_start,
            "retry_after": wait,
            "path": request.axes_path_info,
        },
        note=f"Sign-in locked for {describe_wait(wait)} after repeated failures: "
        f"user {username!r} from {ip_address} (by {' and '.join(by)}).",
    )


def _locked_by(username, ip_address, request, credentials) -> list[str]:
    """Which counts reached their limit: "account", "address" or both."""
    account_limit, address_limit = limits(request, credentials)
    threshold = request.axes_attempt_time - get_cool_off(request)
    recent = AccessAttempt.objects.filter(attempt_time__gte=threshold)
    by = []
    for name, rows, limit in (
        ("account", recent.filter(username=username), account_limit),
        ("address", recent.filter(ip_address=ip_address), address_limit),
    ):
        total = sum(rows.values_list("failures_since_start", flat=True))
        if total >= limit:
            by.append(name)
    return by


def unlock(by, attempts: Iterable[AccessAttempt]) -> int:
    """Forget failed attempts (an admin's unlock); one audit row each. Returns how many."""
    count = 0
    with transaction.atomic():
        for attempt in attempts:
            record(
                by,
                "auth.unlocked",
                attempt,
                before={
                    "username": attempt.username,
                    "ip_address": attempt.ip_address,
                    "failures": attempt.failures_since_start,
                },
                note=f"Unlocked sign-in for user {attempt.username!r} from "
                f"{attempt.ip_address}: {attempt.failures_since_start} failed attempts forgotten.",
            )
            attempt.delete()
            count += 1
    return count
