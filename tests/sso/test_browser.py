"""Single sign-on once through headless Chromium (Debian package ``chromium``, playwright).

The sign-in page with its "Sign in with Test IdP" button above the local form, the
provider's login and consent pages, back to the portal signed in; the portal's pages raise
no Content-Security-Policy violation (the button is a plain link: no inline script or
style), nor does the page of a refused callback. Screenshots go to
``$TEST_ARTIFACTS/sso/`` (default ``.data/test-artifacts``).
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest
from django.contrib.auth import get_user_model

from portal.sso.models import GroupRule
from quotas.models import Membership, Team
from tests.e2e.browser import Checker, axe_source
from tests.prereqs import SKIPPED, need

from .conftest import person

pytestmark = pytest.mark.django_db(transaction=True)
ROOT = Path(__file__).resolve().parents[2]
RECORD_VIOLATIONS = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(`${e.violatedDirective} ${e.blockedURI || "inline"}`);
});
"""


def _artifacts() -> Path:
    base = Path(os.environ.get("TEST_ARTIFACTS") or ROOT / ".data" / "test-artifacts")
    folder = base / "sso"
    folder.mkdir(parents=True, exist_ok=True)
    return folder


def _chromium() -> str:
    return "/usr/bin/chromium" if Path("/usr/bin/chromium").exists() else need("chromium")


def test_sign_in_with_the_provider_in_a_browser(sso_on, live_server):
    try:
        from playwright.sync_api import sync_playwright
    except ImportError:
        SKIPPED.add("playwright (pip install -r requirements-dev.txt)")
        pytest.skip("the playwright package is not installed (requirements-dev.txt)")
    chromium = _chromium()
    team = Team.objects.create(slug="vision", name="Computer Vision")
    GroupRule.objects.create(group="vision-*", team=team, role=Membership.Role.MANAGER)
    sso_on.people({"sub-bea": person("bea", ["vision-leads"])})
    out = _artifacts()
    seen: dict[str, list[str]] = {}
    # The portal's pages of this journey, as every browser journey checks them (issue #12
    # section 4): axe-core serious/critical, horizontal overflow at 1280 and 390 px, CSP.
    checker = Checker("sso-sign-in", axe_source())

    # No ORM call below: playwright's sync API runs an event loop in this thread.
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True)
        try:
            context = browser.new_context(viewport={"width": 1100, "height": 800})
            context.add_init_script(RECORD_VIOLATIONS)
            page = context.new_page()
            response = page.goto(f"{live_server.url}/login/", wait_until="load")
            header = response.header_value("content-security-policy") or ""
            button = page.get_by_role("link", name="Sign in with Test IdP")
            button.wait_for()
            above = button.bounding_box()["y"] < page.locator("#id_password").bounding_box()["y"]
            page.screenshot(path=str(out / "01-sign-in-page.png"), full_page=True)
            seen["/login/"] = page.evaluate("window.__csp")
            checker.check(page, "sign-in page with the provider button")
            button.click()
            page.wait_for_url(f"{sso_on.issuer}/interaction/**")
            page.fill("input[name=login]", "sub-bea")
            page.fill("input[name=password]", "any-password")
            page.screenshot(path=str(out / "02-provider-login.png"), full_page=True)
            page.click("button[type=submit]")
            page.get_by_role("button", name="Continue").click()  # the provider's consent
            page.wait_for_url(f"{live_server.url}/")
            page.wait_for_load_state("load")
            seen["/"] = page.evaluate("window.__csp")
            page.screenshot(path=str(out / "03-signed-in.png"), full_page=True)
            landed = page.url
            checker.check(page, "signed in through the provider")
            failed = page.goto(f"{live_server.url}/sso/callback/?code=x&state=y")
            failed_status = failed.status
            seen["/sso/callback/ (refused)"] = page.evaluate("window.__csp")
            page.screenshot(path=str(out / "04-refused-callback.png"), full_page=True)
            checker.check(page, "a refused callback")
            context.close()
        finally:
            browser.close()

    assert "script-src 'self'" in header and "unsafe-inline" not in header
    assert above, "the single sign-on button is above the local form"
    assert landed == f"{live_server.url}/"
    assert failed_status == 400
    assert seen == {"/login/": [], "/": [], "/sso/callback/ (refused)": []}, seen
    bea = get_user_model().objects.get(username="bea")
    assert Membership.objects.get(user=bea).role == Membership.Role.MANAGER
    assert (out / "03-signed-in.png").stat().st_size > 10_000
    checker.assert_clean()
