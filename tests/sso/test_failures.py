"""What goes wrong answers a clear portal page (4xx, or 502 for a provider that is down),
never a 500; with single sign-on off there is no button and /sso/ answers 404."""

from __future__ import annotations

from urllib.parse import parse_qs, urlsplit

import pytest
import requests
from django.contrib.auth import get_user_model

from .conftest import free_port, person, sign_in, signed_in_as, sso_button, through_provider

pytestmark = pytest.mark.django_db(transaction=True)


def _start(portal: str) -> tuple[requests.Session, requests.Response]:
    """Begin a sign-in and stop at the provider's redirect (its state is in the session)."""
    session = requests.Session()
    button = sso_button(session.get(f"{portal}/login/", timeout=30))
    return session, session.get(button, allow_redirects=False, timeout=30)


def test_the_person_cancels_at_the_provider(sso_on, live_server):
    sso_on.people({"sub-cy": person("cy", [])})
    session, redirect = _start(live_server.url)
    at_provider = session.get(redirect.headers["Location"], timeout=30)
    page = through_provider(session, at_provider, "sub-cy", abort=True)
    assert page.status_code == 403
    assert urlsplit(page.url).path == "/sso/callback/"
    assert "error=access_denied" in page.url
    assert "was cancelled" in page.text and "Back to sign-in" in page.text
    assert signed_in_as(session) is None
    assert not get_user_model().objects.filter(username="cy").exists()


def test_a_state_that_is_not_this_sessions_is_refused(sso_on, live_server):
    session, redirect = _start(live_server.url)
    state = parse_qs(urlsplit(redirect.headers["Location"]).query)["state"][0]
    callback = f"{live_server.url}/sso/callback/"
    wrong = session.get(callback, params={"code": "abc", "state": state[::-1]}, timeout=30)
    assert wrong.status_code == 400 and "not valid any more" in wrong.text
    # Another browser (no state in its session) presenting this one's state.
    other = requests.get(callback, params={"code": "abc", "state": state}, timeout=30)
    assert other.status_code == 400 and "not valid any more" in other.text
    incomplete = session.get(callback, params={"state": state}, timeout=30)
    assert incomplete.status_code == 400 and "incomplete" in incomplete.text
    params = {"code": "abc", "state": state, "iss": "https://evil.example"}
    mixed_up = session.get(callback, params=params, timeout=30)
    assert mixed_up.status_code == 400 and "another identity provider" in mixed_up.text


def test_a_replayed_callback_is_refused(sso_on, live_server):
    sso_on.people({"sub-rex": person("rex", [])})
    session, landed = sign_in(live_server.url, "sub-rex")
    assert signed_in_as(session).username == "rex"
    callback = next(r.url for r in landed.history if "/sso/callback/" in r.url)
    again = session.get(callback, timeout=30)
    assert again.status_code == 400 and "already used" in again.text


def test_an_invalid_code_is_refused_not_a_500(sso_on, live_server):
    session, redirect = _start(live_server.url)
    state = parse_qs(urlsplit(redirect.headers["Location"]).query)["state"][0]
    page = session.get(f"{live_server.url}/sso/callback/",
                       params={"code": "made-up", "state": state}, timeout=30)  # fmt: skip
    assert page.status_code == 400 and "did not accept this sign-in" in page.text
    assert "invalid_grant" in page.text


def test_an_error_from_the_provider_is_shown(sso_on, live_server):
    session, redirect = _start(live_server.url)
    state = parse_qs(urlsplit(redirect.headers["Location"]).query)["state"][0]
    page = session.get(f"{live_server.url}/sso/callback/", timeout=30, params={
        "error": "temporarily_unavailable", "error_description": "<b>maintenance</b>",
        "state": state,
    })  # fmt: skip
    assert page.status_code == 403 and "did not sign you in" in page.text
    assert "&lt;b&gt;maintenance&lt;/b&gt;" in page.text  # escaped


def test_a_provider_that_is_down_answers_502(sso_on, settings, live_server):
    settings.SSO_ISSUER = f"http://127.0.0.1:{free_port()}"  # nothing listens there
    session = requests.Session()
    button = sso_button(session.get(f"{live_server.url}/login/", timeout=30))
    page = session.get(button, timeout=30)
    assert page.status_code == 502 and "could not be reached" in page.text
    # ... and local sign-in is unaffected (the backend reads nothing until a callback).
    get_user_model().objects.create_user("local", "", "local-pw-123")
    signed = session.post(f"{live_server.url}/login/", timeout=30, data={
        "username": "local", "password": "local-pw-123",
        "csrfmiddlewaretoken": session.cookies["csrftoken"],
    })  # fmt: skip
    assert signed.url == live_server.url + "/" and signed_in_as(session).username == "local"


def test_sso_off_no_button_and_no_routes(live_server):
    session = requests.Session()
    page = session.get(f"{live_server.url}/login/", timeout=30)
    assert page.status_code == 200 and "Sign in with" not in page.text
    assert sso_button(page) is None
    for route in ("authenticate/", "callback/?code=a&state=b", "logout/"):
        response = session.get(f"{live_server.url}/sso/{route}", timeout=30)
        assert response.status_code == 404, route
    logout = session.post(f"{live_server.url}/sso/logout/", timeout=30,
                          data={"csrfmiddlewaretoken": session.cookies["csrftoken"]})  # fmt: skip
    assert logout.status_code == 404
