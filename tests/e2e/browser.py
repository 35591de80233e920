"""What every browser journey uses: the page check (axe-core, horizontal overflow,
screenshots at two widths), signing in through the form, and following a page that
updates itself until a state shows.

``Checker.check(page, step)`` runs on the page as it is (after a form post too): at 1280 and
390 px it saves a full-page screenshot under ``$TEST_ARTIFACTS/e2e/<journey>/`` (default
``.data/test-artifacts``), measures ``scrollWidth`` against ``innerWidth`` and runs axe-core
(``tests/e2e/axe``, pinned by its lockfile). axe is injected with ``page.evaluate`` (the
DevTools protocol), which the page's Content-Security-Policy does not govern: the journeys
run with the CSP enforced, and any CSP violation a page reports counts as a problem too.
``add_script_tag`` would add an inline ``<script>`` that our CSP (no 'unsafe-inline')
blocks. Problems are collected and ``assert_clean()`` fails naming the page, the width and
the axe rule ids with their targets.
"""

from __future__ import annotations

import os
import re
import time
from collections.abc import Callable
from pathlib import Path
from urllib.parse import urlsplit

import pytest

from tests.npm import node_modules
from tests.prereqs import SKIPPED, need

ROOT = Path(__file__).resolve().parents[2]
WIDTHS = (1280, 390)
HEIGHT = 900
BLOCKING = ("serious", "critical")  # axe impacts that fail a journey

# Counts securitypolicyviolation events (as tests/portal/test_csp.py does).
RECORD_CSP = """
window.__csp = [];
document.addEventListener("securitypolicyviolation", (e) => {
  window.__csp.push(`${e.violatedDirective} ${e.blockedURI || "inline"} ` +
                    `${e.sourceFile || ""}:${e.lineNumber}`);
});
"""

RUN_AXE = """
async (impacts) => {
  const result = await window.axe.run(document, {resultTypes: ["violations"]});
  return result.violations.filter((v) => impacts.includes(v.impact)).map((v) => ({
    id: v.id, impact: v.impact, help: v.help,
    targets: v.nodes.slice(0, 8).map((n) => n.target.join(" ")),
  }));
}
"""

# The outermost elements sticking out on the right (not inside a scrolling box), each
# with its two nearest ancestors, for an overflow failure message.
OVERFLOWING = """
() => {
  const limit = window.innerWidth + 1, out = [];
  const name = (el) => el.tagName.toLowerCase() + (el.id ? "#" + el.id : "") +
    (el.classList.length ? "." + [...el.classList].join(".") : "");
  const sticksOut = (el) => el.getBoundingClientRect().right > limit;
  for (const el of document.body.querySelectorAll("*")) {
    if (!sticksOut(el) || (el.parentElement && sticksOut(el.parentElement) &&
                           el.parentElement !== document.body)) continue;
    let up = el.parentElement, clipped = false;
    while (up && up !== document.body) {
      if (getComputedStyle(up).overflowX !== "visible") { clipped = true; break; }
      up = up.parentElement;
    }
    if (clipped) continue;
    const path = [el.parentElement?.parentElement, el.parentElement, el]
      .filter((e) => e && e !== document.body).map(name).join(" > ");
    out.push(`${path} (right ${Math.round(el.getBoundingClientRect().right)})`);
    if (out.length >= 5) break;
  }
  return out;
}
"""


def sync_playwright():
    """playwright's sync API, or skip (requirements-dev.txt installs it)."""
    try:
        from playwright.sync_api import sync_playwright as api
    except ImportError:
        SKIPPED.add("playwright (pip install -r requirements-dev.txt)")
        pytest.skip("the playwright package is not installed (requirements-dev.txt)")
    return api


def chromium() -> str:
    """The Chromium binary (Debian package ``chromium``), or skip naming the package."""
    return need("chromium")


def axe_source() -> str:
    """axe-core's browser bundle from tests/e2e/axe's lockfile (npm ci once), or skip."""
    modules = node_modules(Path(__file__).resolve().parent / "axe")
    return (modules / "axe-core" / "axe.min.js").read_text()


def artifacts_dir(journey: str) -> Path:
    base = Path(os.environ.get("TEST_ARTIFACTS") or ROOT / ".data" / "test-artifacts")
    folder = base / "e2e" / journey
    folder.mkdir(parents=True, exist_ok=True)
    for old in folder.glob("*.png"):  # this run's screenshots only
        old.unlink()
    return folder


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-")[:60]


class Checker:
    """Checks pages of one journey and remembers what it found."""

    def __init__(self, journey: str, axe_js: str):
        self.folder = artifacts_dir(journey)
        self.axe_js = axe_js
        self.steps = 0
        self.problems: list[str] = []
        self.asserted = False

    def check(self, page, step: str, widths=WIDTHS) -> None:
        """Screenshot, overflow and axe at each width; the viewport is restored after."""
        self.steps += 1
        size = page.viewport_size or {"width": WIDTHS[0], "height": HEIGHT}
        url = urlsplit(page.url)
        where = f"{step} ({url.path}{'#' + url.fragment if url.fragment else ''})"
        try:
            for width in widths:
                page.set_viewport_size({"width": width, "height": HEIGHT})
                page.wait_for_timeout(80)  # relayout (the charts redraw on resize)
                name = f"{self.steps:02d}-{_slug(step)}-{width}.png"
                page.screenshot(path=str(self.folder / name), full_page=True)
                self.problems += [f"{where} at {width}px: {p}" for p in self._page(page)]
        finally:
            page.set_viewport_size(size)

    def _page(self, page) -> list[str]:
        found = []
        scroll, inner = page.evaluate("[document.documentElement.scrollWidth, innerWidth]")
        if scroll > inner + 1:
            wide = ", ".join(page.evaluate(OVERFLOWING)) or "no single element"
            found.append(f"horizontal overflow: scrollWidth {scroll} > innerWidth {inner} ({wide})")
        if not page.evaluate("typeof window.axe === 'object'"):
            page.evaluate(self.axe_js)
        for v in page.evaluate(RUN_AXE, list(BLOCKING)):
            found.append(f"axe {v['id']} ({v['impact']}: {v['help']}) at {v['targets']}")
        csp = page.evaluate("window.__csp || []")
        found += [f"CSP violation: {c}" for c in csp]
        return found

    def assert_clean(self) -> None:
        self.asserted = True
        assert not self.problems, (
            f"{len(self.problems)} problem(s) on the journey's pages "
            f"(screenshots in {self.folder}):\n" + "\n".join(self.problems)
        )


def new_page(browser, live_server):
    """A fresh browser context (own cookies) on the live server, CSP enforced."""
    context = browser.new_context(
        base_url=live_server.url, viewport={"width": WIDTHS[0], "height": HEIGHT}
    )
    context.add_init_script(RECORD_CSP)
    context.set_default_timeout(15_000)
    return context.new_page()


def sign_in(page, username: str, password: str, checker: Checker | None = None) -> None:
    """Sign in through the local login form, as a person would."""
    page.goto("/login/")
    if checker is not None:
        checker.check(page, "sign-in form")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(password)
    page.get_by_role("button", name="Sign in", exact=True).click()
    page.wait_for_load_state()
    assert "/login/" not in page.url, f"{username} was not signed in: {text(page)[:300]}"


def follow_live(page, done: Callable[[], bool], what: str, timeout: float = 30.0) -> None:
    """Wait, without reloading, until ``done()`` holds on a page that updates itself: a
    request page with work in progress polls its progress fragment (htmx, discussion/
    progress.py) until the work ends. A page not done yet must be polling, or it would
    never change: that is a failure too."""
    if done():
        return
    assert page.locator("[hx-trigger]").count() > 0, (
        f"{what}: not shown yet and {page.url} does not update itself (no polling part)"
    )
    deadline = time.monotonic() + timeout
    while not done():
        if time.monotonic() > deadline:
            raise AssertionError(f"{what}: not shown within {timeout:g} s on {page.url}")
        page.wait_for_timeout(250)


def text(page, selector: str = "main") -> str:
    """The visible text of ``selector``, whitespace folded."""
    return " ".join(page.locator(selector).first.inner_text().split())
