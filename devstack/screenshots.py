"""Re-take the screenshots of docs/user-guide.md, docs/api-guide.md and docs/architecture.md.

Runs against a running demo (``make demo``): signs in through the login form as the persona
each page is for (alice: a member of Computer Vision, bob: its manager, admin: a portal
admin; carol: a member of NLP; passwords ``<name>-demo-pass``) and saves PNGs, 1280 px wide
(a few at 390 px, the phone layout). Pages that show one request pick it through the API
with the same session: a request approved for less than asked, a MIG request that ran, a
pending MIG request (a fresh demo has none of these: docs/api-guide.md sections 3, 5 and 11
make them with curl). The script itself changes nothing: the quota form is only previewed
("Check what is free") and the MIG form is filled, not sent.

    .venv/bin/python devstack/screenshots.py --base http://127.0.0.1:8000 \\
        --out docs/screenshots/guide [--only fleet,queue]

Uses Debian's headless ``chromium`` through python playwright (no browser download).
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

from playwright.sync_api import Page, sync_playwright

CHROMIUM = "/usr/bin/chromium"
DESKTOP = 1280
PHONE = 390


@dataclass
class Shot:
    name: str  # file name without .png
    persona: str  # alice, bob, admin
    path: str | Callable[[Page, str], str]  # a path, or a function that finds one
    width: int = DESKTOP
    height: int = 900  # the visible part that is saved (not the whole page)
    anchor: str | None = None  # CSS selector scrolled into view before the shot
    prepare: Callable[[Page], None] | None = None  # fills a form, clicks, before the shot


def _api(page: Page, base: str, path: str) -> dict:
    """GET an API path with the page's session (reads need no CSRF token)."""
    response = page.request.get(base + path)
    if not response.ok:
        raise SystemExit(f"{path}: HTTP {response.status}")
    return response.json()


def _less_than_asked(page: Page, base: str) -> str:
    rows = _api(page, base, "/api/v1/quota-requests/?kind=new&ordering=-created_at&page_size=100")
    for row in rows["results"]:
        granted = row.get("granted_amount")
        if granted is not None and granted < row["amount"]:
            return f"/requests/{row['id']}/"
    raise SystemExit("no request approved for less than asked: approve one for less first")


def _mig_run(page: Page, base: str) -> str:
    rows = _api(page, base, "/api/v1/mig-requests/?ordering=-created_at&page_size=100")
    for row in rows["results"]:
        if row["status"] in ("succeeded", "running", "failed"):
            return f"/mig/requests/{row['id']}/"
    raise SystemExit("no MIG request has run yet: approve one first")


def _mig_pending(page: Page, base: str) -> str:
    rows = _api(page, base, "/api/v1/mig-requests/?status=pending&ordering=-created_at")
    if not rows["results"]:
        raise SystemExit("no pending MIG request: file one first")
    return f"/mig/requests/{rows['results'][0]['id']}/"


def _fill_quota_form(page: Page) -> None:
    """A window request for 4 H100s, then "Check what is free" (nothing is stored)."""
    page.select_option("#id_namespace", label="demo/ml-vision (vision)")
    page.select_option("#id_resource", "nvidia.com/gpu")
    page.select_option("#id_gpu_class", label="demo: NVIDIA H100 80GB HBM3 (16 GPUs)")
    page.fill("#id_amount", "4")
    page.check("#id_duration_1")
    page.fill("#id_ends_at", "2026-12-24T00:00")
    page.fill("#id_justification", "Fine-tuning the detector for the CVPR rebuttal.")
    page.click("button[name=preview]")
    page.wait_for_load_state("networkidle")


def _fill_mig_form(page: Page) -> None:
    """One A100-80GB GPU as 3g.40gb + 2g.20gb + 2 x 1g.10gb: the diagram draws it."""
    page.select_option("#id_team", label="Computer Vision")
    page.select_option("#id_namespace", label="demo/ml-vision (vision)")
    page.select_option("#id_product", "A100-80GB")
    for name, count in (("3g-40gb", "1"), ("2g-20gb", "1"), ("1g-10gb", "2")):
        page.fill(f"#id_p-a100-80gb-{name}", count)
    page.fill("#id_justification", "Mixed slices for the notebook users of the lab course.")
    page.wait_for_timeout(1500)  # the layout is checked as you type (debounced)


SHOTS = [
    Shot("account", "alice", "/account/", height=600),
    Shot("fleet", "alice", "/", height=1000),
    Shot("fleet-phone", "alice", "/", width=PHONE, height=844),
    Shot("request-form", "alice", "/requests/new/", height=1200, prepare=_fill_quota_form),
    Shot("request-less", "alice", _less_than_asked, height=900),
    Shot("requests-phone", "alice", "/requests/", width=PHONE, height=844),
    Shot("mig-form", "alice", "/mig/requests/new/", height=1300, prepare=_fill_mig_form),
    Shot("mig-decide", "admin", _mig_pending, height=1100),
    Shot("mig-run", "alice", _mig_run, height=1100),
    Shot("team", "alice", "/teams/", height=1100),
    Shot("members", "bob", "/teams/vision/members/", height=800),
    Shot("telemetry-team", "alice", "/telemetry/teams/vision/", height=1100),
    Shot("showback", "alice", "/telemetry/showback/", height=900),
    Shot("waiting", "carol", "/teams/nlp/waiting/", height=900),
    Shot("waiting-phone", "carol", "/teams/nlp/waiting/", width=PHONE, height=844),
    Shot("queue", "admin", "/admin-queue/", height=1100),
]


def sign_in(page: Page, base: str, persona: str) -> None:
    page.goto(base + "/login/")
    page.fill("input[name=username]", persona)
    page.fill("input[name=password]", f"{persona}-demo-pass")
    page.click("form button[type=submit], form input[type=submit]")
    page.wait_for_load_state("networkidle")
    if "/login/" in page.url:
        raise SystemExit(f"could not sign in as {persona} (still on {page.url})")


def take(browser, base: str, out: Path, shot: Shot) -> Path:
    context = browser.new_context(
        viewport={"width": shot.width, "height": shot.height}, device_scale_factor=1
    )
    page = context.new_page()
    try:
        if shot.persona:
            sign_in(page, base, shot.persona)
        path = shot.path(page, base) if callable(shot.path) else shot.path
        page.goto(base + path)
        page.wait_for_load_state("networkidle")
        if shot.prepare:
            shot.prepare(page)
        if shot.anchor:
            page.locator(shot.anchor).first.scroll_into_view_if_needed()
        target = out / f"{shot.name}.png"
        page.screenshot(path=str(target), full_page=False)
        return target
    finally:
        context.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--base", default="http://127.0.0.1:8000")
    parser.add_argument("--out", default="docs/screenshots/guide")
    parser.add_argument("--only", default="", help="comma-separated shot names")
    args = parser.parse_args(argv)
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    wanted = {n for n in args.only.split(",") if n}
    unknown = wanted - {s.name for s in SHOTS}
    if unknown:
        parser.error(f"unknown shot(s): {', '.join(sorted(unknown))}")
    base = args.base.rstrip("/")
    with sync_playwright() as pw:
        browser = pw.chromium.launch(executable_path=CHROMIUM)
        try:
            for shot in SHOTS:
                if wanted and shot.name not in wanted:
                    continue
                target = take(browser, base, out, shot)
                print(f"{target}  {target.stat().st_size // 1024} KB")
        finally:
            browser.close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
