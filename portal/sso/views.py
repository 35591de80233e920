"""The start and the callback of a single sign-on (mozilla-django-oidc's views, with pages).

``Authenticate`` redirects to the provider (endpoint resolved per request, not at start-up);
``Callback`` signs the person in. Whatever goes wrong answers a portal page with the
reason and a way back, never a 500: an ``error=`` from the provider (access_denied: the
person cancelled or may not use the portal) or a refused account is 403; a state that is
unknown, expired or replayed, a missing code, a mix-up ``iss``, a code the token endpoint
refuses or an ID token that does not verify is 400; a provider that cannot be reached or
answers something malformed is 502.
"""

from __future__ import annotations

import logging

import jwt
import requests
from django.conf import settings
from django.core.exceptions import SuspiciousOperation
from django.http import Http404
from django.shortcuts import render
from django.views.generic import View
from mozilla_django_oidc.views import OIDCAuthenticationCallbackView, OIDCAuthenticationRequestView

from . import config

log = logging.getLogger(__name__)

EXPIRED = (
    "This sign-in link is not valid any more: it expired, was already used, or was opened "
    "in another browser. Start again."
)
UNVERIFIED = (
    "The identity provider's answer could not be verified (signature, issuer, audience or "
    "expiry). Start again; if it keeps happening, tell a portal admin."
)
UNREACHABLE = (
    "The identity provider could not be reached or answered unexpectedly. Try again later."
)


def failed(request, status: int, message: str, detail: str = ""):
    context = {
        "message": message, "detail": detail[:300], "status": status,
        "provider_name": settings.SSO_PROVIDER_NAME,
    }  # fmt: skip
    return render(request, "sso/failed.html", context, status=status)


def _refused_by_provider(request, exc: requests.HTTPError):
    """The token endpoint said no: a 4xx (a made-up, expired or used code) is the sign-in's
    fault, anything else the provider's."""
    response = exc.response
    status = response.status_code if response is not None else 502
    try:
        body = response.json() if response is not None else {}
        error = f"{body.get('error', '')}: {body.get('error_description', '')}".strip(": ")
    except ValueError:
        error = ""
    log.warning("single sign-on: token endpoint answered %s %s", status, error)
    if 400 <= status < 500:
        message = "The identity provider did not accept this sign-in (it may have expired). "
        return failed(request, 400, message + "Start again.", error or str(status))
    return failed(request, 502, UNREACHABLE, error or str(status))


def _require_enabled() -> None:
    if not config.enabled():
        raise Http404("Single sign-on is not configured.")


class Authenticate(OIDCAuthenticationRequestView):
    def __init__(self, **kwargs):  # the library's reads the endpoint here, at every request
        View.__init__(self, **kwargs)

    @property
    def OIDC_OP_AUTH_ENDPOINT(self) -> str:
        return config.endpoint("authorization_endpoint")

    @property
    def OIDC_RP_CLIENT_ID(self) -> str:
        return settings.OIDC_RP_CLIENT_ID

    def dispatch(self, request, *args, **kwargs):
        _require_enabled()
        try:
            return super().dispatch(request, *args, **kwargs)
        except config.ProviderUnavailable as exc:
            return failed(request, 502, UNREACHABLE, str(exc))


class Callback(OIDCAuthenticationCallbackView):
    def dispatch(self, request, *args, **kwargs):
        _require_enabled()
        self.user = None
        query = request.GET
        self.known_state = query.get("state") in request.session.get("oidc_states", {})
        if query.get("iss") and not config.same_issuer(query["iss"], config.issuer()):
            return failed(request, 400, "The answer came from another identity provider.")
        if not query.get("error") and not (query.get("code") and query.get("state")):
            return failed(
                request, 400, "The identity provider's answer is incomplete. Start again."
            )
        try:
            return super().dispatch(request, *args, **kwargs)
        except (SuspiciousOperation, jwt.PyJWTError) as exc:
            log.warning("single sign-on callback refused: %s", exc)
            message = UNVERIFIED if self.known_state else EXPIRED
            return failed(request, 400, message, f"{type(exc).__name__}: {exc}")
        except requests.HTTPError as exc:
            return _refused_by_provider(request, exc)
        except (requests.RequestException, config.ProviderUnavailable) as exc:
            log.warning("single sign-on callback: provider error: %s", exc)
            return failed(request, 502, UNREACHABLE, type(exc).__name__)
        except (KeyError, TypeError, ValueError) as exc:  # a malformed answer (JWKS, token)
            log.exception("single sign-on callback: unexpected answer from the provider")
            return failed(request, 502, UNREACHABLE, type(exc).__name__)

    def login_failure(self):
        request = self.request
        error = request.GET.get("error")
        if error:
            described = request.GET.get("error_description", "")
            if error == "access_denied":
                message = (f"Sign-in with {settings.SSO_PROVIDER_NAME} was cancelled, or the "
                           "provider does not let this account use the portal.")  # fmt: skip
            else:
                message = f"{settings.SSO_PROVIDER_NAME} did not sign you in."
            return failed(request, 403, message, f"{error}: {described}" if described else error)
        refusal = getattr(request, "sso_refusal", None)
        if refusal:
            return failed(request, 403, refusal)
        if self.user is not None and not self.user.is_active:
            return failed(request, 403, f"The portal account {self.user} is deactivated.")
        if not self.known_state:
            return failed(request, 400, EXPIRED)
        return failed(request, 403, f"{settings.SSO_PROVIDER_NAME} did not sign you in.")
