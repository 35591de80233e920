"""``Authorization: Bearer <token>`` authentication for the REST API."""

from __future__ import annotations

from datetime import timedelta
from functools import wraps

from django.contrib.auth.decorators import login_required
from django.http import HttpResponse
from django.utils import timezone
from drf_spectacular.extensions import OpenApiAuthenticationExtension
from rest_framework import authentication, exceptions

from .models import ApiToken, hash_token

# Writing last_used_at on every request would turn each API read into a write.
LAST_USED_GRANULARITY = timedelta(minutes=5)


class BearerTokenAuthentication(authentication.BaseAuthentication):
    keyword = "Bearer"

    def authenticate(self, request):
        header = authentication.get_authorization_header(request).split()
        if not header or header[0].lower() != self.keyword.lower().encode():
            return None
        if len(header) != 2:
            raise exceptions.AuthenticationFailed(
                "Invalid Authorization header: expected 'Bearer <token>'."
            )
        try:
            raw = header[1].decode()
        except UnicodeError as err:
            raise exceptions.AuthenticationFailed("Invalid token characters.") from err
        token = (
            ApiToken.objects.active()
            .select_related("user")
            .filter(key_hash=hash_token(raw))
            .first()
        )
        if token is None or not token.user.is_active:
            raise exceptions.AuthenticationFailed("Invalid, expired or revoked token.")
        now = timezone.now()
        if token.last_used_at is None or now - token.last_used_at > LAST_USED_GRANULARITY:
            ApiToken.objects.filter(pk=token.pk).update(last_used_at=now)
        return token.user, token

    def authenticate_header(self, request) -> str:
        return self.keyword


class PasswordInBody(authentication.BaseAuthentication):
    """For an endpoint that checks a password sent in its body (``POST /auth/token/``).

    It authenticates nobody: a bearer token or a session sent along changes neither whose
    password is checked nor who is throttled. A wrong password is still a 401 that names
    the scheme to use afterwards.
    """

    def authenticate(self, request):
        return None

    def authenticate_header(self, request) -> str:
        return BearerTokenAuthentication.keyword


class BearerTokenScheme(OpenApiAuthenticationExtension):
    target_class = "portal.auth.BearerTokenAuthentication"
    name = "bearerAuth"

    def get_security_definition(self, auto_schema):
        return {"type": "http", "scheme": "bearer", "description": "Personal API token"}


def session_or_token(view):
    """A page view (a CSV download) that automation may fetch with ``Authorization: Bearer
    <token>`` as well as a signed-in browser: a valid token signs the request in for this
    request only (no session); a bad one is a 401 naming the scheme; neither redirects to
    the sign-in page as ``login_required`` does."""
    browser_view = login_required(view)

    @wraps(view)
    def wrapped(request, *args, **kwargs):
        if not request.user.is_authenticated and request.META.get("HTTP_AUTHORIZATION"):
            try:
                found = BearerTokenAuthentication().authenticate(request)
            except exceptions.AuthenticationFailed as err:
                found, failure = None, str(err.detail)
            else:
                failure = "Send 'Authorization: Bearer <token>'."
            if found is None:
                response = HttpResponse(failure, status=401, content_type="text/plain")
                response["WWW-Authenticate"] = BearerTokenAuthentication.keyword
                return response
            request.user = found[0]
        return browser_view(request, *args, **kwargs)

    return wrapped
