"""Production settings: secure by default, and refuse to start without real secrets."""

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
