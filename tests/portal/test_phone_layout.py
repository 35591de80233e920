"""Pages fit a phone (issue #12, "Phones"): at 390 px nothing is wider than the screen, the
header's menu button opens and closes the navigation, and a grant's Renew button is on
screen without a sideways scroll.

Headless Chromium (Debian package ``chromium``, driven by ``playwright``) on the seeded
demo (tests/portal/test_csp.py's ``demo`` fixture: seed_demo on the simulated cluster).
"""

from __future__ import annotations

import pytest
from django.contrib.auth import get_user_model

from tests.portal.test_csp import _chromium, _playwright, _session_cookie, demo  # noqa: F401

pytestmark = pytest.mark.django_db(transaction=True)

WIDTH = 390
PAGES = ["/", "/nodes/", "/telemetry/", "/teams/", "/requests/", "/requests/new/"]
ADMIN_PAGES = [*PAGES, "/admin-queue/"]
TABLET_AND_DESKTOP = (760, 900, 1100, 1280)


def _overflowing(page, base: str, paths: list[str]) -> dict[str, int]:
    wide = {}
    for path in paths:
        response = page.goto(base + path, wait_until="load")
        assert response is not None and response.status == 200, path
        assert "/login/" not in page.url, path
        page.wait_for_timeout(50)  # deferred scripts (charts, the menu button)
        width = page.evaluate("document.documentElement.scrollWidth")
        if width > WIDTH:
            wide[path] = width
    return wide


def _menu_opens(page) -> None:
    toggle = page.locator(".nav-toggle")
    approvals = page.locator("#site-nav a[href='/admin-queue/']")
    assert toggle.is_visible() and not approvals.is_visible()
    assert toggle.get_attribute("aria-expanded") == "false"
    box = page.locator(".site-header").bounding_box()
    assert box["height"] < 90, box  # one row: brand, menu button, account
    toggle.click()
    assert toggle.get_attribute("aria-expanded") == "true" and approvals.is_visible()
    approvals.focus()
    page.keyboard.press("Escape")  # closes it, the focus back on the button
    assert toggle.get_attribute("aria-expanded") == "false" and not approvals.is_visible()
    assert page.evaluate("document.activeElement.classList.contains('nav-toggle')")
    toggle.click()
    approvals.click()
    assert page.url.endswith("/admin-queue/")


def _nav_links_off_screen(page, base: str) -> list[str]:
    """The admin's header links that are not on screen, the Admin menu open (the bar used
    to scroll sideways between 760 and 1100 px, hiding "API docs" and "Admin"); and
    ``two rows`` when the bar takes two rows at 1280 px or wider (issue #21 section 6)."""
    page.goto(base + "/admin-queue/", wait_until="load")
    page.locator("#site-nav .nav-menu summary").click()
    return page.evaluate(
        """() => {
          const nav = document.querySelector('#site-nav');
          const off = [...nav.querySelectorAll('a')].filter(a => {
            const r = a.getBoundingClientRect();
            const inMenu = a.closest('.nav-menu__panel') !== null;
            return r.width === 0 || r.left < 0 || r.right > window.innerWidth
              || (!inMenu && r.right > nav.getBoundingClientRect().right + 1);
          }).map(a => a.textContent.trim());
          const items = [...nav.querySelectorAll(':scope > ul > li')];
          const tops = new Set(items.map(li => Math.round(li.getBoundingClientRect().top)));
          if (window.innerWidth >= 1280 && tops.size > 1) off.push('two rows');
          return off;
        }"""
    )


def _renew_on_screen(page, base: str) -> None:
    page.goto(base + "/teams/", wait_until="load")
    renew = page.locator(".table--grants a", has_text="Renew").first
    renew.scroll_into_view_if_needed()
    box = renew.bounding_box()
    assert box and box["x"] >= 0 and box["x"] + box["width"] <= WIDTH, box
    wrap = renew.locator("xpath=ancestor::div[contains(@class, 'table-wrap')]")
    assert wrap.evaluate("w => w.scrollWidth <= w.clientWidth"), "the grants table scrolls"


def test_pages_fit_a_phone_and_the_menu_button_works(demo, live_server):  # noqa: F811
    sync_playwright = _playwright()
    chromium = _chromium()
    users = get_user_model().objects
    cookies = {
        "admin": (_session_cookie(live_server, users.get(username="admin")), ADMIN_PAGES),
        "bob": (
            _session_cookie(live_server, users.get(username="bob")),
            [*PAGES, "/teams/vision/waiting/", "/telemetry/showback/"],
        ),
    }
    wide: dict[str, dict[str, int]] = {}
    hidden: dict[int, list[str]] = {}
    # No ORM call below: playwright's sync API runs an event loop in this thread.
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, headless=True)
        try:
            for name, (cookie, paths) in cookies.items():
                context = browser.new_context(viewport={"width": WIDTH, "height": 844})
                context.add_cookies([cookie])
                page = context.new_page()
                wide[name] = _overflowing(page, live_server.url, paths)
                if name == "admin":
                    page.goto(live_server.url + "/teams/", wait_until="load")
                    _menu_opens(page)
                    for width in TABLET_AND_DESKTOP:
                        page.set_viewport_size({"width": width, "height": 900})
                        hidden[width] = _nav_links_off_screen(page, live_server.url)
                else:  # a team manager: Renew and Release on every grant row
                    _renew_on_screen(page, live_server.url)
                context.close()
        finally:
            browser.close()
    assert wide == {"admin": {}, "bob": {}}, wide
    assert hidden == {width: [] for width in TABLET_AND_DESKTOP}, hidden
