"""The ID token checks the backend adds to mozilla-django-oidc's (issuer, audience, azp,
subject), with tokens signed here and the signing key served as a JWKS over real HTTP;
and an ID token that expired before the callback, from the real provider."""

from __future__ import annotations

import json
import threading
import time
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from urllib.parse import parse_qs, urlsplit

import jwt
import pytest
import requests
import time_machine
from cryptography.hazmat.primitives.asymmetric import rsa
from django.core.exceptions import SuspiciousOperation
from django.utils import timezone

from portal.sso.backend import SsoBackend

from .conftest import CLIENT_ID, person, signed_in_as, sso_button, through_provider

ISSUER = "https://idp.example.org/realms/gpu"


@pytest.fixture
def signer(settings):
    """An RSA key, its JWKS served on a local port, and the settings pointing at it."""
    key = rsa.generate_private_key(public_exponent=65537, key_size=2048)
    jwk = json.loads(jwt.algorithms.RSAAlgorithm.to_jwk(key.public_key()))
    body = json.dumps({"keys": [{**jwk, "kid": "k1", "alg": "RS256", "use": "sig"}]}).encode()

    class Jwks(BaseHTTPRequestHandler):
        def do_GET(self):
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args):
            pass

    server = ThreadingHTTPServer(("127.0.0.1", 0), Jwks)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    settings.SSO_ENABLED = True
    settings.SSO_ISSUER = ISSUER
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    jwks_uri = f"http://127.0.0.1:{server.server_port}/jwks"
    settings.SSO_ENDPOINTS = {**settings.SSO_ENDPOINTS, "jwks_uri": jwks_uri}

    def sign(**claims) -> str:
        now = int(time.time())
        payload = {"iss": ISSUER, "aud": CLIENT_ID, "sub": "s1", "iat": now, "exp": now + 300,
                   "nonce": "n1", **claims}  # fmt: skip
        payload = {k: v for k, v in payload.items() if v is not None}
        return jwt.encode(payload, key, algorithm="RS256", headers={"kid": "k1"})

    yield sign
    server.shutdown()


def test_a_good_token_passes(signer):
    payload = SsoBackend().verify_token(signer(), nonce="n1")
    assert payload["sub"] == "s1"
    # Several audiences: fine when azp is this client.
    assert SsoBackend().verify_token(signer(aud=[CLIENT_ID, "api"], azp=CLIENT_ID), nonce="n1")


@pytest.mark.parametrize(
    ("claims", "why"),
    [
        ({"iss": "https://evil.example.org"}, "issuer"),
        ({"aud": "another-client"}, "another client"),
        ({"aud": [CLIENT_ID, "api"]}, "another client"),  # several audiences, no azp
        ({"aud": [CLIENT_ID, "api"], "azp": "api"}, "another client"),
        ({"sub": None}, "without sub"),
        ({"nonce": "other"}, "Nonce"),
    ],
)
def test_a_token_for_someone_else_is_refused(signer, claims, why):
    with pytest.raises(SuspiciousOperation, match=why):
        SsoBackend().verify_token(signer(**claims), nonce="n1")


def test_an_expired_token_raises_a_jwt_error(signer):
    with pytest.raises(jwt.ExpiredSignatureError):
        SsoBackend().verify_token(signer(exp=int(time.time()) - 60), nonce="n1")


@pytest.mark.django_db(transaction=True)
def test_an_id_token_expired_by_the_callback_is_a_400(sso_on, live_server):
    """The provider's ID tokens live an hour; the callback arrives two hours later."""
    sso_on.people({"sub-late": person("late", [])})
    session = requests.Session()
    button = sso_button(session.get(f"{live_server.url}/login/", timeout=30))
    # Through the provider, stopping at its redirect back to the portal.
    back = through_provider(session, session.get(button, timeout=30), "sub-late",
                            stop_at=f"{live_server.url}/sso/callback/")  # fmt: skip
    assert back.is_redirect, back.url
    callback = back.headers["Location"]
    assert "code" in parse_qs(urlsplit(callback).query)
    with time_machine.travel(timezone.now() + timedelta(hours=2), tick=True):
        page = session.get(callback, timeout=30)
    assert page.status_code == 400 and "could not be verified" in page.text
    assert "ExpiredSignatureError" in page.text
    assert signed_in_as(session) is None
