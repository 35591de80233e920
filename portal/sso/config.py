"""Whether single sign-on is on, and the provider's endpoints.

Each endpoint is the one set in the environment (``OIDC_AUTHORIZATION_ENDPOINT``, ...) or
else the one in the issuer's discovery document
(``<OIDC_ISSUER>/.well-known/openid-configuration``), fetched on first use - never at
import or start-up, so the portal (and its local sign-in) starts while the provider is
down - and cached for ``OIDC_DISCOVERY_TTL`` seconds.
"""

from __future__ import annotations

import hashlib
import logging

import requests
from django.conf import settings
from django.core.cache import cache

log = logging.getLogger(__name__)

ENDPOINTS = (
    "authorization_endpoint", "token_endpoint", "userinfo_endpoint", "jwks_uri",
    "end_session_endpoint",
)  # fmt: skip


class ProviderUnavailable(Exception):
    """The provider's discovery document could not be read or does not fit (a 502)."""


def enabled() -> bool:
    return bool(getattr(settings, "SSO_ENABLED", False))


def issuer() -> str:
    return settings.SSO_ISSUER.rstrip("/")


def same_issuer(a: str, b: str) -> bool:
    return (a or "").rstrip("/") == (b or "").rstrip("/")


def _cache_key() -> str:
    return "sso:discovery:" + hashlib.sha256(issuer().encode()).hexdigest()[:24]


def discovery() -> dict:
    """The issuer's discovery document (cached)."""
    doc = cache.get(_cache_key())
    if doc is not None:
        return doc
    url = issuer() + "/.well-known/openid-configuration"
    try:
        response = requests.get(
            url, timeout=settings.OIDC_TIMEOUT, verify=settings.OIDC_VERIFY_SSL,
            headers={"Accept": "application/json"},
        )  # fmt: skip
        response.raise_for_status()
        doc = response.json()
    except (requests.RequestException, ValueError) as exc:
        log.warning("single sign-on: cannot read %s: %s", url, exc)
        raise ProviderUnavailable(f"The identity provider's discovery document {url} could "
                                  f"not be read ({type(exc).__name__}).") from exc  # fmt: skip
    if not isinstance(doc, dict) or not same_issuer(doc.get("issuer", ""), issuer()):
        found = doc.get("issuer") if isinstance(doc, dict) else None
        raise ProviderUnavailable(
            f"The discovery document at {url} names the issuer {found!r}, not OIDC_ISSUER "
            f"{issuer()!r}."
        )
    cache.set(_cache_key(), doc, settings.SSO_DISCOVERY_TTL)
    return doc


def endpoint(name: str) -> str:
    """The provider's ``name`` endpoint (one of ``ENDPOINTS``); from the env or discovery."""
    configured = settings.SSO_ENDPOINTS.get(name) or ""
    if configured:
        return configured
    value = discovery().get(name)
    if not value or not isinstance(value, str):
        raise ProviderUnavailable(f"The identity provider's discovery document has no {name}.")
    return value
