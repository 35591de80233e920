"""A real OpenID provider for the single sign-on tests, and a person's way through it.

``provider``: panva's ``oidc-provider`` (npm, pinned in provider/package-lock.json,
installed by tests/npm.py) run by ``provider/provider.mjs`` on a free port, with one
client whose redirect URI is the live test server's callback. Its accounts are read from
a JSON file at every sign-in (``provider.people({...})`` rewrites it), so a test changes
someone's groups between two sign-ins. Without node/npm the tests skip naming the Debian
package.

``sso_on``: turns single sign-on on for the live server (what ``OIDC_ISSUER``,
``OIDC_CLIENT_ID`` and ``OIDC_CLIENT_SECRET`` do in portal/settings.py).

``sign_in(portal, login)``: a person's browser over real HTTP (a ``requests`` session
following redirects): the portal's sign-in page, its "Sign in with" button, the
provider's development login and consent forms, back to the portal.
"""

from __future__ import annotations

import json
import socket
import subprocess
import time
from dataclasses import dataclass, field
from html.parser import HTMLParser
from pathlib import Path
from urllib.parse import urljoin

import pytest
import requests

from tests import npm
from tests.prereqs import SKIPPED

HERE = Path(__file__).resolve().parent
CLIENT_ID = "gpu-portal"
CLIENT_SECRET = "sso-test-client-secret-0123456789abcdef"
PROVIDER_NAME = "Test IdP"


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@dataclass
class Provider:
    issuer: str
    accounts: Path
    process: subprocess.Popen
    log: Path

    def people(self, accounts: dict) -> None:
        """Replace the provider's accounts: ``{sub: {preferred_username, email, groups}}``."""
        tmp = self.accounts.with_suffix(".tmp")
        tmp.write_text(json.dumps(accounts))
        tmp.replace(self.accounts)


def person(username: str, groups: list[str], **claims) -> dict:
    return {
        "preferred_username": username, "email": f"{username}@idp.example.org",
        "email_verified": True, "given_name": username.title(), "family_name": "Tester",
        "name": f"{username.title()} Tester", "groups": groups, **claims,
    }  # fmt: skip


def _node_at_least(major: int) -> str:
    """``node``, or skip when it is older than ``major`` (oidc-provider 9 needs 20)."""
    node = npm.node()
    version = subprocess.run([node, "--version"], capture_output=True, text=True, timeout=30)
    found = int(version.stdout.strip().lstrip("v").split(".")[0] or 0)
    if found < major:
        SKIPPED.add(f"node >= {major} (found {version.stdout.strip()}; Debian package nodejs)")
        pytest.skip(f"oidc-provider needs node {major} or newer, found {version.stdout.strip()}")
    return node


@pytest.fixture(scope="session")
def provider(live_server, tmp_path_factory):
    node = _node_at_least(20)
    modules = npm.node_modules(HERE / "provider")
    folder = tmp_path_factory.mktemp("oidc-provider")
    port = free_port()
    issuer = f"http://127.0.0.1:{port}"
    accounts = folder / "accounts.json"
    accounts.write_text("{}")
    config = folder / "config.json"
    config.write_text(json.dumps({
        "node_modules": str(modules), "port": port, "issuer": issuer,
        "client_id": CLIENT_ID, "client_secret": CLIENT_SECRET,
        "redirect_uris": [f"{live_server.url}/sso/callback/"], "accounts": str(accounts),
    }))  # fmt: skip
    log = folder / "provider.log"
    with open(log, "w") as out:
        process = subprocess.Popen(
            [node, str(HERE / "provider" / "provider.mjs"), str(config)],
            stdout=out, stderr=subprocess.STDOUT,
        )  # fmt: skip
    deadline = time.monotonic() + 30
    while True:
        try:
            if requests.get(f"{issuer}/.well-known/openid-configuration", timeout=2).ok:
                break
        except requests.RequestException:
            pass
        if process.poll() is not None or time.monotonic() > deadline:
            process.kill()
            pytest.fail(f"oidc-provider did not start:\n{log.read_text()[-3000:]}")
        time.sleep(0.1)
    yield Provider(issuer=issuer, accounts=accounts, process=process, log=log)
    process.terminate()
    try:
        process.wait(timeout=10)
    except subprocess.TimeoutExpired:
        process.kill()


@pytest.fixture
def sso_on(settings, provider):
    """Single sign-on on, against the test provider, with the default claims."""
    settings.SSO_ENABLED = True
    settings.SSO_ISSUER = provider.issuer
    settings.OIDC_RP_CLIENT_ID = CLIENT_ID
    settings.OIDC_RP_CLIENT_SECRET = CLIENT_SECRET
    settings.SSO_PROVIDER_NAME = PROVIDER_NAME
    settings.SSO_LINK_EXISTING = "none"
    settings.AUTHENTICATION_BACKENDS = [
        *settings.AUTHENTICATION_BACKENDS,
        "portal.sso.backend.SsoBackend",
    ]
    provider.people({})
    return provider


# -- a browser over plain HTTP -------------------------------------------------------------


@dataclass
class Form:
    action: str
    fields: dict[str, str] = field(default_factory=dict)


class _Forms(HTMLParser):
    def __init__(self):
        super().__init__()
        self.forms: list[Form] = []
        self.links: list[tuple[str, str]] = []
        self._href: str | None = None

    def handle_starttag(self, tag, attrs):
        a = dict(attrs)
        if tag == "form":
            self.forms.append(Form(a.get("action") or ""))
        elif tag == "input" and self.forms and a.get("name"):
            self.forms[-1].fields[a["name"]] = a.get("value") or ""
        elif tag == "a":
            self._href = a.get("href")

    def handle_data(self, data):
        if self._href is not None and data.strip():
            self.links.append((data.strip(), self._href))

    def handle_endtag(self, tag):
        if tag == "a":
            self._href = None


def parse(html: str) -> _Forms:
    parser = _Forms()
    parser.feed(html)
    return parser


def sso_button(response: requests.Response) -> str | None:
    """The href of the sign-in page's "Sign in with <provider>" link, if it shows one."""
    for text, href in parse(response.text).links:
        if text.startswith("Sign in with"):
            return urljoin(response.url, href)
    return None


def _send(session, method: str, url: str, stop_at: str | None, **kwargs):
    """``session.request``, following redirects; with ``stop_at``, not into that prefix."""
    response = session.request(method, url, allow_redirects=stop_at is None, timeout=30,
                               **kwargs)  # fmt: skip
    while stop_at and response.is_redirect:
        location = urljoin(response.url, response.headers["Location"])
        if location.startswith(stop_at):
            return response
        response = session.get(location, allow_redirects=False, timeout=30)
    return response


def through_provider(
    session: requests.Session, response: requests.Response, login: str, *,
    abort: bool = False, stop_at: str | None = None,
) -> requests.Response:  # fmt: skip
    """Fill the provider's login (and consent) forms until it answers the portal.

    ``stop_at``: return the provider's redirect to that URL prefix instead of following it.
    """
    for _ in range(5):
        if "/interaction/" not in response.url or response.is_redirect:
            return response
        if abort:
            return _send(session, "GET", response.url.rstrip("/") + "/abort", stop_at)
        forms = [f for f in parse(response.text).forms if "prompt" in f.fields]
        assert forms, f"no provider form at {response.url}:\n{response.text[:2000]}"
        form = forms[0]
        data = dict(form.fields)
        if data["prompt"] == "login":
            data.update(login=login, password="any-password")
        response = _send(session, "POST", urljoin(response.url, form.action), stop_at, data=data)
    raise AssertionError(f"the provider kept asking: {response.url}")


def sign_in(portal: str, login: str, *, session: requests.Session | None = None,
            next_url: str | None = None) -> tuple[requests.Session, requests.Response]:  # fmt: skip
    """Sign in as the provider's account ``login``; the session and the final response."""
    session = session or requests.Session()
    page = session.get(f"{portal}/login/" + (f"?next={next_url}" if next_url else ""), timeout=30)
    assert page.status_code == 200, page.status_code
    button = sso_button(page)
    assert button, "the sign-in page shows no single sign-on button"
    response = session.get(button, timeout=30)
    return session, through_provider(session, response, login)


def signed_in_as(session: requests.Session):
    """The portal account this browser session is signed in as (None: signed out)."""
    from django.conf import settings
    from django.contrib.auth import get_user_model
    from django.contrib.sessions.models import Session

    key = session.cookies.get(settings.SESSION_COOKIE_NAME)
    row = Session.objects.filter(session_key=key).first() if key else None
    user_id = row.get_decoded().get("_auth_user_id") if row else None
    return get_user_model().objects.filter(pk=user_id).first() if user_id else None
