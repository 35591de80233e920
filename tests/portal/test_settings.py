"""Production settings: secure by default, and refuse to start without real secrets."""

import json
import os
import secrets
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def _manage(*args, **env):
    full_env = {k: v for k, v in os.environ.items() if k not in ("SECRET_KEY", "ALLOWED_HOSTS")}
    full_env.update(DJANGO_SETTINGS_MODULE="portal.settings_production", **env)
    return subprocess.run(
        [sys.executable, "manage.py", *args], cwd=ROOT, env=full_env,
        capture_output=True, text=True, timeout=120,
    )  # fmt: skip


def test_check_deploy_is_clean_with_production_settings():
    result = _manage(
        "check", "--deploy", "--fail-level", "WARNING",
        SECRET_KEY=secrets.token_urlsafe(64), ALLOWED_HOSTS="portal.example.org",
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    assert "no issues" in result.stdout


def test_production_refuses_missing_secret_key():
    result = _manage("check", ALLOWED_HOSTS="portal.example.org")
    assert result.returncode != 0
    assert "SECRET_KEY" in result.stderr


def test_production_refuses_missing_allowed_hosts():
    result = _manage("check", SECRET_KEY=secrets.token_urlsafe(64))
    assert result.returncode != 0
    assert "ALLOWED_HOSTS" in result.stderr


def test_secret_key_can_come_from_a_file(tmp_path):
    key_file = tmp_path / "key"
    key_file.write_text(secrets.token_urlsafe(64) + "\n")
    result = _manage("check", SECRET_KEY_FILE=str(key_file), ALLOWED_HOSTS="portal.example.org")
    assert result.returncode == 0, result.stderr


def test_production_serves_probes_and_the_in_cluster_host_first():
    """portal/middleware.py runs before every host check; the Service names are allowed and
    can be turned off (docs/install.md, "Hosts, TLS and the in-cluster path")."""
    code = (
        "from django.conf import settings as s; import json; print(json.dumps("
        "[s.MIDDLEWARE[0], s.ALLOWED_HOSTS, s.SECURE_REDIRECT_EXEMPT]))"
    )
    key = secrets.token_urlsafe(64)
    result = _manage("shell", "-c", code, SECRET_KEY=key, ALLOWED_HOSTS="portal.example.org")
    assert result.returncode == 0, result.stderr
    first, hosts, exempt = json.loads(result.stdout.splitlines()[-1])
    assert first == "portal.middleware.HostRoutingMiddleware"
    assert hosts == ["portal.example.org", "portal-web.gpu-quota-portal.svc",
                     "portal-web.gpu-quota-portal.svc.cluster.local"]  # fmt: skip
    assert r"^api/v1/agent/reports/$" in exempt
    result = _manage("shell", "-c", code, SECRET_KEY=key, ALLOWED_HOSTS="portal.example.org",
                     PORTAL_INTERNAL_HOSTS="")  # fmt: skip
    assert json.loads(result.stdout.splitlines()[-1])[1] == ["portal.example.org"]
