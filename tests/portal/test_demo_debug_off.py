"""``make demo`` looks like a real installation (issue #12 section 3): DEBUG off, static
files served by WhiteNoise without a ``collectstatic``, the portal's own 404 and 500 pages.

The demo's environment is the one ``devstack/demo.py`` gives every child process; a fresh
interpreter imports the settings with it and answers requests through the whole
middleware stack (django.test.Client), as the demo's web server would.
"""

from __future__ import annotations

import json
import os
import re
import subprocess
import sys

import pytest
from django.test import RequestFactory
from django.views.defaults import server_error

from devstack import REPO_ROOT
from devstack.demo import child_env
from devstack.services import Services

PROBE = r"""
import json, django
django.setup()
from django.conf import settings
from django.test import Client
client = Client()
out = {"debug": settings.DEBUG, "finders": settings.WHITENOISE_USE_FINDERS}
for name, path in [
    ("css", "/static/css/portal.css"),
    ("js", "/static/js/nav-toggle.js"),
    ("swagger", "/static/drf_spectacular_sidecar/swagger-ui-dist/swagger-ui.css"),
    ("missing", "/no-such-page/"),
]:
    response = client.get(path)
    body = b"".join(response) if response.streaming else response.content
    out[name] = [response.status_code, body.decode("utf-8", "replace")[:4000]]
print("PROBE" + json.dumps(out))
"""


def _demo_env(tmp_path, monkeypatch, **extra) -> dict[str, str]:
    for name in ("DEBUG", "WHITENOISE_USE_FINDERS"):
        monkeypatch.delenv(name, raising=False)
    for name, value in extra.items():
        monkeypatch.setenv(name, value)
    services = Services(
        database_url=os.environ.get("DATABASE_URL", "postgres://postgres@localhost/portal"),
        redis_url=os.environ.get("REDIS_URL", "redis://localhost:6379/0"),
    )
    return child_env(services, tmp_path, tmp_path / "portal.kubeconfig")


def _probe(env: dict[str, str]) -> dict:
    done = subprocess.run(
        [sys.executable, "-c", PROBE], env=env, cwd=REPO_ROOT, capture_output=True,
        text=True, timeout=120, check=False,
    )  # fmt: skip
    line = next((x for x in done.stdout.splitlines() if x.startswith("PROBE")), None)
    assert line, done.stdout[-2000:] + done.stderr[-4000:]
    return json.loads(line.removeprefix("PROBE"))


def test_the_demo_runs_with_debug_off_and_serves_static_files(tmp_path, monkeypatch):
    env = _demo_env(tmp_path, monkeypatch)
    assert env["DEBUG"] == "False"
    out = _probe(env)
    assert out["debug"] is False and out["finders"] is True
    # No collectstatic: WhiteNoise finds static/ and the apps' files (Swagger UI's).
    assert out["css"][0] == 200 and ".site-header" in out["css"][1]
    assert out["js"][0] == 200
    assert out["swagger"][0] == 200
    status, html = out["missing"]
    assert status == 404
    assert "<title>Not found · GPU Quota Portal</title>" in html
    assert "URLconf" not in html and "technical" not in html.lower()


def test_debug_true_still_turns_development_mode_on(tmp_path, monkeypatch):
    assert _demo_env(tmp_path, monkeypatch, DEBUG="True")["DEBUG"] == "True"


@pytest.mark.django_db
def test_a_404_is_the_portal_page_for_a_signed_in_user(client, settings, researcher):
    settings.DEBUG = False
    client.force_login(researcher)
    response = client.get("/no-such-page/")
    html = response.content.decode()
    assert response.status_code == 404
    assert "There is nothing at this address" in html
    assert 'class="site-nav"' in html  # the portal's header, with its navigation
    assert "Using the URLconf" not in html


def test_the_500_page_renders_without_a_request_context():
    # Django's server_error renders 500.html with an empty context: no request, no user.
    response = server_error(RequestFactory().get("/"))
    html = response.content.decode()
    assert response.status_code == 500
    assert "Something went wrong" in html and "css/portal.css" in html
    # The Content-Security-Policy allows no inline script, style or handler.
    assert not re.search(r"<script(?![^>]*\bsrc=)", html)
    assert not re.search(r"\sstyle=|\son[a-z]+=", html)


def test_demo_links_follow_port(tmp_path, monkeypatch):
    monkeypatch.delenv("PORTAL_URL", raising=False)
    assert _demo_env(tmp_path, monkeypatch, PORT="8123")["PORTAL_URL"] == "http://127.0.0.1:8123"
