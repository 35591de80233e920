"""The authentication backend of single sign-on (mozilla-django-oidc's, made lazy and strict).

Django builds a backend object for every ``authenticate()`` (local sign-ins too) and for
every request of a signed-in person, so nothing here reads the network before the
callback of a sign-in needs it: the endpoints are properties (``config.endpoint``).
Compared with the library's defaults this backend also
- acts only for the callback view (its ``nonce`` / ``code_verifier`` arguments), never
  for a password sign-in that happens to carry ``?code=&state=``;
- checks the ID token's ``iss`` and ``aud`` (the library checks neither) and that the
  userinfo ``sub`` is the ID token's;
- takes the groups claim from the ID token when userinfo lacks it (Azure AD sends them
  in the ID token only);
- matches accounts by issuer + ``sub``, not by e-mail (``accounts.sign_in``).
A refusal is kept on the request (``request.sso_refusal``) for the callback's page.
"""

from __future__ import annotations

import logging

from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.exceptions import SuspiciousOperation
from mozilla_django_oidc.auth import OIDCAuthenticationBackend

from . import accounts, config, mapping

log = logging.getLogger(__name__)
CALLBACK_ARGUMENTS = frozenset({"nonce", "code_verifier"})


class SsoBackend(OIDCAuthenticationBackend):
    OIDC_RP_IDP_SIGN_KEY = None

    def __init__(self, *args, **kwargs):  # the library's reads settings and endpoints here
        self.UserModel = get_user_model()

    @property
    def OIDC_OP_TOKEN_ENDPOINT(self) -> str:
        return config.endpoint("token_endpoint")

    @property
    def OIDC_OP_USER_ENDPOINT(self) -> str:
        return config.endpoint("userinfo_endpoint")

    @property
    def OIDC_OP_JWKS_ENDPOINT(self) -> str:
        return config.endpoint("jwks_uri")

    @property
    def OIDC_RP_CLIENT_ID(self) -> str:
        return settings.OIDC_RP_CLIENT_ID

    @property
    def OIDC_RP_CLIENT_SECRET(self) -> str:
        return settings.OIDC_RP_CLIENT_SECRET

    @property
    def OIDC_RP_SIGN_ALGO(self) -> str:
        return settings.OIDC_RP_SIGN_ALGO

    def authenticate(self, request, **kwargs):
        if request is None or not config.enabled() or set(kwargs) != CALLBACK_ARGUMENTS:
            return None
        return super().authenticate(request, **kwargs)

    def verify_token(self, token, **kwargs):
        payload = super().verify_token(token, **kwargs)
        if not config.same_issuer(payload.get("iss", ""), config.issuer()):
            raise SuspiciousOperation(f"ID token from issuer {payload.get('iss')!r}")
        audience = payload.get("aud")
        audience = [audience] if isinstance(audience, str) else list(audience or [])
        client = settings.OIDC_RP_CLIENT_ID
        if client not in audience or (len(audience) > 1 and payload.get("azp") != client):
            raise SuspiciousOperation("ID token for another client (aud / azp)")
        if not payload.get("sub"):
            raise SuspiciousOperation("ID token without sub")
        return payload

    def get_userinfo(self, access_token, id_token, payload):
        info = super().get_userinfo(access_token, id_token, payload)
        if not isinstance(info, dict) or str(info.get("sub")) != str(payload["sub"]):
            raise SuspiciousOperation("userinfo is about another subject than the ID token")
        name = settings.SSO_GROUPS_CLAIM
        if mapping.claim(info, name) is None and mapping.claim(payload, name) is not None:
            info = {**info, name: mapping.claim(payload, name)}
        return info

    def verify_claims(self, claims) -> bool:
        return bool(claims.get("sub"))

    def get_or_create_user(self, access_token, id_token, payload):
        claims = self.get_userinfo(access_token, id_token, payload)
        try:
            return accounts.sign_in(claims)
        except accounts.Refused as exc:
            log.warning("single sign-on refused for sub %s: %s", claims.get("sub"), exc)
            self.request.sso_refusal = str(exc)
            return None
