"""Single sign-on is configured by the environment alone (portal/settings.py): off by
default, on with issuer + client id + secret (or a secret file), the backend appended after
axes, and ``check --deploy`` clean with production settings."""

from __future__ import annotations

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
SHOW = (
    "from django.conf import settings as s; import json; print(json.dumps([s.SSO_ENABLED, "
    "list(s.AUTHENTICATION_BACKENDS), s.OIDC_RP_CLIENT_SECRET, s.SSO_ISSUER, s.OIDC_RP_SCOPES,"
    " s.SSO_GROUPS_CLAIM, s.SSO_ENDPOINTS['token_endpoint']]))"
)


def _manage(*args, settings="portal.settings", **env):
    full = {k: v for k, v in os.environ.items() if not k.startswith("OIDC_")}
    full.pop("SECRET_KEY", None)
    full.update(DJANGO_SETTINGS_MODULE=settings, **env)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=full, capture_output=True,
        text=True, timeout=120,
    )  # fmt: skip


def _show(**env):
    result = _manage("shell", "-c", SHOW, **env)
    assert result.returncode == 0, result.stderr
    return json.loads(result.stdout.splitlines()[-1])


def test_off_without_the_environment():
    enabled, backends, *_ = _show()
    assert not enabled
    assert backends == ["axes.backends.AxesStandaloneBackend",
                        "django.contrib.auth.backends.ModelBackend"]  # fmt: skip


def test_on_with_issuer_client_and_a_secret_file(tmp_path):
    secret = tmp_path / "oidc-secret"
    secret.write_text("from-a-file\n")
    enabled, backends, client_secret, issuer, scopes, claim, token = _show(
        OIDC_ISSUER="https://idp.example.org/realms/gpu/", OIDC_CLIENT_ID="portal",
        OIDC_CLIENT_SECRET="ignored", OIDC_CLIENT_SECRET_FILE=str(secret),
        OIDC_GROUPS_CLAIM="roles", OIDC_TOKEN_ENDPOINT="https://idp.example.org/token",
    )  # fmt: skip
    assert enabled and client_secret == "from-a-file"
    assert backends[0] == "axes.backends.AxesStandaloneBackend"
    assert backends[-1] == "portal.sso.backend.SsoBackend"
    assert issuer == "https://idp.example.org/realms/gpu"
    assert (scopes, claim, token) == (
        "openid email profile",
        "roles",
        "https://idp.example.org/token",
    )
    # Issuer without a secret: still off.
    assert not _show(OIDC_ISSUER="https://idp.example.org", OIDC_CLIENT_ID="portal")[0]


def test_check_deploy_is_clean_with_sso_on():
    env = dict(SECRET_KEY=secrets.token_urlsafe(64), ALLOWED_HOSTS="portal.example.org",
               OIDC_ISSUER="https://idp.example.org", OIDC_CLIENT_ID="portal",
               OIDC_CLIENT_SECRET="s3cret")  # fmt: skip
    result = _manage("check", "--deploy", "--fail-level", "WARNING",
                     settings="portal.settings_production", **env)  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    # A plain-http issuer is worth a warning; a bad link mode is an error.
    result = _manage("check", "--deploy", settings="portal.settings_production",
                     **{**env, "OIDC_ISSUER": "http://idp.example.org"})  # fmt: skip
    assert "sso.W001" in result.stdout + result.stderr
    result = _manage("check", **{**env, "OIDC_LINK_EXISTING": "mail"})
    assert result.returncode != 0 and "sso.E001" in result.stderr
